"""A ring of reusable (optionally pinned) batch buffers that never recycles a held buffer.

Allocating a fresh (pinned or shared) buffer per batch costs more than filling it, so buffers are
reused. A buffer is free again only when nothing outside the ring references its storage: the
ring compares the storage's use count with the count it had when idle. If the user holds every
buffer, the ring allocates another one instead of waiting (so ``list(loader)`` cannot deadlock,
it just uses memory).
"""

from __future__ import annotations

import threading

import numpy as np
import torch

from detfmt.reading.buffers import aligned_empty

__all__ = ["BufferRing", "Slot", "storage_use_count"]

HUGE_PAGE = 2 << 20


def storage_use_count(tensor: torch.Tensor) -> int:
    """How many tensors (and numpy arrays made from them) share ``tensor``'s storage."""
    return int(torch._C._storage_Use_Count(tensor.untyped_storage()._cdata))


class Slot:
    """One flat uint8 buffer, its numpy view, and whether the ring has lent it out."""

    __slots__ = ("array", "busy", "event", "idle_count", "index", "layout", "tensor")

    def __init__(self, index: int, capacity: int, pin: bool, shared: bool) -> None:
        self.index = index
        if pin or shared:
            self.tensor = torch.empty(capacity, dtype=torch.uint8, pin_memory=pin)
            if shared:
                self.tensor.share_memory_()
        else:
            # numpy asks for transparent huge pages on large arrays (torch does not): a gather
            # writes each image row by row across the whole buffer, and 2 MiB pages spare it a
            # TLB miss every couple of rows
            self.tensor = torch.from_numpy(aligned_empty(capacity, align=HUGE_PAGE))
        self.array = self.tensor.numpy()
        self.busy = False
        self.event: object | None = None  # a CUDA event: the async copy out of this slot
        # what the last gather left: ((H, W), pad_value, [(h, w) per image], tensor version)
        self.layout: tuple | None = None
        self.idle_count = storage_use_count(self.tensor)

    @property
    def capacity(self) -> int:
        return int(self.tensor.numel())

    def referenced(self) -> bool:
        """True while a tensor or array handed out still points into this buffer."""
        return storage_use_count(self.tensor) > self.idle_count

    def copy_done(self) -> bool:
        event = self.event
        return event is None or bool(event.query())  # type: ignore[attr-defined]


class BufferRing:
    """Hands out free slots of at least a given capacity; grows when every slot is held."""

    def __init__(self, capacity: int, pin: bool = False, shared: bool = False) -> None:
        self.capacity = int(capacity)
        self.pin = pin
        self.shared = shared
        self.slots: list[Slot] = []
        self._lock = threading.Lock()

    def acquire(self, min_capacity: int = 0) -> Slot:
        """A slot nobody references, marked busy until ``release``.

        A free slot too small for ``min_capacity`` is replaced by a larger one (buffers follow
        the largest batch seen), so the ring holds no more slots than batches in flight or held.
        """
        need = max(self.capacity, int(min_capacity))
        with self._lock:
            small = None
            for k, slot in enumerate(self.slots):
                if slot.busy or slot.referenced() or not slot.copy_done():
                    continue
                if slot.capacity >= need:
                    slot.busy = True
                    slot.event = None
                    return slot
                small = k
            slot = Slot(len(self.slots) if small is None else small, need, self.pin, self.shared)
            slot.busy = True
            if small is None:
                self.slots.append(slot)
            else:
                self.slots[small] = slot
            return slot

    def release(self, slot: Slot) -> None:
        """The loader is done with the slot; it is reused once the user drops its tensors."""
        with self._lock:
            slot.busy = False

    def view(self, slot: Slot, shape: tuple[int, int, int, int]) -> np.ndarray:
        """The first prod(shape) bytes of the slot as a C-contiguous (B, H, W, C) uint8 array."""
        b, h, w, c = shape
        return slot.array[: b * h * w * c].reshape(shape)

    def tensor_view(self, slot: Slot, shape: tuple[int, int, int, int],
                    channels_first: bool = False) -> torch.Tensor:
        """`view` as a tensor sharing the slot's storage (so the ring sees it held); with
        ``channels_first`` the same bytes as (B, C, H, W) channels_last."""
        b, h, w, c = shape
        if channels_first:
            return slot.tensor.as_strided((b, c, h, w), (h * w * c, 1, w * c, c))
        return slot.tensor.as_strided(shape, (h * w * c, w * c, c, 1))
