"""The one strict JSON profile of SPEC.md §5.6, for every JSON file detfmt reads.

header.json, manifest.json and a shard's table of contents are parsed here, so two conforming
readers never disagree about the same bytes: UTF-8 without a byte-order mark, RFC 8259 syntax and
whitespace, no duplicate member names (compared after unescaping), no lone surrogate escapes, at
most 64 nested arrays and objects, number tokens of at most 64 characters, finite numbers only,
and a top-level object. Integers stay Python ints (exact at any size) and numbers with a fraction
or exponent become floats, so ``3`` and ``3.0`` stay distinguishable for the schema checks.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from detfmt import errors

__all__ = ["MAX_DEPTH", "MAX_NUMBER_CHARS", "parse_json"]

MAX_DEPTH = 64  # nested arrays and objects, the top-level object counting as 1
MAX_NUMBER_CHARS = 64  # characters of one number token (sign, digits, fraction, exponent)
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


class _Invalid(ValueError):
    """Raised inside the json hooks; turned into the caller's typed error."""


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _Invalid(f"duplicate member name {key!r}")
            seen.add(key)
    return result


def _integer(token: str) -> int:
    if len(token) > MAX_NUMBER_CHARS:
        raise _Invalid(f"number token of {len(token)} characters (limit {MAX_NUMBER_CHARS})")
    return int(token)


def _number(token: str) -> float:
    if len(token) > MAX_NUMBER_CHARS:
        raise _Invalid(f"number token of {len(token)} characters (limit {MAX_NUMBER_CHARS})")
    value = float(token)
    if not math.isfinite(value):
        raise _Invalid(f"number {token} is not finite as a binary64 value")
    return value


def _constant(name: str) -> None:
    raise _Invalid(f"{name} is not JSON")


def _check_tree(value: Any, strings: bool) -> None:
    """Depth limit, and (when the text has surrogate escapes) no lone surrogate in any string."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            if depth > MAX_DEPTH:
                raise _Invalid(f"more than {MAX_DEPTH} nested arrays and objects")
            for key, child in item.items():
                if strings:
                    _check_string(key)
                stack.append((child, depth + 1))
        elif isinstance(item, list):
            if depth > MAX_DEPTH:
                raise _Invalid(f"more than {MAX_DEPTH} nested arrays and objects")
            stack.extend((child, depth + 1) for child in item)
        elif strings and isinstance(item, str):
            _check_string(item)


def _check_string(text: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        raise _Invalid("a string holds a lone surrogate escape") from error


def parse_json(data: bytes, *, path: str, limit: int | None, rule: str,
               error: type[errors.FormatError] = errors.FormatError,
               size_rule: str | None = None, encoding_rule: str | None = None) -> dict[str, Any]:
    """Parse ``data`` as one JSON object under the profile of SPEC.md §5.6.

    Args:
        path: the file (or ``shard#member``) named in errors.
        limit: the file's size limit in bytes, or None when the caller checked it already.
        rule: the rule id of a syntax or profile violation (``HEADER_JSON``, ``MANIFEST_SCHEMA``,
            ``PACK_LAYOUT``).
        error: the `FormatError` subclass to raise.
        size_rule, encoding_rule: the ids for a file over ``limit`` and for an empty file, a
            byte-order mark or invalid UTF-8 (default: ``rule``).

    Raises:
        error: with the rule broken, naming ``path``.
    """
    if limit is not None and len(data) > limit:
        raise error(f"{len(data)} bytes, over the {limit}-byte limit",
                    rule=size_rule or rule, path=path)
    encoding = encoding_rule or rule
    if not data:
        raise error("the file is empty", rule=encoding, path=path)
    if data.startswith(b"\xef\xbb\xbf"):
        raise error("starts with a UTF-8 byte-order mark", rule=encoding, path=path)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as cause:
        raise error(f"not valid UTF-8: {cause}", rule=encoding, path=path) from cause
    try:
        value = json.loads(text, object_pairs_hook=_pairs, parse_int=_integer,
                           parse_float=_number, parse_constant=_constant)
        if not isinstance(value, dict):
            raise _Invalid(f"the top-level value is a {type(value).__name__}, not an object")
        _check_tree(value, strings=_SURROGATE_ESCAPE.search(data) is not None)
    except RecursionError as cause:
        raise error(f"more than {MAX_DEPTH} nested arrays and objects", rule=rule,
                    path=path) from cause
    except ValueError as cause:  # json.JSONDecodeError and _Invalid
        raise error(f"not valid JSON under the detfmt profile: {cause}", rule=rule,
                    path=path) from cause
    return value
