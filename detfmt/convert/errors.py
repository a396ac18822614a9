"""The converters' error type: a `UsageError`, because the bad input is the caller's source data."""

from __future__ import annotations

from detfmt.errors import UsageError

__all__ = ["ConversionError"]


class ConversionError(UsageError):
    """The source dataset cannot be converted as asked.

    ``rule`` says why (for example ``JSON_INVALID``, ``XML_INVALID``, ``LABEL_MALFORMED``,
    ``UNKNOWN_CLASS``, ``IMAGE_MISSING``, ``IMAGE_INVALID``, ``DUPLICATE_ID``, ``NAMES_MISSING``)
    and ``path`` names the offending file.
    """

    default_rule = "CONVERT"
