"""``detfmt filter``: a new dataset of the samples (and classes) you want, payloads as stored.

Criteria combine (a sample must pass all): ``classes`` (names or ids), ``min_boxes``,
``indices`` and ``file_names`` (glob patterns). With ``classes``, ``drop="images"`` (the
default) drops every image holding a box of another class, since training on it with that box
removed would teach the model that the object is background; ``drop="boxes"`` keeps every image
and removes the other classes' boxes. The output's classes are the wanted ones, in the source's
order (names and source ids kept). Images without boxes pass a class filter (they hold no
unwanted box): ``min_boxes=1`` drops them.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import os
import posixpath
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Literal

import numpy as np

from detfmt import errors
from detfmt.reading.protocol import DatasetLike
from detfmt.workflows._copy import (
    Source,
    check_not_empty,
    class_index,
    copy_samples,
    label_blocks,
    opened,
    resolve_class,
)
from detfmt.workflows._splitroot import (
    SplitsReport,
    for_each_split,
    located,
    refuse_per_split,
    split_index,
)
from detfmt.workflows.lineage import derived_metadata, source_entry
from detfmt.writing.writer import WriteReport

__all__ = ["FilterReport", "filter_dataset", "read_indices", "select_indices"]

Drop = Literal["images", "boxes"]


@dataclasses.dataclass
class FilterReport:
    """What `filter_dataset` kept: samples and boxes of the source and of the output."""

    path: Path
    source_samples: int
    samples: int
    source_boxes: int
    boxes: int
    classes: list[str]
    write: WriteReport

    def lines(self) -> list[str]:
        return [f"{self.path}: kept {self.samples} of {self.source_samples} samples and "
                f"{self.boxes} of {self.source_boxes} boxes; classes {self.classes}"]


@dataclasses.dataclass(frozen=True)
class Selection:
    """The samples a filter keeps (sorted source indices) and the class map it applies."""

    indices: np.ndarray
    class_map: np.ndarray | None
    classes: list[int]  # source ids of the output classes, in output order


def select_indices(
    ds: DatasetLike,
    *,
    classes: Sequence[str | int] | None = None,
    min_boxes: int | None = None,
    indices: Iterable[int] | None = None,
    file_names: Sequence[str] | str | None = None,
    drop: Drop = "images",
) -> Selection:
    """Which samples of ``ds`` pass the criteria (see the module doc), without writing."""
    if drop not in ("images", "boxes"):
        raise errors.UsageError(f"drop must be 'images' or 'boxes', got {drop!r}")
    n = len(ds)
    keep = np.ones(n, bool)
    if indices is not None:
        keep &= _index_mask(indices, n, ds.location)
    if file_names is not None:
        keep &= _name_mask(ds, [file_names] if isinstance(file_names, str) else list(file_names))
    class_map, wanted = None, list(range(len(ds.class_names)))
    if classes is not None:
        wanted = _wanted(ds, classes)
        class_map = np.full(len(ds.class_names), -1, np.int64)
        class_map[wanted] = np.arange(len(wanted))
    if min_boxes is not None and (isinstance(min_boxes, bool) or not isinstance(
            min_boxes, (int, np.integer)) or min_boxes < 0):
        raise errors.UsageError(f"min_boxes must be an int >= 0, got {min_boxes!r}")
    if class_map is not None or min_boxes:
        candidates = np.flatnonzero(keep)
        for labels in label_blocks(ds, candidates):
            rows = labels.indices
            if class_map is not None and labels.classes.size:
                mapped = np.where(labels.mask, class_map[np.maximum(labels.classes, 0)], 0)
                unwanted = labels.mask & (mapped < 0)
                if drop == "images":
                    keep[rows[unwanted.any(axis=1)]] = False
                counts = (labels.mask & ~unwanted).sum(axis=1)
            else:
                counts = labels.mask.sum(axis=1)
            if min_boxes:
                keep[rows[counts < min_boxes]] = False
    return Selection(np.flatnonzero(keep).astype(np.int64), class_map, wanted)


def filter_dataset(
    src: Source,
    dst: str | os.PathLike[str],
    *,
    classes: Sequence[str | int] | None = None,
    min_boxes: int | None = None,
    indices: Iterable[int] | None = None,
    file_names: Sequence[str] | str | None = None,
    drop: Drop = "images",
    allow_empty: bool = False,
    overwrite: bool = False,
    progress: bool | None = None,
) -> FilterReport | SplitsReport[FilterReport]:
    """Write the samples of ``src`` that pass the criteria into a new dataset at ``dst``.

    Payloads are copied byte for byte and every per-box and per-image field is kept (see
    `detfmt.writing.writer.write_stored`); ``dst`` records the step in its card's lineage. A split
    root (``splits.json``) is filtered split by split into a split root at ``dst``.

    Args:
        src: a dataset path, URL or opened dataset (any kind).
        classes: wanted classes by name (or id); the output has only these classes.
        min_boxes: keep samples with at least this many boxes (after dropping boxes).
        indices: keep only these sample indices (any order; the output keeps source order).
        file_names: keep samples whose stored file name (or its last part) matches one of these
            glob patterns.
        drop: with ``classes``: "images" drops an image holding another class's box,
            "boxes" keeps the image and drops those boxes.
        allow_empty: write even when nothing passes (refused by default).

    Raises:
        UsageError: an unknown class, an index out of range, an empty result...
    """
    names = split_index(src)
    if names is not None:  # every split, into a split root
        refuse_per_split("indices", indices)
        return for_each_split(
            list(names), dst, overwrite, lambda name, out: filter_dataset(
                located(src, name), out, classes=classes, min_boxes=min_boxes,
                file_names=file_names, drop=drop, allow_empty=allow_empty,
                overwrite=overwrite, progress=progress),
            os.fspath(src), lambda r: (r.samples, r.boxes))  # type: ignore[arg-type]
    with opened(src) as ds:
        selection = select_indices(ds, classes=classes, min_boxes=min_boxes, indices=indices,
                                   file_names=file_names, drop=drop)
        check_not_empty(len(selection.indices), "the filter", allow_empty,
                        "loosen the criteria")
        out_classes = [ds.schema.classes[i] for i in selection.classes]
        args = {"classes": [c.name for c in out_classes] if classes is not None else None,
                "min_boxes": min_boxes, "indices": None if indices is None else "given",
                "file_names": file_names, "drop": drop if classes is not None else None}
        metadata = derived_metadata(ds.metadata, "filter", args, [source_entry(ds)],
                                    len(selection.indices))
        report = copy_samples(ds, selection.indices, dst, classes=out_classes,
                              metadata=metadata, class_map=selection.class_map,
                              overwrite=overwrite, progress=progress)
        return FilterReport(path=report.path, source_samples=len(ds),
                            samples=report.num_samples, source_boxes=int(np.sum(ds.counts)),
                            boxes=report.num_boxes, classes=[c.name for c in out_classes],
                            write=report)


def read_indices(path: str | os.PathLike[str]) -> list[int]:
    """Sample indices from a text file: integers separated by newlines, spaces or commas;
    ``#`` starts a comment."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise errors.UsageError(f"cannot read the index file: {error}", path=path) from error
    values = []
    for number, line in enumerate(text.splitlines(), 1):
        for token in line.split("#", 1)[0].replace(",", " ").split():
            try:
                values.append(int(token))
            except ValueError:
                raise errors.UsageError(f"line {number}: {token!r} is not an integer index",
                                        path=path) from None
    return values


def _index_mask(indices: Iterable[int], n: int, where: str) -> np.ndarray:
    values = np.asarray(list(indices) if not isinstance(indices, np.ndarray) else indices)
    if values.size and (values.dtype == np.bool_ or not np.issubdtype(values.dtype, np.integer)):
        raise errors.UsageError(f"indices must be integers, got {values.dtype}", path=where)
    values = values.reshape(-1).astype(np.int64)
    bad = values[(values < 0) | (values >= n)]
    if bad.size:
        raise errors.SampleIndexError(f"index {int(bad[0])} is out of range for {n} samples "
                                      f"({bad.size} such)", path=where)
    mask = np.zeros(n, bool)
    mask[values] = True
    return mask


def _name_mask(ds: DatasetLike, patterns: list[str]) -> np.ndarray:
    if not patterns or not all(isinstance(p, str) and p for p in patterns):
        raise errors.UsageError(f"file_names must be non-empty glob patterns, got {patterns!r}")
    if "file_name" not in ds.schema.image_fields:
        raise errors.UsageError("the dataset stores no file names", path=ds.location)
    mask = np.zeros(len(ds), bool)
    for i in range(len(ds)):
        name = ds.string_field("file_name", i)
        base = posixpath.basename(name)
        mask[i] = any(fnmatch.fnmatchcase(name, p) or fnmatch.fnmatchcase(base, p)
                      for p in patterns)
    return mask


def _wanted(ds: DatasetLike, classes: Sequence[str | int]) -> list[int]:
    if isinstance(classes, (str, bytes)):
        raise errors.UsageError(f"classes must be a list of class names, not the string "
                                f"{classes!r} (did you mean [{classes!r}]?)")
    names = class_index(ds)
    ids = sorted({resolve_class(c, names, ds.location) for c in classes})
    if not ids:
        raise errors.UsageError("classes is empty: name at least one class to keep")
    return ids
