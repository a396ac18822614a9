"""DataLoader compatibility: a map-style Dataset + collate, and a worker loader with a shared ring.

- `DetectionDataset` is a standard ``torch.utils.data.Dataset`` (works with ``DistributedSampler``
  and any sampler). It pickles only the dataset path, so each worker re-opens the memmap; items are
  per-sample dicts and `collate` pads them into a `Batch`. Convenient, but a stock DataLoader then
  copies every batch into fresh shared memory (~37 ms per 29 MB batch measured here).
- `RingDataLoader` keeps DataLoader's worker processes but has them gather whole batches into a
  ring of preallocated shared-memory buffers and return only the slot id, so multi-process
  loading is never slower than one process and scales decode-bound codecs.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.utils.data as tud

from detfmt.errors import DatasetChangedError, UsageError
from detfmt.torch._gather import Gatherer, dataset_path
from detfmt.torch._ring import BufferRing, Slot
from detfmt.torch._schedule import EpochSchedule, default_quasi_block
from detfmt.torch.batch import Batch

__all__ = ["DetectionDataset", "RingDataLoader", "collate"]


def _open(path: Path | str) -> Any:
    import detfmt

    return detfmt.open(path)


def _is_sharded(ds: Any) -> bool:
    from detfmt.shard.sharded import ShardedDataset

    return isinstance(ds, ShardedDataset)


class DetectionDataset(tud.Dataset):
    """Map-style dataset of samples: ``{"image", "boxes", "classes", "index", "size"}`` tensors.

    ``image`` is (H, W, 3) uint8 (or (3, H, W) with ``layout="CHW"``), a copy the caller owns.
    Pickling sends the path only; the memmaps are re-opened lazily in each worker.
    """

    def __init__(self, ds_or_path: Any, layout: str = "HWC") -> None:
        if layout not in ("CHW", "HWC"):
            raise UsageError(f"layout must be 'CHW' or 'HWC', got {layout!r}")
        if isinstance(ds_or_path, (str, os.PathLike)):
            text = os.fspath(ds_or_path)
            self.path: Path | str = text if "://" in text else Path(text)  # URL: a sharded root
            self._ds = None
        elif _is_sharded(ds_or_path):
            self.path = ds_or_path.root
            self._ds = ds_or_path
        else:
            self.path = dataset_path(ds_or_path)
            self._ds = ds_or_path
        self.layout = layout
        self._len = len(self.ds)

    @property
    def ds(self) -> Any:
        if self._ds is None:
            ds = _open(self.path)
            expected = getattr(self, "_generation", None)  # set when unpickled in a worker
            if expected is not None and getattr(ds, "generation", None) != expected:
                raise DatasetChangedError("the dataset was replaced after the main process "
                                          "opened it; restart the loader", path=self.path)
            self._ds = ds
        return self._ds

    def __getstate__(self) -> dict[str, Any]:
        if _is_sharded(self.ds):  # pickles as (root, open options, write_id): checked on reopen
            return {"path": self.path, "layout": self.layout, "_len": self._len, "_ds": self.ds,
                    "_generation": None}
        # the files' identities travel with the path, so a worker never mixes two versions
        return {"path": self.path, "layout": self.layout, "_len": self._len, "_ds": None,
                "_generation": getattr(self.ds, "generation", None)}

    def __len__(self) -> int:
        return self._len

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        ds = self.ds
        if _is_sharded(ds):  # the sample's own shard reader (S-5)
            shard, local = ds.locate(index)  # checks the index (UsageError / IndexError)
            ds = ds.shard(shard)
            h, w, _ = ds.image_shape(local)
            return self._item(ds, local, index, h, w)
        h, w, _ = ds.image_shape(index)  # checks the index (UsageError / IndexError)
        return self._item(ds, index, index, h, w)

    def _item(self, ds: Any, index: int, global_index: int, h: int, w: int
              ) -> dict[str, torch.Tensor]:
        image = torch.empty((h, w, 3), dtype=torch.uint8)
        ds.decode_into(index, image.numpy())
        count = int(ds.counts[index])
        return {
            "image": image if self.layout == "HWC" else image.permute(2, 0, 1),
            "boxes": torch.from_numpy(np.array(ds.boxes[index, :count], dtype=np.float32)),
            "classes": torch.from_numpy(np.array(ds.classes[index, :count], dtype=np.int32)),
            "index": torch.tensor(int(global_index) % self._len, dtype=torch.int64),
            "size": torch.tensor([h, w], dtype=torch.int32),
        }


def collate(samples: Sequence[dict[str, torch.Tensor]], pad_value: int = 0) -> Batch:
    """Pad a list of `DetectionDataset` items into one `Batch` (images padded bottom/right).

    Images come out as (B, 3, H, W) channels_last views of one HWC tensor, like the `Loader`.
    """
    if not samples:
        raise UsageError("collate needs at least one sample")
    hwc = [s["image"] if s["image"].shape[-1] == 3 and s["image"].dim() == 3 and
           s["image"].shape[0] != 3 else s["image"].permute(1, 2, 0) for s in samples]
    sizes = torch.stack([s["size"] for s in samples])
    height, width = int(sizes[:, 0].max()), int(sizes[:, 1].max())
    images = torch.full((len(samples), height, width, 3), pad_value, dtype=torch.uint8)
    for j, image in enumerate(hwc):
        images[j, : image.shape[0], : image.shape[1]] = image
    m = max(int(s["boxes"].shape[0]) for s in samples)
    boxes = torch.zeros((len(samples), m, 4), dtype=torch.float32)
    classes = torch.full((len(samples), m), -1, dtype=torch.int32)
    mask = torch.zeros((len(samples), m), dtype=torch.bool)
    for j, s in enumerate(samples):
        k = int(s["boxes"].shape[0])
        boxes[j, :k] = s["boxes"]
        classes[j, :k] = s["classes"]
        mask[j, :k] = True
    return Batch(
        images=images.permute(0, 3, 1, 2), boxes=boxes, classes=classes, mask=mask,
        sizes=sizes, indices=torch.stack([s["index"] for s in samples]),
    )


class _RingBatches(tud.Dataset):
    """Worker side: item (indices, slot id) -> gather into the shared slot, return labels only."""

    def __init__(self, path: Path, slots: list[torch.Tensor], io: str, pad_value: int,
                 generation: Any = None) -> None:
        self.path = path
        self.slots = slots  # shared-memory tensors: pickled by handle, never by value
        self.io = io
        self.pad_value = pad_value
        self.generation = generation  # the main process's file identities
        self._gather: Gatherer | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_gather"] = None
        return state

    def __len__(self) -> int:  # the sampler drives; DataLoader asks only for len()
        return 0

    def __getitem__(self, item: tuple[np.ndarray, int, tuple[int, int]]) -> tuple:
        indices, slot_id, (height, width) = item
        if self._gather is None:
            ds = _open(self.path)
            if self.generation is not None and getattr(ds, "generation", None) != self.generation:
                raise DatasetChangedError("the dataset was replaced after the loader opened it; "
                                          "restart the loader", path=self.path)
            self._gather = Gatherer(ds, io=self.io)
        shape = (len(indices), height, width, 3)
        if slot_id >= 0:
            target = self.slots[slot_id].numpy()[: int(np.prod(shape))].reshape(shape)
            self._gather.fill(indices, target, self.pad_value)
            images = None
        else:  # every ring slot is held by the user: fall back to a fresh (shared) tensor
            images = torch.empty(shape, dtype=torch.uint8)
            self._gather.fill(indices, images.numpy(), self.pad_value)
        boxes, classes, mask, fields = self._gather.labels(indices)
        return indices, slot_id, shape, images, boxes, classes, mask, fields


def _identity(item: Any) -> Any:
    return item


class _RingSampler(tud.Sampler):
    """Main-process side: yields (indices, slot, shape) and assigns a free slot to each batch.

    It reads the owner's current epoch plan at each ``iter()``, so one DataLoader with
    persistent workers serves every epoch.
    """

    def __init__(self, owner: RingDataLoader) -> None:
        self.owner = owner

    def __len__(self) -> int:
        batches, start = self.owner._plan
        return len(batches) - start

    def __iter__(self) -> Iterator[tuple[np.ndarray, int, tuple[int, int]]]:
        owner = self.owner
        batches, start = owner._plan
        for indices in batches[start:]:
            shape = owner.canvas or owner.gather.batch_shape(indices)
            slot = owner.ring.try_acquire(len(indices) * shape[0] * shape[1] * 3)
            owner.in_flight.append(slot)
            yield indices, (slot.index if slot is not None else -1), shape


class RingDataLoader(EpochSchedule):
    """Batches from DataLoader worker processes that fill a ring of preallocated shared buffers.

    Same order, resume state and buffer-reuse contract as `Loader` (a batch you hold is never
    overwritten; if you hold every ring slot, the next batch travels the slow, fresh-shared-memory
    way instead). ``ring`` defaults to ``num_workers * prefetch_factor + 2`` slots.
    """

    def __init__(
        self,
        ds_or_path: Any,
        batch_size: int,
        num_workers: int = 2,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool | None = None,
        rank: int | None = None,
        world_size: int | None = None,
        prefetch_factor: int = 2,
        layout: str = "CHW",
        *,
        canvas: tuple[int, int] | None = None,
        order: str | None = None,
        io: str = "mmap",
        ring: int | None = None,
        pad_value: int = 0,
        multiprocessing_context: Any = None,
        quasi_block: int | None = None,
        quasi_window: int = 8,
    ) -> None:
        if layout not in ("CHW", "HWC"):
            raise UsageError(f"layout must be 'CHW' or 'HWC', got {layout!r}")
        if not isinstance(num_workers, int) or num_workers < 1:
            raise UsageError(f"num_workers must be >= 1 (one process: use Loader): {num_workers}")
        ds = _open(Path(ds_or_path)) if isinstance(ds_or_path, (str, os.PathLike)) else ds_or_path
        if _is_sharded(ds):
            raise UsageError("RingDataLoader reads 1.0 datasets; for a sharded dataset use Loader "
                             "(threads over the mapped shards, the elastic order of SPEC §19.6)")
        self.path = dataset_path(ds)
        self.gather = Gatherer(ds, io=io)
        order = order if order is not None else ("random" if shuffle else "sequential")
        self._init_schedule(
            len(ds), batch_size, seed, drop_last, rank, world_size, order,
            quasi_block or default_quasi_block(self.gather.nbytes), quasi_window,
        )
        self.layout = layout
        self.canvas = canvas
        max_h, max_w = canvas if canvas is not None else self.gather.max_hw
        self.ring = _SharedRing(batch_size * max_h * max_w * 3)
        for _ in range(ring if ring is not None else num_workers * prefetch_factor + 2):
            self.ring.add()
        self.in_flight: list[Slot | None] = []
        self._plan: tuple[list[np.ndarray], int] = ([], 0)
        self._loader: tud.DataLoader | None = None
        self.num_workers = num_workers
        self.prefetch_factor = prefetch_factor
        self.io = io
        self.pad_value = pad_value
        self.multiprocessing_context = multiprocessing_context

    def _dataloader(self) -> tud.DataLoader:
        """One DataLoader whose persistent workers (and their slot mappings) serve every epoch."""
        if self._loader is None:
            source = _RingBatches(
                self.path, [slot.tensor for slot in self.ring.slots], self.io, self.pad_value,
                getattr(self.gather.ds, "generation", None),
            )
            self._loader = tud.DataLoader(
                source,
                batch_size=None,
                sampler=_RingSampler(self),
                num_workers=self.num_workers,
                collate_fn=_identity,
                prefetch_factor=self.prefetch_factor,
                persistent_workers=True,
                multiprocessing_context=self.multiprocessing_context,
            )
        return self._loader

    def __iter__(self) -> Iterator[Batch]:
        batches, start = self._begin_epoch()
        self._plan = (batches, start)
        self.in_flight = []
        return self._run(self._dataloader(), start, len(batches))

    def close(self) -> None:
        """Stop the worker processes (they also stop when the loader is garbage collected)."""
        loader, self._loader = self._loader, None
        iterator = getattr(loader, "_iterator", None) if loader is not None else None
        if iterator is not None:
            iterator._shutdown_workers()

    def _run(self, loader: tud.DataLoader, start: int, total: int) -> Iterator[Batch]:
        position = start
        try:
            for indices, slot_id, shape, images, boxes, classes, mask, fields in loader:
                slot = self.in_flight.pop(0)
                if slot is not None and slot.index != slot_id:
                    raise RuntimeError("detfmt RingDataLoader: batches arrived out of order")
                if slot is not None:
                    count = int(np.prod(shape))
                    images = slot.tensor[:count].view(shape)
                    self.ring.release(slot)
                else:
                    images = torch.as_tensor(images)
                position += 1
                self.batches_done = position
                yield Batch(
                    images=images if self.layout == "HWC" else images.permute(0, 3, 1, 2),
                    boxes=torch.as_tensor(boxes),
                    classes=torch.as_tensor(classes),
                    mask=torch.as_tensor(mask),
                    sizes=torch.from_numpy(np.ascontiguousarray(self.gather.sizes[indices])),
                    indices=torch.as_tensor(np.ascontiguousarray(indices)),
                    extras={name: torch.as_tensor(v) for name, v in fields.items()},
                )
        finally:
            if position < total:  # stopped early or failed: workers may still write into slots
                self.close()
            for slot in self.in_flight:
                if slot is not None:
                    self.ring.release(slot)
            self.in_flight = []


class _SharedRing(BufferRing):
    """A fixed ring of shared-memory slots (workers hold the handles; it cannot grow)."""

    def __init__(self, capacity: int) -> None:
        super().__init__(capacity, pin=False, shared=True)

    def add(self) -> Slot:
        slot = Slot(len(self.slots), self.capacity, pin=False, shared=True)
        self.slots.append(slot)
        return slot

    def try_acquire(self, need: int) -> Slot | None:
        with self._lock:
            for slot in self.slots:
                if not slot.busy and slot.capacity >= need and not slot.referenced():
                    slot.busy = True
                    return slot
        return None
