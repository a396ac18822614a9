"""detfmt: a versioned on-disk dataset format for object-detection training.

``import detfmt`` loads the error types and the format constants only (numpy); everything else
loads on first use, so reading a raw dataset needs numpy and msgspec alone, and Pillow,
simplejpeg, zstandard and the writer load when a decode or a write needs them. torch is imported
by ``detfmt.torch`` and ``detfmt.augment`` alone.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from detfmt.errors import (
    CacheError,
    ClassNamesMismatchError,
    CommitConflictError,
    DatasetChangedError,
    DatasetNotFoundError,
    DecodeError,
    DetfmtError,
    FormatError,
    HeaderError,
    IncompatibleDatasetsError,
    IntegrityError,
    InvalidSampleError,
    LabelError,
    LayoutError,
    ManifestError,
    NormalizedBoxesWarning,
    NotDetfmtError,
    PackError,
    RootLayoutError,
    SampleIndexError,
    SchemaMismatchError,
    ShardChecksumError,
    TargetExistsError,
    TargetLockedError,
    TargetNotWritableError,
    TooManyBoxesError,
    UnsafePathError,
    UnsupportedVersionError,
    UsageError,
    WriteError,
)
from detfmt.format.spec import FORMAT_VERSION
from detfmt.version import __version__

if TYPE_CHECKING:  # what the lazy names below resolve to, for type checkers and IDEs
    from detfmt.format.records import DatasetSchema, NumpyBatch, RaggedLabels, Sample
    from detfmt.format.schema import ClassInfo, Header
    from detfmt.reading.dataset import Dataset
    from detfmt.reading.kernel import load as use_native_gather
    from detfmt.reading.mixture import Mixture
    from detfmt.reading.opener import open_dataset as open
    from detfmt.reading.protocol import DatasetLike
    from detfmt.reading.sharded import ShardedDataset
    from detfmt.reading.verify import VerifyReport, verify
    from detfmt.shard.write import ShardMeta, commit, write_shard
    from detfmt.writing.options import WriteOptions
    from detfmt.writing.stored import StoredSample
    from detfmt.writing.writer import WriteReport, cleanup, write, write_stored

#: public name -> (module, attribute); loaded on first access (PEP 562)
_LAZY: dict[str, tuple[str, str | None]] = {
    "open": ("detfmt.reading.opener", "open_dataset"),
    "verify": ("detfmt.reading.verify", "verify"),
    "VerifyReport": ("detfmt.reading.verify", "VerifyReport"),
    "Dataset": ("detfmt.reading.dataset", "Dataset"),
    "ShardedDataset": ("detfmt.reading.sharded", "ShardedDataset"),
    "DatasetLike": ("detfmt.reading.protocol", "DatasetLike"),
    "DatasetSchema": ("detfmt.format.records", "DatasetSchema"),
    "NumpyBatch": ("detfmt.format.records", "NumpyBatch"),
    "RaggedLabels": ("detfmt.format.records", "RaggedLabels"),
    "Sample": ("detfmt.format.records", "Sample"),
    "ClassInfo": ("detfmt.format.schema", "ClassInfo"),
    "Header": ("detfmt.format.schema", "Header"),
    "write": ("detfmt.writing.writer", "write"),
    "write_stored": ("detfmt.writing.writer", "write_stored"),
    "StoredSample": ("detfmt.writing.stored", "StoredSample"),
    "Mixture": ("detfmt.reading.mixture", "Mixture"),
    "workflows": ("detfmt.workflows", None),
    "WriteOptions": ("detfmt.writing.options", "WriteOptions"),
    "WriteReport": ("detfmt.writing.writer", "WriteReport"),
    "cleanup": ("detfmt.writing.writer", "cleanup"),
    "ShardMeta": ("detfmt.shard.write", "ShardMeta"),
    "commit": ("detfmt.shard.write", "commit"),
    "write_shard": ("detfmt.shard.write", "write_shard"),
    "convert": ("detfmt.convert", None),
    "use_native_gather": ("detfmt.reading.kernel", "load"),
}

__all__ = [
    "FORMAT_VERSION",
    "CacheError",
    "ClassInfo",
    "ClassNamesMismatchError",
    "CommitConflictError",
    "Dataset",
    "DatasetChangedError",
    "DatasetLike",
    "DatasetNotFoundError",
    "DatasetSchema",
    "DecodeError",
    "DetfmtError",
    "FormatError",
    "Header",
    "HeaderError",
    "IncompatibleDatasetsError",
    "IntegrityError",
    "InvalidSampleError",
    "LabelError",
    "LayoutError",
    "ManifestError",
    "Mixture",
    "NormalizedBoxesWarning",
    "NotDetfmtError",
    "NumpyBatch",
    "PackError",
    "RaggedLabels",
    "RootLayoutError",
    "Sample",
    "SampleIndexError",
    "SchemaMismatchError",
    "ShardChecksumError",
    "ShardMeta",
    "ShardedDataset",
    "StoredSample",
    "TargetExistsError",
    "TargetLockedError",
    "TargetNotWritableError",
    "TooManyBoxesError",
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
    "use_native_gather",
    "verify",
    "write",
    "write_shard",
    "write_stored",
]


def __getattr__(name: str) -> Any:
    entry = _LAZY.get(name)
    if entry is None:
        raise AttributeError(f"module 'detfmt' has no attribute {name!r}")
    module = importlib.import_module(entry[0])
    value = module if entry[1] is None else getattr(module, entry[1])
    globals()[name] = value  # later accesses skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
