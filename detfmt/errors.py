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
    │   ├── DatasetChangedError             files replaced or truncated under a reader
    │   ├── ManifestError                   manifest.json of a sharded root (SPEC §19.3)
    │   ├── PackError (LayoutError)         a packed shard's prefix or table of contents
    │   ├── RootLayoutError (LayoutError)   a root holding both manifest.json and header.json
    │   ├── SchemaMismatchError             a shard's header disagrees with the manifest
    │   └── ShardChecksumError (IntegrityError)  a shard's size or xxh3-64
    ├── DatasetNotFoundError (FileNotFoundError)
    ├── WriteError (OSError)                writing failed; the target is untouched
    │   ├── TargetExistsError
    │   ├── TargetLockedError               another writer holds the target
    │   ├── TargetNotWritableError
    │   ├── CommitConflictError             another commit won (sharded roots)
    │   └── CacheError                      the shard cache is unsafe, unwritable or full
    └── UsageError (ValueError)             invalid arguments or input from the caller
        ├── InvalidSampleError              one input sample is invalid (names the index)
        ├── SampleIndexError (IndexError)   a sample index outside 0..N-1
        ├── TooManyBoxesError               a box cap (max_boxes) would drop valid boxes
        ├── ClassNamesMismatchError         mixed datasets whose class names do not agree
        └── IncompatibleDatasetsError       valid datasets that cannot be combined as asked

    NormalizedBoxesWarning (UserWarning)    the writer's boxes look normalised to 0..1

`error_for(rule, ...)` builds the typed error of a rule id: the one registry (`RULES`) that the
reader, ``verify`` and the conformance adapter share.
"""

from __future__ import annotations

import os

__all__ = [
    "CacheError",
    "ClassNamesMismatchError",
    "CommitConflictError",
    "DatasetChangedError",
    "DatasetNotFoundError",
    "DecodeError",
    "DetfmtError",
    "FormatError",
    "HeaderError",
    "IncompatibleDatasetsError",
    "IntegrityError",
    "InvalidSampleError",
    "LabelError",
    "LayoutError",
    "ManifestError",
    "NormalizedBoxesWarning",
    "NotDetfmtError",
    "PackError",
    "RootLayoutError",
    "SampleIndexError",
    "SchemaMismatchError",
    "ShardChecksumError",
    "TargetExistsError",
    "TargetLockedError",
    "TargetNotWritableError",
    "TooManyBoxesError",
    "UnsafePathError",
    "UnsupportedVersionError",
    "UsageError",
    "WriteError",
    "error_for",
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


class SampleIndexError(UsageError, IndexError):
    """A sample index outside 0..N-1 (an IndexError, so ``for sample in ds`` stops cleanly)."""

    default_rule = "INDEX_RANGE"


class ManifestError(FormatError):
    """manifest.json is unreadable, too large or does not match the 1.1 schema (S-3, S-5)."""

    default_rule = "MANIFEST_SCHEMA"


class PackError(LayoutError):
    """A packed shard file's table of contents or member layout is invalid (S-9, S-10)."""

    default_rule = "PACK_LAYOUT"


class RootLayoutError(LayoutError):
    """A root holds both manifest.json and header.json: neither a 1.0 nor a 1.1 root (S-1)."""

    default_rule = "ROOT_LAYOUT"


class SchemaMismatchError(FormatError):
    """A shard's inner 1.0 header disagrees with the manifest schema or shard entry (S-8)."""

    default_rule = "SCHEMA_MISMATCH"


class ShardChecksumError(IntegrityError):
    """A shard file's size or xxh3-64 differs from its manifest entry (S-7, S-21)."""

    default_rule = "SHARD_CHECKSUM"


#: Rule id -> the error class that reports it. Ids not listed are `LayoutError`s (the structural
#: rules of index, arrays and files).
RULES: dict[str, type[FormatError]] = {
    "NOT_DETFMT": NotDetfmtError,
    "PACK_MAGIC": NotDetfmtError,
    "VERSION_UNSUPPORTED": UnsupportedVersionError,
    "FEATURE_UNSUPPORTED": UnsupportedVersionError,
    "PATH_UNSAFE": UnsafePathError,
    "CHECKSUM": IntegrityError,
    "FILE_CHECKSUM": IntegrityError,
    "DATASET_CHANGED": DatasetChangedError,
    "MANIFEST_SCHEMA": ManifestError,
    "SHARD_INDEXING": ManifestError,
    "PACK_LAYOUT": PackError,
    "ROOT_LAYOUT": RootLayoutError,
    "SCHEMA_MISMATCH": SchemaMismatchError,
    "SHARD_CHECKSUM": ShardChecksumError,
    "SHARD_SIZE": ShardChecksumError,
    **dict.fromkeys(("HEADER_MISSING", "HEADER_ENCODING", "HEADER_TOO_LARGE", "HEADER_JSON",
                     "HEADER_SCHEMA"), HeaderError),
    **dict.fromkeys(("ZSTD_SIZE", "ZSTD_WINDOW", "ZSTD_CORRUPT", "ZSTD_TRAILING", "IMAGE_DECODE",
                     "CODEC_UNKNOWN"), DecodeError),
    **dict.fromkeys(("BOX_INVALID", "BOX_OUT_OF_IMAGE", "CLASS_RANGE", "COUNT_RANGE", "COUNT_SUM",
                     "MASK_INCONSISTENT", "IMAGE_FIELD"), LabelError),
}


def error_for(rule: str, message: str, *, path: str | os.PathLike[str] | None = None,
              index: int | None = None) -> FormatError:
    """The typed error of a format rule id (`RULES`; `LayoutError` for the others)."""
    cls = RULES.get(rule, LayoutError)
    if cls is UnsupportedVersionError:
        return cls(message, found="?", supported="?", rule=rule, path=path, index=index)
    return cls(message, rule=rule, path=path, index=index)


class CommitConflictError(WriteError):
    """Another commit published a new manifest since this one read its base generation.

    Nothing was published by the losing commit; re-read the root and commit again."""

    default_rule = "COMMIT_CONFLICT"


class CacheError(WriteError):
    """The shard cache cannot be used: not private to this user, not writable, or full."""

    default_rule = "CACHE_UNUSABLE"


class TooManyBoxesError(UsageError):
    """A fixed number of box slots (``max_boxes``) is smaller than a sample's valid boxes.

    Raised instead of dropping the boxes beyond the cap: a missing box teaches the model that
    the object is background. ``index`` names the sample (dataset index where known),
    ``count`` its valid boxes and ``max_boxes`` the cap.
    """

    default_rule = "MAX_BOXES"

    def __init__(self, message: str, *, count: int, max_boxes: int, **kwargs) -> None:
        self.count = int(count)
        self.max_boxes = int(max_boxes)
        super().__init__(message, **kwargs)

    def __reduce__(self):  # keep count/max_boxes too across pickling
        state = (self.message, self.count, self.max_boxes, self.rule, self.path, self.index)
        return (_rebuild_too_many_boxes, state)


def _rebuild_too_many_boxes(message, count, max_boxes, rule, path, index):
    return TooManyBoxesError(
        message, count=count, max_boxes=max_boxes, rule=rule, path=path, index=index
    )


class NormalizedBoxesWarning(UserWarning):
    """Every box given to the writer lies within 0..1 on images of many pixels: they look
    normalised, while detfmt stores boxes in pixels (xyxy)."""


class IncompatibleDatasetsError(UsageError):
    """Valid datasets that cannot be combined as asked (appended to a root, merged, exported
    as one YOLO dataset): other classes, or a per-box field of two dtypes. Not a broken
    dataset, unlike `SchemaMismatchError` (a shard disagreeing with its own manifest, S-8)."""

    default_rule = "DATASETS_INCOMPATIBLE"


class ClassNamesMismatchError(UsageError):
    """Datasets mixed in one loader disagree on their class names (SPEC O-12).

    A class id means a class by name: mixing datasets whose ids name different classes would
    train on wrong labels. ``source`` is the number of the disagreeing dataset, ``names`` its
    class names and ``expected`` the mixture's; pass ``class_names=`` (map by name) or
    ``class_map=`` (rename) to mix them.
    """

    default_rule = "CLASS_NAMES_MISMATCH"

    def __init__(self, message: str, *, source: int, names: list[str], expected: list[str],
                 **kwargs) -> None:
        self.source = int(source)
        self.names = list(names)
        self.expected = list(expected)
        super().__init__(message, **kwargs)

    def __reduce__(self):  # keep source/names/expected too across pickling
        state = (self.message, self.source, self.names, self.expected, self.rule, self.path,
                 self.index)
        return (_rebuild_class_names, state)


def _rebuild_class_names(message, source, names, expected, rule, path, index):
    return ClassNamesMismatchError(message, source=source, names=names, expected=expected,
                                   rule=rule, path=path, index=index)
