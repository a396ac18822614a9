"""detfmt: a versioned on-disk dataset format for object-detection training.

Importing detfmt needs numpy only (plus msgspec, zstandard, xxhash and Pillow); torch is imported by
``detfmt.torch`` and ``detfmt.augment`` alone.
"""

from detfmt.errors import (
    DatasetChangedError,
    DatasetNotFoundError,
    DecodeError,
    DetfmtError,
    FormatError,
    HeaderError,
    IntegrityError,
    InvalidSampleError,
    LabelError,
    LayoutError,
    NotDetfmtError,
    TargetExistsError,
    TargetLockedError,
    TargetNotWritableError,
    UnsafePathError,
    UnsupportedVersionError,
    UsageError,
    WriteError,
)

__version__ = "0.1.0"

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
    "NotDetfmtError",
    "TargetExistsError",
    "TargetLockedError",
    "TargetNotWritableError",
    "UnsafePathError",
    "UnsupportedVersionError",
    "UsageError",
    "WriteError",
    "__version__",
]
