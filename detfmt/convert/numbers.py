"""Strict number parsing for text label formats (YOLO rows, VOC XML).

Python's ``float`` accepts far more than a label file should contain: ``nan``, ``inf``,
``infinity``, ``1_000``, non-ASCII digits (``"١٢"``) and overflowing literals (``1e999`` becomes
``inf``). A label with such a token is malformed, not a box: these helpers accept only plain ASCII
decimals that give a finite value, and integers within a stated range.
"""

from __future__ import annotations

import math
import re

__all__ = ["MAX_TOKEN", "parse_decimal", "parse_integer"]

MAX_TOKEN = 64  # characters; longer tokens are refused before any conversion
_DECIMAL = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]{1,4})?\Z")


def parse_decimal(text: str) -> float | None:
    """A finite float from a plain ASCII decimal token, else None."""
    if len(text) > MAX_TOKEN or not _DECIMAL.match(text):
        return None
    value = float(text)
    return value if math.isfinite(value) else None


def parse_integer(text: str, low: int, high: int) -> int | None:
    """An integer in [low, high] from a decimal token; an integral float such as ``3.0`` or
    ``3.000e+00`` (numpy's ``savetxt``) is accepted. None otherwise."""
    value = parse_decimal(text)
    if value is None or value != int(value) or not low <= value <= high:
        return None
    return int(value)
