"""`Loader`: threaded, prefetching batch iterator over a detfmt dataset.

Why threads in one process: numpy copies, zstd and libjpeg-turbo decodes release the GIL, so
threads reach memory bandwidth without pickling or shared-memory allocation per batch (a stock
DataLoader with workers falls to a quarter of one process on raw data). Each batch is gathered by
one thread into a reusable HWC buffer; images are handed out as a ``channels_last`` (B, 3, H, W)
view of it, so nobody pays for a transpose.

Buffer-reuse contract: a batch's tensors stay valid for as long as you hold any of them (or a view
of them). The loader reuses a buffer only when no tensor outside it references its storage, and
allocates another buffer rather than overwrite one you hold. Holding many batches therefore costs
memory, never correctness. With ``device="cuda"``, the pinned buffer is reused once the
non-blocking copy has completed.
"""

from __future__ import annotations

import concurrent.futures as cf
import os
import threading
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from detfmt.errors import UsageError
from detfmt.torch._gather import Gatherer
from detfmt.torch._ring import BufferRing, Slot
from detfmt.torch._schedule import EpochSchedule, default_quasi_block
from detfmt.torch.batch import Batch

__all__ = ["Loader"]



def _open(ds_or_path: Any) -> Any:
    if isinstance(ds_or_path, (str, os.PathLike)):
        import detfmt

        return detfmt.open(Path(ds_or_path))
    return ds_or_path


class Loader(EpochSchedule):
    """Iterate over batches of a detfmt dataset (an iterable; one epoch per ``iter()``).

    Args:
        ds_or_path: an open dataset (``detfmt.open``) or its path.
        batch_size: samples per batch on this rank.
        shuffle: ``order="random"`` when True, ``"sequential"`` when False (unless ``order`` set).
        seed: the order's seed (docs/spec-order.md); with ``set_epoch`` it fixes every batch.
        drop_last: drop the last incomplete global batch; default True when distributed.
        rank, world_size: this process's share (rule O-6); default from torch.distributed.
        num_threads: gather threads (each fills whole batches).
        prefetch: batches gathered ahead of the consumer.
        pin_memory: gather into page-locked buffers (default: when ``device`` is CUDA).
        device: move each batch there (non-blocking from pinned buffers).
        layout: ``"CHW"`` (a channels_last view) or ``"HWC"``.
        canvas: (H, W): place every image at the top-left of a fixed canvas (larger images are an
            error) instead of padding to the batch maximum.
        order: ``"random"``, ``"quasi_random"`` (near-sequential reads, rule O-4) or
            ``"sequential"``.
        io: ``"mmap"`` (fastest when the blob is in the page cache) or ``"pread"`` (no page
            faults; use on a cold cache, ideally with ``order="quasi_random"``).
        quasi_block, quasi_window: rule O-4's L and W; default L = samples per ~8 MiB, W = 8.
        pad_value: value of padding pixels.
        gpu_decode: decode JPEG samples with torchvision.io.decode_jpeg on ``device``.
    """

    def __init__(
        self,
        ds_or_path: Any,
        batch_size: int,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool | None = None,
        rank: int | None = None,
        world_size: int | None = None,
        num_threads: int | None = None,
        prefetch: int | None = None,
        pin_memory: bool | None = None,
        device: torch.device | str | None = None,
        layout: str = "CHW",
        *,
        canvas: tuple[int, int] | None = None,
        order: str | None = None,
        io: str = "mmap",
        quasi_block: int | None = None,
        quasi_window: int = 8,
        pad_value: int = 0,
        gpu_decode: bool = False,
    ) -> None:
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
            raise UsageError(f"batch_size must be a positive int, got {batch_size!r}")
        if layout not in ("CHW", "HWC"):
            raise UsageError(f"layout must be 'CHW' or 'HWC', got {layout!r}")
        order = order if order is not None else ("random" if shuffle else "sequential")
        self.ds = _open(ds_or_path)
        threads = num_threads if num_threads is not None else min(4, os.cpu_count() or 1)
        self.num_threads = int(threads)
        if self.num_threads < 1:
            raise UsageError(f"num_threads must be >= 1, got {num_threads}")
        self.prefetch = int(prefetch if prefetch is not None else 2 * self.num_threads)
        if self.prefetch < 1:
            raise UsageError(f"prefetch must be >= 1, got {prefetch}")
        self.device = torch.device(device) if device is not None else None
        cuda = self.device is not None and self.device.type == "cuda"
        self.pin_memory = bool(cuda if pin_memory is None else pin_memory)
        if self.pin_memory and not torch.cuda.is_available():
            raise UsageError("pin_memory=True needs CUDA (torch.cuda.is_available() is False)")
        self.layout = layout
        self.pad_value = int(pad_value)
        self.gather = Gatherer(self.ds, io=io)
        self._init_schedule(
            len(self.ds), batch_size, seed, drop_last, rank, world_size, order,
            quasi_block or default_quasi_block(self.gather.nbytes), quasi_window,
        )
        if canvas is not None:
            canvas = (int(canvas[0]), int(canvas[1]))
            max_h, max_w = self.gather.max_hw
            if canvas[0] < max_h or canvas[1] < max_w:
                raise UsageError(
                    f"canvas {canvas} is smaller than the largest stored image ({max_h}, {max_w})"
                )
        self.canvas = canvas
        self._gpu = None
        if gpu_decode:
            from detfmt.torch._gpu import GpuJpegDecoder

            self._gpu = GpuJpegDecoder(self.device)
        max_h, max_w = canvas if canvas is not None else self.gather.max_hw
        self.ring = BufferRing(batch_size * max_h * max_w * 3, pin=self.pin_memory)

    # -- iteration -----------------------------------------------------------------------------

    def __iter__(self) -> Iterator[Batch]:
        batches, start = self._begin_epoch()
        return self._run(batches, start)

    def _run(self, batches: list[np.ndarray], start: int) -> Iterator[Batch]:
        pool = cf.ThreadPoolExecutor(self.num_threads, thread_name_prefix="detfmt-loader")
        pending: deque[tuple[cf.Future, Slot]] = deque()
        stop = threading.Event()
        position = start
        submitted = start
        try:
            while position < len(batches):
                while submitted < len(batches) and len(pending) < self.prefetch:
                    indices = batches[submitted]
                    if self.order == "quasi_random":  # near-sequential: let the kernel read ahead
                        self.gather.advise(indices)
                    slot = self.ring.acquire(self._capacity(indices))
                    pending.append((pool.submit(self._fill, indices, slot, stop), slot))
                    submitted += 1
                future, slot = pending.popleft()
                try:
                    batch = future.result()
                finally:
                    self.ring.release(slot)
                position += 1
                self.batches_done = position
                if self.device is not None:
                    batch = self._to_device(batch, slot)
                yield batch
        finally:
            stop.set()
            for future, _ in pending:
                future.cancel()
            pool.shutdown(wait=True, cancel_futures=True)
            for _, slot in pending:
                self.ring.release(slot)
            if position >= len(batches):
                self.batches_done = position

    def _capacity(self, indices: np.ndarray) -> int:
        height, width = self.canvas or self.gather.batch_shape(indices)
        return len(indices) * height * width * 3

    def _fill(self, indices: np.ndarray, slot: Slot, stop: threading.Event) -> Batch:
        if stop.is_set():
            raise cf.CancelledError
        height, width = self.canvas or self.gather.batch_shape(indices)
        shape = (len(indices), height, width, 3)
        count = int(np.prod(shape))
        if self._gpu is not None and self._gpu.wants(self.gather, indices):
            hwc = self._gpu.decode_batch(self.gather, indices, shape, self.pad_value)
        else:
            previous = None
            layout = slot.layout
            # Only the parts the last gather wrote need clearing, unless someone wrote into the
            # buffer in place since (torch bumps the shared version counter of every view).
            if (
                layout is not None
                and layout[0] == (height, width)
                and layout[1] == self.pad_value
                and layout[3] == slot.tensor._version
            ):
                previous = layout[2]
            slot.layout = None  # unknown while the gather runs (an exception leaves it so)
            extents = self.gather.fill(
                indices, self.ring.view(slot, shape), self.pad_value, previous=previous
            )
            slot.layout = ((height, width), self.pad_value, extents, slot.tensor._version)
            hwc = slot.tensor[:count].view(shape)
        boxes, classes, mask, fields = self.gather.labels(indices)
        sizes = self.gather.sizes[indices]
        images = hwc if self.layout == "HWC" else hwc.permute(0, 3, 1, 2)
        return Batch(
            images=images,
            boxes=torch.from_numpy(boxes),
            classes=torch.from_numpy(classes),
            mask=torch.from_numpy(mask),
            sizes=torch.from_numpy(np.ascontiguousarray(sizes)),
            indices=torch.from_numpy(np.ascontiguousarray(indices)),
            extras={name: torch.from_numpy(value) for name, value in fields.items()},
        )

    def _to_device(self, batch: Batch, slot: Slot) -> Batch:
        non_blocking = self.pin_memory and self.device is not None and self.device.type == "cuda"
        moved = batch.to(self.device, non_blocking=non_blocking)
        if non_blocking and batch.images.device.type == "cpu":
            event = torch.cuda.Event()
            event.record()
            slot.event = event
        return moved

    def close(self) -> None:
        """Release the file descriptor and memory maps (the loader is unusable afterwards)."""
        self.gather.close()

    def __repr__(self) -> str:
        return (
            f"Loader(n={self.n}, batch_size={self.batch_size}, rank={self.rank}/"
            f"{self.world_size}, order={self.order!r}, epoch={self.epoch}, "
            f"threads={self.num_threads})"
        )
