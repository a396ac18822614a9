"""The detfmt exception hierarchy.

Every failure detfmt reports is a `DetfmtError` carrying the rule it enforces (a stable id that
SPEC.md, the conformance suite and these errors share), the file concerned and, where it applies,
the sample index. Third-party exceptions (numpy, msgspec, zstandard, Pillow, OSError) are chained
as ``__cause__``, never leaked.

    DetfmtError
    ├── FormatError (ValueError)            the bytes on disk violate SPEC.md
    │   ├── NotDetfmtError                  not a detfmt dataset at all
    │   ├── UnsupportedVersionError         unknown major version or required feature
    │   ├── HeaderError                     header.json unreadable or invalid
    │   ├── LayoutError                     .npy files, offsets, sizes, alignment
    │   ├── LabelError                      boxes, classes, counts, padding
    │   ├── IntegrityError                  checksum mismatch
    │   ├── DecodeError                     a payload does not decode as declared
    │   ├── UnsafePathError                 a member is a symlink, FIFO, directory...
    │   └── DatasetChangedError             files replaced or truncated under a reader
    ├── DatasetNotFoundError (FileNotFoundError)
    ├── WriteError (OSError)                writing failed; the target is untouched
    │   ├── TargetExistsError
    │   ├── TargetLockedError               another writer holds the target
    │   └── TargetNotWritableError
    └── UsageError (ValueError)             invalid arguments or input from the caller
        └── InvalidSampleError              one input sample is invalid (names the index)

    NormalizedBoxesWarning (UserWarning)    the writer's boxes look normalised to 0..1
"""

from __future__ import annotations

import os

__all__ = [
    "DatasetChangedError",
    "DatasetNotFoundError",
    "DecodeError",
    "DetfmtError",
    "FormatError",
    "HeaderError",
    "IntegrityError",
    "InvalidSampleError",
    "LabelError",
    "LayoutError",
    "NormalizedBoxesWarning",
    "NotDetfmtError",
    "TargetExistsError",
    "TargetLockedError",
    "TargetNotWritableError",
    "UnsafePathError",
    "UnsupportedVersionError",
    "UsageError",
    "WriteError",
]


class DetfmtError(Exception):
    """Base class of every detfmt error.

    Attributes:
        rule: stable rule id (e.g. ``"OFFSETS_BOUNDS"``) as listed in SPEC.md, or None.
        path: the file or directory concerned, or None.
        index: the sample index concerned, or None.
    """

    default_rule: str | None = None

    def __init__(
        self,
        message: str,
        *,
        rule: str | None = None,
        path: str | os.PathLike[str] | None = None,
        index: int | None = None,
    ) -> None:
        self.message = message
        self.rule = rule if rule is not None else self.default_rule
        self.path = os.fspath(path) if path is not None else None
        self.index = int(index) if index is not None else None
        super().__init__(self._format())

    def _format(self) -> str:
        where = []
        if self.path is not None:
            where.append(self.path)
        if self.index is not None:
            where.append(f"sample {self.index}")
        text = f"{': '.join(where)}: {self.message}" if where else self.message
        if self.rule is not None:
            text += f" [{self.rule}]"
        return text

    def __reduce__(self):  # keep rule/path/index across pickling (worker processes)
        return (_rebuild, (type(self), self.message, self.rule, self.path, self.index))


def _rebuild(cls, message, rule, path, index):
    error = cls.__new__(cls)
    DetfmtError.__init__(error, message, rule=rule, path=path, index=index)
    return error


class FormatError(DetfmtError, ValueError):
    """The data on disk violates the detfmt specification."""


class NotDetfmtError(FormatError):
    """The path does not hold a detfmt dataset (wrong or missing identity)."""

    default_rule = "NOT_DETFMT"


class UnsupportedVersionError(FormatError):
    """The dataset needs a newer reader: unknown major version or required feature."""

    default_rule = "VERSION_UNSUPPORTED"

    def __init__(self, message: str, *, found: str, supported: str, **kwargs) -> None:
        self.found = found
        self.supported = supported
        super().__init__(message, **kwargs)


class HeaderError(FormatError):
    """header.json is missing, unreadable, too large or does not match the schema."""

    default_rule = "HEADER_SCHEMA"


class LayoutError(FormatError):
    """An array file, offset, size or alignment is inconsistent."""


class LabelError(FormatError):
    """Boxes, classes, counts or padding break the label rules."""


class IntegrityError(FormatError):
    """Stored bytes do not match their checksum."""

    default_rule = "CHECKSUM"


class DecodeError(FormatError):
    """A payload does not decode to the image its index record declares."""

    default_rule = "IMAGE_DECODE"


class UnsafePathError(FormatError):
    """A dataset member is not a plain regular file at its fixed name."""

    default_rule = "PATH_UNSAFE"


class DatasetChangedError(FormatError):
    """The dataset's files were replaced or truncated after it was opened."""

    default_rule = "DATASET_CHANGED"


class DatasetNotFoundError(DetfmtError, FileNotFoundError):
    """No dataset exists at the given path."""

    default_rule = "HEADER_MISSING"


class WriteError(DetfmtError, OSError):
    """Writing failed (disk full, I/O error...); the target was left untouched."""

    default_rule = "WRITE_FAILED"

    def __init__(self, message: str, *, errno: int | None = None, **kwargs) -> None:
        super().__init__(message, **kwargs)
        self.errno = errno


class TargetExistsError(WriteError):
    """The target exists and ``overwrite`` was not requested (or another writer won)."""

    default_rule = "TARGET_EXISTS"


class TargetLockedError(WriteError):
    """Another writer is writing the same target right now."""

    default_rule = "TARGET_LOCKED"


class TargetNotWritableError(WriteError):
    """The target's parent directory cannot be written (read-only file system, permissions)."""

    default_rule = "TARGET_NOT_WRITABLE"


class UsageError(DetfmtError, ValueError):
    """Invalid arguments or input from the caller."""

    default_rule = "USAGE"


class InvalidSampleError(UsageError):
    """One input sample is invalid; ``index`` names it and ``rule`` says why."""

    default_rule = "SAMPLE_INVALID"


class NormalizedBoxesWarning(UserWarning):
    """Every box given to the writer lies within 0..1 on images of many pixels: they look
    normalised, while detfmt stores boxes in pixels (xyxy)."""
