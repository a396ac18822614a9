"""Large CPU buffers: fresh ones backed by transparent huge pages, and reused batch outputs.

A 32 x 640 x 640 x 3 uint8 batch is 39 MB; malloc maps fresh pages for every allocation that
large, and first-touching them cost ~31 ms of CPU per batch on the development VM (4 KB page
faults), while per-image arrays of 1.2 MB, as in a per-sample pipeline, are recycled by malloc.
An anonymous mapping advised with ``MADV_HUGEPAGE`` faults in 2 MB pages: ~6.5 ms. The result is
an ordinary tensor (its storage is a numpy view that keeps the mapping alive). Where the kernel
has no transparent huge pages (or ``madvise`` is unavailable) the advice is ignored or skipped
and the cost is as before.
"""

from __future__ import annotations

import math
import mmap
import os
import sys
import threading

import numpy as np
import torch

from detfmt.reading.buffers import aligned_empty

# Buffers from this size on are backed by memory advised for transparent huge pages.
HUGE_PAGE_MIN_BYTES = 8 << 20
_huge_pages = {"enabled": hasattr(mmap, "MADV_HUGEPAGE")}


def empty_hwc(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """An uninitialised contiguous CPU tensor of ``shape`` (huge-page backed when large)."""
    nbytes = int(np.prod(shape)) * torch.empty((), dtype=dtype).element_size()
    if _huge_pages["enabled"] and nbytes >= HUGE_PAGE_MIN_BYTES:
        try:
            region = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
            region.madvise(mmap.MADV_HUGEPAGE)
        except (OSError, ValueError):
            region = None
        if region is not None:
            raw = torch.from_numpy(np.frombuffer(region, dtype=np.uint8))
            return raw.view(dtype).view(shape)
    return torch.empty(shape, dtype=dtype)


# Output buffers kept for reuse (batches in flight or held by the consumer at once, over all
# threads).
REUSED_BUFFERS = 8


class _Reused:
    """Reusable buffers and, for each, its reference count while nothing holds it."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.arrays: list[np.ndarray] = []
        self.idle: list[int] = []


_reused = _Reused()


def _new_lock_in_child() -> None:
    """A forked child gets a fresh lock (a parent thread may have held it at the fork)."""
    _reused.lock = threading.Lock()


os.register_at_fork(after_in_child=_new_lock_in_child)


def reused_empty(shape: tuple[int, ...]) -> torch.Tensor:
    """An uninitialised contiguous uint8 CPU tensor of ``shape``, in a buffer that is reused.

    A batch output is written whole, handed out and dropped a batch or two later. A fresh large
    allocation per batch pays page faults on every batch (huge-page ones included), or not,
    depending on malloc's heuristics; these buffers are touched once. A buffer is reused only
    when no tensor (or array made from one) references it any more: the tensor holds the
    numpy array, whose reference count is compared with its count when idle. The buffers are
    shared by all threads (a loader starts new threads every epoch). When every buffer is
    held, the tensor is a fresh `empty_hwc` one.
    """
    need = math.prod(shape)
    pool = _reused
    with pool.lock:  # a free buffer is handed out (referenced) before another thread looks
        replace = None
        for k in range(len(pool.arrays)):
            if sys.getrefcount(pool.arrays[k]) > pool.idle[k]:
                continue  # still referenced by a tensor handed out
            if pool.arrays[k].size == need:
                return torch.from_numpy(pool.arrays[k]).view(shape)
            replace = k  # free, another size: shapes changed, the old one is not needed
        if replace is None and len(pool.arrays) >= REUSED_BUFFERS:
            return empty_hwc(shape, torch.uint8)
        array = aligned_empty(need)
        if replace is None:
            pool.arrays.append(array)
            pool.idle.append(0)
            replace = len(pool.arrays) - 1
        else:
            pool.arrays[replace] = array
        del array
        pool.idle[replace] = sys.getrefcount(pool.arrays[replace])
        return torch.from_numpy(pool.arrays[replace]).view(shape)


def channels_last(images: torch.Tensor) -> torch.Tensor:
    """``images`` (B, C, H, W) as channels_last: itself if it already is, else a huge-page copy."""
    if images.is_contiguous(memory_format=torch.channels_last):
        return images
    b, c, h, w = images.shape
    out = empty_hwc((b, h, w, c), images.dtype)
    out.copy_(images.permute(0, 2, 3, 1))
    return out.permute(0, 3, 1, 2)
