"""The values detfmt returns: `Sample`, `NumpyBatch`, `DatasetSchema`, and the index rules.

A bottom module (numpy and msgspec only) that the readers, the gather engine and the adapters
share, so none of them has to import another to name a sample or a batch.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec
import numpy as np

from detfmt import errors
from detfmt.format.schema import BoxField, ClassInfo

__all__ = ["DatasetSchema", "NumpyBatch", "RaggedLabels", "Sample", "batch_indices",
           "sample_index"]


@dataclass(frozen=True)
class Sample:
    """One sample: the image as stored (H, W, 3), its boxes (K, 4) and classes (K,).

    For raw samples ``image`` is a read-only view of the mapped file (copy it to modify).
    ``fields`` holds the optional per-box fields (trimmed to K) and per-image fields.
    """

    index: int
    image: np.ndarray
    boxes: np.ndarray
    classes: np.ndarray
    fields: dict[str, Any] = field(default_factory=dict)

    def __getattr__(self, name: str) -> Any:  # sample.iscrowd, sample.file_name, ...
        fields = object.__getattribute__(self, "fields")
        if name in fields:
            return fields[name]
        raise AttributeError(name)

    def __repr__(self) -> str:
        h, w = self.image.shape[:2]
        extra = f", fields={sorted(self.fields)}" if self.fields else ""
        return f"Sample(index={self.index}, image={h}x{w}, boxes={len(self.boxes)}{extra})"


@dataclass
class NumpyBatch:
    """A gathered batch: images padded to the batch's largest size (or a canvas), labels to its
    largest count (or ``max_boxes``); ``mask`` marks the real boxes."""

    images: np.ndarray  # (B, H, W, 3) uint8
    sizes: np.ndarray  # (B, 2) int32 (height, width) of each image's valid region
    boxes: np.ndarray  # (B, M, 4) float32, xyxy pixels; padding 0
    classes: np.ndarray  # (B, M) int32, -1 in padding
    mask: np.ndarray  # (B, M) bool
    indices: np.ndarray  # (B,) int64
    fields: dict[str, np.ndarray] = field(default_factory=dict)  # per-box (B, M) fields

    def __len__(self) -> int:
        return len(self.indices)

    def __repr__(self) -> str:
        b, h, w = self.images.shape[:3]
        return (f"NumpyBatch(samples={b}, images={h}x{w}, boxes={int(self.mask.sum())} in "
                f"{self.mask.shape[1]} slots, fields={sorted(self.fields)})")


@dataclass
class RaggedLabels:
    """The labels of samples as rows, one per box, back to back (what ``ds.ragged_labels()``
    returns on every kind of dataset, whatever label layout it stores): sample ``indices[k]``
    has the rows ``offsets[k] : offsets[k + 1]``; no padding, so it costs what the boxes do."""

    boxes: np.ndarray  # (T, 4) float32, xyxy pixels
    classes: np.ndarray  # (T,) int32
    offsets: np.ndarray  # (B + 1,) int64, offsets[0] == 0, offsets[-1] == T
    indices: np.ndarray  # (B,) int64
    fields: dict[str, np.ndarray] = field(default_factory=dict)  # per-box (T,) fields

    def __len__(self) -> int:
        return len(self.indices)

    @property
    def counts(self) -> np.ndarray:
        """(B,) boxes per sample."""
        return np.diff(self.offsets)

    def of(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(boxes, classes) of the k-th sample of these labels (sample ``indices[k]``)."""
        start, stop = int(self.offsets[k]), int(self.offsets[k + 1])
        return self.boxes[start:stop], self.classes[start:stop]

    def __repr__(self) -> str:
        return (f"RaggedLabels(samples={len(self)}, boxes={len(self.classes)}, "
                f"fields={sorted(self.fields)})")


class DatasetSchema(msgspec.Struct, frozen=True, kw_only=True):
    """What every sample of a dataset shares: classes, optional fields, image constraints."""

    classes: list[ClassInfo]
    box_fields: list[BoxField] = []
    image_fields: list[str] = []
    fixed_shape: tuple[int, int, int] | None = None
    max_side: int | None = None
    #: "raw", "zstd", "jpeg" or "png" when every sample uses that codec, else "mixed"
    codec: str = "mixed"

    @property
    def class_names(self) -> list[str]:
        return [c.name for c in self.classes]

    @property
    def num_classes(self) -> int:
        return len(self.classes)


def sample_index(index: Any, n: int, where: str | os.PathLike[str]) -> int:
    """A sample index as a Python int in 0..n-1 (negative counts from the end)."""
    if isinstance(index, (bool, np.bool_)) or not isinstance(index, (int, np.integer)):
        raise errors.UsageError(f"a sample index must be an int, got {index!r}", path=where)
    i = int(index)
    if i < 0:
        i += n
    if not 0 <= i < n:
        raise errors.SampleIndexError(f"sample index {index} out of range for {n} samples",
                                      path=where)
    return i


def batch_indices(indices: Sequence[int] | np.ndarray, n: int,
                  where: str | os.PathLike[str]) -> np.ndarray:
    """Batch indices as an int64 array in 0..n-1 (negative counts from the end).

    Boolean masks and floats are refused rather than reinterpreted (a mask read as indices
    would silently return samples 0 and 1).
    """
    if type(indices) is np.ndarray and indices.dtype == np.int64 and indices.ndim == 1:
        # the loaders' case, in as few numpy calls as possible (they run once per batch)
        if not indices.size:
            return indices
        lo, hi = indices.min(), indices.max()
        if lo < -n or hi >= n:
            raise errors.SampleIndexError(f"batch index out of range for {n} samples", path=where)
        return indices if lo >= 0 else np.where(indices < 0, indices + n, indices)
    array = np.asarray(indices)
    if array.dtype == np.bool_:
        raise errors.UsageError("batch indices must be integers, got a boolean mask; use "
                                "np.flatnonzero(mask)", path=where)
    if array.size and not np.issubdtype(array.dtype, np.integer):
        raise errors.UsageError(f"batch indices must be integers, got dtype {array.dtype}",
                                path=where)
    array = array.reshape(-1)
    if array.size and (array.min() < -n or array.max() >= n):  # before any cast can wrap
        raise errors.SampleIndexError(f"batch index out of range for {n} samples", path=where)
    idx = array.astype(np.int64, copy=False)
    return np.where(idx < 0, idx + n, idx) if idx.size and idx.min() < 0 else idx
