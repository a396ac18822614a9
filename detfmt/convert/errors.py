"""The converters' error type: a `UsageError`, because the bad input is the caller's source data."""

from __future__ import annotations

import os

from detfmt.errors import UsageError

__all__ = ["ConversionError"]


class ConversionError(UsageError):
    """The source dataset cannot be converted as asked.

    ``rule`` says why (for example ``JSON_INVALID``, ``XML_INVALID``, ``LABEL_MALFORMED``,
    ``LABEL_OUT_OF_RANGE``, ``UNKNOWN_CLASS``, ``IMAGE_MISSING``, ``IMAGE_INVALID``,
    ``PATH_UNSAFE``, ``NAME_ENCODING``, ``DUPLICATE_ID``, ``NAMES_MISSING``, ``EMPTY_RESULT``,
    ``SPLIT_OVERLAP``) and ``path`` names the offending file. ``affected`` is the number of
    source files the error stands for when it sums up several (None: one). Messages spell a
    remedy as a Python keyword (``on_error='skip'``); the CLI rewrites it as its option.
    """

    default_rule = "CONVERT"
    affected: int | None = None  # also when rebuilt after pickling (DetfmtError.__reduce__)

    def __init__(
        self,
        message: str,
        *,
        rule: str | None = None,
        path: str | os.PathLike[str] | None = None,
        index: int | None = None,
        affected: int | None = None,
    ) -> None:
        self.affected = affected
        super().__init__(message, rule=rule, path=path, index=index)
