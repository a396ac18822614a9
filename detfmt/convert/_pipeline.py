"""Shared conversion pipeline: a `Source` -> checked `detfmt.write` samples + report + card.

Every converter describes its input as a `Source`: a function that yields `SourceImage`
records (annotations parsed, image files located and confined), the class list and the files
read up front. The pipeline then runs two passes over the records:

1. **scan** (`scan_source`): every image header is read (with ``on_error="skip"``, or for
   ``--check-source``, every image is decode-checked in a process pool), every file hashed for
   the card's fingerprint, and every decision (skip, drop, clip) made and counted. Nothing is
   written. A source with problems fails here, naming how many files are affected, before any
   pixel is converted; so does a source that would give an empty dataset.
2. **write** (`convert_source`): the same records again, with the decisions of the scan, are
   streamed into `detfmt.write` (decode, resize, encode in worker processes), with the card
   (including the complete report) in the header. A file that changed since the scan stops
   the write (``SOURCE_CHANGED``), so the card always describes what was written.

The report is saved beside the dataset in both the success and the failure case.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import signal
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np

from detfmt.convert.boxes import apply_box_policy
from detfmt.convert.card import DatasetCard, card_metadata
from detfmt.convert.codec import choose_codec, estimate_sizes, size_advice
from detfmt.convert.errors import ConversionError
from detfmt.convert.fingerprint import Fingerprint, file_digest
from detfmt.convert.inputs import SYMLINK_MODES, printable
from detfmt.convert.report import ConversionReport, report_path
from detfmt.errors import DetfmtError, InvalidSampleError, TargetExistsError
from detfmt.format.schema import ClassInfo
from detfmt.writing import image as _image
from detfmt.writing import processes

__all__ = ["ConvertOptions", "Scan", "Source", "SourceImage", "convert_source", "plan_codec",
           "prepare_source", "remedy", "resolve_frame", "scan_source", "write_prepared"]

Codec = Literal["auto", "raw", "zstd", "jpeg", "png"]
OnError = Literal["error", "skip"]
CODECS = ("auto", "raw", "zstd", "jpeg", "png")
ESTIMATE_SAMPLES = 8  # images encoded with every codec to estimate the dataset's size


@dataclasses.dataclass
class SourceImage:
    """One image of the source with its annotations, before any check.

    ``path`` names the image as the user sees it; ``read_path`` is the resolved regular file
    inside the image folder that will be read (None when ``error`` says why it may not be).
    ``boxes`` are float64 xyxy in the pixels of the frame the source annotated (``normalized``:
    fractions of the displayed image, as YOLO writes them); ``classes`` are contiguous ids.
    ``declared_size`` is the (width, height) the annotation file states, if any. ``error`` is a
    problem found while locating or parsing; it is raised or makes the image skipped.
    ``label_path`` is this image's own label file (fingerprinted), ``duplicates`` the number of
    duplicate label rows the parser removed (counted as dropped boxes).
    """

    path: Path
    file_name: str
    boxes: np.ndarray
    classes: np.ndarray
    fields: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)
    source_id: int | None = None
    declared_size: tuple[int, int] | None = None
    normalized: bool = False
    error: ConversionError | None = None
    read_path: Path | None = None
    label_path: Path | None = None
    duplicates: int = 0

    @property
    def num_boxes(self) -> int:
        return len(self.boxes)


@dataclasses.dataclass
class Source:
    """One dataset to write, as a converter found it (nothing read but the annotations).

    ``records(report)`` yields the `SourceImage` records in a fixed order each time it is called
    (once per pass; notes go to the report it is given). ``prelude(report)`` accounts for what
    lies outside the records (e.g. label files without an image). ``files`` are the annotation
    and configuration files read up front, fingerprinted before the images; ``root`` is the
    folder fingerprint names are relative to.
    """

    source_format: str
    source: str
    classes: list[tuple[str, int]]
    count: int
    records: Callable[[ConversionReport], Iterable[SourceImage]]
    prelude: Callable[[ConversionReport], None] = lambda report: None
    files: list[Path] = dataclasses.field(default_factory=list)
    root: Path | None = None
    metadata: dict[str, str] = dataclasses.field(default_factory=dict)
    box_fields: dict[str, str] | None = None
    split: str | None = None

    def new_report(self, destination: str | os.PathLike[str] | None) -> ConversionReport:
        report = ConversionReport(self.source_format, self.source,
                                  os.fspath(destination) if destination is not None else "")
        report.split = self.split
        return report


@dataclasses.dataclass
class ConvertOptions:
    """Options every ``from_*`` converter accepts (see their docstrings).

    ``allow_empty``: write a dataset that keeps no image or no box (refused by default, since it
    is almost always a wrong path or layout). ``card``: a `DatasetCard` (or a mapping with its
    fields) stored in the header; ``fingerprint``: hash every source file for the card.
    ``symlinks``: ``"follow"`` (read symlinked files wherever they point: DVC, git-annex and
    symlink exports) or ``"refuse"`` (a link leaving its folder is ``PATH_UNSAFE``: untrusted
    archives); names from annotation files are confined either way (docs/converters.md).
    """

    max_side: int | None = 1024
    codec: Codec = "auto"
    workers: int = 0
    on_error: OnError = "error"
    overwrite: bool = False
    progress: bool | None = None
    jpeg_quality: int = 90
    verbose: bool = False
    allow_empty: bool = False
    card: DatasetCard | Mapping[str, Any] | None = None
    fingerprint: bool = True
    symlinks: str = "follow"

    def __post_init__(self) -> None:
        if self.symlinks not in SYMLINK_MODES:
            raise ConversionError(f"symlinks must be one of {SYMLINK_MODES}, got "
                                  f"{self.symlinks!r}", rule="USAGE")
        if self.codec not in CODECS:
            raise ConversionError(f"codec must be one of {CODECS}, got {self.codec!r}",
                                  rule="USAGE")
        if self.on_error not in ("error", "skip"):
            raise ConversionError(f"on_error must be 'error' or 'skip', got {self.on_error!r}",
                                  rule="USAGE")
        if self.max_side is not None and (not isinstance(self.max_side, int) or
                                          isinstance(self.max_side, bool) or self.max_side < 1):
            raise ConversionError(f"max_side must be a positive int or None, got "
                                  f"{self.max_side!r}", rule="USAGE")
        if (not isinstance(self.workers, int) or isinstance(self.workers, bool)
                or self.workers < 0):
            raise ConversionError(f"workers must be an int >= 0, got {self.workers!r}",
                                  rule="USAGE")
        self.card = DatasetCard.coerce(self.card)
        self.card.check()


def resolve_frame(
    info: _image.ImageInfo,
    declared: tuple[int, int] | None,
    report: ConversionReport,
    path: str | os.PathLike[str],
) -> tuple[bool, int, int]:
    """Decide in which pixel frame the annotations were made: (exif_transpose, width, height).

    The rule (docs/converters.md): annotations refer to the image as displayed, i.e. after its
    EXIF orientation (what Ultralytics, Detectron2, CVAT and Roboflow use). When the source states
    the image size and that size matches only the stored, un-rotated pixel grid (the orientation
    swaps the axes), the annotations were made on the stored pixels (e.g. torchvision's
    CocoDetection, LabelImg): the image is then kept un-rotated so boxes and pixels still agree.
    A stated size matching neither is counted (``declared_size_mismatch``); the real image wins.
    """
    display_w, display_h = info.display_size
    if declared is None or declared == (display_w, display_h):
        return True, display_w, display_h
    if info.swaps_axes and declared == (info.width, info.height):
        report.note("exif_stored_frame", path,
                    f"EXIF orientation {info.orientation}; stated size {declared[0]}x{declared[1]} "
                    "is the stored grid, kept un-rotated")
        return False, info.width, info.height
    report.note("declared_size_mismatch", path,
                f"stated {declared[0]}x{declared[1]}, image is {display_w}x{display_h}")
    return True, display_w, display_h


# ---------------------------------------------------------------------------- pass 1: scan


class _ImageTable:
    """What the scan learnt about each image, kept compactly (about 40 bytes per image) so the
    write pass needs neither a second header read nor a second decode check."""

    def __init__(self, count: int) -> None:
        self.width = np.zeros(count, np.int32)
        self.height = np.zeros(count, np.int32)
        self.orientation = np.ones(count, np.uint8)
        self.size = np.full(count, -1, np.int64)
        self.mtime = np.zeros(count, np.int64)
        self.device = np.zeros(count, np.uint64)
        self.inode = np.zeros(count, np.uint64)
        self.digest = np.zeros(count, np.uint64)
        self.hashed = np.zeros(count, bool)
        self.kept = np.zeros(count, bool)

    def grow(self, count: int) -> None:
        """More records than announced (a source that changed while being listed)."""
        for name in ("width", "height", "orientation", "size", "mtime", "device", "inode",
                     "digest", "hashed", "kept"):
            array = getattr(self, name)
            if len(array) < count:
                extra = np.zeros(max(count, 2 * len(array)) - len(array), array.dtype)
                setattr(self, name, np.concatenate([array, extra]))

    def info(self, row: int) -> _image.ImageInfo:
        return _image.ImageInfo(int(self.width[row]), int(self.height[row]),
                                int(self.orientation[row]))


@dataclasses.dataclass
class Scan:
    """The result of the scan pass: the full report, per-image facts and the fingerprint."""

    report: ConversionReport
    table: _ImageTable
    records: int
    fingerprint: tuple[str, int, int] | None
    duplicate_images: int = 0
    raw_bytes: int = 0
    source_bytes: int = 0  # the kept images' files
    samples: list[tuple[Path, int, int]] = dataclasses.field(default_factory=list)


def _check_image(path: Path, full: bool) -> _image.ImageInfo | InvalidSampleError:
    try:
        if os.stat(path).st_size == 0:  # said plainly: a failed download or a placeholder
            return InvalidSampleError("empty file (0 bytes)", rule="IMAGE_INVALID",
                                      path=os.fspath(path))
    except OSError:
        pass
    try:
        return _image.check_decodes(path) if full else _image.probe_image(path)
    except InvalidSampleError as error:
        return error


def _check_full(path: Path) -> _image.ImageInfo | InvalidSampleError:
    return _check_image(path, True)


def _check_pool(workers: int):
    """A spawn pool whose workers ignore Ctrl-C from their first instruction and die with this
    process: SIGINT is ignored while they are started (an ignored signal stays ignored across
    exec, and Python then installs no KeyboardInterrupt handler), and the initializer keeps it
    so and asks the kernel to kill the worker when its parent dies (no orphans)."""
    context = multiprocessing.get_context("spawn")
    try:
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    except ValueError:  # not the main thread: signals are not ours to change
        return context.Pool(workers, initializer=processes.die_with_parent,
                            initargs=(os.getpid(),))
    try:
        return context.Pool(workers, initializer=processes.die_with_parent,
                            initargs=(os.getpid(),))
    finally:
        signal.signal(signal.SIGINT, previous)


def _windows(items: Iterable[SourceImage], size: int) -> Iterator[list[SourceImage]]:
    window: list[SourceImage] = []
    for item in items:
        window.append(item)
        if len(window) == size:
            yield window
            window = []
    if window:
        yield window


def _probed(records: Iterable[SourceImage], decode: bool, workers: int
            ) -> Iterator[tuple[SourceImage, _image.ImageInfo | InvalidSampleError | None]]:
    """Attach header info to each record whose image may be read (None for the others); with
    ``decode`` also decode-check each image, in a process pool one window ahead when
    ``workers`` > 0. Memory stays bounded by the window size."""
    if not decode or workers < 1:
        for record in records:
            if record.error is not None or record.read_path is None:
                yield record, None
            else:
                yield record, _check_image(record.read_path, decode)
        return
    size = 16 * workers
    with _check_pool(workers) as pool:
        pending = None
        for window in _windows(records, size):
            readable = [r.read_path for r in window if r.error is None and r.read_path]
            job = pool.map_async(_check_full, readable, chunksize=4)
            if pending is not None:
                yield from _merge(*pending)
            pending = (window, job)
        if pending is not None:
            yield from _merge(*pending)


def _merge(window: list[SourceImage], job) -> Iterator[tuple[SourceImage, Any]]:
    results = iter(job.get())
    for record in window:
        if record.error is not None or record.read_path is None:
            yield record, None
        else:
            yield record, next(results)


def _skip(report: ConversionReport, error: DetfmtError, record: SourceImage) -> None:
    report.skip_image(error.rule or "error", error.path or record.path, error.message,
                      record.num_boxes + record.duplicates)


def _decide(record: SourceImage, info: _image.ImageInfo | InvalidSampleError | None,
            report: ConversionReport, *, decode_unrotated: bool) -> dict[str, Any] | None:
    """Apply every rule to one record: the sample to write, or None when the image is skipped
    (each decision counted in ``report``)."""
    report.images_source += 1
    report.boxes_source += record.num_boxes + record.duplicates
    if record.error is not None:
        _skip(report, record.error, record)
        return None
    if info is None:
        _skip(report, ConversionError("image not readable", rule="IMAGE_MISSING",
                                      path=record.path), record)
        return None
    if isinstance(info, InvalidSampleError):
        error = ConversionError(info.message, rule=info.rule, path=record.path)
        _skip(report, error, record)
        return None
    transpose, width, height = resolve_frame(info, record.declared_size, report, record.path)
    image: Any = record.read_path
    if not transpose and decode_unrotated:  # rare (see resolve_frame): decoded here, un-rotated
        try:
            image = _image.load_rgb(record.read_path, exif_transpose=False)
        except InvalidSampleError as cause:
            raise ConversionError(cause.message, rule=cause.rule, path=record.path) from cause
    report.drop_boxes("box_duplicate", record.label_path or record.path, record.duplicates,
                      "the same row more than once in the label file")
    boxes = record.boxes.astype(np.float64, copy=True).reshape(-1, 4)
    if record.normalized:
        boxes *= np.array([width, height, width, height], dtype=np.float64)
    boxes, keep = apply_box_policy(boxes, width, height, report, record.path)
    sample: dict[str, Any] = {
        "image": image,
        "boxes": boxes[keep],
        "classes": np.asarray(record.classes, dtype=np.int32)[keep],
        "file_name": record.file_name,
    }
    if record.source_id is not None:
        sample["source_id"] = int(record.source_id)
    for name, values in record.fields.items():
        sample[name] = np.asarray(values)[keep]
    report.images_kept += 1
    report.boxes_kept += int(keep.sum())
    return sample


def _add_files(fingerprint: Fingerprint | None, files: Iterable[Path]) -> None:
    if fingerprint is None:
        return
    for path in files:
        try:
            fingerprint.add_file(path)
        except OSError as error:
            raise ConversionError(f"cannot read: {error.strerror}", rule="SOURCE_CHANGED",
                                  path=path) from error


def scan_source(source: Source, options: ConvertOptions, *, decode: bool | None = None,
                destination: str | os.PathLike[str] | None = None) -> Scan:
    """Pass 1: read the annotations and every image header, hash every file, make and count
    every decision; write nothing. ``decode`` (default: with ``on_error="skip"``) also
    decode-checks every image so corrupt ones are counted."""
    decode = options.on_error == "skip" if decode is None else decode
    report = source.new_report(destination)
    report.max_side, report.workers = options.max_side, options.workers
    report.classes = [{"id": i, "name": n, "source_id": int(s)}
                      for i, (n, s) in enumerate(source.classes)]
    fingerprint = Fingerprint(source.root) if options.fingerprint else None
    _add_files(fingerprint, source.files)
    source.prelude(report)
    table = _ImageTable(source.count)
    raw_bytes = source_bytes = 0
    samples: list[tuple[Path, int, int]] = []
    every = max(1, source.count // ESTIMATE_SAMPLES)
    row = -1
    for row, (record, info) in enumerate(_probed(source.records(report), decode,
                                                 options.workers)):
        table.grow(row + 1)
        if fingerprint is not None and record.label_path is not None:
            _add_files(fingerprint, [record.label_path])
        sample = _decide(record, info, report, decode_unrotated=False)
        if sample is None or not isinstance(info, _image.ImageInfo):
            continue
        table.kept[row] = True
        table.width[row], table.height[row] = info.width, info.height
        table.orientation[row] = info.orientation
        try:
            stat = os.stat(record.read_path)
            table.size[row], table.mtime[row] = stat.st_size, stat.st_mtime_ns
            table.device[row], table.inode[row] = stat.st_dev, stat.st_ino
            if fingerprint is not None:
                size, digest = file_digest(record.read_path)
                fingerprint.add(record.path, size, digest)
                table.digest[row] = int.from_bytes(digest[:8], "little")
                table.hashed[row] = True
        except OSError as error:
            raise ConversionError(f"changed while scanned: {error.strerror}",
                                  rule="SOURCE_CHANGED", path=record.path) from error
        width, height = info.display_size
        h, w = _image.scaled_size(height, width, options.max_side)
        raw_bytes += h * w * 3 + 32  # + average alignment padding
        source_bytes += int(table.size[row])
        if row % every == 0 and len(samples) < ESTIMATE_SAMPLES:
            samples.append((record.read_path, h, w))
    scan = Scan(report, table, row + 1,
                (fingerprint.hexdigest(), fingerprint.files, fingerprint.bytes)
                if fingerprint is not None else None, raw_bytes=raw_bytes,
                source_bytes=source_bytes, samples=samples)
    scan.duplicate_images = _note_duplicate_images(scan, report)
    return scan


def _note_duplicate_images(scan: Scan, report: ConversionReport) -> int:
    """Count kept images whose bytes equal an earlier kept image's (a note: both are kept)."""
    rows = np.flatnonzero(scan.table.hashed[:scan.records])
    if len(rows) < 2:
        return 0
    digests = scan.table.digest[rows]
    order = np.argsort(digests, kind="stable")
    repeated = np.zeros(len(rows), bool)
    repeated[order[1:]] = digests[order[1:]] == digests[order[:-1]]
    count = int(repeated.sum())
    if count:
        report.note("duplicate_image", None, count=count)
    return count


def _split_prefix(source: Source) -> str:
    return f"split {source.split!r}: " if source.split else ""


def remedy(report: ConversionReport) -> str:
    """What to do about the images a conversion cannot use: ``on_error='skip'`` only when it
    would keep some (a hint that converts nothing is no hint), else the cause to fix."""
    skipped = sum(report.images_skipped.values())
    if report.images_source > skipped:
        return "Pass on_error='skip' to leave them out (each is listed in the report)"
    rules = set(report.images_skipped)
    if rules <= {"PATH_UNSAFE"} and any("symlinks are refused" in issue.detail
                                        for issue in report.issues):
        return ("every image is a symlink leaving its folder; if the source is trusted, "
                "follow them with symlinks='follow'")
    if rules <= {"PATH_UNSAFE"} and all(("absolute" in issue.detail or "'..'" in issue.detail)
                                        for issue in report.issues
                                        if issue.reason == "PATH_UNSAFE"):
        return ("the annotations name files by absolute or '..' paths, which are refused "
                "(a source may only name files inside its folders): write the names relative "
                "to the image folder")
    if rules <= {"IMAGE_MISSING", "PATH_UNSAFE"}:
        return ("is the image folder right? pass images=DIR to name it (one COCO split: "
                "split={name: (json, images folder)})")
    if rules <= {"IMAGE_INVALID"}:
        return "no image decodes: are these image files (and complete downloads)?"
    return "fix the source; the report lists every file and why"


def _problems_error(report: ConversionReport, source: Source) -> ConversionError:
    skipped = sum(report.images_skipped.values())
    by_rule = ", ".join(f"{rule} {count}" for rule, count in report.images_skipped.most_common())
    first = next(issue for issue in report.issues if issue.reason in report.images_skipped)
    return ConversionError(
        f"{_split_prefix(source)}{skipped} of {report.images_source} source images cannot be "
        f"converted ({by_rule}); "
        f"first: {first.path}: {first.detail}. {remedy(report)}", rule=first.reason,
        path=first.path, affected=skipped)


def _empty_error(report: ConversionReport, source: Source) -> ConversionError:
    if report.images_source == 0:
        why = f"no images were found in {source.source}"
    elif report.images_kept == 0:
        why = f"all {report.images_source} images were skipped"
    else:
        without = report.notes.get("image_without_label", 0)
        empty = report.notes.get("empty_label_file", 0)
        why = (f"none of the {report.images_kept} kept images has a box"
               + (f" ({without} have no label file, {empty} an empty one: are the labels in the "
                  "expected folder? Name it with labels=DIR)" if without or empty else ""))
    advice = (remedy(report) if report.images_source and not report.images_kept
              else "Pass allow_empty=True to write it anyway")
    return ConversionError(
        f"{_split_prefix(source)}the conversion would keep {report.images_kept} images and "
        f"{report.boxes_kept} boxes: {why}. {advice}", rule="EMPTY_RESULT",
        path=source.source, affected=report.images_source)


def check_scan(scan: Scan, source: Source, options: ConvertOptions) -> None:
    """Refuse, after the scan, what must not be written: problems with ``on_error="error"``
    (all of them counted), then an empty result without ``allow_empty``."""
    report = scan.report
    if options.on_error == "error" and report.images_skipped:
        raise _problems_error(report, source)
    if not options.allow_empty and (report.images_kept == 0 or report.boxes_kept == 0):
        raise _empty_error(report, source)


# ---------------------------------------------------------------------------- pass 2: write


class _Sized:
    """The sample stream with a length, so the writer's progress bar knows the total."""

    def __init__(self, samples: Iterator[dict[str, Any]], count: int) -> None:
        self.samples, self.count = samples, count

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return self.samples

    def __len__(self) -> int:
        return self.count


def _changed(record: SourceImage, why: str) -> ConversionError:
    return ConversionError(f"the source changed since it was scanned ({why}); run the "
                           "conversion again", rule="SOURCE_CHANGED", path=record.path)


def _replay(source: Source, scan: Scan) -> Iterator[dict[str, Any]]:
    """The samples of pass 2: the scan's decisions applied again to fresh records."""
    report = source.new_report(None)
    source.prelude(report)
    table = scan.table
    row = -1
    for row, record in enumerate(source.records(report)):
        if row >= scan.records:
            raise _changed(record, "more images than scanned")
        info = table.info(row) if table.kept[row] else None
        if info is not None and record.error is None and record.read_path is not None:
            try:
                stat = os.stat(record.read_path)
            except OSError as error:
                raise _changed(record, error.strerror or "gone") from error
            if (stat.st_size, stat.st_mtime_ns) != (table.size[row], table.mtime[row]):
                raise _changed(record, "size or modification time differs")
        elif info is not None:
            raise _changed(record, "no longer readable")
        if info is None and record.error is None:  # skipped by the scan for its image
            report.images_source += 1
            report.boxes_source += record.num_boxes + record.duplicates
            report.skip_image("scanned", record.path, "", record.num_boxes + record.duplicates)
            continue
        sample = _decide(record, info, report, decode_unrotated=True)
        if sample is not None:
            yield sample
    expected = scan.report
    if (row + 1, report.images_kept, report.boxes_kept) != (
            scan.records, expected.images_kept, expected.boxes_kept):
        raise ConversionError(
            f"the source changed since it was scanned ({report.images_kept} images / "
            f"{report.boxes_kept} boxes now, {expected.images_kept} / {expected.boxes_kept} "
            "then); run the conversion again", rule="SOURCE_CHANGED", path=source.source)


def _class_infos(classes: Sequence[tuple[str, int]]) -> list[ClassInfo]:
    return [ClassInfo(name=name, source_id=int(source_id)) for name, source_id in classes]


def save_failed(report: ConversionReport, dst: str | os.PathLike[str],
                error: BaseException) -> Path | None:
    """Save the report of a conversion that did not publish, so the problems stay listed.

    Beside an existing dataset (a failed overwrite) it goes to ``<dst>.failed.report.json``,
    so the report of the dataset that is still there is kept."""
    report.error = f"{type(error).__name__}: {printable(str(error))}"
    report.written = False
    path = report_path(dst, failed=os.path.lexists(dst))
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        report.save(path)
    except OSError:
        return None
    error.report_path = path  # type: ignore[attr-defined]  # the CLI names it
    return path


def prepare_source(source: Source, dst: str | os.PathLike[str], options: ConvertOptions
                   ) -> Scan:
    """Scan ``source`` for a conversion into ``dst`` and refuse problems and empty results
    (`check_scan`); the report of a refused conversion is saved beside ``dst``."""
    if os.path.lexists(dst) and not options.overwrite:
        raise TargetExistsError("target exists; pass overwrite=True to replace it", path=dst)
    report = source.new_report(dst)
    try:
        scan = scan_source(source, options, destination=dst)
        report = scan.report
        check_scan(scan, source, options)
    except (DetfmtError, OSError) as error:
        save_failed(report, dst, error)
        raise
    return scan


def plan_codec(source: Source, scan: Scan, options: ConvertOptions) -> str:
    """Choose the codec of a prepared source and estimate every codec's size (the report's
    ``codec``, ``codec_reason``, ``size_estimates``, ``source_bytes``); with ``verbose`` say
    both on one line, before anything is written."""
    report = scan.report
    codec, reason = choose_codec(options.codec, scan.raw_bytes, report.images_kept)
    report.codec, report.codec_reason = codec, reason
    report.source_bytes = scan.source_bytes
    report.size_estimates = estimate_sizes(scan.samples, scan.raw_bytes, options.jpeg_quality)
    if options.verbose:
        split = f" [{source.split}]" if source.split else ""
        advice = size_advice(codec, report.size_estimates, report.source_bytes)
        print(f"codec{split}: {codec} ({reason})" + (f"; {advice}" if advice else ""),
              file=sys.stderr)
    return codec


def write_prepared(source: Source, scan: Scan, dst: str | os.PathLike[str],
                   options: ConvertOptions) -> ConversionReport:
    """Pass 2: write a prepared source to ``dst`` with its card; save the report beside it
    (also when the write fails)."""
    from detfmt.writing.writer import write  # the writer (and Pillow) load when a conversion runs

    start = time.perf_counter()
    report = scan.report
    try:
        if not report.codec:
            plan_codec(source, scan, options)
        codec = report.codec
        meta = dict(source.metadata)
        meta.update(card_metadata(options.card, source_format=source.source_format,
                                  source=source.source, split=source.split,
                                  fingerprint=scan.fingerprint, report=report))
        write(
            _Sized(_replay(source, scan), report.images_kept),
            dst,
            classes=_class_infos(source.classes),
            codec=codec,
            max_side=options.max_side,
            overwrite=options.overwrite,
            workers=options.workers,
            jpeg_quality=options.jpeg_quality,
            progress=options.progress,
            metadata=meta,
            **({"box_fields": source.box_fields} if source.box_fields else {}),
        )
    except InvalidSampleError as error:
        if isinstance(error, ConversionError):
            save_failed(report, dst, error)
            raise
        wrapped = ConversionError(error.message, rule=error.rule, path=error.path,
                                  index=error.index)
        save_failed(report, dst, wrapped)
        raise wrapped from error
    except (DetfmtError, OSError) as error:
        save_failed(report, dst, error)
        raise
    report.seconds += time.perf_counter() - start
    report.written = True
    report.save(report_path(dst))
    return report


def convert_source(source: Source, dst: str | os.PathLike[str], options: ConvertOptions
                   ) -> ConversionReport:
    """Scan ``source``, refuse problems and empty results, then write it to ``dst`` with its
    card; the report is saved beside ``dst`` whatever happens (`save_failed`)."""
    start = time.perf_counter()
    scan = prepare_source(source, dst, options)
    scan.report.seconds = time.perf_counter() - start
    return write_prepared(source, scan, dst, options)
