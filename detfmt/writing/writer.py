"""``detfmt.write``: stream samples into a new dataset and publish it atomically; and
``build_shard``: stream them into one packed shard file, each byte written once.

Both run the same pipeline: options and limits checked before the first sample, samples
prepared (in workers only where they decode, resize or encode), appended to a sink (a temporary
directory, or the shard file), the label members written once at the end in bounded memory, and
the result checked with the reader before anyone can see it.

Durability order of `write`: every file is fsynced after its last write, then the temporary
directory, then it is renamed into place (renameat2 RENAME_NOREPLACE for a new target,
RENAME_EXCHANGE to replace an existing dataset in one step), then the parent is fsynced. A crash
at any point leaves the target absent, or the old dataset, or the new one; never a partial one.
Overwriting removes only the old dataset's own members, and refuses a target holding anything else.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import errno
import os
import socket
import stat
import sys
import time
import warnings
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from detfmt import errors, fileio
from detfmt.format import jsonprofile, spec
from detfmt.format import members as _members
from detfmt.format.schema import ClassInfo, Header
from detfmt.writing import processes
from detfmt.writing.blocks import Block
from detfmt.writing.builder import DatasetBuilder
from detfmt.writing.cleanup import CleanupReport, cleanup
from detfmt.writing.options import WriteOptions
from detfmt.writing.prepare import Prepared, Rules
from detfmt.writing.sink import DirectorySink, ShardSink
from detfmt.writing.stored import StoredSample, prepare_stored
from detfmt.writing.stream import Outcome, prepared_stream

__all__ = ["CleanupReport", "ShardBuild", "StoredSample", "WriteReport", "build_shard", "cleanup",
           "write", "write_stored"]

#: the normalised-box warning: images whose shorter side exceeds this many pixels, and how many
#: samples with boxes must agree before it fires early (it also fires at the end)
NORMALIZED_MIN_SIDE = 8
NORMALIZED_EVIDENCE = 16
_SKIP_EXAMPLES = 5


@dataclasses.dataclass
class WriteReport:
    """What a write produced (``skipped`` counts invalid samples left out by
    ``on_error="skip"``, by rule in ``skipped_rules``)."""

    path: Path
    num_samples: int
    num_boxes: int
    max_boxes: int
    codecs: dict[str, int]
    blob_bytes: int
    total_bytes: int
    clipped_boxes: int
    seconds: float
    skipped: int = 0
    skipped_rules: dict[str, int] = dataclasses.field(default_factory=dict)
    skipped_examples: list[str] = dataclasses.field(default_factory=list)
    extras: dict[str, Any] = dataclasses.field(default_factory=dict)

    def __repr__(self) -> str:
        parts = [f"{self.num_samples} samples", f"{self.num_boxes} boxes (max {self.max_boxes})",
                 "/".join(self.codecs) or "no images", _human(self.total_bytes),
                 f"{self.seconds:.2f} s"]
        if self.clipped_boxes:
            parts.append(f"{self.clipped_boxes} boxes clipped")
        if self.skipped:
            parts.append(f"{self.skipped} skipped")
        return f"WriteReport({str(self.path)!r}: {', '.join(parts)})"


@dataclasses.dataclass(frozen=True)
class ShardBuild:
    """One packed shard written by `build_shard`: the facts a manifest entry needs.

    ``bytes`` and ``xxh3_64`` describe the whole file; ``header`` is its inner 1.0 header (the
    schema: classes, box and image fields, codecs, fixed shape, max side).
    """

    path: Path
    num_samples: int
    num_boxes: int
    max_boxes: int
    bytes: int
    xxh3_64: str
    header: Header
    clipped_boxes: int = 0
    skipped: int = 0
    skipped_rules: dict[str, int] = dataclasses.field(default_factory=dict)

    def __repr__(self) -> str:
        return (f"ShardBuild({str(self.path)!r}: {self.num_samples} samples, "
                f"{_human(self.bytes)}, xxh3 {self.xxh3_64})")


def _human(size: int) -> str:
    value = float(size)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1000 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    return f"{size} B"  # pragma: no cover


# --------------------------------------------------------------------------- the public calls


def write(
    samples: Iterable[Any],
    path: str | os.PathLike[str],
    *,
    classes: Any,
    options: WriteOptions | None = None,
    overwrite: bool = False,
    workers: int = 0,
    progress: bool | None = None,
    **option_kwargs: Any,
) -> WriteReport:
    """Write samples into a new detfmt dataset at ``path``, atomically.

    Args:
        samples: any iterable (a generator is fine) of mappings with ``image`` ((H, W, 3) uint8
            array, PIL image, encoded JPEG/PNG bytes, or a file path), ``boxes`` ((K, 4) xyxy in
            that image's pixels), ``classes`` ((K,) ids into ``classes``), and optionally
            ``file_name``, ``source_id``, per-box fields named in ``box_fields``, and
            ``orig_size`` / ``scale_offset`` when the caller already resized the image.
        path: the dataset directory to create.
        classes: class names by contiguous id: a list (or numpy array) of names, ClassInfo or
            {"name", "source_id"} mappings, or a mapping {id: name}.
        options: a `WriteOptions`; or pass its fields as keywords (``codec="jpeg"``,
            ``max_side=640``, ``fixed_size``, ``clip``, ``box_fields``, ``jpeg_quality``,
            ``zstd_level``, ``exif_transpose``, ``metadata``, ``on_error``, ``labels``: the
            label layout, "auto" by default: ragged when one crowded image would make padding
            cost more than twice the boxes, SPEC §10.2).
        overwrite: replace an existing detfmt dataset (atomically); never a path holding
            anything but a dataset's own files.
        workers: processes that decode, resize and encode (0: in this process). Samples that
            need none of that (arrays stored raw at their size) are always written here.
        progress: show a progress bar (default: when stderr is a terminal).

    Raises:
        InvalidSampleError: a sample is invalid (``index`` and ``rule`` say which and why).
        UsageError: invalid options or classes (checked before any sample is read).
        TargetExistsError, TargetLockedError, TargetNotWritableError, WriteError.
    """
    started = time.perf_counter()
    options = _resolve_options(options, option_kwargs)
    class_infos = options.check_classes(classes)
    _check_call(samples, workers)

    def stream() -> Iterator[Outcome]:
        return prepared_stream(samples, Rules(options, len(class_infos)), workers)

    return _write_directory(stream, lambda: _progress(progress, samples), path, class_infos,
                            options, overwrite, started)


#: the write options that mean something for payloads copied as stored (the rest would re-encode)
STORED_OPTIONS = frozenset({"box_fields", "max_side", "metadata", "labels", "on_error", "clip"})


def write_stored(
    records: Iterable[StoredSample],
    path: str | os.PathLike[str],
    *,
    classes: Any,
    overwrite: bool = False,
    progress: bool | None = None,
    **options: Any,
) -> WriteReport:
    """Write samples whose images are already stored payloads into a new dataset at ``path``,
    copying each payload byte for byte (no decode, no re-encode).

    What filter, remap, merge and split share: the same builder, atomic publish, lock and
    reader self-check as `write`, streaming (one payload in memory at a time, so a copy of any
    size runs in bounded memory). Each record's payload must match its codec, height and width
    (checked without decoding, SPEC §9) and, when it carries the source's ``checksum``, hash to
    it; labels are checked as `write` checks them.

    Args:
        records: an iterable (a generator is fine) of `StoredSample`.
        path: the dataset directory to create.
        classes: class names by contiguous id (as `write` takes them).
        overwrite: replace an existing detfmt dataset (atomically).
        progress: show a progress bar (default: when stderr is a terminal).
        options: ``box_fields`` (every record's per-box fields, name -> dtype), ``max_side``
            (recorded in the header; every stored image must fit it), ``metadata``, ``labels``
            (layout: "auto" by default), ``on_error`` ("skip" leaves invalid records out) and
            ``clip``. Options that would re-encode (codec, fixed_size...) are refused.

    Raises:
        InvalidSampleError: a record is invalid (``index`` and ``rule`` say which and why).
        IntegrityError: a payload does not hash to its checksum (its source is damaged).
        UsageError, TargetExistsError, TargetLockedError, TargetNotWritableError, WriteError.
    """
    started = time.perf_counter()
    refused = sorted(set(options) - STORED_OPTIONS)
    if refused:
        raise errors.UsageError(f"write_stored copies payloads as stored: options {refused} "
                                f"do not apply (it takes {sorted(STORED_OPTIONS)})")
    resolved = WriteOptions.from_kwargs(codec="raw", **options)  # raw: the largest header
    class_infos = resolved.check_classes(classes)
    _check_call(records, 0)
    where = os.fspath(path)

    def stream() -> Iterator[Outcome]:
        rules = Rules(resolved, len(class_infos))
        for index, record in enumerate(records):
            try:
                yield index, prepare_stored(index, record, rules, where)
            except errors.InvalidSampleError as error:
                yield index, error

    return _write_directory(stream, lambda: _progress(progress, records), path, class_infos,
                            resolved, overwrite, started)


def _write_directory(stream: Callable[[], Iterator[Outcome]], bar: Callable[[], Any],
                     path: str | os.PathLike[str], class_infos: list[ClassInfo],
                     options: WriteOptions, overwrite: bool, started: float) -> WriteReport:
    """Lock the target, write the stream into a temporary directory, check it and publish it."""
    if not isinstance(overwrite, bool):
        raise errors.UsageError(f"overwrite must be True or False, got {overwrite!r}")
    target = Path(os.path.abspath(os.fspath(path)))
    with processes.terminating():
        lock = _take_lock(target)
        try:
            header, feed = _write_locked(stream, bar, target, class_infos, options, overwrite)
        finally:
            fileio.unlock(lock)
    feed.warn_at_end()
    total = sum(info.size for info in header.files.values())
    return WriteReport(path=target, num_samples=header.num_samples,
                       num_boxes=feed.builder.num_boxes, max_boxes=header.max_boxes,
                       codecs=dict(header.image.codecs),
                       blob_bytes=header.files[spec.BLOB_FILE].size, total_bytes=total,
                       clipped_boxes=feed.builder.clipped, seconds=time.perf_counter() - started,
                       skipped=feed.skipped, skipped_rules=dict(feed.skipped_rules),
                       skipped_examples=list(feed.examples))


def build_shard(
    samples: Iterable[Any],
    path: str | os.PathLike[str],
    *,
    classes: Any,
    options: WriteOptions | None = None,
    workers: int = 0,
    progress: bool | None = False,
    **option_kwargs: Any,
) -> ShardBuild:
    """Write samples as one packed shard file at ``path`` (a name that must not exist yet).

    The images stream into their final place as samples arrive; the other members are written
    once at the end and the file is fsynced once. Same samples, classes and options give the
    same bytes (S-14). On return the file is complete, fsynced and checked by the reader; on an
    error it has been removed (a SIGKILL can leave a partial file: give a temporary name and
    rename it into place). Options, classes and workers are those of `write`.

    Raises:
        InvalidSampleError, UsageError, TargetExistsError (``path`` exists), WriteError.
    """
    options = _resolve_options(options, option_kwargs)
    class_infos = options.check_classes(classes)
    _check_call(samples, workers)
    target = Path(os.path.abspath(os.fspath(path)))
    with processes.terminating():
        try:
            sink = ShardSink(str(target), _members.member_names(options.box_fields))
        except FileExistsError as error:
            raise errors.TargetExistsError("the shard file exists", path=target) from error
        except OSError as error:
            raise _os_error(error, target, "cannot create the shard file") from error
        builder: DatasetBuilder | None = None
        feed: _Feed | None = None
        try:
            builder = DatasetBuilder(sink, options)
            feed = _Feed(builder, options, _progress(progress, samples))
            feed.run(prepared_stream(samples, Rules(options, len(class_infos)), workers))
            header = builder.finalize(class_infos)
            _validate_shard(target)
        except BaseException as error:
            (builder or sink).abandon()
            if isinstance(error, OSError) and not isinstance(error, errors.DetfmtError):
                raise _os_error(error, target, "writing the shard failed") from error
            raise
        finally:
            if feed is not None:
                feed.close()
    assert builder is not None and feed is not None
    feed.warn_at_end()
    return ShardBuild(path=target, num_samples=header.num_samples, num_boxes=builder.num_boxes,
                      max_boxes=header.max_boxes, bytes=sink.size, xxh3_64=sink.digest,
                      header=header, clipped_boxes=builder.clipped, skipped=feed.skipped,
                      skipped_rules=dict(feed.skipped_rules))


# --------------------------------------------------------------------------- arguments


def _resolve_options(options: WriteOptions | None, kwargs: dict[str, Any]) -> WriteOptions:
    if options is None:
        return WriteOptions.from_kwargs(**kwargs)
    if not isinstance(options, WriteOptions):
        raise errors.UsageError(f"options must be a WriteOptions, got {type(options).__name__}")
    if kwargs:
        raise errors.UsageError(f"pass either options= or option keywords, not both "
                                f"(got {sorted(kwargs)})")
    return options


def _check_call(samples: Any, workers: Any) -> None:
    if isinstance(samples, (str, bytes, os.PathLike)):
        raise errors.UsageError("samples must be an iterable of samples, not a path")
    if isinstance(samples, dict) or not isinstance(samples, Iterable):
        raise errors.UsageError(f"samples must be an iterable of samples, got "
                                f"{type(samples).__name__}")
    if not isinstance(workers, int) or isinstance(workers, bool) or workers < 0:
        raise errors.UsageError(f"workers must be an int >= 0, got {workers!r}")


# --------------------------------------------------------------------------- the stream


class _Feed:
    """Appends the prepared stream to a builder: raises or skips invalid samples, warns once
    when every box looks normalised, drives the progress bar."""

    def __init__(self, builder: DatasetBuilder, options: WriteOptions, bar: Any) -> None:
        self.builder = builder
        self.skip = options.on_error == "skip"
        self.bar = bar
        self.skipped = 0
        self.skipped_rules: collections.Counter[str] = collections.Counter()
        self.examples: list[str] = []
        self.with_boxes = 0
        self.normalized = 0
        self.warned = False

    def run(self, stream: Iterator[Outcome]) -> None:
        append = self.builder.append
        # closed on any exit: an error or Ctrl-C stops the worker pool now, not whenever the
        # generator is collected (interpreter exit would wait for the pool's thread first)
        with contextlib.closing(stream):  # type: ignore[type-var]
            for _, result in stream:
                if isinstance(result, Prepared):
                    append(result)
                    if not self.warned and len(result.classes):
                        self._track_normalized(result.boxes, result.height, result.width)
                elif isinstance(result, Block):
                    self._append_block(result)
                    continue
                elif not self.skip:
                    raise result
                else:
                    self._skipped(result)
                if self.bar is not None:
                    self.bar.update(1)

    def _append_block(self, block: Block) -> None:
        self.builder.append_block(block)
        if not self.warned:
            for j in np.flatnonzero(block.counts)[:NORMALIZED_EVIDENCE].tolist():
                start = int(block.starts[j])
                self._track_normalized(block.boxes[start : start + int(block.counts[j])],
                                       int(block.sizes[j, 0]), int(block.sizes[j, 1]))
                if self.warned:
                    break
        if self.bar is not None:
            self.bar.update(len(block))

    def _skipped(self, error: errors.InvalidSampleError) -> None:
        self.skipped += 1
        self.skipped_rules[error.rule or "SAMPLE_INVALID"] += 1
        if len(self.examples) < _SKIP_EXAMPLES:
            self.examples.append(str(error))

    def _track_normalized(self, boxes: np.ndarray, height: int, width: int) -> None:
        """Stored boxes all within 0..1 on stored images of many pixels (the inputs were then
        within 0..1 too, or the image was shrunk to a few pixels)."""
        self.with_boxes += 1
        if float(boxes.max()) <= 1.0 and min(height, width) > NORMALIZED_MIN_SIDE:
            self.normalized += 1
        if self.with_boxes >= NORMALIZED_EVIDENCE:
            self._maybe_warn()
            self.warned = True  # decided: either warned now, or the boxes are in pixels

    def _maybe_warn(self) -> None:
        if self.with_boxes and self.normalized == self.with_boxes:
            warnings.warn(
                f"all boxes of the first {self.with_boxes} samples with boxes lie within 0..1 on "
                "images of many pixels: they look normalised, but detfmt stores boxes as pixel "
                "xyxy; multiply them by (width, height, width, height)",
                errors.NormalizedBoxesWarning, stacklevel=4)

    def warn_at_end(self) -> None:
        if not self.warned:
            self._maybe_warn()
            self.warned = True
        if self.skipped:
            rules = ", ".join(f"{rule}: {count}" for rule, count in
                              sorted(self.skipped_rules.items()))
            warnings.warn(f"skipped {self.skipped} invalid samples ({rules}); see the report's "
                          "skipped_examples", UserWarning, stacklevel=3)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _progress(progress: bool | None, samples: Any) -> Any:
    if progress is None:
        progress = sys.stderr.isatty()
    if not progress:
        return None
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover - tqdm is a dependency
        return None
    total = len(samples) if hasattr(samples, "__len__") else None
    return tqdm(total=total, unit="img", desc="detfmt write", leave=False)


# --------------------------------------------------------------------------- the 1.0 directory


def _write_locked(stream: Callable[[], Iterator[Outcome]], bar: Callable[[], Any], target: Path,
                  class_infos: list[ClassInfo], options: WriteOptions, overwrite: bool
                  ) -> tuple[Header, _Feed]:
    old_members = _existing_members(target, overwrite)
    try:
        temp: Path | None = fileio.make_temp_dir(target)
    except OSError as error:
        raise _os_error(error, target, "cannot create the temporary directory") from error
    builder = None
    feed = None
    try:
        try:
            builder = DatasetBuilder(DirectorySink(str(temp)), options)
            feed = _Feed(builder, options, bar())
            feed.run(stream())
            header = builder.finalize(class_infos)
            _validate_directory(temp)
            published = _identity(temp)
            try:
                _publish(temp, target, old_members)
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
        if feed is not None:
            feed.close()
        if temp is not None:
            try:
                fileio.remove_tree(temp)
            except OSError:
                warnings.warn(f"could not remove the temporary directory {temp}; "
                              "`detfmt cleanup` removes it", stacklevel=3)
    return header, feed


def _take_lock(target: Path) -> int:
    try:
        fileio.make_dirs(str(target.parent))
        return fileio.lock_target(target)
    except BlockingIOError as error:
        raise errors.TargetLockedError(_locked_message(target), path=target) from error
    except OSError as error:
        raise _os_error(error, target, "cannot prepare the target") from error


def _locked_message(target: Path) -> str:
    holder = fileio.lock_holder(target)
    if holder is None:
        return "another writer is writing this target"
    pid, host = holder
    if host == socket.gethostname() and not _alive(pid):
        return (f"the target is locked; its last writer (pid {pid} on {host}) is gone, so a "
                "process it started still holds the lock: end that process")
    return f"another writer (pid {pid} on {host}) is writing this target"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _existing_members(target: Path, overwrite: bool) -> list[str] | None:
    """None when the target is absent; else the names of the existing dataset's own files,
    refusing what must not be replaced (no overwrite, not a dataset, foreign files)."""
    if not os.path.lexists(target):
        return None
    if not overwrite:
        raise errors.TargetExistsError("target exists; pass overwrite=True to replace it",
                                       path=target)
    refuse = "target exists and is not a detfmt dataset; refusing to replace it"
    try:
        if target.is_symlink() or not target.is_dir():
            raise ValueError("not a directory")
        fd = os.open(target / spec.HEADER_FILE, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        try:  # the one JSON profile (SPEC §5.6), as readers parse it
            if not stat.S_ISREG(os.fstat(fd).st_mode):  # a FIFO would block the read
                raise ValueError("header.json is not a regular file")
            raw = jsonprofile.parse_json(os.read(fd, spec.MAX_HEADER_BYTES + 1),
                                   path=str(target / spec.HEADER_FILE),
                                   limit=spec.MAX_HEADER_BYTES, rule="HEADER_JSON")
        finally:
            os.close(fd)
        listed = raw.get("files")
        if raw.get("format") != spec.FORMAT_NAME or not isinstance(listed, dict):
            raise ValueError("no detfmt header")
        entries = os.listdir(target)
    except (OSError, ValueError, AttributeError, errors.FormatError) as error:
        raise errors.TargetExistsError(refuse, path=target) from error
    members = {spec.HEADER_FILE, *(name for name in listed if isinstance(name, str))}
    foreign = sorted(name for name in entries if name not in members or not
                     (target / name).is_file() or (target / name).is_symlink())
    if foreign:
        shown = ", ".join(foreign[:5]) + (", ..." if len(foreign) > 5 else "")
        raise errors.TargetExistsError(
            f"target holds {len(foreign)} entries that are not files of its dataset ({shown}); "
            "overwrite replaces only a dataset's own files: move them away first", path=target)
    return sorted(entries)


def _os_error(error: OSError, target: Path, what: str) -> errors.WriteError:
    code = error.errno
    if code in (errno.EROFS, errno.EACCES, errno.EPERM):
        return errors.TargetNotWritableError(f"{what}: {error.strerror}", errno=code, path=target)
    return errors.WriteError(f"{what}: {error.strerror or error}", errno=code, path=target)


def _identity(path: Path) -> tuple[int, int] | None:
    """(device, inode) of a directory entry, None if there is none."""
    try:
        info = os.lstat(path)
    except OSError:
        return None
    return info.st_dev, info.st_ino


def _validate_directory(directory: Path) -> None:
    """Run the reader's checks on what was just written, before anyone can see it."""
    from detfmt.reading.dataset import Dataset

    dataset = Dataset(directory)
    try:
        _validate_dataset(dataset, directory)
    finally:
        dataset.close()


def _validate_shard(path: Path) -> None:
    from detfmt.reading.dataset import Dataset
    from detfmt.reading.sources import PackedSource

    dataset = Dataset(PackedSource(path))
    try:
        _validate_dataset(dataset, path)
    finally:
        dataset.close()


def _validate_dataset(dataset: Any, path: Path) -> None:
    dataset.validate_index()
    for violation in dataset.iter_label_violations():
        error = violation.to_error()
        raise errors.WriteError(f"internal error, refusing to publish: {error}",
                                rule="WRITE_FAILED", path=path) from error


def _publish(temp: Path, target: Path, old_members: list[str] | None) -> None:
    if old_members is None:
        try:
            fileio.publish_new(temp, target)
        except FileExistsError as error:
            raise errors.TargetExistsError("the target appeared while writing", path=target
                                           ) from error
        return
    if fileio.publish_exchange(temp, target):
        _remove_old(temp, old_members)  # temp now holds the old dataset
        return
    old = temp.with_name(temp.name + "-old")
    warnings.warn("this platform has no atomic directory exchange; replacing in two renames",
                  stacklevel=4)
    fileio.publish_replace(temp, target, old)
    _remove_old(old, old_members)


def _remove_old(directory: Path, members: list[str]) -> None:
    try:
        gone = fileio.remove_members(directory, members)
    except OSError:
        gone = False
    if not gone:
        warnings.warn(f"the old dataset was replaced but {directory} could not be removed; "
                      "`detfmt cleanup` removes it", stacklevel=5)
