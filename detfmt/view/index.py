"""The viewer's filters: which samples match a query, computed on flat label arrays.

Every box of the dataset is one row of flat arrays (class, owning sample, area in original
pixels), read once when the viewer opens a dataset. A query is then a handful of numpy passes
over those arrays (``bincount`` per condition), never a Python loop over samples, so a filter on
a million samples answers well under a second. File names are joined into one lower-cased text
so a substring search is one ``str.find`` scan mapped back to samples with ``searchsorted``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Literal

import numpy as np

from detfmt import errors
from detfmt.reading.protocol import DatasetLike

__all__ = ["SIZES", "SORTS", "LabelIndex", "Query"]

#: COCO's box-size categories: area (original pixels) below 32², below 96², else
SIZES = {"small": (0.0, 32.0**2), "medium": (32.0**2, 96.0**2), "large": (96.0**2, np.inf)}
#: sample orders: dataset order, most boxes first, fewest boxes first, most prediction errors
#: (false positives + false negatives) first
SORTS = ("index", "most-boxes", "fewest-boxes", "worst")
BLOCK_BYTES = 32 << 20  # padded labels read per block


def _join(parts: list[np.ndarray], dtype: type) -> np.ndarray:
    return np.concatenate(parts) if parts else np.zeros(0, dtype)


@dataclasses.dataclass(frozen=True)
class Query:
    """A filter over samples; empty fields do not filter. A sample matches when it has a box of
    any class of ``any_of``, boxes of every class of ``all_of``, no box of ``none_of``, between
    ``min_boxes`` and ``max_boxes`` boxes, a box of COCO size ``size``, and ``name`` in its file
    name (case-insensitive)."""

    any_of: tuple[int, ...] = ()
    all_of: tuple[int, ...] = ()
    none_of: tuple[int, ...] = ()
    min_boxes: int | None = None
    max_boxes: int | None = None
    size: Literal["small", "medium", "large"] | None = None
    name: str = ""
    sort: str = "index"


@dataclasses.dataclass
class LabelIndex:
    """Flat label arrays of one dataset: ``counts`` (N,) boxes per sample; per box ``classes``,
    ``owner`` (its sample) and ``area`` (original pixels); ``names`` the file names (None when
    the dataset has none, or until `load_names`)."""

    counts: np.ndarray
    classes: np.ndarray
    owner: np.ndarray
    area: np.ndarray
    num_classes: int
    names: Sequence[str] | None = None

    def __post_init__(self) -> None:
        self.counts = np.asarray(self.counts, np.int64)
        self.classes = np.asarray(self.classes)
        self.owner = np.asarray(self.owner)
        self.area = np.asarray(self.area)
        self.has_names = self.names is not None
        #: (N,) prediction errors per sample (false positives + negatives), for sort="worst"
        self.errors: np.ndarray | None = None
        self._text: str | None = None
        self._starts: np.ndarray | None = None

    @classmethod
    def from_dataset(cls, ds: DatasetLike) -> LabelIndex:
        """Read every label of ``ds`` through the reader's checks, in blocks of up to
        `BLOCK_BYTES` of padded labels (a million samples in about a second). File names are
        read later, on the first name filter (`load_names`)."""
        n = len(ds)
        counts = np.asarray(ds.counts, np.int64).reshape(n)
        fields = ds.schema.image_fields
        if "scale_offset" in fields:  # stored = original * scale + offset, per axis
            transform = np.asarray(ds.image_field("scale_offset"), np.float64).reshape(n, 4)
            pixel_area = transform[:, 0] * transform[:, 1]
        else:
            pixel_area = np.ones(n)
        widest = max(1, int(counts.max()) if n else 1)
        step = int(max(1, min(1 << 16, BLOCK_BYTES // (widest * 21))))
        classes, owner, area = [], [], []
        for start in range(0, n, step):
            labels = ds.labels(np.arange(start, min(n, start + step), dtype=np.int64))
            mask = labels.mask
            boxes = labels.boxes[mask].astype(np.float64)
            mine = np.repeat(labels.indices, mask.sum(axis=1))
            stored = ((boxes[:, 2] - boxes[:, 0]).clip(0) * (boxes[:, 3] - boxes[:, 1]).clip(0))
            classes.append(labels.classes[mask].astype(np.int32))
            owner.append(mine.astype(np.int32 if n < 2**31 else np.int64))
            area.append((stored / pixel_area[mine]).astype(np.float32))
        index = cls(counts, _join(classes, np.int32), _join(owner, np.int32),
                    _join(area, np.float32), ds.schema.num_classes)
        index.has_names = "file_name" in fields
        return index

    def load_names(self, ds: DatasetLike) -> None:
        """Read the file names of ``ds`` (the dataset this index was read from)."""
        if self.names is None and self.has_names:
            self.names = [ds.string_field("file_name", i) for i in range(len(ds))]

    def __len__(self) -> int:
        return len(self.counts)

    def _has(self, box_mask: np.ndarray | None) -> np.ndarray:
        """Per sample: has at least one box where ``box_mask`` holds (all boxes if None)."""
        owners = self.owner if box_mask is None else self.owner[box_mask]
        return np.bincount(owners, minlength=len(self)).astype(bool)

    def _has_class(self, classes: tuple[int, ...]) -> np.ndarray:
        wanted = np.zeros(self.num_classes, bool)
        wanted[list(classes)] = True
        return self._has(wanted[self.classes])

    def _name_matches(self, needle: str) -> np.ndarray:
        if self.names is None or "\n" in needle:  # names are joined by (and hold no) "\n"
            return np.zeros(len(self), bool)
        if self._text is None:
            lowered = [name.lower().replace("\n", " ") for name in self.names]
            lengths = np.fromiter((len(s) + 1 for s in lowered), np.int64, len(lowered))
            self._starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
            self._text = "\n".join(lowered)
        text, needle = self._text, needle.lower()
        hits, at = [], text.find(needle)
        while at >= 0:
            hits.append(at)
            at = text.find(needle, at + 1)
        found = np.zeros(len(self), bool)
        if hits:
            found[np.searchsorted(self._starts, np.asarray(hits), side="right") - 1] = True
        return found

    def select(self, query: Query) -> np.ndarray:
        """The indices (int64) of the samples matching ``query``, in ``query.sort`` order."""
        for ids in (query.any_of, query.all_of, query.none_of):
            bad = [c for c in ids if not 0 <= c < self.num_classes]
            if bad:
                raise errors.UsageError(f"class id {bad[0]} is out of range for "
                                        f"{self.num_classes} classes")
        if query.size is not None and query.size not in SIZES:
            raise errors.UsageError(f"size must be one of {sorted(SIZES)}, got {query.size!r}")
        if query.sort not in SORTS:
            raise errors.UsageError(f"sort must be one of {list(SORTS)}, got {query.sort!r}")
        keep = np.ones(len(self), bool)
        if query.any_of:
            keep &= self._has_class(query.any_of)
        for c in dict.fromkeys(query.all_of):
            keep &= self._has(self.classes == c)
        if query.none_of:
            keep &= ~self._has_class(query.none_of)
        if query.min_boxes is not None:
            keep &= self.counts >= query.min_boxes
        if query.max_boxes is not None:
            keep &= self.counts <= query.max_boxes
        if query.size is not None:
            low, high = SIZES[query.size]
            keep &= self._has((self.area >= low) & (self.area < high))
        if query.name:
            if self.has_names and self.names is None:
                raise errors.UsageError("the file names are not read yet: call load_names")
            keep &= self._name_matches(query.name)
        found = np.flatnonzero(keep).astype(np.int64)
        if query.sort == "most-boxes":
            found = found[np.argsort(-self.counts[found], kind="stable")]
        elif query.sort == "fewest-boxes":
            found = found[np.argsort(self.counts[found], kind="stable")]
        elif query.sort == "worst":
            if self.errors is None:
                raise errors.UsageError("sorting by the worst samples needs predictions "
                                        "(detfmt view --predictions)")
            found = found[np.argsort(-self.errors[found], kind="stable")]
        return found
