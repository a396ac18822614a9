"""Large fresh CPU buffers backed by transparent huge pages.

A 32 x 640 x 640 x 3 uint8 batch is 39 MB; malloc maps fresh pages for every allocation that
large, and first-touching them cost ~31 ms of CPU per batch on the development VM (4 KB page
faults), while per-image arrays of 1.2 MB, as in a per-sample pipeline, are recycled by malloc.
An anonymous mapping advised with ``MADV_HUGEPAGE`` faults in 2 MB pages: ~6.5 ms. The result is
an ordinary tensor (its storage is a numpy view that keeps the mapping alive). Where the kernel
has no transparent huge pages (or ``madvise`` is unavailable) the advice is ignored or skipped
and the cost is as before.
"""

from __future__ import annotations

import mmap

import numpy as np
import torch

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


def channels_last(images: torch.Tensor) -> torch.Tensor:
    """``images`` (B, C, H, W) as channels_last: itself if it already is, else a huge-page copy."""
    if images.is_contiguous(memory_format=torch.channels_last):
        return images
    b, c, h, w = images.shape
    out = empty_hwc((b, h, w, c), images.dtype)
    out.copy_(images.permute(0, 2, 3, 1))
    return out.permute(0, 3, 1, 2)
