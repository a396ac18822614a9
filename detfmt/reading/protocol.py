"""What every detfmt dataset offers: `DatasetLike`, and the epoch iteration both kinds share.

A 1.0 directory (`detfmt.Dataset`), a sharded root, local or remote (`detfmt.ShardedDataset`),
honour the same protocol, so every command and adapter (CLI, converters' export, the torch
loaders, Ray) takes any of them. ``detfmt.open`` returns one.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from detfmt.format.records import DatasetSchema, NumpyBatch, RaggedLabels, Sample
from detfmt.order import DEFAULT_SHARD_WINDOW, EpochPlan, OrderSpec, OrderState
from detfmt.reading.gather import Gather, batch_buffer

__all__ = ["DatasetLike", "DatasetSchema", "EpochIteration", "NumpyBatch", "RaggedLabels",
           "Sample"]


@runtime_checkable
class DatasetLike(Protocol):
    """A detfmt dataset: a 1.0 directory, or a sharded root (local or remote)."""

    @property
    def location(self) -> str:
        """Where the dataset lives (a path or URL), for messages."""

    @property
    def schema(self) -> DatasetSchema: ...

    @property
    def format_version(self) -> str:
        """The format version the dataset declares ("1.0", "1.1", ...)."""

    def codec_counts(self) -> dict[str, int]:
        """Samples per codec name."""

    def disk_usage(self) -> dict[str, int]:
        """Bytes per stored file (members, or manifest and shard files)."""

    @property
    def class_names(self) -> list[str]: ...

    @property
    def metadata(self) -> dict[str, str]: ...

    @property
    def sizes(self) -> np.ndarray:
        """(N, 2) int32 stored (height, width) of every image."""

    @property
    def counts(self) -> np.ndarray:
        """(N,) int32 box count of every image."""

    @property
    def engine(self) -> Gather:
        """The gather engine every batch of this dataset goes through (loaders use it)."""

    def __len__(self) -> int: ...

    def __getitem__(self, index: int) -> Sample: ...

    def batch(self, indices: Sequence[int] | np.ndarray, out: np.ndarray | None = None,
              pad_value: int | None = 0, num_threads: int | None = None, *,
              canvas: tuple[int, int] | None = None, max_boxes: int | None = None,
              decode_scale: int = 1) -> NumpyBatch: ...

    def batch_buffer(self, batch_size: int, *, canvas: tuple[int, int] | None = None
                     ) -> np.ndarray: ...

    def labels(self, indices: Sequence[int] | np.ndarray | None = None) -> NumpyBatch:
        """Boxes, classes, mask and fields of samples (all when None), padded to their
        largest count, without pixels (``images`` is empty)."""

    def ragged_labels(self, indices: Sequence[int] | np.ndarray | None = None
                      ) -> RaggedLabels:
        """The labels of samples (all when None) as one row per box with offsets."""

    def image_shape(self, index: int) -> tuple[int, int, int]: ...

    def part_ranges(self) -> list[tuple[int, int]]:
        """[start, stop) of each stored part (one for a 1.0 dataset, one per non-empty shard):
        blocks of work that read one file each."""

    def decode_into(self, index: int, out: np.ndarray) -> None: ...

    def codec(self, index: int) -> str:
        """The codec name of one sample's stored payload ("raw", "zstd", "jpeg", "png")."""

    def payload(self, index: int) -> memoryview:
        """The stored bytes of one sample as written (copies that keep payloads byte for
        byte)."""

    def payload_checksum(self, index: int) -> int:
        """The XXH3-64 stored for one sample's payload (copies check the bytes against it)."""

    def image_field(self, name: str) -> np.ndarray:
        """A per-image field of every sample: ``orig_size`` (N, 2), ``scale_offset`` (N, 4),
        ``source_id`` (N,)."""

    def string_field(self, name: str, index: int) -> str: ...

    def order_spec(self, order: str = "random", *, shard_window: int = DEFAULT_SHARD_WINDOW,
                   quasi_block: int | None = None, quasi_window: int = 8) -> OrderSpec:
        """What fixes this dataset's epoch order besides (seed, epoch) (SPEC §18, S-18)."""

    def plan(self, *, seed: int, epoch: int, batch_size: int, world_size: int = 1,
             rank: int = 0, samples_seen: int = 0, drop_last: bool = True,
             order: str = "random", shard_window: int = DEFAULT_SHARD_WINDOW) -> EpochPlan: ...

    def iter_batches(self, plan: EpochPlan, *, out: np.ndarray | None = None,
                     prefetch_shards: int = 2) -> Iterator[NumpyBatch]: ...

    def close(self) -> None: ...


def _label_blocks(chosen: np.ndarray, counts: np.ndarray, slots: int) -> Iterator[np.ndarray]:
    """``chosen`` in order, in blocks whose padded labels take at most ``slots`` slots (halved
    until they do; a single sample is always one block)."""
    n = len(counts)
    wide = np.asarray(counts)[np.clip(chosen, -n, n - 1)] if n else np.zeros(0)
    pending = [(0, len(chosen))]
    while pending:
        start, stop = pending.pop()
        if stop - start > 1 and (stop - start) * int(wide[start:stop].max()) > slots:
            middle = (start + stop) // 2
            pending += [(middle, stop), (start, middle)]  # the first half comes out first
            continue
        if stop > start:
            yield chosen[start:stop]


class _NoFollower:
    def step(self, t: int, t_last: int | None = None) -> None:
        """Nothing to prepare: every part is local and mapped."""


class EpochIteration(Sequence):
    """What every kind of dataset (a 1.0 directory, a sharded root, a mixture) shares, written
    once over its ``engine`` (`detfmt.reading.gather.Gather`) and ``sizes``: batches, labels,
    buffers
    and the epoch-order methods (numpy only; the torch `Loader` adds threads, reusable buffers
    and devices on top of the same plans)."""

    def batch(self, indices: Sequence[int] | np.ndarray, out: np.ndarray | None = None,
              pad_value: int | None = 0, num_threads: int | None = None, *,
              canvas: tuple[int, int] | None = None, max_boxes: int | None = None,
              decode_scale: int = 1) -> NumpyBatch:
        """Gather samples into one padded batch (see `detfmt.reading.gather.Gather.batch`).

        Args:
            indices: sample indices (any order, repeats allowed; integers only).
            out: optional reusable uint8 buffer (`batch_buffer`): flat with at least
                B*H*W*3 bytes, or exactly (B, H, W, 3). Images are written into it.
            pad_value: value of the pixels outside each image's valid region; None leaves them
                as they are (faster; ``sizes`` tells each image's valid region).
            num_threads: threads copying images; None picks up to the CPU count for batches of
                at least 4 MiB, 1 copies in the calling thread.
            canvas: (H, W): a fixed image shape for every batch (images at the top-left); an
                image larger than the canvas is an error.
            max_boxes: a fixed box-slot count; a sample with more boxes is an error.
            decode_scale: 2, 4 or 8 decodes JPEG-stored images at that fraction of their
                stored size in the DCT domain (faster; ``sizes`` and boxes follow; other codecs
                are an error). 1 (default): the stored pixels, byte for byte.
        """
        return self.engine.batch(  # type: ignore[attr-defined]
            indices, out=out, pad_value=pad_value, num_threads=num_threads, canvas=canvas,
            max_boxes=max_boxes, decode_scale=decode_scale)

    def labels(self, indices: Sequence[int] | np.ndarray | None = None) -> NumpyBatch:
        """Boxes, classes, mask and per-box fields of samples, without pixels: padded (B, m, 4)
        arrays, m the largest count among them, materialised on request on every dataset and
        label layout. ``indices`` None: every sample (mind the padding of one crowded image;
        `ragged_labels` has none)."""
        if indices is None:
            indices = np.arange(len(self))
        return self.engine.labels_only(indices)  # type: ignore[attr-defined]

    def ragged_labels(self, indices: Sequence[int] | np.ndarray | None = None, *,
                      slots: int = 1 << 20) -> RaggedLabels:
        """The labels of samples (every sample when None) as rows, one per box, with offsets:
        sample ``indices[k]`` has rows ``offsets[k] : offsets[k + 1]``. The same on every kind
        of dataset and either stored label layout (padded or ragged); checked like ``ds[i]``.
        Gathered in blocks padded to at most ``slots`` box slots (one crowded image does not
        pad the others), so memory is the boxes' own."""
        chosen = (np.arange(len(self), dtype=np.int64) if indices is None
                  else np.asarray(indices, dtype=np.int64).reshape(-1))
        boxes, classes, counts = [], [], []
        fields: dict[str, list[np.ndarray]] = {}
        for rows in _label_blocks(chosen, self.counts, slots):  # type: ignore[attr-defined]
            part = self.labels(rows)
            boxes.append(part.boxes[part.mask])
            classes.append(part.classes[part.mask])
            counts.append(part.mask.sum(axis=1))
            for name, values in part.fields.items():
                fields.setdefault(name, []).append(values[part.mask])
        offsets = np.zeros(len(chosen) + 1, np.int64)
        if counts:
            np.cumsum(np.concatenate(counts), out=offsets[1:])
        if not boxes:  # no sample asked for
            schema = self.schema  # type: ignore[attr-defined]
            return RaggedLabels(
                boxes=np.zeros((0, 4), np.float32), classes=np.zeros(0, np.int32),
                offsets=offsets, indices=chosen,
                fields={f.name: np.zeros(0, np.dtype(f.dtype)) for f in schema.box_fields})
        return RaggedLabels(boxes=np.concatenate(boxes), classes=np.concatenate(classes),
                            offsets=offsets, indices=chosen,
                            fields={name: np.concatenate(parts) for name, parts in fields.items()})

    def batch_buffer(self, batch_size: int, *, canvas: tuple[int, int] | None = None
                     ) -> np.ndarray:
        """A reusable, page-aligned ``out=`` buffer for batches of up to ``batch_size`` samples.

        Prefer it to ``np.empty``: a large ``np.empty`` starts 16 bytes into a page, which makes
        copies from the 64-byte aligned payloads several times slower (4K aliasing).
        """
        sizes = (np.array([canvas], np.int32) if canvas is not None
                 else self.sizes)  # type: ignore[attr-defined]
        return batch_buffer(sizes, batch_size)

    def order_spec(self, order: str = "random", *, shard_window: int = DEFAULT_SHARD_WINDOW,
                   quasi_block: int | None = None, quasi_window: int = 8) -> OrderSpec:
        raise NotImplementedError

    def follow(self, batches: Sequence[np.ndarray], ahead: int = 2) -> Any:
        """An object whose ``step(t)`` prepares batch t of ``batches`` (remote shards: fetch and
        pin them ahead of use)."""
        return _NoFollower()

    def plan(self, *, seed: int, epoch: int, batch_size: int, world_size: int = 1,
             rank: int = 0, samples_seen: int = 0, drop_last: bool = True,
             order: str = "random", shard_window: int = DEFAULT_SHARD_WINDOW) -> EpochPlan:
        """This rank's batches of one epoch (SPEC §18, S-19): the global order sliced
        contiguously across ranks from position ``samples_seen``; ``drop_last`` drops the tail
        shorter than a global batch, else it is wrap-padded (several ranks) or short (one)."""
        return EpochPlan.build(self.order_spec(order, shard_window=shard_window),
                               OrderState(seed, epoch, samples_seen), world_size=world_size,
                               rank=rank, batch_size=batch_size, drop_last=drop_last)

    def iter_batches(self, plan: EpochPlan, *, out: np.ndarray | None = None,
                     prefetch_shards: int = 2) -> Iterator[NumpyBatch]:
        """Yield ``plan``'s batches (``ds.batch``); remote shards are fetched and pinned ahead."""
        batches = list(plan.batches())
        follower = self.follow(batches, prefetch_shards)
        for t, indices in enumerate(batches):
            follower.step(t)
            yield self.batch(indices, out=out)  # type: ignore[attr-defined]
