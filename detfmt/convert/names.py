"""Class-name lists for YOLO datasets: the ``names:`` key of a data YAML, or a names file.

A tiny parser for the one key we need instead of a PyYAML dependency. It accepts the forms
Ultralytics datasets use: a block mapping (``0: person``), a block list (``- person``) and a flow
list (``names: ['person', 'bicycle']``, possibly over several lines), with quotes and comments.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from detfmt.convert.errors import ConversionError

__all__ = ["load_names", "parse_yaml_names"]

_KEY = re.compile(r"^names\s*:(.*)$")


def _strip_comment(text: str) -> str:
    quote = None
    for i, char in enumerate(text):
        if quote:
            if char == quote:
                quote = None
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or text[i - 1] in " \t"):
            return text[:i]
    return text


def _scalar(text: str) -> str:
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] == "'":
        return text[1:-1].replace("''", "'")
    if len(text) >= 2 and text[0] == text[-1] == '"':
        return text[1:-1].encode("utf-8").decode("unicode_escape")
    return text


def _split_flow(text: str) -> list[str]:
    items, current, quote = [], [], None
    for char in text:
        if quote:
            current.append(char)
            if char == quote:
                quote = None
        elif char in "'\"":
            quote = char
            current.append(char)
        elif char == ",":
            items.append("".join(current))
            current = []
        else:
            current.append(char)
    items.append("".join(current))
    return [item for item in (i.strip() for i in items) if item]


def _as_mapping(pairs: list[tuple[str, str]], path: str) -> dict[int, str]:
    names: dict[int, str] = {}
    for key, value in pairs:
        try:
            index = int(_scalar(key))
        except ValueError as error:
            raise ConversionError(f"names key {key!r} is not an integer class id",
                                  rule="NAMES_INVALID", path=path) from error
        names[index] = _scalar(value)
    return names


def parse_yaml_names(text: str, path: str = "<yaml>") -> dict[int, str]:
    """Return {class id: name} from the ``names:`` key of a YOLO data YAML."""
    lines = text.splitlines()
    for number, line in enumerate(lines):
        match = _KEY.match(line)
        if not match:
            continue
        rest = _strip_comment(match.group(1)).strip()
        if rest.startswith(("[", "{")):
            closing = "]" if rest[0] == "[" else "}"
            flow = rest
            follow = number + 1
            while closing not in flow and follow < len(lines):
                flow += " " + _strip_comment(lines[follow]).strip()
                follow += 1
            if closing not in flow:
                raise ConversionError("unterminated names list", rule="NAMES_INVALID", path=path)
            items = _split_flow(flow[1:flow.rindex(closing)])
            if closing == "]":
                return {i: _scalar(item) for i, item in enumerate(items)}
            return _as_mapping([tuple(item.split(":", 1)) for item in items], path)
        if rest:
            raise ConversionError(f"unsupported names value {rest!r}", rule="NAMES_INVALID",
                                  path=path)
        listed: list[str] = []
        pairs: list[tuple[str, str]] = []
        for follow in lines[number + 1:]:
            body = _strip_comment(follow).rstrip()
            if not body.strip():
                continue
            stripped = body.lstrip()
            if stripped.startswith("- ") or stripped == "-":
                listed.append(stripped[1:])
            elif body[0] in " \t" and ":" in stripped:
                pairs.append(tuple(stripped.split(":", 1)))
            else:
                break
        if listed and pairs:
            raise ConversionError("names mixes a list and a mapping", rule="NAMES_INVALID",
                                  path=path)
        if listed:
            return {i: _scalar(item) for i, item in enumerate(listed)}
        return _as_mapping(pairs, path)
    raise ConversionError("no 'names:' key in the YAML file", rule="NAMES_MISSING", path=path)


def load_names(names: str | os.PathLike[str] | list[str] | dict[int, str]) -> dict[int, str]:
    """Class names as {YOLO class id: name} from a list, a mapping, a data YAML or a names file
    (one name per line, as ``classes.txt`` / ``*.names``)."""
    if isinstance(names, dict):
        return {int(k): str(v) for k, v in names.items()}
    if isinstance(names, (list, tuple)):
        return {i: str(name) for i, name in enumerate(names)}
    path = Path(names)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as error:
        raise ConversionError(f"cannot read class names: {error}", rule="NAMES_MISSING",
                              path=path) from error
    if path.suffix.lower() in (".yaml", ".yml"):
        result = parse_yaml_names(text, os.fspath(path))
    else:
        result = {i: line.strip() for i, line in enumerate(
            line for line in text.splitlines() if line.strip())}
    if not result:
        raise ConversionError("no class names found", rule="NAMES_MISSING", path=path)
    return result
