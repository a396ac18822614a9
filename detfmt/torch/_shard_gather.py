"""Fill one batch buffer from a sharded (1.1) dataset: the `Loader`'s gatherer for shards.

Numpy-only, like `detfmt.torch._gather` (which serves 1.0 directories). A batch's global indices
are located in their shards by the manifest's prefix sums (S-5); each sample is one contiguous
copy out of its shard's mapped ``images.bin`` (raw; through the reader's public ``blob``) or a
decode straight into its batch slot (zstd, JPEG, PNG). Labels of shards with different
``max_boxes`` are re-padded to the batch's own maximum (S-12) and checked with the reader's rules
(on a violation, the shard reader's ``check_labels`` names the shard file and the local index).

Shards are opened through ``ShardedDataset.shard(k)``, so remote roots fetch them into the node
cache (the loader pins and prefetches what its plan needs next). For remote roots the per-shard
tables live in a weak map keyed by the shard reader: when the dataset drops a reader
(``max_open``), its tables and mapping go with it, so an evicted cache file is not held open.
"""

from __future__ import annotations

import itertools
import threading
import weakref
from typing import Any

import numpy as np

from detfmt import validate
from detfmt.errors import UsageError
from detfmt.torch._gather import DecodeScratch

__all__ = ["ShardGatherer", "ShardJob"]

CODEC_RAW = 0
CODEC_JPEG = 2


class _Tables:
    """One shard's per-sample tables as plain numpy arrays (validated once, when built)."""

    __slots__ = (
        "blob", "box_fields", "boxes", "classes", "codecs", "counts", "fixed", "heights",
        "max_boxes", "nbytes", "offsets", "reader", "widths",
    )

    def __init__(self, reader: Any) -> None:
        sizes = reader.sizes  # validates every index record and count of the shard (once)
        # a proxy: a strong reference would keep the weak map's key alive (jobs hold readers)
        self.reader = weakref.proxy(reader)
        self.heights = np.ascontiguousarray(sizes[:, 0], dtype=np.int64)
        self.widths = np.ascontiguousarray(sizes[:, 1], dtype=np.int64)
        index = reader.index
        self.offsets = np.asarray(index["offset"], dtype=np.int64)
        self.codecs = np.asarray(index["codec"], dtype=np.uint8)
        self.nbytes = np.asarray(index["nbytes"], dtype=np.int64)
        self.counts = np.asarray(reader.counts, dtype=np.int64)
        self.boxes = reader.boxes
        self.classes = reader.classes
        self.box_fields = dict(reader.box_fields)
        self.max_boxes = int(self.boxes.shape[1]) if self.boxes.ndim == 3 else 0
        self.fixed = reader.fixed_images
        self.blob = reader.blob


class ShardJob:
    """One batch located in its shards: shard and local index per sample, the shards' tables."""

    __slots__ = (
        "counts", "heights", "indices", "local", "readers", "shard_list", "shards", "sizes",
        "tables", "widths",
    )

    def __init__(self, indices, shards, local, tables, sizes, counts, readers) -> None:
        self.indices = indices
        self.shards = shards  # (B,) shard number of each sample
        self.shard_list = shards.tolist()
        self.local = local  # (B,) index inside its shard
        self.tables = tables  # {shard number: _Tables}
        self.sizes = sizes  # (B, 2) int32 (height, width)
        self.heights = sizes[:, 0]
        self.widths = sizes[:, 1]
        self.counts = counts
        self.readers = readers  # remote roots: the shard readers stay open during the gather

    @property
    def shape(self) -> tuple[int, int]:
        """(Hmax, Wmax) of the batch."""
        if not len(self.indices):
            return (1, 1)
        return int(self.heights.max()), int(self.widths.max())

    def groups(self) -> list[tuple[_Tables, Any, np.ndarray]]:
        """[(tables, batch rows, local indices)] per shard (rows is a slice for one shard)."""
        if len(self.tables) == 1:
            (t,) = self.tables.values()
            return [(t, slice(None), self.local)]
        by_shard = np.argsort(self.shards, kind="stable")
        ordered = self.shards[by_shard]
        cuts = [0, *(np.flatnonzero(ordered[1:] != ordered[:-1]) + 1).tolist(), len(ordered)]
        out = []
        for lo, hi in itertools.pairwise(cuts):
            rows = by_shard[lo:hi]
            out.append((self.tables[int(ordered[lo])], rows, self.local[rows]))
        return out


class ShardGatherer(DecodeScratch):
    """Copies or decodes samples of a `ShardedDataset` into (h, w, 3) regions of batch buffers.

    Per-sample sizes, box counts, offsets and codecs are kept for the whole dataset (filled in
    as shards are first opened; about 21 bytes per sample, as the 1.0 gatherer keeps), so
    locating a batch costs a few vectorized lookups. Local roots keep every shard's tables;
    remote roots look the reader up per batch (the dataset's ``max_open`` LRU may close it).
    """

    def __init__(self, ds: Any) -> None:
        self.ds = ds
        self.n = n = len(ds)
        self.starts = np.array([s.first_index for s in ds.shards], dtype=np.int64)
        self.schema = ds.schema
        fixed = self.schema.fixed_shape
        self.fixed_hw = (int(fixed[0]), int(fixed[1])) if fixed else None
        self.box_field_dtypes = {f.name: np.dtype(f.dtype) for f in self.schema.box_fields}
        self.num_classes = len(self.schema.classes)
        self.root = str(ds.root)
        self.remote = bool(getattr(ds, "is_remote", False))
        self.sizes = np.zeros((n, 2), np.int32)
        self.counts = np.zeros(n, np.int32)
        self.offsets = np.zeros(n, np.int64)
        self.codecs = np.zeros(n, np.uint8)
        self._ready = np.zeros(len(self.starts), bool)
        self._kept: dict[int, tuple[Any, _Tables]] = {}  # local roots: readers kept open
        self._tables: weakref.WeakKeyDictionary[Any, _Tables] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()
        self._local = threading.local()

    # -- shards --------------------------------------------------------------------------------

    def tables(self, k: int) -> _Tables:
        """Shard ``k``'s tables (opening, and for remote roots fetching, the shard)."""
        return self._reader_tables(k)[1]

    def _reader_tables(self, k: int) -> tuple[Any, _Tables]:
        kept = self._kept.get(k)
        if kept is not None:
            return None, kept[1]  # no per-batch reference needed: kept holds the reader
        reader = self.ds.shard(k)
        t = self._tables.get(reader)
        if t is None:
            t = _Tables(reader)
            with self._lock:  # fill the dataset-wide tables before anyone can find ``t``
                if not self._ready[k]:
                    lo = int(self.starts[k])
                    hi = lo + len(t.heights)
                    self.sizes[lo:hi, 0] = t.heights
                    self.sizes[lo:hi, 1] = t.widths
                    self.counts[lo:hi] = t.counts
                    self.offsets[lo:hi] = t.offsets
                    self.codecs[lo:hi] = t.codecs
                    self._ready[k] = True
                self._tables[reader] = t
                if not self.remote:  # local shards stay mapped (cheap), whatever max_open says
                    self._kept[k] = (reader, t)
        return reader, t

    def max_hw(self) -> tuple[int, int]:
        """The largest stored (H, W) over every shard (opens them all: local roots only)."""
        if self.fixed_hw is not None:
            return self.fixed_hw
        for k, info in enumerate(self.ds.shards):
            if info.num_samples:
                self.tables(k)
        if not self.n:
            return (1, 1)
        return max(1, int(self.sizes[:, 0].max())), max(1, int(self.sizes[:, 1].max()))

    def prepare(self, indices: np.ndarray) -> ShardJob:
        """Locate ``indices`` (global, in 0..N-1) in their shards and read their sizes/counts."""
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        if idx.size and (idx.min() < 0 or idx.max() >= self.n):
            raise UsageError(f"sample index out of range for {self.n} samples")
        shards = np.searchsorted(self.starts, idx, side="right") - 1
        tables = {}
        readers = []
        for k in set(shards.tolist()):
            reader, tables[k] = self._reader_tables(k)
            if reader is not None:
                readers.append(reader)
        return ShardJob(
            idx, shards, idx - self.starts[shards], tables, self.sizes[idx], self.counts[idx],
            readers,
        )

    # -- pixels --------------------------------------------------------------------------------

    def fill(
        self,
        job: ShardJob,
        out: np.ndarray,
        pad_value: int = 0,
        previous: list[tuple[int, int]] | None = None,
    ) -> list[tuple[int, int]]:
        """Write the job's samples into ``out`` (B, H, W, 3); everything else becomes pad_value.

        Same contract as `detfmt.torch._gather.Gatherer.fill`: ``previous`` names the top-left
        region of each slot the last fill wrote (only that part of the padding is cleared);
        returns the (h, w) written per slot.
        """
        height, width = out.shape[1], out.shape[2]
        tables = job.tables
        local = job.local.tolist()
        if self.fixed_hw is not None and (height, width) == self.fixed_hw:
            for j, (k, li) in enumerate(zip(job.shard_list, local, strict=True)):
                np.copyto(out[j], tables[k].fixed[li])
            return [self.fixed_hw] * len(local)
        if previous is not None and len(previous) < len(local):
            previous = None
        heights = job.heights.tolist()
        widths = job.widths.tolist()
        rows = zip(
            job.shard_list, local, heights, widths, self.offsets[job.indices].tolist(),
            self.codecs[job.indices].tolist(), strict=True,
        )
        for j, (k, li, h, w, offset, codec) in enumerate(rows):
            slot = out[j]
            old_h, old_w = previous[j] if previous is not None else (height, width)
            if h < old_h:  # rows below the image
                slot[h:old_h, :old_w].fill(pad_value)
            if w < old_w:  # the strip right of the image
                slot[: min(h, old_h), w:old_w].fill(pad_value)
            t = tables[k]
            if codec == CODEC_RAW:  # the hot path: one strided memcpy
                np.copyto(slot[:h, :w], t.blob[offset : offset + h * w * 3].reshape(h, w, 3))
            else:
                self._decode(t, li, offset, codec, slot[:h, :w])
        return list(zip(heights, widths, strict=True))

    def _decode(self, t: _Tables, li: int, offset: int, codec: int, dst: np.ndarray) -> None:
        if codec == CODEC_JPEG:
            payload = t.blob[offset : offset + int(t.nbytes[li])]
            if self._jpeg_into(payload, dst):
                return
        t.reader.decode_into(li, dst)  # the reader's checks; a typed DecodeError names the shard

    # -- labels --------------------------------------------------------------------------------

    def labels(
        self, job: ShardJob
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[str, np.ndarray]]:
        """boxes (B, M', 4) float32, classes (B, M') int32, mask (B, M') bool, box fields.

        M' is the batch's largest box count (S-12: shards pad to their own ``max_boxes``).
        The batch is checked in one vectorized pass; on a violation the shard reader's
        ``check_labels`` raises the typed error naming the shard file and the local index.
        """
        b = len(job.indices)
        m = int(job.counts.max()) if b else 0
        boxes = np.zeros((b, m, 4), np.float32)
        classes = np.full((b, m), -1, np.int32)
        fields = {name: np.zeros((b, m), dt) for name, dt in self.box_field_dtypes.items()}
        if len(job.tables) == 1 or b <= 64:  # per-sample slices beat per-shard fancy indexing
            tables = job.tables
            for j, (k, li) in enumerate(zip(job.shard_list, job.local.tolist(), strict=True)):
                t = tables[k]
                mk = t.max_boxes if t.max_boxes < m else m
                boxes[j, :mk] = t.boxes[li, :mk]
                classes[j, :mk] = t.classes[li, :mk]
                for name, values in fields.items():
                    values[j, :mk] = t.box_fields[name][li, :mk]
        else:
            for t, rows, local in job.groups():
                mk = min(m, t.max_boxes)
                boxes[rows, :mk] = t.boxes[local, :mk]
                classes[rows, :mk] = t.classes[local, :mk]
                for name, values in fields.items():
                    values[rows, :mk] = t.box_fields[name][local, :mk]
        self._check_labels(job, boxes, classes, fields)
        mask = np.arange(m)[None, :] < job.counts[:, None]
        return boxes, classes, mask, fields

    def _check_labels(self, job: ShardJob, boxes, classes, fields) -> None:
        """One vectorized check of the whole batch; on a violation, each shard reader redoes
        its rows so the typed error names the shard file and the local sample index."""
        root = self.root
        clean = not any(
            True
            for _ in validate.check_labels(
                boxes=boxes, classes=classes, counts=job.counts, heights=job.heights,
                widths=job.widths, num_classes=self.num_classes, indices=job.indices,
                paths=(root, root), box_fields={n: (root, v) for n, v in fields.items()},
            )
        )
        if clean:
            return
        for t, rows, local in job.groups():
            t.reader.check_labels(
                local, boxes[rows], classes[rows], job.counts[rows],
                {name: values[rows] for name, values in fields.items()},
            )

    def close(self) -> None:
        """Forget the shard tables and the readers kept for local roots."""
        with self._lock:
            self._tables = weakref.WeakKeyDictionary()
            self._kept = {}
            self._ready[:] = False
