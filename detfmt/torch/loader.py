"""`Loader`: threaded, prefetching batch iterator over any detfmt dataset.

Why threads in one process: numpy copies, zstd and libjpeg-turbo decodes release the GIL, so
threads reach memory bandwidth without pickling or shared-memory allocation per batch (a stock
DataLoader with workers falls to a quarter of one process on raw data). Each batch is gathered by
one thread, through the dataset's gather engine (`detfmt.reading.gather`: the checks and copies
every
read path shares), into a reusable HWC buffer; images are handed out as a ``channels_last``
(B, 3, H, W) view of it, so nobody pays for a transpose.

Buffer-reuse contract: a batch's tensors stay valid for as long as you hold any of them (or a view
of them). The loader reuses a buffer only when no tensor outside it references its storage, and
allocates another buffer rather than overwrite one you hold. Holding many batches therefore costs
memory, never correctness. With ``device="cuda"``, the pinned buffer is reused once the
non-blocking copy has completed.

Order and resume are `detfmt.order.Schedule`'s, the same for every kind of dataset: the batches
of ``ds.plan(...)``, and a ``state_dict()`` that resumes on any world size and batch size. The
order may also be repeat-factor sampling (``sampling=Sampling(repeat_threshold=...)``) or a
weighted mixture of several datasets (a list of datasets with ``weights=``, or a
`detfmt.reading.mixture.Mixture`), SPEC §18.9-18.13.

Augmentation in the loader (``transform=``): each gathered batch goes through the transform in
the gather threads, in epoch order (`detfmt.torch._stage`), so it overlaps the training step; on
CUDA it runs on the loader's own stream after the copy. A transform that returns new tensors frees
the buffer at once; one that writes into the batch in place keeps it until the batch is dropped,
and the buffer's padding is rewritten in full on its next use (an in-place write, through torch
or through numpy/OpenCV views, may have touched it). The loader's threads use
``transform_threads`` torch threads and OpenCV-backend pool threads each, whatever the trainer's
own ``torch.set_num_threads``. A transform that carries samples across batches (Mosaic's
buffer) is refilled on resume from the batches before the resume point (`_history`). A CPU
transform that reads pixels only through per-sample arrays (one that declares
``accepts_stored_samples``, `detfmt.augment.Augmentation`: `Mosaic`, or a `Compose` that starts
with one) gets raw memory-mapped samples where they are stored (`Batch.samples`, no gather copy
and no buffer); the outputs are the same.
"""

from __future__ import annotations

import concurrent.futures as cf
import os
import threading
import warnings
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import torch

from detfmt.errors import UsageError
from detfmt.order import EpochOrder, Schedule, SubsetOrder, repeat_factor_order_for
from detfmt.reading import kernel, opener
from detfmt.reading.gather import Job
from detfmt.reading.mixture import Mixture
from detfmt.reading.protocol import DatasetLike
from detfmt.torch._history import (
    batching,
    check_batching,
    history_of,
    preceding_batches,
    reset_history,
)
from detfmt.torch._ring import BufferRing, Slot
from detfmt.torch._stage import TransformStage, augment_seed, find_generators
from detfmt.torch.batch import Batch, accepts_stored_samples
from detfmt.torch.settings import Delivery, Sampling, from_legacy
from detfmt.torch.threads import configure_thread, stable_batches

__all__ = ["Loader", "default_rank_world", "open_dataset"]


def open_dataset(ds_or_path: Any, options: dict[str, Any] | None = None) -> DatasetLike:
    """An opened dataset: ``ds_or_path`` itself, or `detfmt.open` of a path or URL."""
    if isinstance(ds_or_path, (str, os.PathLike)):
        return opener.open_dataset(ds_or_path, **(options or {}))
    if options:
        raise UsageError("open_options apply when the loader opens a path or URL itself")
    if not isinstance(ds_or_path, DatasetLike):
        raise UsageError(f"expected a detfmt dataset, a path or a URL, got "
                         f"{type(ds_or_path).__name__}")
    return ds_or_path


def open_sources(ds_or_path: Any, options: dict[str, Any] | None,
                 weights: Sequence[float] | None, epoch_length: int | None) -> DatasetLike:
    """The loader's dataset: one dataset, or a `Mixture` of a list of them with ``weights``."""
    if isinstance(ds_or_path, (list, tuple)):
        return Mixture([open_dataset(d, options) if isinstance(d, (str, os.PathLike)) else d
                        for d in ds_or_path], weights, epoch_length=epoch_length)
    if weights is not None or epoch_length is not None:
        raise UsageError("weights= and epoch_length= mix several datasets: pass a list of "
                         "datasets (or set them on the Mixture)")
    return open_dataset(ds_or_path, options)


def sampling_order(ds: DatasetLike, order: str, repeat_threshold: float | None, *,
                   shard_window: int, quasi_block: int | None, quasi_window: int) -> EpochOrder:
    """The epoch order of ``ds``: its own (O-3, O-4, S-18), a mixture's (O-12), or
    repeat-factor sampling (O-10) when ``repeat_threshold`` is set."""
    if isinstance(ds, Mixture):
        return ds.order_spec(order, repeat_threshold=repeat_threshold)
    if repeat_threshold is None:
        return ds.order_spec(order, shard_window=shard_window, quasi_block=quasi_block,
                             quasi_window=quasi_window)
    if order != "random":
        raise UsageError(f"repeat-factor sampling is a shuffled order; order={order!r} does "
                         "not combine with repeat_threshold")
    return repeat_factor_order_for(ds, repeat_threshold)


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

    The keywords follow torch's Dataset / Sampler / DataLoader split: what to read (the
    dataset, ``open_options``, ``weights``), in which order (``shuffle``, ``seed``, the
    distributed share, ``sampling=Sampling(...)``) and how to deliver (``delivery=Delivery(...)``,
    ``transform``, ``convert``). The former flat keywords (``num_threads=``, ``order=``,
    ``io=``...) still work for one release, with a DeprecationWarning.

    Args:
        ds_or_path: an open dataset (``detfmt.open``), a 1.0 directory, a sharded root (a
            directory with manifest.json, or a URL such as ``s3://b/ds``), or a list of those
            mixed by ``weights`` (a `detfmt.reading.mixture.Mixture`; batch indices are the
            mixture's).
        batch_size: samples per batch on this rank.
        shuffle: ``order="random"`` when True, ``"sequential"`` when False (unless
            ``sampling.order`` is set).
        seed: the order's seed (SPEC §18); with ``set_epoch`` it fixes every batch, and the
            transform's per-batch generator seeds.
        drop_last: drop the tail shorter than a global batch; default True when distributed.
        rank, world_size: this process's share (S-19); default from torch.distributed.
        sampling: the order, a subset, repeat-factor sampling (`Sampling`; default: ``shuffle``'s
            order over every sample).
        delivery: threads, prefetch, device, layout, canvas, io... (`Delivery`; default: its
            defaults).
        transform: a ``detfmt.augment`` pipeline, or any ``Batch -> Batch`` callable, run on each
            batch in the gather threads (on CUDA: on the loader's stream, after the copy), in
            epoch order; its generators are re-seeded per batch (``Delivery.transform_reseed``).
            One with history (``Mosaic(buffer_size=...)``) is refilled from the preceding
            batches when a pass starts where it did not leave off (a resume), so resumed batches
            equal the uninterrupted run's (`detfmt.torch._history`). One that declares
            ``accepts_stored_samples`` (`detfmt.augment.Augmentation`) may get the stored
            samples instead of a gathered batch (`Batch.samples`).
        convert: ``Batch -> anything`` run after ``transform`` in the same place (a framework's
            batch format); the loader then yields what it returns.
        open_options: passed to ``detfmt.open`` when ``ds_or_path`` is a path or URL
            (``storage_options``, ``cache_dir``, ``cache_limit``, ``max_open`` for sharded roots).
        weights, epoch_length: a list of datasets: each one's share of an epoch and the epoch's
            length (SPEC O-11, O-12; default: proportional to their sizes, all their samples).
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
        *,
        sampling: Sampling | None = None,
        delivery: Delivery | None = None,
        transform: Callable[[Batch], Batch] | None = None,
        convert: Callable[[Batch], Any] | None = None,
        open_options: dict[str, Any] | None = None,
        weights: Sequence[float] | None = None,
        epoch_length: int | None = None,
        **legacy: Any,
    ) -> None:
        if legacy:
            sampling, delivery = from_legacy(legacy, sampling, delivery)
            warnings.warn(
                f"Loader({', '.join(f'{k}=' for k in legacy)}) is deprecated and will be removed "
                "in the next release: pass sampling=Sampling(...) for the order and "
                "delivery=Delivery(...) for how batches are made (detfmt.torch)",
                DeprecationWarning, stacklevel=2)
        for name, value, kind in (("sampling", sampling, Sampling),
                                  ("delivery", delivery, Delivery)):
            if value is not None and not isinstance(value, kind):
                raise UsageError(f"{name} must be a detfmt.torch.{kind.__name__}, got "
                                 f"{type(value).__name__}")
        for name, value in (("transform", transform), ("convert", convert)):
            if value is not None and not callable(value):
                raise UsageError(f"{name} must be callable, got {type(value).__name__}")
        self.sampling = sampling = sampling if sampling is not None else Sampling()
        self.delivery = delivery = delivery if delivery is not None else Delivery()
        self.ds = open_sources(ds_or_path, open_options, weights, epoch_length)
        if delivery.io == "mmap":
            kernel.load()  # the native raw gather, when numba is installed (a one-time cost)
        rank, world_size = default_rank_world(rank, world_size)
        self.schedule = Schedule(self._epoch_order(sampling, shuffle), batch_size=batch_size,
                                 seed=seed, rank=rank, world_size=world_size,
                                 drop_last=drop_last)
        self.engine = self.ds.engine
        self._deliver_as(delivery, batch_size)
        self._generators: list[torch.Generator] = []
        # (transform, epoch, position) the transform's carried samples are exactly up to
        self._synced: tuple[Any, int, int] | None = None
        self._saved_batching: dict[str, Any] | None = None
        self.transform = transform
        self.convert = convert
        self._stream: Any = None

    def _epoch_order(self, sampling: Sampling, shuffle: bool) -> EpochOrder:
        """The epoch order ``sampling`` asks for over this loader's dataset."""
        order = sampling.order
        if sampling.indices is not None:  # a subset, read in place (no copy of the dataset)
            shuffled = (order or ("random" if shuffle else "sequential")) == "random"
            return SubsetOrder(len(self.ds), sampling.indices, shuffle=shuffled)
        if isinstance(order, str) or order is None:
            order = order if order is not None else ("random" if shuffle else "sequential")
            return sampling_order(self.ds, order, sampling.repeat_threshold,
                                  shard_window=sampling.shard_window,
                                  quasi_block=sampling.quasi_block,
                                  quasi_window=sampling.quasi_window)
        if getattr(order, "num_samples", None) != len(self.ds):
            raise UsageError(f"the order is for {getattr(order, 'num_samples', None)} "
                             f"samples, the dataset has {len(self.ds)}")
        return order

    def _deliver_as(self, delivery: Delivery, batch_size: int) -> None:
        """Threads, buffers and placement from ``delivery``."""
        self.num_threads = int(delivery.num_threads if delivery.num_threads is not None
                               else min(4, os.cpu_count() or 1))
        self.prefetch = int(delivery.prefetch if delivery.prefetch is not None
                            else 2 * self.num_threads)
        self.prefetch_shards = delivery.prefetch_shards
        self.device = torch.device(delivery.device) if delivery.device is not None else None
        cuda = self.device is not None and self.device.type == "cuda"
        if cuda and not torch.cuda.is_available():  # name what the user passed, not pin_memory
            raise UsageError(f"device={str(delivery.device)!r} needs CUDA, and "
                             f"torch.cuda.is_available() is False (torch {torch.__version__}): "
                             "pass device='cpu' or leave device unset")
        self.pin_memory = bool(cuda if delivery.pin_memory is None else delivery.pin_memory)
        if self.pin_memory and not torch.cuda.is_available():
            raise UsageError("pin_memory=True needs CUDA (torch.cuda.is_available() is False)")
        self.layout = delivery.layout
        self.io = delivery.io
        self.pad_value = int(delivery.pad_value)
        self.canvas = delivery.canvas
        self.decode_scale = delivery.decode_scale
        self._gpu = None
        if delivery.gpu_decode:
            from detfmt.torch._gpu import GpuJpegDecoder

            self._gpu = GpuJpegDecoder(self.device)
        height, width = self.canvas or (0, 0)  # buffers grow to what the batches need
        self.ring = BufferRing(batch_size * height * width * 3, pin=self.pin_memory)
        self.transform_threads = int(delivery.transform_threads
                                     if delivery.transform_threads is not None
                                     else min(8, os.cpu_count() or 1))
        self.torch_threads = (int(delivery.torch_threads) if delivery.torch_threads is not None
                              else None)
        self.transform_reseed = bool(delivery.transform_reseed)

    @property
    def transform(self) -> Callable[[Batch], Batch] | None:
        """The augmentation run on each batch in the loader's threads (None: none)."""
        return self._transform

    @transform.setter
    def transform(self, transform: Callable[[Batch], Batch] | None) -> None:
        """Takes effect at the next ``iter()`` (e.g. a pipeline rebuilt after close_mosaic)."""
        if transform is not None and not callable(transform):
            raise UsageError(f"transform must be callable, got {type(transform).__name__}")
        accepts_stored_samples(transform, warn=True)  # a transform that declares the former name
        self._transform = transform
        self._generators = find_generators(transform) if transform is not None else []

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
        size and batch size (S-20). ``batching`` (batch size, world size, drop_last) tells a
        resumed transform with history (Mosaic's buffer) whether its refill is exact."""
        return {**self.schedule.state_dict(), "batching": batching(self.schedule)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue where ``state`` stopped (any world size, batch size or thread count).

        A transform with history (``Mosaic(buffer_size=...)``) is refilled at the next
        ``iter()`` from this rank's batches before the resume point, so the resumed batches
        equal the uninterrupted run's; exactly so when the batching is the saving run's (else
        a RuntimeWarning: the order still resumes exactly, the augmentation does not)."""
        self.schedule.load_state_dict(state)
        saved = state.get("batching")
        self._saved_batching = dict(saved) if isinstance(saved, dict) else None

    def epoch_order(self, epoch: int | None = None) -> np.ndarray:
        """The global sample order of an epoch, before rank slicing and tail handling."""
        return self.schedule.epoch_order(epoch)

    def rank_batches(self, epoch: int | None = None) -> list[np.ndarray]:
        """This rank's batches of a whole epoch."""
        return self.schedule.rank_batches(epoch)

    # -- iteration -----------------------------------------------------------------------------

    def __iter__(self) -> Iterator[Batch]:
        batches = self.schedule.begin_epoch()
        return self._run(batches, self.schedule.samples_seen)

    def _run(self, batches: list[np.ndarray], start: int) -> Iterator[Any]:
        follower = self.ds.follow(batches, self.prefetch_shards)
        pool = cf.ThreadPoolExecutor(self.num_threads, thread_name_prefix="detfmt-loader",
                                     initializer=configure_thread,
                                     initargs=(self.transform_threads, self.torch_threads))
        pending: deque[cf.Future] = deque()
        stop = threading.Event()
        staged = self._transform is not None or self.convert is not None
        stage = TransformStage(self._stage_process, self._stage_release, stop) if staged else None
        epoch = self.schedule.epoch
        position = submitted = 0
        transform = self._transform
        refilled = False
        try:
            if transform is not None:
                self._refill(pool, transform, epoch, start, stop)
            refilled = True
            while position < len(batches):
                while submitted < len(batches) and len(pending) < self.prefetch:
                    follower.step(position, submitted)
                    if stage is not None:
                        pending.append(stage.expect(submitted))
                        pool.submit(self._staged_job, batches[submitted], submitted, epoch,
                                    self.schedule.position(submitted), stage, stop)
                    else:
                        pending.append(pool.submit(self._job, batches[submitted], stop))
                    submitted += 1
                out, slot = pending.popleft().result()  # a failed job released its slot
                if slot is not None:
                    self.ring.release(slot)
                position += 1
                self.schedule.mark(position)
                if stage is not None:
                    out = self._deliver(out)
                elif self.device is not None:
                    out = self._to_device(out, slot)
                yield out
        finally:
            stop.set()
            for future in pending:
                future.cancel()
            pool.shutdown(wait=True, cancel_futures=True)
            if stage is not None:
                stage.abandon()  # gathered, never transformed: their buffers are free again
                # The transform holds exactly the batches handed out unless it ran ahead.
                exact = refilled and transform is not None and stage.processed == position
                self._synced = self._stream_point(transform, epoch) if exact else None
            else:
                for future in pending:  # gathered but never handed out
                    if future.done() and not future.cancelled() and future.exception() is None:
                        self.ring.release(future.result()[1])

    # -- the transform stage -------------------------------------------------------------------

    def _stream_point(self, transform: Any, epoch: int) -> tuple[Any, int, int]:
        """(transform, epoch, position) where the stream stands; a finished epoch is the next
        one's position 0."""
        seen = self.schedule.samples_seen
        if seen >= self.schedule.epoch_length(epoch):
            return transform, epoch + 1, 0
        return transform, epoch, seen

    def _refill(self, pool: cf.ThreadPoolExecutor, transform: Any, epoch: int, start: int,
                stop: threading.Event) -> None:
        """Before a pass that starts where the transform did not leave off: empty its history
        and run it again over the batches that precede the start (`detfmt.torch._history`)."""
        samples = history_of(transform)
        if samples == 0 or self._synced == (transform, epoch, start):
            return
        self._synced = None
        check_batching(self._saved_batching, self.schedule)
        reset_history(transform)
        replay = preceding_batches(self.schedule, epoch, start, samples)
        self.schedule.epoch_order(epoch)  # back to this epoch's order in the schedule's cache
        if replay:
            pool.submit(self._replay, replay, stop).result()

    def _replay(self, replay: list[tuple[int, int, np.ndarray]], stop: threading.Event) -> None:
        """A gather thread: gather and transform each earlier batch, outputs dropped."""
        for epoch, position, indices in replay:
            self._stage_process(-1, (*self._job(indices, stop), epoch, position), convert=False)

    def _staged_job(self, indices: np.ndarray, t: int, epoch: int, position: int,
                    stage: TransformStage, stop: threading.Event) -> None:
        """A gather thread: gather batch ``t``, then hand it to the stage (which may run the
        transform here, on this and the following batches, in order)."""
        try:
            batch, slot = self._job(indices, stop)
        except BaseException as error:
            stage.offer(t, error=error)
            return
        stage.offer(t, (batch, slot, epoch, position))

    def _stage_release(self, item: tuple[Batch, Slot | None, int, int]) -> None:
        if item[1] is not None:
            self.ring.release(item[1])

    def _reseed(self, epoch: int, position: int) -> None:
        """Seed the transform's generators for the batch whose first sample is at
        ``position`` of ``epoch``'s order on this rank."""
        if not self.transform_reseed:
            return
        for k, generator in enumerate(self._generators):
            generator.manual_seed(augment_seed(self.seed, epoch, position, k))

    def _stage_process(self, t: int, item: tuple[Batch, Slot | None, int, int],
                       convert: bool = True) -> tuple[Any, None]:
        """Batch ``t``: to the device (CUDA: on the loader's stream), re-seed, transform,
        convert. Returns (output, None): the buffer is released here, not at hand-out."""
        batch, slot, epoch, position = item
        del item
        released = False
        try:
            if self.device is not None and self.device.type == "cuda":
                return self._process_cuda(batch, slot, epoch, position, convert), None
            if self.device is not None:
                batch = batch.to(self.device)
            self._reseed(epoch, position)
            out = self._run_transform(batch)
            del batch
            self._release_written(slot)
            released = True
            if convert and self.convert is not None:
                out = self.convert(out)
            return out, None
        finally:
            if not released:
                self._release_written(slot)

    def _release_written(self, slot: Slot | None) -> None:
        """Give a transformed batch's buffer back (none: the batch was the stored samples).
        A transform may have written into it in place (also through numpy views, which
        torch's version counter does not see): the next gather clears all padding. Reused
        only once no tensor handed out references it."""
        if slot is None:
            return
        slot.layout = None
        self.ring.release(slot)

    def _run_transform(self, batch: Batch) -> Batch:
        """The transform of a batch the loader made: its buffer is reused only once nothing
        references it, so the transform may hold views of it (`stable_batches`). Stored
        samples reach only a transform that takes them (the transform may have been replaced
        since the batch was made: it then gets real images)."""
        if self._transform is None:
            return batch.materialized()
        if batch.samples is not None and not accepts_stored_samples(self._transform):
            batch = batch.materialized()
        with stable_batches():
            return self._transform(batch)

    def _process_cuda(self, batch: Batch, slot: Slot, epoch: int, position: int,
                      convert: bool) -> Any:
        device = self.device
        assert device is not None
        if self._stream is None:
            self._stream = torch.cuda.Stream(device)
        with torch.cuda.device(device), torch.cuda.stream(self._stream):
            moved = batch.to(device, non_blocking=self.pin_memory)
            if self.pin_memory:
                copied = torch.cuda.Event()
                copied.record(self._stream)
                slot.event = copied  # the slot is reused only once this copy has completed
            del batch
            self._reseed(epoch, position)
            out = self._run_transform(moved)
            del moved
            if convert and self.convert is not None:
                out = self.convert(out)
            done = torch.cuda.Event()
            done.record(self._stream)
        return _OnStream(out, done)

    def _deliver(self, out: Any) -> Any:
        """A staged result for the consumer: CUDA work of the loader's stream ordered before
        the consumer's, and its memory kept until the consumer's stream is done with it."""
        if not isinstance(out, _OnStream):
            return out
        stream = torch.cuda.current_stream(self.device)
        stream.wait_event(out.done)
        for tensor in _tensors(out.value):
            if tensor.is_cuda:
                tensor.record_stream(stream)
        return out.value

    # -- gathering -----------------------------------------------------------------------------

    def _job(self, indices: np.ndarray, stop: threading.Event) -> tuple[Batch, Slot | None]:
        """A gather thread: locate and check the batch, take a free buffer of its size, fill
        (or, for a transform that takes them, hand the stored samples: no buffer)."""
        if stop.is_set():
            raise cf.CancelledError
        job = self.engine.job(indices)
        if self.decode_scale != 1:  # before the sizes are read
            self.engine.scale(job, self.decode_scale)
        if self.io == "pread" and self.order == "quasi_random":
            self.engine.advise(job)  # near-sequential reads: let the kernel read ahead
        height, width = self.canvas or tuple(max(1, v) for v in job.padded_shape(
            self.engine.where))
        if self._hands_samples():
            stored = self.engine.stored_images(job)
            if stored is not None:
                return self._sample_batch(job, (height, width), stored), None
        need = len(indices) * height * width * 3
        if need > self.ring.capacity:  # new buffers at the largest size seen so far
            self.ring.capacity = need
        slot = self.ring.acquire(need)
        try:
            return self._fill(job, slot, (height, width)), slot
        except BaseException:
            self.ring.release(slot)
            raise

    def _hands_samples(self) -> bool:
        """Whether the transform may get the stored samples instead of a gathered batch
        (`Batch.samples`): it declares ``accepts_stored_samples``, runs on the CPU in the
        loader, and the loader reads memory-mapped data into CHW batches of their own size.
        Raw samples are then read where they are mapped, never copied into a buffer first
        (a job with other codecs is gathered as usual)."""
        return (
            accepts_stored_samples(self._transform)
            and self.device is None
            and self._gpu is None
            and self.io == "mmap"
            and self.layout == "CHW"
            and self.canvas is None
        )

    def _sample_batch(self, job: Job, hw: tuple[int, int], stored: list[np.ndarray]) -> Batch:
        """The job's labels with its samples as stored (`Batch.samples`) and a placeholder
        of the batch's images (the pad value; the transform reads the samples)."""
        pad = self.pad_value if self.pad_value is not None else 0
        placeholder = torch.full((1, 1, 1, 1), pad, dtype=torch.uint8).expand(
            len(job), 3, *hw)
        return self._labelled(job, placeholder, tuple(stored))

    def _fill(self, job: Job, slot: Slot, hw: tuple[int, int]) -> Batch:
        height, width = hw
        shape = (len(job), height, width, 3)
        if self._gpu is not None and self._gpu.wants(job):
            hwc = self._gpu.decode_batch(self.engine, job, shape, self.pad_value)
            images = hwc if self.layout == "HWC" else hwc.permute(0, 3, 1, 2)
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
            images = self.ring.tensor_view(slot, shape, channels_first=self.layout == "CHW")
        return self._labelled(job, images)

    def _labelled(self, job: Job, images: torch.Tensor,
                  samples: tuple[np.ndarray, ...] | None = None) -> Batch:
        boxes, classes, mask, fields = self.engine.labels(job)
        return Batch(
            images=images,
            boxes=_tensor(boxes),
            classes=_tensor(classes),
            mask=_tensor(mask),
            sizes=torch.from_numpy(job.sizes),
            indices=_tensor(job.indices),
            extras={name: _tensor(value) for name, value in fields.items()},
            box_fields=tuple(fields),  # the dataset's per-box fields, (B, M) each
            samples=samples,
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


class _OnStream:
    """A result produced on the loader's CUDA stream, with the event that marks it ready."""

    __slots__ = ("done", "value")

    def __init__(self, value: Any, done: Any) -> None:
        self.value = value
        self.done = done


def _tensor(array: np.ndarray) -> torch.Tensor:
    """A tensor sharing a C-contiguous array (copied first when it is not)."""
    return torch.from_numpy(array if array.flags.c_contiguous else np.ascontiguousarray(array))


def _tensors(value: Any) -> Iterator[torch.Tensor]:
    """Every tensor inside a Batch, dict, list or tuple (what a convert may return)."""
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, Batch):
        for field in (value.images, value.boxes, value.classes, value.mask, value.sizes,
                      value.indices, value.extras):
            yield from _tensors(field)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _tensors(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _tensors(item)
