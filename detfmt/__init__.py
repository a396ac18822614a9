"""detfmt: a versioned on-disk dataset format for object-detection training.

Importing detfmt needs numpy only (plus msgspec, zstandard, xxhash and Pillow); torch is imported by
``detfmt.torch`` and ``detfmt.augment`` alone.
"""

from detfmt._version import __version__
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
from detfmt.options import WriteOptions
from detfmt.reader import Dataset, NumpyBatch, Sample
from detfmt.reader import open_dataset as open
from detfmt.schema import ClassInfo, Header
from detfmt.shard.sharded import ShardedDataset
from detfmt.shard.write import ShardMeta, commit, write_shard
from detfmt.spec import FORMAT_VERSION
from detfmt.verify import VerifyReport, verify
from detfmt.writer import WriteReport, cleanup, write

__all__ = [
    "FORMAT_VERSION",
    "ClassInfo",
    "Dataset",
    "DatasetChangedError",
    "DatasetNotFoundError",
    "DecodeError",
    "DetfmtError",
    "FormatError",
    "Header",
    "HeaderError",
    "IntegrityError",
    "InvalidSampleError",
    "LabelError",
    "LayoutError",
    "NotDetfmtError",
    "NumpyBatch",
    "Sample",
    "ShardMeta",
    "ShardedDataset",
    "TargetExistsError",
    "TargetLockedError",
    "TargetNotWritableError",
    "UnsafePathError",
    "UnsupportedVersionError",
    "UsageError",
    "VerifyReport",
    "WriteError",
    "WriteOptions",
    "WriteReport",
    "__version__",
    "cleanup",
    "commit",
    "open",
    "verify",
    "write",
    "write_shard",
]


def __getattr__(name: str):
    """Lazy submodules: ``detfmt.convert.from_coco(...)`` works after a plain ``import detfmt``
    without importing the converters for every user."""
    if name == "convert":
        import importlib

        return importlib.import_module("detfmt.convert")
    raise AttributeError(f"module 'detfmt' has no attribute {name!r}")
