"""``detfmt.write``: stream samples into a new dataset and publish it atomically.

Memory stays bounded whatever N is. The maximum box count M is only known at the end, so labels
are spooled flat (K boxes per sample) into the temporary directory and padded to (N, M) in
chunks when the stream ends: a cheap second pass over the labels only, never over the images.

Durability order: every file is fsynced as it is closed, then the temporary directory, then it is
renamed into place (renameat2 RENAME_NOREPLACE for a new target, RENAME_EXCHANGE to replace an
existing dataset in one step), then the parent directory is fsynced. A crash at any point leaves
the target absent, or the old dataset, or the new one; never a partial dataset.
"""

from __future__ import annotations

import collections
import errno
import json
import multiprocessing
import os
import sys
import time
import warnings
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from detfmt import _io, _json, _npy, errors, spec
from detfmt._prepare import Options, Prepared, prepare
from detfmt.schema import ArrayInfo, BoxField, ClassInfo, FileInfo, Header, ImageInfo

__all__ = ["WriteReport", "cleanup", "write"]

_PAD = bytes(spec.ALIGNMENT)
_CHUNK_BYTES = 64 << 20  # padding pass works on chunks of about this many bytes
_IMAGE_FIELDS = ("orig_size", "scale_offset", "source_id", "file_name")


@dataclass
class WriteReport:
    """What a write produced."""

    path: Path
    num_samples: int
    num_boxes: int
    max_boxes: int
    codecs: dict[str, int]
    blob_bytes: int
    total_bytes: int
    clipped_boxes: int
    seconds: float
    extras: dict[str, Any] = field(default_factory=dict)


def _class_infos(classes: Sequence[Any]) -> list[ClassInfo]:
    infos = []
    for position, item in enumerate(classes):
        if isinstance(item, ClassInfo):
            infos.append(item)
        elif isinstance(item, str):
            infos.append(ClassInfo(name=item))
        elif isinstance(item, Mapping) and "name" in item:
            infos.append(ClassInfo(name=str(item["name"]), source_id=item.get("source_id")))
        else:
            raise errors.UsageError(f"classes[{position}] must be a name, a ClassInfo or a "
                                    f"mapping with 'name', got {item!r}")
    try:
        infos = msgspec.convert([msgspec.to_builtins(info) for info in infos], list[ClassInfo])
    except msgspec.ValidationError as error:
        raise errors.UsageError(f"invalid classes: {error}") from error
    names = [info.name for info in infos]
    if len(set(names)) != len(names):
        raise errors.UsageError("class names must be unique")
    if len(infos) > spec.MAX_CLASSES:
        raise errors.UsageError(f"at most {spec.MAX_CLASSES} classes")
    return infos


def _options(classes: list[ClassInfo], codec: str, max_side: int | None,
             fixed_size: tuple[int, int] | int | None, clip: bool,
             box_fields: Mapping[str, Any] | None, jpeg_quality: int, zstd_level: int,
             exif_transpose: bool) -> Options:
    if codec not in spec.CODEC_IDS:
        raise errors.UsageError(f"codec must be one of {sorted(spec.CODEC_IDS)}, got {codec!r}")
    if max_side is not None and not (isinstance(max_side, int) and 1 <= max_side <= spec.MAX_SIDE):
        raise errors.UsageError(f"max_side must be an int in 1..{spec.MAX_SIDE}, got {max_side!r}")
    if isinstance(fixed_size, int):
        fixed_size = (fixed_size, fixed_size)
    if fixed_size is not None:
        fixed_size = tuple(fixed_size)
        if len(fixed_size) != 2 or not all(isinstance(v, int) and 1 <= v <= spec.MAX_SIDE
                                           for v in fixed_size):
            raise errors.UsageError(f"fixed_size must be (height, width), got {fixed_size!r}")
    if not 1 <= jpeg_quality <= 100:
        raise errors.UsageError("jpeg_quality must be in 1..100")
    fields = []
    for name, dtype in (box_fields or {}).items():
        descr = np.lib.format.dtype_to_descr(np.dtype(dtype))
        if descr not in spec.BOX_FIELD_DTYPES:
            raise errors.UsageError(f"box field {name!r}: dtype must be uint8, int32 or float32")
        try:
            BoxField(name=name, dtype=descr)
            msgspec.convert({"name": name, "dtype": descr}, BoxField)
        except msgspec.ValidationError as error:
            raise errors.UsageError(f"invalid box field name {name!r}: {error}") from error
        if name in _IMAGE_FIELDS or name in ("image", "boxes", "classes"):
            raise errors.UsageError(f"box field name {name!r} is reserved")
        fields.append((name, descr))
    return Options(codec=codec, num_classes=len(classes), max_side=max_side,
                   fixed_size=fixed_size, clip=clip, box_fields=tuple(fields),
                   jpeg_quality=jpeg_quality, zstd_level=zstd_level,
                   exif_transpose=exif_transpose)


class _Spool:
    """A flat temporary array file, appended sample by sample."""

    def __init__(self, path: Path, dtype: str) -> None:
        self.path = path
        self.dtype = np.dtype(dtype)
        self.file = _io.OutputFile(str(path))
        self.count = 0

    def append(self, values: np.ndarray) -> None:
        data = np.ascontiguousarray(values, dtype=self.dtype)
        if data.size:
            self.file.write(data.view(np.uint8).reshape(-1))
            self.count += data.size

    def flush(self) -> None:
        self.file.flush()

    def finish(self) -> None:
        self.flush()
        self.file.sync_and_close()

    def read_chunks(self, counts_chunks: Iterable[int]) -> Iterable[np.ndarray]:
        """Yield consecutive slices holding the given numbers of elements."""
        with open(self.path, "rb") as handle:
            for count in counts_chunks:
                data = handle.read(count * self.dtype.itemsize)
                yield np.frombuffer(data, self.dtype)


class _DatasetBuilder:
    """Appends prepared samples into files of a temporary directory, then finalizes them."""

    def __init__(self, directory: Path, options: Options) -> None:
        self.directory = directory
        self.options = options
        self.blob = _io.OutputFile(str(directory / spec.BLOB_FILE))
        spool = directory / ".spool"
        _io.mkdir(str(spool))
        self.spool_dir = spool
        self.index = _Spool(spool / "index", "V48")
        self.counts = _Spool(spool / "counts", "<i4")
        self.boxes = _Spool(spool / "boxes", "<f4")
        self.classes = _Spool(spool / "classes", "<i4")
        self.fields = {name: _Spool(spool / f"box_{name}", dtype)
                       for name, dtype in options.box_fields}
        self.orig_size = _Spool(spool / "orig_size", "<u4")
        self.scale_offset = _Spool(spool / "scale_offset", "<f8")
        self.source_id = _Spool(spool / "source_id", "<i8")
        self.names = _io.OutputFile(str(directory / "file_name.bin"))
        self.name_offsets = _Spool(spool / "file_name_offsets", "<u8")
        self.name_offsets.append(np.zeros(1, np.uint64))
        self.n = 0
        self.max_boxes = 0
        self.num_boxes = 0
        self.clipped = 0
        self.codec_counts: collections.Counter[str] = collections.Counter()
        self.shapes: set[tuple[int, int]] = set()
        self.record = np.zeros(1, spec.INDEX_DTYPE)
        self.files: dict[str, _io.OutputFile] = {}

    def append(self, item: Prepared) -> None:
        count = len(item.boxes)
        if self.n >= spec.MAX_SAMPLES:
            raise errors.UsageError(f"more than {spec.MAX_SAMPLES} samples")
        offset = self.blob.size
        nbytes = memoryview(item.payload).nbytes
        self.blob.write(item.payload)
        padding = spec.align_up(nbytes) - nbytes
        if padding:
            self.blob.write(_PAD[:padding])
        record = self.record
        record["offset"] = offset
        record["nbytes"] = nbytes
        record["decoded_nbytes"] = item.height * item.width * spec.CHANNELS
        record["checksum"] = item.checksum
        record["height"] = item.height
        record["width"] = item.width
        record["channels"] = spec.CHANNELS
        record["codec"] = item.codec
        self.index.append(record.view("V48"))
        self.counts.append(np.array([count], np.int32))
        self.boxes.append(item.boxes)
        self.classes.append(item.classes)
        for name, spool in self.fields.items():
            spool.append(item.box_fields[name])
        self.orig_size.append(np.array(item.orig_size, np.uint32))
        self.scale_offset.append(np.array(item.scale_offset, np.float64))
        self.source_id.append(np.array([item.source_id], np.int64))
        self.names.write(item.file_name.encode("utf-8"))
        self.name_offsets.append(np.array([self.names.size], np.uint64))
        self.n += 1
        self.max_boxes = max(self.max_boxes, count)
        self.num_boxes += count
        self.clipped += item.clipped
        self.codec_counts[spec.CODEC_NAMES[item.codec]] += 1
        if len(self.shapes) < 2:
            self.shapes.add((item.height, item.width))

    # ------------------------------------------------------------------ finalize

    def finalize(self, classes: list[ClassInfo], metadata: Mapping[str, str], max_side: int | None
                 ) -> Header:
        spools = [self.index, self.counts, self.boxes, self.classes, *self.fields.values(),
                  self.orig_size, self.scale_offset, self.source_id, self.name_offsets]
        for spool in spools:
            spool.finish()
        self._close(spec.BLOB_FILE, self.blob)
        self._close("file_name.bin", self.names)
        n, m = self.n, self.max_boxes
        arrays: dict[str, ArrayInfo] = {}
        self._copy_npy(spec.INDEX_FILE, self.index, spec.INDEX_DTYPE, (n,), arrays)
        self._copy_npy(spec.COUNTS_FILE, self.counts, np.dtype("<i4"), (n,), arrays)
        self._copy_npy("orig_size.npy", self.orig_size, np.dtype("<u4"), (n, 2), arrays)
        self._copy_npy("scale_offset.npy", self.scale_offset, np.dtype("<f8"), (n, 4), arrays)
        self._copy_npy("source_id.npy", self.source_id, np.dtype("<i8"), (n,), arrays)
        self._copy_npy("file_name.offsets.npy", self.name_offsets, np.dtype("<u8"), (n + 1,),
                       arrays)
        counts = np.fromfile(self.counts.path, np.int32)
        self._pad_npy(spec.BOXES_FILE, self.boxes, counts, 4, 0, arrays)
        self._pad_npy(spec.CLASSES_FILE, self.classes, counts, 1, spec.CLASS_PADDING, arrays)
        for name, spool in self.fields.items():
            self._pad_npy(spec.box_field_file(name), spool, counts, 1, 0, arrays)
        _io.remove_tree(self.spool_dir)
        codec = self.options.codec
        fixed = None
        if n and len(self.shapes) == 1 and codec == "raw":
            (h, w), = self.shapes
            fixed = (h, w, 3)
        from detfmt.version import __version__

        header = Header(
            format=spec.FORMAT_NAME, version=spec.FORMAT_VERSION, num_samples=n, max_boxes=m,
            classes=classes,
            image=ImageInfo(fixed_shape=fixed, max_side=max_side, codecs=dict(self.codec_counts)),
            files={name: FileInfo(size=f.size, xxh3_64=f.digest())
                   for name, f in sorted(self.files.items())},
            arrays=dict(sorted(arrays.items())),
            box_fields=[BoxField(name=name, dtype=dtype)
                        for name, dtype in self.options.box_fields],
            image_fields=list(_IMAGE_FIELDS),
            writer=f"detfmt-python {__version__}",
            metadata=dict(metadata),
        )
        encoded = json.dumps(msgspec.to_builtins(header), indent=2, ensure_ascii=False,
                             sort_keys=False).encode("utf-8") + b"\n"
        if len(encoded) > spec.MAX_HEADER_BYTES:
            raise errors.UsageError(f"the header would be {len(encoded)} bytes, over the "
                                    f"{spec.MAX_HEADER_BYTES}-byte limit (too many classes or "
                                    "metadata)")
        out = _io.OutputFile(str(self.directory / spec.HEADER_FILE))
        out.write(encoded)
        out.sync_and_close()
        return header

    def _close(self, name: str, output: _io.OutputFile) -> None:
        output.sync_and_close()
        self.files[name] = output

    def _copy_npy(self, name: str, spool: _Spool, dtype: np.dtype, shape: tuple[int, ...],
                  arrays: dict[str, ArrayInfo]) -> None:
        out = _io.OutputFile(str(self.directory / name))
        out.write(_npy.encode_header(dtype, shape))
        with open(spool.path, "rb") as handle:
            while chunk := handle.read(_CHUNK_BYTES):
                out.write(chunk)
        self._close(name, out)
        descr = np.lib.format.dtype_to_descr(dtype)
        arrays[name] = ArrayInfo(dtype=descr if isinstance(descr, str) else
                                 [tuple(f) for f in descr], shape=list(shape))

    def _pad_npy(self, name: str, spool: _Spool, counts: np.ndarray, width: int, fill: int,
                 arrays: dict[str, ArrayInfo]) -> None:
        """Write an (N, M[, width]) array from the flat spool, padding each row to M."""
        n, m = self.n, self.max_boxes
        shape = (n, m, width) if width > 1 else (n, m)
        out = _io.OutputFile(str(self.directory / name))
        out.write(_npy.encode_header(spool.dtype, shape))
        row_bytes = max(1, m * width * spool.dtype.itemsize)
        rows = max(1, _CHUNK_BYTES // row_bytes)
        starts = range(0, n, rows)
        sizes = [int(counts[s : s + rows].sum()) * width for s in starts]
        for start, flat in zip(starts, spool.read_chunks(sizes), strict=True):
            chunk_counts = counts[start : start + rows]
            block = np.full((len(chunk_counts), m, width), fill, spool.dtype)
            mask = np.arange(m) < chunk_counts[:, None]
            block[mask] = flat.reshape(-1, width)
            out.write(block.reshape(-1).view(np.uint8))
        self._close(name, out)
        arrays[name] = ArrayInfo(dtype=np.lib.format.dtype_to_descr(spool.dtype), shape=list(shape))

    def abandon(self) -> None:
        for output in [self.blob, self.names, *self.files.values()]:
            output.abandon()
        for spool in [self.index, self.counts, self.boxes, self.classes, *self.fields.values(),
                      self.orig_size, self.scale_offset, self.source_id, self.name_offsets]:
            spool.file.abandon()


def _prepare_in_worker(index: int, sample: Any, options: Options) -> Prepared:
    """`prepare` for a worker process: a raw payload is a memoryview, which cannot be pickled
    back to the parent, so it is returned as bytes."""
    item = prepare(index, sample, options)
    if isinstance(item.payload, memoryview):
        item.payload = item.payload.tobytes()
    return item


def _prepared_stream(samples: Iterable[Any], options: Options, workers: int
                     ) -> Iterable[Prepared]:
    """Prepare samples in order, in this process or in a bounded window of worker processes."""
    if workers <= 0:
        for i, sample in enumerate(samples):
            yield prepare(i, sample, options)
        return
    method = "fork" if "fork" in multiprocessing.get_all_start_methods() else None
    context = multiprocessing.get_context(method)
    pending: collections.deque[Future[Prepared]] = collections.deque()
    window = 4 * workers
    with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
        try:
            for i, sample in enumerate(samples):
                pending.append(pool.submit(_prepare_in_worker, i, sample, options))
                if len(pending) >= window:
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
        finally:
            for future in pending:
                future.cancel()


def _progress(progress: bool | None, total: int | None):
    if progress is None:
        progress = sys.stderr.isatty()
    if not progress:
        return None
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover - tqdm is a dependency
        return None
    return tqdm(total=total, unit="img", desc="detfmt write", leave=False)


def _check_target(target: Path, overwrite: bool) -> bool:
    """Return whether the target exists; refuse what must not be replaced."""
    if not os.path.lexists(target):
        return False
    if not overwrite:
        raise errors.TargetExistsError("target exists; pass overwrite=True to replace it",
                                       path=target)
    header = target / spec.HEADER_FILE
    try:
        if target.is_symlink() or not target.is_dir():
            raise ValueError("not a directory")
        with open(header, "rb") as handle:  # the one JSON profile (SPEC §5.6), as readers
            identity = _json.parse_json(handle.read(spec.MAX_HEADER_BYTES + 1), path=str(header),
                                        limit=spec.MAX_HEADER_BYTES, rule="HEADER_JSON"
                                        ).get("format")
    except (OSError, ValueError, AttributeError) as error:
        raise errors.TargetExistsError(
            "target exists and is not a detfmt dataset; refusing to replace it", path=target
        ) from error
    if identity != spec.FORMAT_NAME:
        raise errors.TargetExistsError(
            "target exists and is not a detfmt dataset; refusing to replace it", path=target)
    return True


def _os_error(error: OSError, target: Path, what: str) -> errors.WriteError:
    code = error.errno
    if code in (errno.EROFS, errno.EACCES, errno.EPERM):
        return errors.TargetNotWritableError(f"{what}: {error.strerror}", errno=code, path=target)
    return errors.WriteError(f"{what}: {error.strerror or error}", errno=code, path=target)


def write(
    samples: Iterable[Any],
    path: str | os.PathLike[str],
    *,
    classes: Sequence[str | ClassInfo | Mapping[str, Any]],
    codec: str = "raw",
    max_side: int | None = None,
    fixed_size: tuple[int, int] | int | None = None,
    clip: bool = False,
    box_fields: Mapping[str, Any] | None = None,
    overwrite: bool = False,
    workers: int = 0,
    jpeg_quality: int = 90,
    zstd_level: int = 3,
    exif_transpose: bool = True,
    progress: bool | None = None,
    metadata: Mapping[str, str] | None = None,
) -> WriteReport:
    """Write samples into a new detfmt dataset at ``path``, atomically.

    Args:
        samples: any iterable (a generator is fine) of mappings with ``image`` ((H, W, 3) uint8
            array, encoded JPEG/PNG bytes, or a file path), ``boxes`` ((K, 4) xyxy in that image's
            pixels), ``classes`` ((K,) ids into ``classes``), and optionally ``file_name``,
            ``source_id``, per-box fields named in ``box_fields``, and ``orig_size`` /
            ``scale_offset`` when the caller already resized the image.
        path: the dataset directory to create.
        classes: class names (or ClassInfo / {"name", "source_id"}) indexed by contiguous id.
        codec: ``raw`` (fastest to read), ``zstd`` (lossless, smaller), ``jpeg`` or ``png``.
        max_side: shrink images (aspect kept) so the long side is at most this; boxes follow.
        fixed_size: letterbox every image into (height, width) (pad 114); with ``raw`` the
            dataset gets a fixed shape and reads as one (N, H, W, 3) array.
        clip: clip boxes that stick out of the image instead of refusing them.
        box_fields: optional per-box fields, name -> dtype (uint8, int32 or float32).
        overwrite: replace an existing detfmt dataset (atomically); never a non-dataset path.
        workers: processes that decode, resize and encode (0: in this process).
        progress: show a progress bar (default: when stderr is a terminal).
        metadata: free-form string pairs stored in the header.

    Raises:
        InvalidSampleError: a sample is invalid (``index`` and ``rule`` say which and why).
        TargetExistsError, TargetLockedError, TargetNotWritableError, WriteError.
    """
    started = time.perf_counter()
    target = Path(os.path.abspath(os.fspath(path)))
    class_infos = _class_infos(classes)
    options = _options(class_infos, codec, max_side, fixed_size, clip, box_fields, jpeg_quality,
                       zstd_level, exif_transpose)
    meta = dict(metadata or {})
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in meta.items()):
        raise errors.UsageError("metadata must map strings to strings")
    if isinstance(samples, (str, bytes, os.PathLike)):
        raise errors.UsageError("samples must be an iterable of samples, not a path")
    if not isinstance(workers, int) or workers < 0:
        raise errors.UsageError("workers must be a non-negative int")
    try:
        os.makedirs(target.parent, exist_ok=True)
        lock = _io.lock_target(target)
    except BlockingIOError as error:
        raise errors.TargetLockedError("another writer is writing this target", path=target
                                       ) from error
    except OSError as error:
        raise _os_error(error, target, "cannot prepare the target") from error
    temp: Path | None = None
    builder: _DatasetBuilder | None = None
    bar = None
    try:
        exists = _check_target(target, overwrite)
        try:
            temp = _io.make_temp_dir(target)
        except OSError as error:
            raise _os_error(error, target, "cannot create the temporary directory") from error
        try:
            builder = _DatasetBuilder(temp, options)
            bar = _progress(progress, len(samples) if hasattr(samples, "__len__") else None)
            for item in _prepared_stream(samples, options, workers):
                builder.append(item)
                if bar is not None:
                    bar.update(1)
            header = builder.finalize(class_infos, meta, max_side)
            _validate_output(temp)
            _io.fsync_dir(str(temp))
            published = _identity(temp)
            try:
                _publish(temp, target, exists)
            except OSError as error:
                if isinstance(error, errors.DetfmtError) or _identity(target) != published:
                    raise
                # the switch happened; only making it durable failed: do not claim "untouched"
                raise errors.WriteError(
                    f"the new dataset is in place (the old one was replaced), but making the "
                    f"switch durable failed: {error.strerror or error}; it may not survive a "
                    "power loss", errno=error.errno, path=target) from error
            temp = None
        except OSError as error:
            if isinstance(error, errors.DetfmtError):  # already typed (e.g. TargetExistsError)
                raise
            raise _os_error(error, target, "write failed") from error
    except BaseException:
        if builder is not None:
            builder.abandon()
        raise
    finally:
        if bar is not None:
            bar.close()
        if temp is not None:
            try:
                _io.remove_tree(temp)
            except OSError:
                warnings.warn(f"could not remove the temporary directory {temp}; "
                              "`detfmt cleanup` removes it", stacklevel=2)
        _io.unlock(lock)
    total = sum(info.size for info in header.files.values())
    return WriteReport(path=target, num_samples=header.num_samples, num_boxes=builder.num_boxes,
                       max_boxes=header.max_boxes, codecs=dict(header.image.codecs),
                       blob_bytes=header.files[spec.BLOB_FILE].size, total_bytes=total,
                       clipped_boxes=builder.clipped, seconds=time.perf_counter() - started)


def _identity(path: Path) -> tuple[int, int] | None:
    """(device, inode) of a directory entry, None if there is none."""
    try:
        info = os.lstat(path)
    except OSError:
        return None
    return info.st_dev, info.st_ino


def _validate_output(directory: Path) -> None:
    """Run the reader's checks on what was just written, before anyone can see it."""
    from detfmt.reader import Dataset

    dataset = Dataset(directory)
    dataset.validate_index()
    for violation in dataset.iter_label_violations():
        error = violation.to_error()
        raise errors.WriteError(f"internal error, refusing to publish: {error}",
                                rule="WRITE_FAILED", path=directory) from error
    dataset.close()

def _publish(temp: Path, target: Path, exists: bool) -> None:
    if not exists:
        try:
            _io.publish_new(temp, target)
        except FileExistsError as error:
            raise errors.TargetExistsError("the target appeared while writing", path=target
                                           ) from error
        return
    if _io.publish_exchange(temp, target):
        try:
            _io.remove_tree(temp)  # temp now holds the old dataset
        except OSError:
            warnings.warn(f"the old dataset was replaced but {temp} could not be removed; "
                          "`detfmt cleanup` removes it", stacklevel=3)
        return
    old = temp.with_name(temp.name + "-old")
    warnings.warn("this platform has no atomic directory exchange; replacing in two renames",
                  stacklevel=3)
    _io.publish_replace(temp, target, old)
    _io.remove_tree(old)


def cleanup(directory: str | os.PathLike[str]) -> list[Path]:
    """Remove temporary directories left in ``directory`` by writers that died.

    A temporary directory whose target is still locked by a live writer is kept. Returns the
    removed paths.
    """
    removed = []
    root = Path(directory)
    for entry in sorted(root.glob(_io.TEMP_PREFIX + "*")):
        name = entry.name[len(_io.TEMP_PREFIX):]
        name = name.removesuffix("-old")  # the two-rename fallback parks the old dataset there
        target_name = name.rsplit("-", 2)[0] if name.count("-") >= 2 else name
        target = root / target_name
        try:
            lock = _io.lock_target(target)
        except BlockingIOError:
            continue
        try:
            _io.remove_tree(entry)
            removed.append(entry)
        finally:
            _io.unlock(lock)
    return removed
