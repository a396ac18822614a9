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
from detfmt.torch._schedule import ElasticSchedule, EpochSchedule, default_quasi_block
from detfmt.torch.batch import Batch

__all__ = ["Loader", "ShardedLoader"]


def _open(ds_or_path: Any, options: dict[str, Any] | None = None) -> Any:
    if isinstance(ds_or_path, (str, os.PathLike)):
        import detfmt

        text = os.fspath(ds_or_path)
        return detfmt.open(text if "://" in text else Path(text), **(options or {}))
    if options:
        raise UsageError("open_options apply when the loader opens a path or URL itself")
    return ds_or_path


def _is_sharded(ds: Any) -> bool:
    from detfmt.shard.sharded import ShardedDataset

    return isinstance(ds, ShardedDataset)


class Loader(EpochSchedule):
    """Iterate over batches of a detfmt dataset (an iterable; one epoch per ``iter()``).

    Args:
        ds_or_path: an open dataset (``detfmt.open``, 1.0 or sharded), a 1.0 directory, or a
            sharded root (a directory with manifest.json, or a URL such as ``s3://b/ds``).
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
        shard_window: sharded datasets only: shards shuffled together (S-18's W; default that
            of ``ShardedDataset.plan``).
        open_options: passed to ``detfmt.open`` when ``ds_or_path`` is a path or URL
            (``storage_options``, ``cache_dir``, ``cache_limit``, ``max_open`` for sharded roots).
        prefetch_shards: sharded remote roots only: shards fetched ahead of the batches in
            flight (default 2).

    A sharded (1.1) dataset, local or remote, gives a `ShardedLoader` (a subclass): the same
    batches and buffer contract, in the elastic order of SPEC §19.6.
    """

    def __new__(cls, ds_or_path: Any = None, *args: Any, **kwargs: Any) -> Loader:
        if cls is not Loader:
            return super().__new__(cls)
        ds = _open(ds_or_path, kwargs.get("open_options"))
        self = super().__new__(ShardedLoader if _is_sharded(ds) else Loader)
        self._opened = ds  # __init__ uses it instead of opening the path a second time
        return self

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
        shard_window: int | None = None,
        open_options: dict[str, Any] | None = None,
        prefetch_shards: int | None = None,
    ) -> None:
        if shard_window is not None or prefetch_shards is not None:
            raise UsageError("shard_window and prefetch_shards apply to sharded (1.1) datasets")
        self._setup(ds_or_path, batch_size, num_threads, prefetch, pin_memory, device, layout,
                    pad_value, open_options)
        order = order if order is not None else ("random" if shuffle else "sequential")
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
        if gpu_decode:
            from detfmt.torch._gpu import GpuJpegDecoder

            self._gpu = GpuJpegDecoder(self.device)
        max_h, max_w = canvas if canvas is not None else self.gather.max_hw
        self.ring = BufferRing(batch_size * max_h * max_w * 3, pin=self.pin_memory)

    def _setup(
        self, ds_or_path: Any, batch_size: int, num_threads: int | None, prefetch: int | None,
        pin_memory: bool | None, device: Any, layout: str, pad_value: int,
        open_options: dict[str, Any] | None,
    ) -> None:
        """Arguments shared by both kinds of dataset, and the dataset itself."""
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
            raise UsageError(f"batch_size must be a positive int, got {batch_size!r}")
        if layout not in ("CHW", "HWC"):
            raise UsageError(f"layout must be 'CHW' or 'HWC', got {layout!r}")
        opened = self.__dict__.pop("_opened", None)
        self.ds = opened if opened is not None else _open(ds_or_path, open_options)
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
        self._gpu = None

    # -- iteration -----------------------------------------------------------------------------

    def __iter__(self) -> Iterator[Batch]:
        batches, start = self._begin_epoch()
        return self._run(batches, start)

    def _run(self, batches: list[np.ndarray], start: int) -> Iterator[Batch]:
        pool = cf.ThreadPoolExecutor(self.num_threads, thread_name_prefix="detfmt-loader")
        pending: deque[cf.Future] = deque()
        stop = threading.Event()
        position = start
        submitted = start
        try:
            while position < len(batches):
                while submitted < len(batches) and len(pending) < self.prefetch:
                    self._before_submit(batches, position, submitted)
                    pending.append(pool.submit(self._job, batches[submitted], stop))
                    submitted += 1
                batch, slot = pending.popleft().result()  # a failed job released its slot
                self.ring.release(slot)
                position += 1
                self._mark(position, len(batches))
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
            if position >= len(batches):
                self._mark(position, len(batches))

    def _before_submit(self, batches: list[np.ndarray], position: int, submitted: int) -> None:
        """The main thread, before batch ``submitted`` goes to a gather thread."""
        if self.order == "quasi_random":  # near-sequential: let the kernel read ahead
            self.gather.advise(batches[submitted])

    def _job(self, indices: np.ndarray, stop: threading.Event) -> tuple[Batch, Slot]:
        """A gather thread: take a free buffer of the batch's size and fill it."""
        if stop.is_set():
            raise cf.CancelledError
        job = self._prepare(indices)
        height, width = self.canvas or self._job_shape(job)
        slot = self.ring.acquire(len(indices) * height * width * 3)
        try:
            return self._fill(job, indices, slot, (height, width)), slot
        except BaseException:
            self.ring.release(slot)
            raise

    def _prepare(self, indices: np.ndarray) -> Any:
        return indices

    def _job_shape(self, job: Any) -> tuple[int, int]:
        return self.gather.batch_shape(job)

    def _job_sizes(self, job: Any) -> np.ndarray:
        return self.gather.sizes[job]

    def _fill(
        self, job: Any, indices: np.ndarray, slot: Slot, hw: tuple[int, int]
    ) -> Batch:
        height, width = hw
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
                job, self.ring.view(slot, shape), self.pad_value, previous=previous
            )
            slot.layout = ((height, width), self.pad_value, extents, slot.tensor._version)
            hwc = slot.tensor[:count].view(shape)
        boxes, classes, mask, fields = self.gather.labels(job)
        sizes = self._job_sizes(job)
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


class ShardedLoader(ElasticSchedule, Loader):
    """`Loader` over a sharded (1.1) dataset, local or remote: what ``Loader(...)`` returns for one.

    Batches are those of ``ShardedDataset.plan(seed=, epoch=, batch_size=, world_size=, rank=,
    window=shard_window, shuffle=, drop_last=)`` (elastic order, SPEC §19.6), with the same
    images, sizes, boxes, classes, mask and indices as ``ShardedDataset.batch``. Resume state is
    ``{seed, epoch, samples_seen}`` (S-20): valid on any world size and batch size. For remote
    roots the shards the plan needs next are pinned in the node cache and prefetched
    (``prefetch_shards`` shards beyond the ones in flight).

    Refused (``UsageError``): ``order="quasi_random"`` (the shard window already keeps reads
    local), ``io="pread"``, ``quasi_block``, ``gpu_decode=True``.
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
        shard_window: int | None = None,
        open_options: dict[str, Any] | None = None,
        prefetch_shards: int | None = None,
    ) -> None:
        from detfmt.shard.order import DEFAULT_SHARD_WINDOW
        from detfmt.torch._shard_gather import ShardGatherer

        order = order if order is not None else ("random" if shuffle else "sequential")
        if order not in ("random", "sequential"):
            raise UsageError(
                f"order={order!r} is not available for sharded datasets: use 'random' (the "
                "elastic shard-window order, SPEC §19.6) or 'sequential'"
            )
        if io != "mmap":
            raise UsageError(f"io={io!r} is not available for sharded datasets (shards are "
                             "memory-mapped; remote ones are cached whole on local disk)")
        if quasi_block is not None:
            raise UsageError("quasi_block applies to 1.0 datasets; sharded ones use shard_window")
        if gpu_decode:
            raise UsageError("gpu_decode=True is not available for sharded datasets yet")
        prefetch_shards = 2 if prefetch_shards is None else prefetch_shards
        if not isinstance(prefetch_shards, int) or prefetch_shards < 0:
            raise UsageError(f"prefetch_shards must be a non-negative int: {prefetch_shards!r}")
        self._setup(ds_or_path, batch_size, num_threads, prefetch, pin_memory, device, layout,
                    pad_value, open_options)
        if not _is_sharded(self.ds):
            raise UsageError("ShardedLoader needs a sharded dataset; use Loader")
        self.gather = ShardGatherer(self.ds)
        window = DEFAULT_SHARD_WINDOW if shard_window is None else shard_window
        self._init_elastic(
            [s.num_samples for s in self.ds.shards], batch_size, seed, drop_last, rank,
            world_size, order == "random", window,
        )
        self.prefetch_shards = prefetch_shards
        self.remote = bool(self.ds.is_remote)
        max_hw = None
        if self.gather.fixed_hw is not None or not self.remote:
            max_hw = self.gather.max_hw()  # local shards: mapping them all is cheap
        if canvas is not None:
            canvas = (int(canvas[0]), int(canvas[1]))
            if max_hw is not None and (canvas[0] < max_hw[0] or canvas[1] < max_hw[1]):
                raise UsageError(
                    f"canvas {canvas} is smaller than the largest stored image {max_hw}"
                )
        self.canvas = canvas
        height, width = canvas or max_hw or (0, 0)  # remote: buffers grow to what batches need
        self.ring = BufferRing(batch_size * height * width * 3, pin=self.pin_memory)
        self._working: Any = None
        self._pinned: list[int] | None = None

    def _begin_epoch(self) -> tuple[list[np.ndarray], int]:
        batches, start = super()._begin_epoch()
        self._working = None
        if self.remote and batches:
            from detfmt.shard.order import ShardWorkingSet

            self._working = ShardWorkingSet(
                batches, self.plan().shard_of, len(self.ds.shards), self.prefetch_shards
            )
        return batches, start

    def _before_submit(self, batches: list[np.ndarray], position: int, submitted: int) -> None:
        if self._working is not None:  # remote: pin what is in flight, prefetch what is next
            wanted = self._working.wanted(position, submitted)
            if wanted != self._pinned:
                self._pinned = wanted
                self.ds.keep_shards(wanted)

    def _prepare(self, indices: np.ndarray) -> Any:
        return self.gather.prepare(indices)

    def _job_shape(self, job: Any) -> tuple[int, int]:
        height, width = job.shape
        if self.canvas is None:
            need = len(job.indices) * height * width * 3
            if need > self.ring.capacity:  # new buffers at the largest size seen so far
                self.ring.capacity = need
        return height, width

    def _fill(self, job: Any, indices: np.ndarray, slot: Slot, hw: tuple[int, int]) -> Batch:
        if self.canvas is not None:
            height, width = job.shape
            if height > self.canvas[0] or width > self.canvas[1]:
                raise UsageError(
                    f"canvas {self.canvas} is smaller than an image of this batch "
                    f"({height}, {width})"
                )
        return super()._fill(job, indices, slot, hw)

    def _job_sizes(self, job: Any) -> np.ndarray:
        return job.sizes

    def close(self) -> None:
        """Drop the shard tables (the dataset itself stays open: close it yourself)."""
        self.gather.close()

    def __repr__(self) -> str:
        return (
            f"ShardedLoader(n={self.n}, shards={len(self.shard_counts)}, batch_size="
            f"{self.batch_size}, rank={self.rank}/{self.world_size}, epoch={self.epoch}, "
            f"samples_seen={self.samples_seen}, threads={self.num_threads})"
        )
