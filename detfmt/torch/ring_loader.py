"""`RingDataLoader`: DataLoader worker processes that gather whole batches into shared buffers.

It keeps DataLoader's worker processes but has them gather whole batches, through the gather
engine, into a ring of preallocated shared-memory buffers and return only the slot id, so
multi-process loading is never slower than one process and scales decode-bound codecs. (The
map-style `DetectionDataset` + `collate` are in `detfmt.torch.dataset`.)
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
import torch.utils.data as tud

from detfmt.errors import DetfmtError, UsageError
from detfmt.order import DEFAULT_SHARD_WINDOW, Schedule
from detfmt.reading import kernel
from detfmt.reading.gather import check_canvas, check_padding
from detfmt.torch._reopen import Reopen
from detfmt.torch._ring import BufferRing, Slot
from detfmt.torch.batch import Batch
from detfmt.torch.loader import default_rank_world, open_dataset

__all__ = ["RingDataLoader"]


class _RingBatches(tud.Dataset):
    """Worker side: item (indices, slot id, shape, previous extents) -> gather into the shared
    slot, return the labels and sizes only."""

    def __init__(self, source: Reopen, slots: list[torch.Tensor], io: str, pad_value: int,
                 native: bool) -> None:
        self.source = source
        self.slots = slots  # shared-memory tensors: pickled by handle, never by value
        self.io = io
        self.pad_value = pad_value
        self.native = native  # load the native gather in the worker, as the parent did

    def __len__(self) -> int:  # the sampler drives; DataLoader asks only for len()
        return 0

    def __getitem__(self, item: tuple[np.ndarray, int, tuple[int, int], np.ndarray | None]
                    ) -> tuple:
        if self.native:
            kernel.load()  # once per worker process (persistent workers)
        try:
            return self._gather(*item)
        except DetfmtError as error:  # travels pickled with its rule, file and sample (torch
            return (error,)  # would re-raise its type with the message only)

    def _gather(self, indices: np.ndarray, slot_id: int, hw: tuple[int, int],
                previous: np.ndarray | None) -> tuple:
        height, width = hw
        engine = self.source.ds.engine
        job = engine.job(indices)
        shape = (len(indices), height, width, 3)
        if slot_id >= 0:
            target = self.slots[slot_id].numpy()[: int(np.prod(shape))].reshape(shape)
            images = None
        else:  # every ring slot is held by the user: fall back to a fresh (shared) tensor
            images = torch.empty(shape, dtype=torch.uint8)
            target = images.numpy()
        boxes, classes, mask, fields = engine.labels(job)
        extents = engine.fill(job, target, self.pad_value, previous=previous, io=self.io)
        return indices, slot_id, shape, images, boxes, classes, mask, fields, extents


def _identity(item: Any) -> Any:
    return item


class _RingSampler(tud.Sampler):
    """Main-process side: yields (indices, slot, shape) and assigns a free slot to each batch.

    It reads the owner's current epoch batches at each ``iter()``, so one DataLoader with
    persistent workers serves every epoch.
    """

    def __init__(self, owner: RingDataLoader) -> None:
        self.owner = owner

    def __len__(self) -> int:
        return len(self.owner._batches)

    def __iter__(self) -> Iterator[tuple[np.ndarray, int, tuple[int, int], np.ndarray | None]]:
        owner = self.owner
        for indices in owner._batches:
            shape = owner.canvas or owner._shape(indices)
            slot = owner.ring.try_acquire(len(indices) * shape[0] * shape[1] * 3)
            owner.in_flight.append(slot)
            previous = None
            if slot is not None:
                # what the slot's last gather wrote, unless its batch was written in place since
                # (torch bumps the version counter shared by every view of the slot)
                layout = slot.layout
                if (layout is not None and layout[0] == shape
                        and layout[2] == slot.tensor._version):
                    previous = layout[1]
                slot.layout = None  # unknown while a worker writes into it
            yield indices, (slot.index if slot is not None else -1), shape, previous


class RingDataLoader:
    """Batches from DataLoader worker processes that fill a ring of preallocated shared buffers.

    Same order, resume state and buffer-reuse contract as `Loader`, over any detfmt dataset (a
    batch you hold is never overwritten; if you hold every ring slot, the next batch travels the
    slow, fresh-shared-memory way instead). ``ring`` defaults to
    ``num_workers * prefetch_factor + 2`` slots, each as large as the largest batch of the
    dataset (or ``canvas``).
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
        shard_window: int = DEFAULT_SHARD_WINDOW,
    ) -> None:
        if layout not in ("CHW", "HWC"):
            raise UsageError(f"layout must be 'CHW' or 'HWC', got {layout!r}")
        if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 1:
            raise UsageError(f"num_workers must be >= 1 (one process: use Loader): {num_workers}")
        self.ds = open_dataset(ds_or_path)
        order = order if order is not None else ("random" if shuffle else "sequential")
        rank, world_size = default_rank_world(rank, world_size)
        self.schedule = Schedule(
            self.ds.order_spec(order, shard_window=shard_window, quasi_block=quasi_block,
                               quasi_window=quasi_window),
            batch_size=batch_size, seed=seed, rank=rank, world_size=world_size,
            drop_last=drop_last)
        self.layout = layout
        if canvas is not None:
            canvas = check_canvas(canvas)
        self.canvas = canvas
        self._sizes = self.ds.sizes  # (N, 2): slots are sized once, workers cannot grow them
        max_h, max_w = canvas if canvas is not None else (
            (int(self._sizes[:, 0].max()), int(self._sizes[:, 1].max())) if len(self._sizes)
            else (1, 1))
        if canvas is None and len(self._sizes):  # every slot fits the largest image
            typical = float(np.prod(self._sizes, axis=1, dtype=np.int64).mean()) * 3
            check_padding(batch_size, max_h, max_w, int(typical * batch_size),
                          self.ds.location)
        self.ring = _SharedRing(batch_size * max_h * max_w * 3)
        for _ in range(ring if ring is not None else num_workers * prefetch_factor + 2):
            self.ring.add()
        self.in_flight: list[Slot | None] = []
        self._batches: list[np.ndarray] = []
        self._loader: tud.DataLoader | None = None
        self.num_workers = num_workers
        self.prefetch_factor = prefetch_factor
        self.io = io
        # the workers load the native gather when this process can (numba installed)
        self.native = io == "mmap" and kernel.load()
        self.pad_value = pad_value
        self.multiprocessing_context = multiprocessing_context

    def _shape(self, indices: np.ndarray) -> tuple[int, int]:
        if not len(indices):
            return (1, 1)
        sizes = self._sizes[indices]
        return int(sizes[:, 0].max()), int(sizes[:, 1].max())

    # the schedule, as `Loader` has it
    def __len__(self) -> int:
        return len(self.schedule)

    @property
    def epoch(self) -> int:
        return self.schedule.epoch

    def set_epoch(self, epoch: int) -> None:
        self.schedule.set_epoch(epoch)

    def state_dict(self) -> dict[str, Any]:
        return self.schedule.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.schedule.load_state_dict(state)

    def rank_batches(self, epoch: int | None = None) -> list[np.ndarray]:
        return self.schedule.rank_batches(epoch)

    def _dataloader(self) -> tud.DataLoader:
        """One DataLoader whose persistent workers (and their slot mappings) serve every epoch."""
        if self._loader is None:
            source = _RingBatches(Reopen(self.ds), [slot.tensor for slot in self.ring.slots],
                                  self.io, self.pad_value, self.native)
            self._loader = tud.DataLoader(
                source, batch_size=None, sampler=_RingSampler(self),
                num_workers=self.num_workers, collate_fn=_identity,
                prefetch_factor=self.prefetch_factor, persistent_workers=True,
                multiprocessing_context=self.multiprocessing_context)
        return self._loader

    def __iter__(self) -> Iterator[Batch]:
        self._batches = self.schedule.begin_epoch()
        self.in_flight = []
        return self._run(self._dataloader(), len(self._batches))

    def close(self) -> None:
        """Stop the worker processes (they also stop when the loader is garbage collected)."""
        loader, self._loader = self._loader, None
        iterator = getattr(loader, "_iterator", None) if loader is not None else None
        if iterator is not None:
            iterator._shutdown_workers()

    def _run(self, loader: tud.DataLoader, total: int) -> Iterator[Batch]:
        position = 0
        try:
            for result in loader:
                slot = self.in_flight.pop(0)
                if len(result) == 1:  # a worker's typed error: raise it here, as it was
                    if slot is not None:
                        self.ring.release(slot)
                    raise result[0]
                indices, slot_id, shape, images, boxes, classes, mask, fields, sizes = result
                if slot is not None and slot.index != slot_id:
                    raise RuntimeError("detfmt RingDataLoader: batches arrived out of order")
                if slot is not None:
                    count = int(np.prod(shape))
                    images = slot.tensor[:count].view(shape)
                    slot.layout = (shape[1:3], sizes, slot.tensor._version)
                    self.ring.release(slot)
                else:
                    images = torch.as_tensor(images)
                position += 1
                self.schedule.mark(position)
                yield Batch(
                    images=images if self.layout == "HWC" else images.permute(0, 3, 1, 2),
                    boxes=torch.as_tensor(boxes),
                    classes=torch.as_tensor(classes),
                    mask=torch.as_tensor(mask),
                    sizes=torch.as_tensor(sizes),
                    indices=torch.as_tensor(np.ascontiguousarray(indices)),
                    extras={name: torch.as_tensor(v) for name, v in fields.items()},
                    box_fields=tuple(fields),  # the dataset's per-box fields, (B, M) each
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
