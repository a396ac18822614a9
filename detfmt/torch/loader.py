"""`Loader`: threaded, prefetching batch iterator over any detfmt dataset.

Why threads in one process: numpy copies, zstd and libjpeg-turbo decodes release the GIL, so
threads reach memory bandwidth without pickling or shared-memory allocation per batch (a stock
DataLoader with workers falls to a quarter of one process on raw data). Each batch is gathered by
one thread, through the dataset's gather engine (`detfmt.gather`: the checks and copies every
read path shares), into a reusable HWC buffer; images are handed out as a ``channels_last``
(B, 3, H, W) view of it, so nobody pays for a transpose.

Buffer-reuse contract: a batch's tensors stay valid for as long as you hold any of them (or a view
of them). The loader reuses a buffer only when no tensor outside it references its storage, and
allocates another buffer rather than overwrite one you hold. Holding many batches therefore costs
memory, never correctness. With ``device="cuda"``, the pinned buffer is reused once the
non-blocking copy has completed.

Order and resume are `detfmt.order.Schedule`'s, the same for every kind of dataset: the batches
of ``ds.plan(...)``, and a ``state_dict()`` that resumes on any world size and batch size.
"""

from __future__ import annotations

import concurrent.futures as cf
import os
import threading
from collections import deque
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from detfmt import _kernel, api
from detfmt.errors import UsageError
from detfmt.gather import IO_MODES, Job, check_canvas
from detfmt.order import DEFAULT_SHARD_WINDOW, Schedule
from detfmt.protocol import DatasetLike
from detfmt.torch._ring import BufferRing, Slot
from detfmt.torch.batch import Batch

__all__ = ["Loader", "default_rank_world", "open_dataset"]


def open_dataset(ds_or_path: Any, options: dict[str, Any] | None = None) -> DatasetLike:
    """An opened dataset: ``ds_or_path`` itself, or `detfmt.open` of a path or URL."""
    if isinstance(ds_or_path, (str, os.PathLike)):
        return api.open_dataset(ds_or_path, **(options or {}))
    if options:
        raise UsageError("open_options apply when the loader opens a path or URL itself")
    if not isinstance(ds_or_path, DatasetLike):
        raise UsageError(f"expected a detfmt dataset, a path or a URL, got "
                         f"{type(ds_or_path).__name__}")
    return ds_or_path


def default_rank_world(rank: int | None, world_size: int | None) -> tuple[int, int]:
    """(rank, world_size) as given, else from an initialized torch.distributed, else (0, 1)."""
    if rank is None and world_size is None:
        dist = torch.distributed
        if dist.is_available() and dist.is_initialized():
            return dist.get_rank(), dist.get_world_size()
        return 0, 1
    if rank is None or world_size is None:
        raise UsageError("pass both rank and world_size, or neither")
    return rank, world_size


class Loader:
    """Iterate over batches of a detfmt dataset (an iterable; one epoch per ``iter()``).

    Args:
        ds_or_path: an open dataset (``detfmt.open``), a 1.0 directory, or a sharded root (a
            directory with manifest.json, or a URL such as ``s3://b/ds``).
        batch_size: samples per batch on this rank.
        shuffle: ``order="random"`` when True, ``"sequential"`` when False (unless ``order`` set).
        seed: the order's seed (SPEC §18); with ``set_epoch`` it fixes every batch.
        drop_last: drop the tail shorter than a global batch; default True when distributed.
        rank, world_size: this process's share (S-19); default from torch.distributed.
        num_threads: gather threads (each fills whole batches).
        prefetch: batches gathered ahead of the consumer.
        pin_memory: gather into page-locked buffers (default: when ``device`` is CUDA).
        device: move each batch there (non-blocking from pinned buffers).
        layout: ``"CHW"`` (a channels_last view) or ``"HWC"``.
        canvas: (H, W): place every image at the top-left of a fixed canvas (a larger image is
            an error) instead of padding to the batch maximum.
        order: ``"random"``, ``"quasi_random"`` (1.0 datasets: near-sequential reads, O-4) or
            ``"sequential"``.
        io: ``"mmap"`` (fastest when the data is in the page cache) or ``"pread"`` (no page
            faults; use on a cold cache, ideally with ``order="quasi_random"``).
        quasi_block, quasi_window: O-4's L and W; default L = samples per ~8 MiB, W = 8.
        pad_value: value of padding pixels.
        gpu_decode: decode JPEG samples with torchvision.io.decode_jpeg on ``device``.
        shard_window: sharded roots: shards shuffled together (S-18's W).
        open_options: passed to ``detfmt.open`` when ``ds_or_path`` is a path or URL
            (``storage_options``, ``cache_dir``, ``cache_limit``, ``max_open`` for sharded roots).
        prefetch_shards: remote roots: shards fetched ahead of the batches in flight.
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
        shard_window: int = DEFAULT_SHARD_WINDOW,
        open_options: dict[str, Any] | None = None,
        prefetch_shards: int = 2,
    ) -> None:
        if layout not in ("CHW", "HWC"):
            raise UsageError(f"layout must be 'CHW' or 'HWC', got {layout!r}")
        if io not in IO_MODES:
            raise UsageError(f"io must be one of {IO_MODES}, got {io!r}")
        for name, value, low in (("num_threads", num_threads, 1), ("prefetch", prefetch, 1),
                                 ("prefetch_shards", prefetch_shards, 0)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                      or value < low):
                raise UsageError(f"{name} must be an int >= {low}, got {value!r}")
        self.ds = open_dataset(ds_or_path, open_options)
        if io == "mmap":
            _kernel.load()  # the native raw gather, when numba is installed (a one-time cost)
        order = order if order is not None else ("random" if shuffle else "sequential")
        rank, world_size = default_rank_world(rank, world_size)
        spec = self.ds.order_spec(order, shard_window=shard_window, quasi_block=quasi_block,
                                  quasi_window=quasi_window)
        self.schedule = Schedule(spec, batch_size=batch_size, seed=seed, rank=rank,
                                 world_size=world_size, drop_last=drop_last)
        self.engine = self.ds.engine
        self.num_threads = int(num_threads if num_threads is not None
                               else min(4, os.cpu_count() or 1))
        self.prefetch = int(prefetch if prefetch is not None else 2 * self.num_threads)
        self.prefetch_shards = prefetch_shards
        self.device = torch.device(device) if device is not None else None
        cuda = self.device is not None and self.device.type == "cuda"
        self.pin_memory = bool(cuda if pin_memory is None else pin_memory)
        if self.pin_memory and not torch.cuda.is_available():
            raise UsageError("pin_memory=True needs CUDA (torch.cuda.is_available() is False)")
        self.layout = layout
        self.io = io
        self.pad_value = int(pad_value)
        self.canvas = None
        if canvas is not None:
            self.canvas = check_canvas(canvas)
        self._gpu = None
        if gpu_decode:
            from detfmt.torch._gpu import GpuJpegDecoder

            self._gpu = GpuJpegDecoder(self.device)
        height, width = self.canvas or (0, 0)  # buffers grow to what the batches need
        self.ring = BufferRing(batch_size * height * width * 3, pin=self.pin_memory)

    # -- schedule ------------------------------------------------------------------------------

    @property
    def batch_size(self) -> int:
        return self.schedule.batch_size

    @property
    def rank(self) -> int:
        return self.schedule.rank

    @property
    def world_size(self) -> int:
        return self.schedule.world_size

    @property
    def seed(self) -> int:
        return self.schedule.seed

    @property
    def epoch(self) -> int:
        return self.schedule.epoch

    @property
    def samples_seen(self) -> int:
        """Position in this epoch's global order (S-20)."""
        return self.schedule.samples_seen

    @property
    def order(self) -> str:
        return self.schedule.spec.order

    @property
    def drop_last(self) -> bool:
        return self.schedule.drop_last

    @property
    def n(self) -> int:
        return self.schedule.num_samples

    def __len__(self) -> int:
        return len(self.schedule)

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch whose order the next ``iter()`` runs (restarting it)."""
        self.schedule.set_epoch(epoch)

    def state_dict(self) -> dict[str, Any]:
        """``{seed, epoch, samples_seen}`` and the order's configuration: resumes on any world
        size and batch size (S-20)."""
        return self.schedule.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue where ``state`` stopped (any world size, batch size or thread count)."""
        self.schedule.load_state_dict(state)

    def epoch_order(self, epoch: int | None = None) -> np.ndarray:
        """The global sample order of an epoch, before rank slicing and tail handling."""
        return self.schedule.epoch_order(epoch)

    def rank_batches(self, epoch: int | None = None) -> list[np.ndarray]:
        """This rank's batches of a whole epoch."""
        return self.schedule.rank_batches(epoch)

    # -- iteration -----------------------------------------------------------------------------

    def __iter__(self) -> Iterator[Batch]:
        batches = self.schedule.begin_epoch()
        return self._run(batches)

    def _run(self, batches: list[np.ndarray]) -> Iterator[Batch]:
        follower = self.ds.follow(batches, self.prefetch_shards)
        pool = cf.ThreadPoolExecutor(self.num_threads, thread_name_prefix="detfmt-loader")
        pending: deque[cf.Future] = deque()
        stop = threading.Event()
        position = submitted = 0
        try:
            while position < len(batches):
                while submitted < len(batches) and len(pending) < self.prefetch:
                    follower.step(position, submitted)
                    pending.append(pool.submit(self._job, batches[submitted], stop))
                    submitted += 1
                batch, slot = pending.popleft().result()  # a failed job released its slot
                self.ring.release(slot)
                position += 1
                self.schedule.mark(position)
                if self.device is not None:
                    batch = self._to_device(batch, slot)
                yield batch
        finally:
            stop.set()
            for future in pending:
                future.cancel()
            pool.shutdown(wait=True, cancel_futures=True)
            for future in pending:  # gathered but never handed out
                if future.done() and not future.cancelled() and future.exception() is None:
                    self.ring.release(future.result()[1])

    def _job(self, indices: np.ndarray, stop: threading.Event) -> tuple[Batch, Slot]:
        """A gather thread: locate and check the batch, take a free buffer of its size, fill."""
        if stop.is_set():
            raise cf.CancelledError
        job = self.engine.job(indices)
        if self.io == "pread" and self.order == "quasi_random":
            self.engine.advise(job)  # near-sequential reads: let the kernel read ahead
        height, width = self.canvas or tuple(max(1, v) for v in job.padded_shape(
            self.engine.where))
        need = len(indices) * height * width * 3
        if need > self.ring.capacity:  # new buffers at the largest size seen so far
            self.ring.capacity = need
        slot = self.ring.acquire(need)
        try:
            return self._fill(job, slot, (height, width)), slot
        except BaseException:
            self.ring.release(slot)
            raise

    def _fill(self, job: Job, slot: Slot, hw: tuple[int, int]) -> Batch:
        height, width = hw
        shape = (len(job), height, width, 3)
        count = int(np.prod(shape))
        boxes, classes, mask, fields = self.engine.labels(job)
        if self._gpu is not None and self._gpu.wants(job):
            hwc = self._gpu.decode_batch(self.engine, job, shape, self.pad_value)
        else:
            previous = None
            layout = slot.layout
            # Only the parts the last gather wrote need clearing, unless someone wrote into the
            # buffer in place since (torch bumps the shared version counter of every view).
            if (layout is not None and layout[0] == (height, width)
                    and layout[1] == self.pad_value and layout[3] == slot.tensor._version):
                previous = layout[2]
            slot.layout = None  # unknown while the gather runs (an exception leaves it so)
            extents = self.engine.fill(job, self.ring.view(slot, shape), self.pad_value,
                                       previous=previous, io=self.io)
            slot.layout = ((height, width), self.pad_value, extents, slot.tensor._version)
            hwc = slot.tensor[:count].view(shape)
        images = hwc if self.layout == "HWC" else hwc.permute(0, 3, 1, 2)
        return Batch(
            images=images,
            boxes=torch.from_numpy(np.ascontiguousarray(boxes)),
            classes=torch.from_numpy(np.ascontiguousarray(classes)),
            mask=torch.from_numpy(mask),
            sizes=torch.from_numpy(job.sizes),
            indices=torch.from_numpy(np.ascontiguousarray(job.indices)),
            extras={name: torch.from_numpy(np.ascontiguousarray(value))
                    for name, value in fields.items()},
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
        """Drop the buffers (the dataset stays open: close it yourself, or let it go)."""
        self.ring.slots.clear()

    def __repr__(self) -> str:
        return (f"Loader(n={self.n}, batch_size={self.batch_size}, rank={self.rank}/"
                f"{self.world_size}, order={self.order!r}, epoch={self.epoch}, "
                f"samples_seen={self.samples_seen}, threads={self.num_threads})")
