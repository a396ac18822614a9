"""``detfmt.open``: a zero-copy, numpy-only reader.

Opening reads header.json and the small .npy headers, checks every count, offset and size
against the real file sizes (in Python ints) and only then maps the files read-only. Labels are
checked for the samples actually read (a vectorized check per sample or batch), so opening stays
O(1) in I/O beyond the index; ``verify`` checks everything.
"""

from __future__ import annotations

import mmap
import os
import stat
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from detfmt import _buffers, _codecs, _npy, errors, spec, validate
from detfmt.schema import Header

__all__ = ["Dataset", "NumpyBatch", "Sample", "open_dataset"]


@dataclass(frozen=True)
class Sample:
    """One sample: the image as stored (H, W, 3), its boxes (K, 4) and classes (K,).

    For raw samples ``image`` is a read-only view of the mapped file (copy it to modify).
    ``fields`` holds the optional per-box fields (trimmed to K) and per-image fields.
    """

    index: int
    image: np.ndarray
    boxes: np.ndarray
    classes: np.ndarray
    fields: dict[str, Any] = field(default_factory=dict)

    def __getattr__(self, name: str) -> Any:  # sample.iscrowd, sample.file_name, ...
        fields = object.__getattribute__(self, "fields")
        if name in fields:
            return fields[name]
        raise AttributeError(name)


@dataclass
class NumpyBatch:
    """A gathered batch: images padded to the batch's largest size, labels to its largest count."""

    images: np.ndarray  # (B, Hmax, Wmax, 3) uint8
    sizes: np.ndarray  # (B, 2) int32 (height, width) of each image's valid region
    boxes: np.ndarray  # (B, M', 4) float32
    classes: np.ndarray  # (B, M') int32, -1 in padding
    mask: np.ndarray  # (B, M') bool
    indices: np.ndarray  # (B,) int64
    fields: dict[str, np.ndarray] = field(default_factory=dict)  # per-box (B, M') fields


class SampleIndexError(errors.UsageError, IndexError):
    """A sample index outside 0..N-1 (an IndexError, so ``for sample in ds`` stops cleanly)."""

    default_rule = "INDEX_RANGE"


def normalize_index(index: Any, n: int, path: os.PathLike[str] | str) -> int:
    """A sample index as a Python int in 0..n-1 (negative counts from the end)."""
    try:
        i = int(index)
    except (TypeError, ValueError) as error:
        raise errors.UsageError(f"sample index must be an int, got {index!r}") from error
    if i < 0:
        i += n
    if not 0 <= i < n:
        raise SampleIndexError(f"sample index {index} out of range for {n} samples", path=path)
    return i


_OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)


class _Member:
    """One opened member file: its stat identity and its read-only mapping."""

    def __init__(self, directory_fd: int, root: Path, name: str) -> None:
        self.name = name
        self.path = str(root / name)
        try:
            fd = os.open(name, _OPEN_FLAGS, dir_fd=directory_fd)
        except FileNotFoundError as error:
            raise errors.LayoutError(f"missing member file {name}", rule="FILE_MISSING",
                                     path=self.path) from error
        except OSError as error:
            raise errors.UnsafePathError(
                f"cannot open {name} as a plain file ({error.strerror}); members must be regular "
                "files, not symlinks", path=self.path) from error
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise errors.UnsafePathError(f"{name} is not a regular file", path=self.path)
            self.identity = (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)
            self.size = info.st_size
            self.map: mmap.mmap | None = None
            if self.size:
                self.map = mmap.mmap(fd, self.size, access=mmap.ACCESS_READ)
        finally:
            os.close(fd)

    def read_prefix(self, limit: int) -> bytes:
        return bytes(self.map[: min(limit, self.size)]) if self.map is not None else b""

    def array(self, dtype: np.dtype, count: int, offset: int) -> np.ndarray:
        if count == 0 or self.map is None:
            return np.zeros(0, dtype)
        array = np.frombuffer(self.map, dtype=dtype, count=count, offset=offset)
        return array


def _read_header(directory_fd: int, root: Path, max_header_bytes: int) -> tuple[bytes, tuple]:
    path = str(root / spec.HEADER_FILE)
    try:
        fd = os.open(spec.HEADER_FILE, _OPEN_FLAGS, dir_fd=directory_fd)
    except FileNotFoundError as error:
        raise errors.DatasetNotFoundError(
            f"no {spec.HEADER_FILE}: not a detfmt dataset (or not finished writing)",
            path=path) from error
    except OSError as error:
        raise errors.UnsafePathError(f"cannot open header ({error.strerror})", path=path) from error
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise errors.UnsafePathError("header.json is not a regular file", path=path)
        if info.st_size > max_header_bytes:
            raise errors.HeaderError(f"header is {info.st_size} bytes; the limit is "
                                     f"{max_header_bytes}", rule="HEADER_TOO_LARGE", path=path)
        data = os.read(fd, info.st_size + 1)
        if len(data) != info.st_size:
            raise errors.DatasetChangedError("header.json changed size while being read",
                                             path=path)
        return data, (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)
    finally:
        os.close(fd)


_POOL: ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()
_PARALLEL_BYTES = 4 << 20  # below this a batch is copied in the calling thread


def _pool() -> ThreadPoolExecutor:
    """One shared pool of copy threads for every dataset in the process."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1),
                                       thread_name_prefix="detfmt-batch")
        return _POOL


def _thread_count(requested: int | None, nbytes: int, samples: int) -> int:
    if requested is not None:
        if not isinstance(requested, int) or requested < 1:
            raise errors.UsageError(f"num_threads must be a positive int, got {requested!r}")
        return min(requested, max(1, samples), min(8, os.cpu_count() or 1))
    if nbytes < _PARALLEL_BYTES:
        return 1
    return min(max(1, samples), min(8, os.cpu_count() or 1))


class Dataset(Sequence):
    """An opened detfmt dataset. Use :func:`detfmt.open`.

    Thread-safe for reading. Pickling sends only the path and the files' identity; the receiver
    re-opens the dataset and raises `DatasetChangedError` if it was replaced in between.
    """

    def __init__(self, path: str | os.PathLike[str], *,
                 max_header_bytes: int = spec.MAX_HEADER_BYTES) -> None:
        root = Path(path)
        self.path = root
        self._max_header_bytes = max_header_bytes
        try:
            directory_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
        except FileNotFoundError as error:
            raise errors.DatasetNotFoundError("no such dataset directory", path=root) from error
        except NotADirectoryError as error:
            raise errors.NotDetfmtError("a detfmt dataset is a directory", path=root) from error
        try:
            self._open(directory_fd, root)
        finally:
            os.close(directory_fd)

    # ------------------------------------------------------------------ opening

    def _open(self, directory_fd: int, root: Path) -> None:
        header_path = str(root / spec.HEADER_FILE)
        data, header_identity = self._read_header_bytes(directory_fd, root)
        header = validate.parse_header(data, header_path)
        self.header: Header = header
        self._identities = {spec.HEADER_FILE: header_identity}
        members: dict[str, _Member] = {}
        for name in validate.expected_files(header):
            member = self._open_member(directory_fd, root, name)
            members[name] = member
            self._identities[name] = member.identity
            declared = header.files[name].size
            if member.size != declared:
                rule = "BLOB_SIZE" if name == spec.BLOB_FILE else "FILE_SIZE"
                raise errors.LayoutError(f"{name} has {member.size} bytes, header says {declared}",
                                         rule=rule, path=member.path)
        self._members = members
        arrays = {name: self._map_npy(members[name], dtype, shape)
                  for name, (dtype, shape) in validate.expected_arrays(header).items()}
        self.index: np.ndarray = arrays[spec.INDEX_FILE]
        blob = members[spec.BLOB_FILE]
        self.counts: np.ndarray = arrays[spec.COUNTS_FILE]
        for violation in validate.check_index_tail(self.index, header, blob.size, blob.path):
            raise violation.to_error()
        # SPEC §12 step 4: the string tails are O(1) open checks, before any index record
        self._strings: dict[str, tuple[np.ndarray, _Member]] = {}
        for name in header.image_fields:
            if name in spec.STRING_FIELDS:
                offsets = arrays[f"{name}.offsets.npy"]
                text = members[f"{name}.bin"]
                if int(offsets[0]) != 0 or int(offsets[-1]) != text.size:  # O(1) at open;
                    raise errors.LayoutError(  # each string is checked when read
                        f"string offsets must run from 0 to {text.size}", rule="OFFSETS_BOUNDS",
                        path=members[f"{name}.offsets.npy"].path)
                self._strings[name] = (offsets, text)
        # The index and counts are validated in chunks on first use (the first one now), so
        # opening a dataset of millions of samples stays O(1); no record is used unchecked.
        chunks = -(-len(self.index) // validate.INDEX_CHUNK)
        self._chunk_ok = np.zeros(chunks, dtype=bool)
        self._validate_chunk(0)
        self.boxes: np.ndarray = arrays[spec.BOXES_FILE]
        self.classes: np.ndarray = arrays[spec.CLASSES_FILE]
        self.box_fields: dict[str, np.ndarray] = {
            f.name: arrays[spec.box_field_file(f.name)] for f in header.box_fields}
        self.image_fields: dict[str, np.ndarray] = {
            name: arrays[f"{name}.npy"] for name in header.image_fields
            if name not in spec.STRING_FIELDS}
        self._blob = blob.array(np.dtype(np.uint8), blob.size, 0)
        self._offsets = self.index["offset"]
        self._nbytes = self.index["nbytes"]
        self._heights = self.index["height"]
        self._widths = self.index["width"]
        self._codecs = self.index["codec"]
        self._num_classes = header.num_classes
        self._sizes: np.ndarray | None = None

    # Hooks for other containers of the same member files: a 1.1 packed shard
    # (detfmt.shard.packed) serves header.json and the members from slices of one mapping.

    def _read_header_bytes(self, directory_fd: int, root: Path) -> tuple[bytes, tuple]:
        return _read_header(directory_fd, root, self._max_header_bytes)

    def _open_member(self, directory_fd: int, root: Path, name: str) -> _Member:
        return _Member(directory_fd, root, name)

    def _validate_chunk(self, chunk: int) -> None:
        if chunk >= len(self._chunk_ok) or self._chunk_ok[chunk]:
            return
        start = chunk * validate.INDEX_CHUNK
        stop = start + validate.INDEX_CHUNK
        blob = self._members[spec.BLOB_FILE]
        for violation in validate.check_index(self.index, self.header, blob.size, blob.path,
                                              start, stop, self.counts[start:stop],
                                              self._members[spec.COUNTS_FILE].path):
            raise violation.to_error()
        self._chunk_ok[chunk] = True  # idempotent, so a race between threads is harmless

    def _ensure_valid(self, indices: np.ndarray) -> None:
        if len(self._chunk_ok) <= 1:
            return
        chunks = np.unique(indices // validate.INDEX_CHUNK)
        for chunk in chunks[~self._chunk_ok[chunks]]:
            self._validate_chunk(int(chunk))

    def validate_index(self) -> None:
        """Validate every index record and count now (``open`` does it lazily, chunk by chunk)."""
        for chunk in range(len(self._chunk_ok)):
            self._validate_chunk(chunk)

    def _map_npy(self, member: _Member, dtype: str, shape: tuple[int, ...]) -> np.ndarray:
        header = _npy.parse_header(member.read_prefix(spec.MAX_NPY_HEADER_BYTES), member.size,
                                   member.path)
        wanted = spec.INDEX_DTYPE if dtype == "index" else np.dtype(dtype)
        wanted_descr = np.lib.format.dtype_to_descr(wanted)
        if header.descr != wanted_descr:
            raise errors.LayoutError(f"{member.name} has dtype {header.descr!r}, expected "
                                     f"{wanted_descr!r}", rule="NPY_DTYPE", path=member.path)
        if header.shape != shape:
            rule = "COUNT_MISMATCH" if header.shape[:1] != shape[:1] else "NPY_SHAPE"
            raise errors.LayoutError(f"{member.name} has shape {list(header.shape)}, the header "
                                     f"implies {list(shape)}", rule=rule, path=member.path)
        _npy.check_layout(header, member.size, member.path)
        count = 1
        for dim in shape:
            count *= dim
        return member.array(wanted, count, header.data_offset).reshape(shape)

    # ------------------------------------------------------------------ access

    def __len__(self) -> int:
        return self.header.num_samples

    @property
    def class_names(self) -> list[str]:
        return self.header.class_names

    @property
    def sizes(self) -> np.ndarray:
        """(N, 2) int32 stored (height, width) of every image."""
        if self._sizes is None:
            self.validate_index()
            self._sizes = np.stack([self._heights, self._widths], axis=1).astype(np.int32)
        return self._sizes

    @property
    def fixed_images(self) -> np.ndarray | None:
        """The whole blob as a read-only (N, H, W, 3) array when the header fixes the shape."""
        shape = self.header.image.fixed_shape
        if shape is None or not len(self):
            return None
        h, w, c = shape
        stride = spec.align_up(h * w * c)
        return np.lib.stride_tricks.as_strided(
            self._blob, shape=(len(self), h, w, c), strides=(stride, w * c, c, 1), writeable=False)

    def _check_index(self, index: int) -> int:
        i = normalize_index(index, len(self), self.path)
        chunk = i // validate.INDEX_CHUNK
        if not self._chunk_ok[chunk]:
            self._validate_chunk(chunk)
        return i

    def image_shape(self, index: int) -> tuple[int, int, int]:
        i = self._check_index(index)
        return int(self._heights[i]), int(self._widths[i]), spec.CHANNELS

    def payload(self, index: int) -> memoryview:
        """The stored bytes of one sample (a zero-copy view)."""
        i = self._check_index(index)
        start = int(self._offsets[i])
        return memoryview(self._blob[start : start + int(self._nbytes[i])])

    def codec(self, index: int) -> str:
        return spec.CODEC_NAMES[int(self._codecs[self._check_index(index)])]

    def decode_into(self, index: int, out: np.ndarray) -> None:
        """Decode sample ``index`` into ``out``, an (H, W, 3) uint8 array or view."""
        i = self._check_index(index)
        h, w = int(self._heights[i]), int(self._widths[i])
        if out.shape != (h, w, 3) or out.dtype != np.uint8:
            raise errors.UsageError(f"out must be uint8 {(h, w, 3)}, got {out.dtype} {out.shape}")
        start = int(self._offsets[i])
        payload = self._blob[start : start + int(self._nbytes[i])]
        _codecs.decode_into(payload, int(self._codecs[i]), out, path=self.blob_path, index=i)

    def decode_payload_into(self, index: int, payload: Any, out: np.ndarray) -> None:
        """Decode ``payload``, the stored bytes of sample ``index`` that the caller read itself
        (for example with ``os.preadv`` at ``index["offset"]``), into ``out`` (H, W, 3) uint8.

        The codec comes from the index; the checks and the typed `DecodeError` naming the sample
        are those of `decode_into`. ``out`` may be a strided view (a slot of a padded batch).
        """
        i = self._check_index(index)
        _codecs.decode_into(payload, int(self._codecs[i]), out, path=self.blob_path, index=i)

    @property
    def blob(self) -> np.ndarray:
        """images.bin as a flat, read-only uint8 array: a zero-copy view of the reader's own
        mapping (the bytes its index checks covered). Sample i is
        ``blob[index["offset"][i] : index["offset"][i] + index["nbytes"][i]]``; raw payloads are
        the (H, W, 3) pixels. Loaders copy from it directly; it stays valid while referenced,
        even after `close`."""
        view = self._blob.view()
        view.flags.writeable = False
        return view

    @property
    def blob_path(self) -> str:
        """Where images.bin lives, for messages (``<shard>#images.bin`` inside a packed shard)."""
        return self._members[spec.BLOB_FILE].path

    def read_image(self, index: int) -> np.ndarray:
        """The image of one sample: a read-only zero-copy view for raw, a new array otherwise."""
        i = self._check_index(index)
        h, w = int(self._heights[i]), int(self._widths[i])
        if int(self._codecs[i]) == spec.CODEC_RAW:
            start = int(self._offsets[i])
            return self._blob[start : start + h * w * 3].reshape(h, w, 3)
        out = np.empty((h, w, 3), np.uint8)
        self.decode_into(i, out)
        return out

    def string_field(self, name: str, index: int) -> str:
        offsets, member = self._strings[name]
        i = self._check_index(index)
        start, end = int(offsets[i]), int(offsets[i + 1])
        if not start <= end <= member.size:
            raise errors.LayoutError(f"{name} offsets [{start}, {end}) are decreasing or past the "
                                     f"{member.size}-byte file", rule="OFFSETS_NON_MONOTONIC",
                                     path=str(self.path / f"{name}.offsets.npy"), index=i)
        if end - start > spec.MAX_STRING_BYTES:
            raise errors.LayoutError(f"{name} is {end - start} bytes, over the "
                                     f"{spec.MAX_STRING_BYTES}-byte limit", rule="LIMIT_EXCEEDED",
                                     path=str(self.path / f"{name}.offsets.npy"), index=i)
        try:
            return member.map[start:end].decode("utf-8") if member.map is not None else ""
        except UnicodeDecodeError as error:
            raise errors.LabelError(f"{name} is not valid UTF-8", rule="IMAGE_FIELD",
                                    path=member.path, index=i) from error

    def __getitem__(self, index: int) -> Sample:  # type: ignore[override]
        if isinstance(index, slice):
            raise errors.UsageError("use ds.batch(indices) to read several samples")
        i = self._check_index(index)
        count = int(self.counts[i])
        boxes = np.array(self.boxes[i, :count])
        classes = np.array(self.classes[i, :count])
        fields_ = {name: np.array(values[i, :count]) for name, values in self.box_fields.items()}
        self.check_labels(np.array([i]), boxes[None], classes[None], np.array([count]),
                                 {name: value[None] for name, value in fields_.items()})
        for name, values in self.image_fields.items():
            fields_[name] = np.array(values[i])
        for name in self._strings:
            fields_[name] = self.string_field(name, i)
        return Sample(index=i, image=self.read_image(i), boxes=boxes, classes=classes,
                      fields=fields_)

    def check_labels(self, indices: np.ndarray, boxes: np.ndarray, classes: np.ndarray,
                     counts: np.ndarray, box_fields: dict[str, np.ndarray] | None = None) -> None:
        """Check the labels of samples ``indices`` as read into a batch; raise the first
        violation as the reader's typed error (`LabelError`: box invalid or outside the image,
        class out of range, padding not exact), naming this dataset's file and the sample.

        ``boxes`` (B, M', 4), ``classes`` (B, M') and each ``box_fields`` value (B, M') hold
        the rows of those samples trimmed or padded to any M' >= the largest of ``counts`` (B,).
        `batch` and ``ds[i]`` run this check themselves; loaders that gather labels on their own
        call it once per batch.
        """
        indices = np.asarray(indices, dtype=np.int64)
        for violation in self._label_violations(indices, boxes, classes, counts,
                                                box_fields or {}):
            raise violation.to_error()

    def _label_violations(self, indices, boxes, classes, counts, box_fields):
        paths = (self._members[spec.BOXES_FILE].path, self._members[spec.CLASSES_FILE].path)
        return validate.check_labels(
            boxes=boxes, classes=classes, counts=counts, heights=self._heights[indices],
            widths=self._widths[indices], num_classes=self._num_classes, indices=indices,
            paths=paths,
            box_fields={name: (self._members[spec.box_field_file(name)].path, value)
                        for name, value in box_fields.items()},
        )

    def iter_label_violations(self, block: int = 4096) -> Iterator[validate.Violation]:
        """Check the labels of every sample, ``block`` samples at a time (bounded memory)."""
        n = len(self)
        for start in range(0, n, block):
            rows = np.arange(start, min(n, start + block))
            yield from self._label_violations(
                rows, self.boxes[rows], self.classes[rows], self.counts[rows],
                {name: values[rows] for name, values in self.box_fields.items()})

    def batch(self, indices: Sequence[int] | np.ndarray, out: np.ndarray | None = None,
              pad_value: int | None = 0, num_threads: int | None = None) -> NumpyBatch:
        """Gather samples into one padded batch.

        Labels are checked before any pixel is copied; images are copied (or decoded) one
        contiguous sample at a time, split over threads when the batch is large (numpy copies and
        the decoders release the GIL).

        Args:
            indices: sample indices (any order, repeats allowed).
            out: optional reusable uint8 buffer: a flat array of at least B*Hmax*Wmax*3 bytes, or
                an array of exactly (B, Hmax, Wmax, 3). Images are written into it, no allocation.
            pad_value: value of the pixels outside each image's valid region; None leaves them
                as they are (faster; ``sizes`` tells each image's valid region).
            num_threads: threads copying images; None picks up to the CPU count for batches of
                at least 4 MiB, 1 copies in the calling thread.
        """
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        n = len(self)
        if idx.size and (idx.min() < -n or idx.max() >= n):
            raise SampleIndexError(f"batch index out of range for {n} samples", path=self.path)
        idx = np.where(idx < 0, idx + n, idx)
        self._ensure_valid(idx)
        heights = self._heights[idx].astype(np.int64)
        widths = self._widths[idx].astype(np.int64)
        b = idx.size
        counts = self.counts[idx].astype(np.int64)
        m = int(counts.max()) if b else 0
        boxes = self.boxes[idx, :m] if m else np.zeros((b, 0, 4), np.float32)
        classes = self.classes[idx, :m] if m else np.zeros((b, 0), np.int32)
        fields_ = {name: (values[idx, :m] if m else np.zeros((b, 0), values.dtype))
                   for name, values in self.box_fields.items()}
        self.check_labels(idx, boxes, classes, counts, fields_)
        hmax = int(heights.max()) if b else 0
        wmax = int(widths.max()) if b else 0
        images = self._batch_buffer(out, b, hmax, wmax)
        rows = list(zip(range(b), idx.tolist(), heights.tolist(), widths.tolist(),
                        self._offsets[idx].tolist(), self._codecs[idx].tolist(), strict=True))
        threads = _thread_count(num_threads, images.nbytes, b)
        if threads > 1:
            parts = [rows[k::threads] for k in range(threads)]
            list(_pool().map(lambda part: self._fill(images, part, pad_value), parts))
        else:
            self._fill(images, rows, pad_value)
        mask = np.arange(m) < counts[:, None]
        sizes = np.stack([heights, widths], axis=1).astype(np.int32)
        return NumpyBatch(images=images, sizes=sizes, boxes=np.ascontiguousarray(boxes),
                          classes=np.ascontiguousarray(classes), mask=mask, indices=idx,
                          fields=fields_)

    def _fill(self, images: np.ndarray, rows: list[tuple[int, ...]], pad_value: int | None
              ) -> None:
        """Copy or decode validated samples into their batch slots and pad the rest."""
        fixed = self.fixed_images
        blob = self._blob
        hmax, wmax = images.shape[1], images.shape[2]
        for j, i, h, w, start, codec in rows:
            if fixed is not None:  # one contiguous copy per sample, no decode dispatch
                np.copyto(images[j], fixed[i])
                continue
            if codec == spec.CODEC_RAW:  # validated record: one strided copy, no dispatch
                np.copyto(images[j, :h, :w], blob[start : start + h * w * 3].reshape(h, w, 3))
            else:
                self.decode_into(i, images[j, :h, :w])
            if pad_value is None:
                continue
            if h < hmax:
                images[j, h:] = pad_value
            if w < wmax:
                images[j, :h, w:] = pad_value

    def batch_buffer(self, batch_size: int) -> np.ndarray:
        """A reusable, page-aligned ``out=`` buffer for batches of up to ``batch_size`` samples.

        Prefer it to ``np.empty``: a large ``np.empty`` starts 16 bytes into a page, which makes
        copies from the 64-byte aligned payloads several times slower (4K aliasing).
        """
        return _buffers.batch_buffer(self.sizes, batch_size)

    @staticmethod
    def _batch_buffer(out: np.ndarray | None, b: int, h: int, w: int) -> np.ndarray:
        shape = (b, h, w, 3)
        if out is None:
            return _buffers.aligned_empty(shape)  # np.empty's 16-byte offset copies 3x slower
        if out.dtype != np.uint8:
            raise errors.UsageError(f"out must be a uint8 buffer, got {out.dtype}")
        if out.shape == shape:
            return out
        need = b * h * w * 3
        if out.ndim != 1 or not out.flags.c_contiguous or out.size < need:
            raise errors.UsageError(f"out must be a flat contiguous uint8 buffer of at least "
                                    f"{need} bytes, or exactly {shape}; got {out.shape}")
        return out[:need].reshape(shape)

    # ------------------------------------------------------------------ lifecycle

    def check(self) -> None:
        """Raise `DatasetChangedError` if any file was replaced or truncated since opening.

        Committed files are never modified in place, so a changed identity means someone replaced
        the dataset (this mapping still reads the old, intact files) or damaged it.
        """
        for name, identity in self._identities.items():
            path = self.path / name
            try:
                info = os.stat(path, follow_symlinks=False)
            except OSError as error:
                raise errors.DatasetChangedError(f"{name} disappeared", path=path) from error
            if (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns) != identity:
                raise errors.DatasetChangedError(f"{name} was replaced or modified since open",
                                                 path=path)

    @property
    def generation(self) -> tuple:
        """The identity of every member file, as captured at open."""
        return tuple(sorted(self._identities.items()))

    def close(self) -> None:
        """Drop the mappings (arrays already handed out keep them alive)."""
        self._members = {}

    def __enter__(self) -> Dataset:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __reduce__(self):
        return (_reopen, (str(self.path), self._max_header_bytes, self.generation))

    def __repr__(self) -> str:
        return (f"detfmt.Dataset({str(self.path)!r}, samples={len(self)}, "
                f"classes={self.header.num_classes}, max_boxes={self.header.max_boxes})")


def _reopen(path: str, max_header_bytes: int, generation: tuple) -> Dataset:
    dataset = Dataset(path, max_header_bytes=max_header_bytes)
    if dataset.generation != generation:
        raise errors.DatasetChangedError("the dataset was replaced since it was pickled",
                                         path=path)
    return dataset


def open_dataset(path: str | os.PathLike[str], *, max_header_bytes: int = spec.MAX_HEADER_BYTES,
                 **sharded_options: Any) -> Dataset:
    """Open a detfmt dataset for reading (cheap structural checks; see ``verify`` for all).

    A 1.1 sharded root (a URL, or a directory with manifest.json) opens as a
    ``detfmt.shard.ShardedDataset`` with the same ``ds[i]`` / ``ds.batch`` API; ``sharded_options``
    (storage_options, cache_dir, cache_limit, max_open) apply to it only. A directory holding
    both manifest.json and header.json is refused (``ROOT_LAYOUT``, SPEC.md S-1).
    """
    text = os.fspath(path)
    if "://" in text or os.path.lexists(os.path.join(text, "manifest.json")):  # any entry
        from detfmt.shard.manifest import check_root_layout
        from detfmt.shard.sharded import open_sharded

        if "://" not in text:
            check_root_layout(text)  # S-1, before anything else is read

        return open_sharded(path, **sharded_options)  # type: ignore[return-value]
    if sharded_options:
        raise errors.UsageError(f"options {sorted(sharded_options)} apply to sharded datasets only")
    return Dataset(path, max_header_bytes=max_header_bytes)
