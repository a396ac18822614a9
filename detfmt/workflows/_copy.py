"""Reading a source dataset sample by sample as stored payloads, for the copying workflows.

Filter, remap, merge and split all copy samples of an opened dataset (any kind) into a new 1.0
directory through `detfmt.writing.writer.write_stored`: payload bytes as stored (checked against the
source's checksums), labels read through the reader's checks, every per-box and per-image field
kept. Labels are read a bounded block at a time, so a copy holds one payload and one block of
labels in memory whatever the dataset's size.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from detfmt import errors
from detfmt.format.schema import ClassInfo
from detfmt.reading.protocol import DatasetLike
from detfmt.writing.writer import StoredSample, WriteReport, write_stored

__all__ = ["Source", "box_field_specs", "check_not_empty", "class_index", "copy_samples",
           "label_blocks", "opened", "resolve_class", "stored_samples"]

Source = str | os.PathLike[str] | DatasetLike
#: label bytes (boxes, classes, mask, fields) gathered per block
LABEL_BLOCK_BYTES = 8 << 20
MAX_BLOCK = 4096


@contextlib.contextmanager
def opened(source: Source) -> Iterator[DatasetLike]:
    """The dataset ``source`` names (opened here and closed after), or ``source`` itself."""
    if isinstance(source, (str, os.PathLike)):
        from detfmt.reading.opener import open_dataset

        ds = open_dataset(source)
        try:
            yield ds
        finally:
            ds.close()
    elif isinstance(source, DatasetLike):
        yield source
    else:
        raise errors.UsageError(f"expected a dataset path, URL or opened dataset, got "
                                f"{type(source).__name__}")


def block_size(ds: DatasetLike) -> int:
    """Samples whose padded labels fit `LABEL_BLOCK_BYTES` at the dataset's largest count."""
    counts = np.asarray(ds.counts)
    widest = int(counts.max()) if len(counts) else 0
    per_sample = max(1, widest) * (4 * 4 + 4 + 1 + 4 * len(ds.schema.box_fields))
    return int(max(1, min(MAX_BLOCK, LABEL_BLOCK_BYTES // per_sample)))


def label_blocks(ds: DatasetLike, indices: np.ndarray) -> Iterator[Any]:
    """``ds.labels`` of ``indices`` (int64, any order), one bounded block at a time."""
    step = block_size(ds)
    for start in range(0, len(indices), step):
        yield ds.labels(indices[start : start + step])


def box_field_specs(ds: DatasetLike) -> list[tuple[str, str]]:
    """The dataset's per-box fields as (name, numpy descr) pairs, in stored order."""
    return [(field.name, field.dtype) for field in ds.schema.box_fields]


class _ImageFields:
    """Per-image fields of a dataset, read as whole arrays once (when the dataset has them)
    and handed out per block as plain Python values."""

    def __init__(self, ds: DatasetLike) -> None:
        fields = set(ds.schema.image_fields)
        self.ds = ds
        self.orig = np.asarray(ds.image_field("orig_size")) if "orig_size" in fields else None
        self.scale = (np.asarray(ds.image_field("scale_offset")) if "scale_offset" in fields
                      else None)
        self.source = (np.asarray(ds.image_field("source_id")) if "source_id" in fields
                       else None)
        self.names = "file_name" in fields

    def block(self, rows: np.ndarray) -> list[dict[str, Any]]:
        """The fields of samples ``rows`` as keyword arguments of `StoredSample`."""
        n = len(rows)
        orig = [None] * n if self.orig is None else [tuple(v) for v in self.orig[rows].tolist()]
        scale = [None] * n if self.scale is None else \
            [tuple(v) for v in self.scale[rows].tolist()]
        source = [-1] * n if self.source is None else self.source[rows].tolist()
        names = [self.ds.string_field("file_name", i) for i in rows.tolist()] if self.names \
            else [""] * n
        return [{"orig_size": o, "scale_offset": s, "source_id": d, "file_name": f}
                for o, s, d, f in zip(orig, scale, source, names, strict=True)]


def stored_samples(
    ds: DatasetLike,
    indices: Sequence[int] | np.ndarray,
    *,
    class_map: np.ndarray | None = None,
    fields: Sequence[str] | None = None,
) -> Iterator[StoredSample]:
    """The samples ``indices`` of ``ds`` as `StoredSample` records, in that order.

    Args:
        class_map: (C,) new class id of each source class, -1 to drop that class's boxes (with
            their per-box fields); None keeps the ids.
        fields: the per-box fields to carry (default: all the dataset has).
    """
    idx = np.asarray(indices, dtype=np.int64).reshape(-1)
    images = _ImageFields(ds)
    sizes = np.asarray(ds.sizes)
    names = [f.name for f in ds.schema.box_fields] if fields is None else list(fields)
    for labels in label_blocks(ds, idx):
        extra = images.block(labels.indices)
        heights_widths = sizes[labels.indices].tolist()
        for row, i in enumerate(labels.indices.tolist()):
            keep = labels.mask[row]
            classes = labels.classes[row][keep]
            boxes = labels.boxes[row][keep]
            values = {name: labels.fields[name][row][keep] for name in names}
            if class_map is not None and len(classes):
                mapped = class_map[classes]
                kept = mapped >= 0
                classes, boxes = mapped[kept].astype(np.int32), boxes[kept]
                values = {name: array[kept] for name, array in values.items()}
            height, width = heights_widths[row]
            yield StoredSample(payload=ds.payload(i), codec=ds.codec(i), height=height,
                               width=width, boxes=boxes, classes=classes, box_fields=values,
                               checksum=ds.payload_checksum(i), **extra[row])


def copy_samples(
    ds: DatasetLike,
    indices: Sequence[int] | np.ndarray,
    dst: str | os.PathLike[str],
    *,
    classes: Sequence[ClassInfo],
    metadata: Mapping[str, str],
    class_map: np.ndarray | None = None,
    overwrite: bool = False,
    progress: bool | None = None,
) -> WriteReport:
    """Copy samples ``indices`` of ``ds`` into a new dataset at ``dst`` (see `stored_samples`),
    keeping the source's per-box fields, ``max_side`` and the label layout rule."""
    return write_stored(stored_samples(ds, indices, class_map=class_map), dst,
                        classes=list(classes), box_fields=box_field_specs(ds),
                        max_side=ds.schema.max_side, metadata=dict(metadata),
                        overwrite=overwrite, progress=progress)


def check_not_empty(count: int, what: str, allow_empty: bool, hint: str) -> None:
    """Refuse an output of 0 samples unless ``allow_empty`` (it is almost always a mistake)."""
    if count == 0 and not allow_empty:
        raise errors.UsageError(f"{what} keeps 0 samples; {hint} (pass allow_empty=True to "
                                "write an empty dataset anyway)")


def class_index(ds: DatasetLike) -> dict[str, int]:
    return {name: i for i, name in enumerate(ds.class_names)}


def resolve_class(name: str | int, names: dict[str, int], where: str) -> int:
    """A class given by name (or by id, as an int or a string of digits that is no name)."""
    if isinstance(name, str) and name in names:
        return names[name]
    if (isinstance(name, (int, np.integer)) and not isinstance(name, bool)) or (
            isinstance(name, str) and name.isdigit()):
        value = int(name)
        if 0 <= value < len(names):
            return value
    import difflib

    close = difflib.get_close_matches(str(name), list(names), n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    shown = ", ".join(list(names)[:20]) + (", ..." if len(names) > 20 else "")
    raise errors.UsageError(f"no class {name!r} in {where}{hint} (classes: {shown})")
