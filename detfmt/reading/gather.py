"""The one gather engine: batches of any detfmt dataset, numpy only.

A dataset is one or more *parts*, each a 1.0 dataset (`detfmt.reading.dataset.Dataset`): a 1.0
directory
is the one-part case, a sharded root has a part per shard (global index ``i`` lives in the part
whose range holds it, SPEC S-5). Every read path goes through here: ``ds.batch`` and
``ds.labels`` of both kinds of dataset, the torch `Loader`, the DataLoader path and remote roots
(whose parts are shards fetched into the node cache). So no path can skip a check, and an
optimisation made here reaches all of them.

A batch is located first (`Gather.job`): its samples' parts, local indices, sizes and counts,
with the part's index records, counts and labels checked (each chunk once; R-44). Then pixels
are copied or decoded into the caller's buffer (`fill`), each image at the top-left of its slot,
and labels are gathered and re-padded to the batch's own maximum (`labels`, S-12).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Any, Protocol

import numpy as np

from detfmt import errors
from detfmt.format import spec
from detfmt.format.records import NumpyBatch, batch_indices
from detfmt.reading import buffers
from detfmt.reading import kernel as _kernel

__all__ = ["DECODE_SCALES", "IO_MODES", "Gather", "Job", "Parts", "batch_buffer", "check_canvas",
           "check_decode_scale", "check_padding", "single_part"]

IO_MODES = ("mmap", "pread")
# The DCT-domain scales libjpeg decodes at (1: the stored size), `Gather.scale`.
DECODE_SCALES = (1, 2, 4, 8)
_PARALLEL_BYTES = 4 << 20  # below this a batch is copied in the calling thread
#: a padded batch may take this many bytes whatever its padding, and beyond that at most
#: `PADDING_FACTOR` times its images' bytes (property 6 of docs/reliability.md)
PADDING_LIMIT = 1 << 30
PADDING_FACTOR = 8

_MASK_ROWS = np.arange(256) < np.arange(257)[:, None]  # row k: k leading True slots
_MASK_TABLES: dict[int, np.ndarray] = {}
_POOL: ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()


def _pool() -> ThreadPoolExecutor:
    """One shared pool of copy threads for every ``ds.batch`` in the process."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1),
                                       thread_name_prefix="detfmt-batch")
        return _POOL


def _split(work: Callable[[Any], None], shares: Sequence[Any]) -> None:
    """``work(share)`` for every share: the first in the calling thread, the others in the pool
    meanwhile (the caller works instead of waiting: one hand-off fewer per batch)."""
    futures = [_pool().submit(work, share) for share in shares[1:]]
    try:
        work(shares[0])
    finally:  # no share may still write into the buffer once this returns or raises
        wait(futures)
    for future in futures:
        future.result()


def _forget_pool_in_child() -> None:
    """A forked child (a DataLoader worker) has none of its parent's threads: the inherited
    pool would queue work that no thread ever runs. It starts its own on first use."""
    global _POOL, _POOL_LOCK
    _POOL = None
    _POOL_LOCK = threading.Lock()


os.register_at_fork(after_in_child=_forget_pool_in_child)


def _thread_count(requested: int | None, nbytes: int, samples: int) -> int:
    if requested is not None:
        if isinstance(requested, bool) or not isinstance(requested, int) or requested < 1:
            raise errors.UsageError(f"num_threads must be a positive int, got {requested!r}")
        return min(requested, max(1, samples), min(8, os.cpu_count() or 1))
    if nbytes < _PARALLEL_BYTES:
        return 1
    return min(max(1, samples), min(8, os.cpu_count() or 1))


class Part(Protocol):
    """What the engine reads of one part (`detfmt.reading.dataset.Dataset` provides it): the mapped
    columns of its index and labels, its payload bytes, and its lazy checks."""

    heights: np.ndarray
    widths: np.ndarray
    counts: np.ndarray
    offsets: np.ndarray
    nbytes: np.ndarray
    codecs: np.ndarray
    max_boxes: int
    blob: np.ndarray
    fixed_images: np.ndarray | None
    blob_path: str
    #: per sample, nonzero once its compressed payload passed the SPEC §9 structure checks in
    #: this process (one memo per part, shared by every read path)
    payload_checked: np.ndarray

    @property
    def blob_member(self) -> Any: ...

    def ensure_checked(self, rows: np.ndarray, labels: bool = True) -> None: ...

    def label_slots(self, rows: np.ndarray, m: int
                    ) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]: ...

    def pread_fd(self) -> int: ...


class Parts:
    """How the engine reaches a dataset's parts: their first global indices and an opener.

    ``open_part(k)`` returns part ``k`` ready to read (a remote shard is fetched first); the
    engine keeps the parts of a batch referenced while it gathers that batch.
    """

    def __init__(self, num_samples: int, starts: np.ndarray,
                 open_part: Callable[[int], Part], box_fields: Sequence[tuple[str, str]]
                 ) -> None:
        self.num_samples = int(num_samples)
        self.starts = np.asarray(starts, dtype=np.int64)
        self.open_part = open_part
        self.box_fields = [(name, np.dtype(dtype)) for name, dtype in box_fields]


def single_part(ds: Any) -> Parts:
    """The parts of a 1.0 dataset: itself."""
    fields = [(f.name, f.dtype) for f in ds.header.box_fields]
    return Parts(len(ds), np.zeros(1, np.int64), lambda k: ds, fields)


class Job:
    """One batch located in its parts: everything the fill and the label gather need."""

    __slots__ = ("codecs", "counts", "heights", "indices", "local", "nbytes", "offsets", "part",
                 "readers", "scale", "stored", "table", "widths")

    def __init__(self, indices: np.ndarray) -> None:
        b = len(indices)
        self.indices = indices
        # one allocation for the per-sample columns (a batch is a few dozen samples: the cost
        # is the number of numpy calls, not their size)
        self.table = np.zeros((6, b), np.int64)
        self.part = self.table[0]  # part number of each sample
        self.heights = self.table[1]
        self.widths = self.table[2]
        self.counts = self.table[3]
        self.offsets = self.table[4]
        self.nbytes = self.table[5]
        self.local = indices  # index inside its part
        self.codecs = np.zeros(b, np.uint8)
        self.readers: dict[int, Part] = {}  # the parts this batch reads, kept open
        self.scale = 1  # JPEG decoded at 1/scale (`Gather.scale`); heights/widths are then
        self.stored: np.ndarray | None = None  # the decoded sizes, these the stored ones

    def __len__(self) -> int:
        return len(self.indices)

    @property
    def sizes(self) -> np.ndarray:
        """(B, 2) int32 (height, width) of each image."""
        return self.table[1:3].T.astype(np.int32)

    @property
    def shape(self) -> tuple[int, int]:
        """(Hmax, Wmax) of the batch; (0, 0) when it is empty."""
        if not len(self.indices):
            return (0, 0)
        height, width = self.table[1:3].max(axis=1).tolist()
        return height, width

    def padded_shape(self, where: str) -> tuple[int, int]:
        """`shape`, after `check_padding` (one huge image among small ones must not allocate
        gigabytes of padding)."""
        height, width = self.shape
        if len(self.indices) * height * width * 3 > PADDING_LIMIT:  # else within any budget
            areas = self.heights * self.widths
            check_padding(len(self.indices), height, width, int(areas.sum()) * 3, where,
                          int(self.indices[int(np.argmax(areas))]))
        return height, width

    def groups(self) -> list[tuple[Part, np.ndarray, np.ndarray]]:
        """(part, batch rows, local indices) for each part the batch touches."""
        if len(self.readers) == 1:
            (reader,) = self.readers.values()
            return [(reader, np.arange(len(self.indices)), self.local)]
        out = []
        for k, reader in self.readers.items():
            rows = np.flatnonzero(self.part == k)
            out.append((reader, rows, self.local[rows]))
        return out


class _Scratch(threading.local):
    """Per-thread reusable buffers (a fresh one per sample would page-fault every time)."""

    def __init__(self) -> None:
        self.image = np.empty(0, np.uint8)
        self.payload = np.empty(0, np.uint8)

    def take(self, name: str, size: int) -> np.ndarray:
        buffer = getattr(self, name)
        if buffer.size < size:
            buffer = np.empty(max(size, 1 << 20), np.uint8)
            setattr(self, name, buffer)
        return buffer[:size]


def _pread(fd: int, dst: np.ndarray, offset: int, where: str, index: int) -> None:
    view = memoryview(dst).cast("B")
    total, done = view.nbytes, 0
    while done < total:
        got = os.preadv(fd, [view[done:]], offset + done)
        if got <= 0:
            raise errors.DatasetChangedError(
                f"the file ended at byte {offset + done}, the sample needs {offset + total}",
                path=where, index=index)
        done += got


class Gather:
    """Batches of one dataset (see the module docstring). Thread-safe."""

    def __init__(self, parts: Parts, where: str) -> None:
        self.parts = parts
        self.where = where
        self._scratch = _Scratch()

    @property
    def num_samples(self) -> int:
        return self.parts.num_samples

    # ------------------------------------------------------------------ locate

    def job(self, indices: Sequence[int] | np.ndarray, *, labels: bool = True) -> Job:
        """Locate ``indices`` (integers, negative from the end) in their parts and check them:
        index records and counts always, labels too unless ``labels`` is False."""
        idx = batch_indices(indices, self.num_samples, self.where)
        job = Job(idx)
        starts = self.parts.starts
        if len(starts) == 1:
            if len(idx):
                self._locate_part(job, 0, None, idx, labels)
            return job
        part = np.searchsorted(starts, idx, side="right") - 1
        job.part[:] = part
        job.local = idx - starts[part]
        for k in np.unique(part).tolist():
            rows = np.flatnonzero(part == k)
            self._locate_part(job, k, rows, job.local[rows], labels)
        return job

    def _locate_part(self, job: Job, k: int, rows: np.ndarray | None, local: np.ndarray,
                     labels: bool) -> None:
        reader = self.parts.open_part(k)
        reader.ensure_checked(local, labels=labels)
        job.readers[k] = reader
        where = slice(None) if rows is None else rows
        job.heights[where] = reader.heights[local]
        job.widths[where] = reader.widths[local]
        job.counts[where] = reader.counts[local]
        job.offsets[where] = reader.offsets[local]
        job.nbytes[where] = reader.nbytes[local]
        job.codecs[where] = reader.codecs[local]

    # ------------------------------------------------------------------ pixels

    def fill(self, job: Job, out: np.ndarray, pad_value: int | None = 0,
             previous: Sequence[tuple[int, int]] | np.ndarray | None = None, io: str = "mmap",
             num_threads: int = 1) -> np.ndarray:
        """Write the job's images into ``out`` (B, H, W, 3), each at the top-left of its slot.

        Pixels outside the images become ``pad_value`` (None leaves them as they are).
        ``previous`` (optional) is what the last fill of this buffer returned, nobody having
        written since: only the parts it wrote outside the new images are cleared. Returns the
        (h, w) written per slot, a (B, 2) int64 array.
        """
        if io not in IO_MODES:
            raise errors.UsageError(f"io must be one of {IO_MODES}, got {io!r}")
        b = len(job)
        if previous is not None and len(previous) < b:
            previous = None
        kernel = _kernel.raw_gather() if io == "mmap" else None
        if kernel is not None and self._fill_native(kernel, job, out, pad_value, previous,
                                                    num_threads):
            return job.table[1:3].T.copy()
        if num_threads > 1 and b > 1:
            parts = [range(t, b, num_threads) for t in range(num_threads)]
            _split(lambda rows: self._fill_rows(job, out, rows, pad_value, previous, io), parts)
        else:
            self._fill_rows(job, out, range(b), pad_value, previous, io)
        return job.table[1:3].T.copy()

    def _fill_native(self, kernel: Callable[..., int], job: Job, out: np.ndarray,
                     pad_value: int | None, previous: Sequence[tuple[int, int]] | np.ndarray | None,
                     num_threads: int) -> bool:
        """`fill` through the native kernel (`detfmt.reading.kernel`): raw images and padding in one
        GIL-free call per thread, other codecs decoded after it. False, having written
        nothing, when the buffer or the pad value is not what the kernel takes."""
        b = len(job)
        if not (out.ndim == 4 and out.dtype == np.uint8 and out.shape[3] == 3
                and out.shape[0] >= b and out.flags.c_contiguous and out.flags.writeable):
            return False
        if pad_value is not None and not (isinstance(pad_value, (int, np.integer))
                                          and 0 <= pad_value <= 255):
            return False
        height, width = out.shape[1], out.shape[2]
        if not b:
            return True
        heights, widths, offsets = job.heights, job.widths, job.offsets  # int64 columns
        if heights.max() > height or widths.max() > width:
            j = int(np.flatnonzero((heights > height) | (widths > width))[0])
            raise errors.UsageError(
                f"the image is {heights[j]}x{widths[j]}, larger than the batch's "
                f"{height}x{width} canvas", path=self.where, index=int(job.indices[j]))
        raw = job.codecs == spec.CODEC_RAW
        all_raw = bool(raw.all())
        image_bytes = heights * widths * 3
        if len(job.readers) == 1:  # one part: scalars instead of per-row tables
            (blob,) = (reader.blob for reader in job.readers.values())
            base, size = (blob.ctypes.data if blob.size else 0), blob.size
        else:
            keys = sorted(job.readers)
            which = np.searchsorted(np.array(keys, np.int64), job.part)  # each row's part
            blobs = [job.readers[k].blob for k in keys]
            size = np.array([blob.size for blob in blobs], np.int64)[which]
            base = np.array([blob.ctypes.data if blob.size else 0 for blob in blobs],
                            np.int64)[which]
        # checked records guarantee this; the kernel writes through raw pointers, so say it
        ends = offsets + image_bytes
        if all_raw:
            if not ((ends <= size).all() and (job.nbytes == image_bytes).all()):
                return False
            sources = offsets + base
        else:
            if not ((ends <= size) | ~raw).all() or not ((job.nbytes == image_bytes) | ~raw).all():
                return False
            sources = np.where(raw, offsets + base, 0)
        if previous is None:
            prev_h = np.full(b, height, np.int64)
            prev_w = np.full(b, width, np.int64)
        else:
            sizes_before = np.asarray(previous[:b], np.int64).reshape(b, 2)
            prev_h = np.minimum(sizes_before[:, 0], height)
            prev_w = np.minimum(sizes_before[:, 1], width)
        pad = -1 if pad_value is None else int(pad_value)
        others = None if all_raw else np.flatnonzero(~raw)
        stream = _kernel.streams(b * height * width * 3)

        def run(rows: np.ndarray) -> None:
            kernel(sources, heights, widths, rows, out, pad, prev_h, prev_w, stream)
            if others is None or not len(others):  # all raw: the kernel did everything
                return
            for j in np.intersect1d(rows, others).tolist():
                h, w = int(heights[j]), int(widths[j])
                reader = job.readers[int(job.part[j])]
                self._decode(reader, int(job.local[j]), int(offsets[j]), int(job.nbytes[j]),
                             int(job.codecs[j]), out[j, :h, :w], True, _stored(job, j))

        if num_threads > 1 and b > 1:
            _split(run, [np.arange(t, b, num_threads) for t in range(num_threads)])
        else:
            run(np.arange(b))
        return True

    def _fill_rows(self, job: Job, out: np.ndarray, rows: range, pad_value: int | None,
                   previous: Sequence[tuple[int, int]] | np.ndarray | None, io: str) -> None:
        height, width = out.shape[1], out.shape[2]
        parts = job.part.tolist()
        local = job.local.tolist()
        heights = job.heights.tolist()
        widths = job.widths.tolist()
        offsets = job.offsets.tolist()
        codecs = job.codecs.tolist()
        readers = job.readers
        mmap_io = io == "mmap"
        for j in rows:
            h, w = heights[j], widths[j]
            if h > height or w > width:
                raise errors.UsageError(
                    f"the image is {h}x{w}, larger than the batch's {height}x{width} canvas",
                    path=self.where, index=int(job.indices[j]))
            slot = out[j]
            if pad_value is not None:
                old_h, old_w = previous[j] if previous is not None else (height, width)
                if h < old_h:  # rows below the image
                    slot[h:old_h, :old_w].fill(pad_value)
                if w < old_w:  # the strip right of the image
                    slot[: min(h, old_h), w:old_w].fill(pad_value)
            reader = readers[parts[j]]
            li = local[j]
            if codecs[j] == spec.CODEC_RAW:
                if mmap_io:  # the hot path: one strided copy out of the mapping
                    fixed = reader.fixed_images
                    if fixed is not None and h == height and w == width:
                        np.copyto(slot, fixed[li])
                    else:
                        start = offsets[j]
                        np.copyto(slot[:h, :w],
                                  reader.blob[start : start + h * w * 3].reshape(h, w, 3))
                else:
                    self._pread_raw(reader, li, offsets[j], slot[:h, :w])
            else:
                self._decode(reader, li, offsets[j], int(job.nbytes[j]), codecs[j],
                             slot[:h, :w], mmap_io, _stored(job, j))

    def _pread_raw(self, reader: Part, li: int, offset: int, dst: np.ndarray) -> None:
        base = reader.blob_member.base
        fd = reader.pread_fd()
        if dst.flags.c_contiguous:
            _pread(fd, dst, base + offset, reader.blob_path, li)
            return
        tmp = self._scratch.take("image", dst.size).reshape(dst.shape)
        _pread(fd, tmp, base + offset, reader.blob_path, li)
        np.copyto(dst, tmp)

    def _decode(self, reader: Part, li: int, offset: int, nbytes: int, codec: int,
                dst: np.ndarray, mmap_io: bool, scaled: tuple[int, int, int] | None = None
                ) -> None:
        """Decode one payload into ``dst``; ``scaled``: (scale, stored height, stored width)
        of a JPEG decoded at 1/scale (`Gather.scale`)."""
        from detfmt.format import codecs as _codecs

        if mmap_io:
            payload = reader.blob[offset : offset + nbytes]
        else:
            payload = self._scratch.take("payload", nbytes)
            _pread(reader.pread_fd(), payload, reader.blob_member.base + offset,
                   reader.blob_path, li)
        seen = reader.payload_checked  # each decode after the first skips the marker walk
        checked = bool(seen[li])
        # the slot is as wide as the image: decode straight into it (the decoders write rows
        # back to back), else into a scratch image and copy (~5% of a decode)
        target = dst if dst.flags.c_contiguous else \
            self._scratch.take("image", dst.size).reshape(dst.shape)
        _codecs.decode_into(payload, codec, target, path=reader.blob_path, index=li,
                            structure_checked=checked, scaled=scaled)
        if target is not dst:
            np.copyto(dst, target)
        if not checked and mmap_io:  # a pread reads the bytes afresh: checked every time
            seen[li] = 1

    def payload(self, job: Job, j: int) -> np.ndarray:
        """The stored bytes of the job's sample ``j`` (a read-only view of its part's mapping)."""
        reader = job.readers[int(job.part[j])]
        start = int(job.offsets[j])
        return reader.blob[start : start + int(job.nbytes[j])]

    def check_payload(self, job: Job, j: int) -> np.ndarray:
        """The stored bytes of the job's sample ``j`` after the structure checks of its codec
        (SPEC §9: for a JPEG, frame type, precision, components and sampling, J1..J3), for a
        decoder of its own (the GPU decoder) to decode."""
        from detfmt.format import codecs as _codecs

        payload = self.payload(job, j)
        reader = job.readers[int(job.part[j])]
        h, w, li = int(job.heights[j]), int(job.widths[j]), int(job.local[j])
        if int(job.codecs[j]) == spec.CODEC_JPEG:
            _codecs.check_jpeg(payload, h, w, path=reader.blob_path, index=li)
        elif int(job.codecs[j]) == spec.CODEC_PNG:
            _codecs.check_png(payload, h, w, path=reader.blob_path, index=li)
        return payload

    def advise(self, job: Job) -> None:
        """Ask the kernel to read ahead the byte span of the job's samples (cold-cache reads in
        a near-sequential order); an optimisation, silently skipped where unsupported."""
        for reader, rows, _ in job.groups():
            lo = int(job.offsets[rows].min())
            hi = int((job.offsets[rows] + job.nbytes[rows]).max())
            base = reader.blob_member.base
            with contextlib.suppress(AttributeError, OSError):
                os.posix_fadvise(reader.pread_fd(), base + lo, hi - lo, os.POSIX_FADV_WILLNEED)

    # ------------------------------------------------------------------ images in place

    def stored_images(self, job: Job) -> list[np.ndarray] | None:
        """The job's images where they are stored, in job order: read-only (h, w, 3) uint8
        views of the mapping, no copy; None if a sample is not raw (it would be decoded into
        a fresh array, where `fill` decodes into a reused buffer)."""
        if not (job.codecs == spec.CODEC_RAW).all():
            return None
        readers = job.readers
        return [readers[part].read_image(local)
                for part, local in zip(job.part.tolist(), job.local.tolist(), strict=True)]

    # ------------------------------------------------------------------ labels

    def labels(self, job: Job, max_boxes: int | None = None
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[str, np.ndarray]]:
        """boxes (B, M, 4) float32, classes (B, M) int32, mask (B, M) bool and the per-box
        fields (B, M), with M the batch's largest box count (or ``max_boxes``; a sample with
        more boxes is an error, never a silent cut). The labels were checked by `job`."""
        b = len(job)
        m = int(job.counts.max()) if b else 0
        if max_boxes is not None:
            if isinstance(max_boxes, bool) or not isinstance(max_boxes, (int, np.integer)) \
                    or max_boxes < 0:
                raise errors.UsageError(f"max_boxes must be an int >= 0, got {max_boxes!r}")
            if m > max_boxes:
                j = int(np.argmax(job.counts))
                raise errors.TooManyBoxesError(
                    f"the sample has {m} boxes, more than max_boxes={max_boxes}; boxes are never "
                    "dropped silently: raise max_boxes (or filter the dataset)",
                    count=m, max_boxes=int(max_boxes), path=self.where,
                    index=int(job.indices[j]))
            m = int(max_boxes)
        groups = job.groups() if b else []
        if len(groups) == 1:  # one part: its own gather, padded to m
            reader, _, local = groups[0]
            boxes, classes, fields = reader.label_slots(local, m)
        else:  # several parts (S-12): each part's labels into one re-padded batch
            boxes = np.zeros((b, m, 4), np.float32)
            classes = np.full((b, m), spec.CLASS_PADDING, np.int32)
            fields = {name: np.zeros((b, m), dtype) for name, dtype in self.parts.box_fields}
            for reader, rows, local in groups:
                mk = min(m, reader.max_boxes)
                part_boxes, part_classes, part_fields = reader.label_slots(local, mk)
                boxes[rows, :mk] = part_boxes
                classes[rows, :mk] = part_classes
                for name, values in fields.items():
                    values[rows, :mk] = part_fields[name]
        if job.stored is not None:  # decoded at a scale (`scale`): the boxes follow the pixels
            boxes = boxes * _box_factors(job)[:, None, :]
        return boxes, classes, _slot_mask(job.counts, m), fields

    # ------------------------------------------------------------------ whole batches

    def batch(self, indices: Sequence[int] | np.ndarray, *, out: np.ndarray | None = None,
              pad_value: int | None = 0, num_threads: int | None = None,
              canvas: tuple[int, int] | None = None, max_boxes: int | None = None,
              io: str = "mmap", decode_scale: int = 1) -> NumpyBatch:
        """One padded batch (what ``ds.batch`` returns); ``decode_scale``: `scale`."""
        job = self.job(indices)
        b = len(job)
        self.scale(job, decode_scale)
        height, width = check_canvas(canvas) if canvas is not None else \
            job.padded_shape(self.where)
        # A new array is uninitialised and only its padding is cleared: a zero-filled one costs
        # a full extra pass (glibc's calloc memsets a batch-sized block, which its dynamic mmap
        # threshold keeps on the heap after the first free), a third of a copy loop's time.
        images = _output(out, b, height, width)
        threads = _thread_count(num_threads, images.nbytes, b)
        boxes, classes, mask, fields = self.labels(job, max_boxes)  # before any pixel is copied
        self.fill(job, images, pad_value, io=io, num_threads=threads)
        return NumpyBatch(images=images, sizes=job.sizes, boxes=np.ascontiguousarray(boxes),
                          classes=np.ascontiguousarray(classes), mask=mask, indices=job.indices,
                          fields=fields)

    def scale(self, job: Job, decode_scale: int) -> None:
        """Make the job decode its JPEG images at 1/``decode_scale`` (2, 4 or 8) in the DCT
        domain (libjpeg's scaled decode: 1.2-1.3x faster at 1/2 on 4:4:4 JPEGs, the entropy
        decode being the same; no resize pass): its sizes become ceil(stored / scale), the
        boxes of `labels` are scaled alike. Only ever on request (the pixels differ from a full
        decode then resize); every sample must be JPEG-stored (other codecs have no cheap
        scaled decode), else a UsageError."""
        decode_scale = check_decode_scale(decode_scale)
        if decode_scale == 1 or not len(job):
            return
        other = np.flatnonzero(job.codecs != spec.CODEC_JPEG)
        if len(other):
            j = int(other[0])
            raise errors.UsageError(
                f"decode_scale={decode_scale} needs JPEG-stored samples; this one is stored as "
                f"{spec.CODEC_NAMES[int(job.codecs[j])]}", path=self.where,
                index=int(job.indices[j]))
        job.stored = job.table[1:3].T.copy()
        job.scale = decode_scale
        job.table[1:3] = -(-job.table[1:3] // decode_scale)

    def labels_only(self, indices: Sequence[int] | np.ndarray) -> NumpyBatch:
        """The labels of a batch without its pixels (``images`` has shape (B, 0, 0, 3))."""
        job = self.job(indices)
        boxes, classes, mask, fields = self.labels(job)
        return NumpyBatch(images=np.zeros((len(job), 0, 0, 3), np.uint8), sizes=job.sizes,
                          boxes=boxes, classes=classes, mask=mask, indices=job.indices,
                          fields=fields)


def check_padding(count: int, height: int, width: int, image_bytes: int, where: str,
                  index: int | None = None) -> None:
    """Refuse (UsageError, rule PADDING_BUDGET) ``count`` slots of ``height`` x ``width``
    pixels that would take more than `PADDING_LIMIT` bytes and more than `PADDING_FACTOR`
    times the ``image_bytes`` they hold; ``index`` names the sample that forces the size."""
    padded = count * height * width * 3
    if padded > PADDING_LIMIT and padded > PADDING_FACTOR * image_bytes:
        raise errors.UsageError(
            f"padding {count} images to {height}x{width} would take {padded / 2**30:.1f} GiB, "
            f"{padded / max(image_bytes, 1):.0f}x the images: pass a canvas (the images must "
            "fit it), use smaller batches, or write the dataset with max_side",
            rule="PADDING_BUDGET", path=where, index=index)


def batch_buffer(sizes: np.ndarray, batch_size: int) -> np.ndarray:
    """A flat, page-aligned uint8 ``out=`` buffer that holds any ``batch_size`` images of
    ``sizes`` ((N, 2) heights and widths, or one (1, 2) canvas)."""
    return buffers.batch_buffer(sizes, batch_size)


def check_canvas(canvas: tuple[int, int]) -> tuple[int, int]:
    """``canvas`` as (height, width) ints in 1..MAX_SIDE, or a typed error."""
    try:
        height, width = (int(v) for v in canvas)
    except (TypeError, ValueError) as error:
        raise errors.UsageError(f"canvas must be (height, width), got {canvas!r}") from error
    if not (1 <= height <= spec.MAX_SIDE and 1 <= width <= spec.MAX_SIDE):
        raise errors.UsageError(f"canvas sides must be in 1..{spec.MAX_SIDE}, got {canvas!r}")
    return height, width


def check_decode_scale(decode_scale: int) -> int:
    """``decode_scale`` as an int of `DECODE_SCALES`, or a typed error (a bool or a float such
    as 2.0 is refused: the sizes it gives are integer arithmetic)."""
    if (isinstance(decode_scale, bool) or not isinstance(decode_scale, (int, np.integer))
            or decode_scale not in DECODE_SCALES):
        raise errors.UsageError(f"decode_scale must be one of {DECODE_SCALES}, got "
                                f"{decode_scale!r}")
    return int(decode_scale)


def _output(out: np.ndarray | None, b: int, h: int, w: int) -> np.ndarray:
    shape = (b, h, w, 3)
    if out is None:
        return buffers.aligned_empty(shape)  # np.empty's 16-byte offset copies 3x slower
    if not isinstance(out, np.ndarray) or out.dtype != np.uint8:
        raise errors.UsageError(f"out must be a uint8 numpy buffer, got {type(out).__name__}")
    if out.shape == shape:
        return out
    need = b * h * w * 3
    if out.ndim != 1 or not out.flags.c_contiguous or out.size < need:
        raise errors.UsageError(f"out must be a flat contiguous uint8 buffer of at least "
                                f"{need} bytes, or exactly {shape}; got {out.shape}")
    if not out.flags.writeable:
        raise errors.UsageError("out must be writeable")
    return out[:need].reshape(shape)


def _stored(job: Job, j: int) -> tuple[int, int, int] | None:
    if job.stored is None:
        return None
    return job.scale, int(job.stored[j, 0]), int(job.stored[j, 1])


def _box_factors(job: Job) -> np.ndarray:
    """(B, 4) float32 x, y, x, y factors from stored to decoded pixels."""
    assert job.stored is not None
    fy = job.heights / job.stored[:, 0]
    fx = job.widths / job.stored[:, 1]
    return np.stack([fx, fy, fx, fy], axis=1).astype(np.float32)


def _slot_mask(counts: np.ndarray, m: int) -> np.ndarray:
    """(B, m) bool, the first ``counts[i]`` (checked: 0..m) slots of row i set. Up to 256
    slots it is a row gather from a table, a few times cheaper for a batch than the broadcast
    comparison, which stays for more slots."""
    if m <= _MASK_ROWS.shape[1]:
        table = _MASK_TABLES.get(m)
        if table is None:  # a contiguous (257, m) table per slot count: one take per batch
            table = _MASK_TABLES.setdefault(m, np.ascontiguousarray(_MASK_ROWS[:, :m]))
        return table.take(counts, axis=0)
    return np.arange(m) < counts[:, None]
