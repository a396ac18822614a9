"""Class-name lists and data YAML files of YOLO datasets.

A data YAML is read with PyYAML's ``BaseLoader``: every scalar stays the text the file holds, so
a class called ``no`` or ``null`` stays that name (YAML 1.1 would turn it into ``False`` or
``None``) and ``0:`` keys are parsed as class ids here. Only the keys a converter needs are
looked at (``path``, ``train``, ``val``, ``test``, ``names``), each checked for its shape.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from detfmt.convert.errors import ConversionError
from detfmt.convert.inputs import MAX_CONFIG_BYTES, read_source_text
from detfmt.convert.numbers import parse_integer

__all__ = ["load_data_yaml", "load_names", "names_from_yaml", "parse_yaml_names"]

MAX_CLASSES = 65536  # SPEC.md §15


def parse_data_yaml(text: str, path: str | os.PathLike[str] = "<yaml>") -> dict[str, Any]:
    """The top-level mapping of a data YAML (scalars as text)."""
    try:
        data = yaml.load(text, Loader=yaml.BaseLoader)  # BaseLoader: text scalars, no objects
    except yaml.YAMLError as error:
        raise ConversionError(f"malformed YAML: {error}", rule="YAML_INVALID",
                              path=path) from error
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConversionError("the YAML file is not a mapping of keys", rule="YAML_INVALID",
                              path=path)
    return data


def load_data_yaml(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a data YAML (a regular UTF-8 file of at most 16 MiB) into its top-level mapping."""
    text = read_source_text(path, rule="YAML_INVALID", limit=MAX_CONFIG_BYTES)
    return parse_data_yaml(text, path)


def _name(value: Any, path) -> str:
    if not isinstance(value, str):
        raise ConversionError(f"a class name must be text, got {type(value).__name__}",
                              rule="NAMES_INVALID", path=path)
    return value


def names_from_yaml(data: Mapping[str, Any], path: str | os.PathLike[str] = "<yaml>"
                    ) -> dict[int, str]:
    """{class id: name} from the ``names:`` key of a parsed data YAML (a list or a mapping)."""
    if "names" not in data:
        raise ConversionError("no 'names:' key in the YAML file", rule="NAMES_MISSING", path=path)
    names = data["names"]
    if isinstance(names, list):
        if len(names) > MAX_CLASSES:
            raise ConversionError(f"{len(names)} names, over {MAX_CLASSES}",
                                  rule="NAMES_INVALID", path=path)
        return {i: _name(name, path) for i, name in enumerate(names)}
    if isinstance(names, dict):
        if len(names) > MAX_CLASSES:
            raise ConversionError(f"{len(names)} names, over {MAX_CLASSES}",
                                  rule="NAMES_INVALID", path=path)
        table: dict[int, str] = {}
        for key, value in names.items():
            index = parse_integer(key, 0, 2**31 - 1) if isinstance(key, str) else None
            if index is None:
                raise ConversionError(f"names key {key!r} is not a class id (an integer >= 0)",
                                      rule="NAMES_INVALID", path=path)
            if index in table:
                raise ConversionError(f"class id {index} is named twice", rule="NAMES_INVALID",
                                      path=path)
            table[index] = _name(value, path)
        return table
    raise ConversionError("names must be a list or a mapping of class id to name",
                          rule="NAMES_INVALID", path=path)


def parse_yaml_names(text: str, path: str = "<yaml>") -> dict[int, str]:
    """Return {class id: name} from the ``names:`` key of a YOLO data YAML text."""
    return names_from_yaml(parse_data_yaml(text, path), path)


def load_names(names: str | os.PathLike[str] | list[str] | dict[int, str]) -> dict[int, str]:
    """Class names as {YOLO class id: name} from a list, a mapping, a data YAML or a names file
    (one name per line, as ``classes.txt`` / ``*.names``)."""
    if isinstance(names, dict):
        return {int(k): str(v) for k, v in names.items()}
    if isinstance(names, (list, tuple)):
        return {i: str(name) for i, name in enumerate(names)}
    path = Path(names)
    if path.suffix.lower() in (".yaml", ".yml"):
        result = names_from_yaml(load_data_yaml(path), os.fspath(path))
    else:
        text = read_source_text(path, rule="NAMES_MISSING", encoding_rule="NAMES_INVALID",
                                limit=MAX_CONFIG_BYTES)
        result = {i: line.strip() for i, line in enumerate(
            line for line in text.splitlines() if line.strip())}
    if not result:
        raise ConversionError("no class names found", rule="NAMES_MISSING", path=path)
    return result
