"""Shared conversion pipeline: source records -> checked `detfmt.write` samples + report.

Every converter turns its annotation files into `SourceImage` records; this module applies the
common rules (image checks, EXIF frame, box policy, ``on_error``), picks the codec, streams the
samples into `detfmt.write` (which decodes, resizes and encodes them in worker processes) and
saves the report.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import sys
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np

from detfmt import _image, _processes
from detfmt.convert.boxes import apply_box_policy
from detfmt.convert.errors import ConversionError
from detfmt.convert.report import ConversionReport, report_path
from detfmt.errors import InvalidSampleError

__all__ = ["ConvertOptions", "SourceImage", "convert_records", "resolve_frame"]

Codec = Literal["auto", "raw", "zstd", "jpeg", "png"]
OnError = Literal["error", "skip"]
CODECS = ("auto", "raw", "zstd", "jpeg", "png")
RAW_RAM_FRACTION = 0.5  # --codec auto: raw when the raw dataset needs at most half the RAM


@dataclasses.dataclass
class SourceImage:
    """One image of the source with its annotations, before any check.

    ``boxes`` are float64 xyxy in the pixels of the frame the source annotated (``normalized``:
    fractions of the displayed image, as YOLO writes them); ``classes`` are contiguous ids.
    ``declared_size`` is the (width, height) the annotation file states, if any. ``error`` is a
    problem found while parsing the labels; it is raised or makes the image skipped.
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

    @property
    def num_boxes(self) -> int:
        return len(self.boxes)


@dataclasses.dataclass
class ConvertOptions:
    """Options every ``from_*`` converter accepts (see their docstrings)."""

    max_side: int | None = 1024
    codec: Codec = "auto"
    workers: int = 0
    on_error: OnError = "error"
    overwrite: bool = False
    progress: bool | None = None
    jpeg_quality: int = 90
    verbose: bool = False

    def __post_init__(self) -> None:
        if self.codec not in CODECS:
            raise ConversionError(f"codec must be one of {CODECS}, got {self.codec!r}",
                                  rule="USAGE")
        if self.on_error not in ("error", "skip"):
            raise ConversionError(f"on_error must be 'error' or 'skip', got {self.on_error!r}",
                                  rule="USAGE")
        if self.max_side is not None and (not isinstance(self.max_side, int) or
                                          self.max_side < 1):
            raise ConversionError(f"max_side must be a positive int or None, got "
                                  f"{self.max_side!r}", rule="USAGE")
        if not isinstance(self.workers, int) or self.workers < 0:
            raise ConversionError(f"workers must be an int >= 0, got {self.workers!r}",
                                  rule="USAGE")


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


def _check(path: Path, full: bool) -> _image.ImageInfo | InvalidSampleError:
    try:
        return _image.check_decodes(path) if full else _image.probe_image(path)
    except InvalidSampleError as error:
        return error


def _check_full(path: Path) -> _image.ImageInfo | InvalidSampleError:
    return _check(path, True)


def _windows(items: Iterable[SourceImage], size: int) -> Iterator[list[SourceImage]]:
    window: list[SourceImage] = []
    for item in items:
        window.append(item)
        if len(window) == size:
            yield window
            window = []
    if window:
        yield window


def _probed(
    records: Iterable[SourceImage], options: ConvertOptions
) -> Iterator[tuple[SourceImage, _image.ImageInfo | InvalidSampleError]]:
    """Attach header info to each record; with ``on_error="skip"`` also decode-check each image
    (in a process pool, one window ahead) so a corrupt file can be skipped before the writer
    sees it. Memory stays bounded by the window size."""
    if options.on_error != "skip" or options.workers < 1:
        full = options.on_error == "skip"
        for record in records:
            yield record, _check(record.path, full)
        return
    size = 16 * options.workers
    context = multiprocessing.get_context("spawn")
    with context.Pool(options.workers, initializer=_processes.die_with_parent,
                      initargs=(os.getpid(),)) as pool:  # no orphans if we are killed
        pending = None
        for window in _windows(records, size):
            job = pool.map_async(_check_full, [r.path for r in window], chunksize=4)
            if pending is not None:
                yield from zip(pending[0], pending[1].get(), strict=True)
            pending = (window, job)
        if pending is not None:
            yield from zip(pending[0], pending[1].get(), strict=True)


def _fail_or_skip(
    error: ConversionError, record: SourceImage, report: ConversionReport, options: ConvertOptions
) -> None:
    if options.on_error == "error":
        raise error
    report.skip_image(error.rule or "error", error.path or record.path, error.message,
                      record.num_boxes)


def _samples(
    records: Iterable[SourceImage], report: ConversionReport, options: ConvertOptions
) -> Iterator[dict[str, Any]]:
    for record, info in _probed(records, options):
        report.images_source += 1
        report.boxes_source += record.num_boxes
        if record.error is not None:
            _fail_or_skip(record.error, record, report, options)
            continue
        if isinstance(info, InvalidSampleError):
            error = ConversionError(info.message, rule=info.rule, path=record.path)
            error.__cause__ = info
            _fail_or_skip(error, record, report, options)
            continue
        transpose, width, height = resolve_frame(info, record.declared_size, report, record.path)
        image: Any = record.path
        if not transpose:  # rare (see resolve_frame): decoded here, un-rotated
            try:
                image = _image.load_rgb(record.path, exif_transpose=False)
            except InvalidSampleError as cause:
                error = ConversionError(cause.message, rule=cause.rule, path=record.path)
                error.__cause__ = cause
                _fail_or_skip(error, record, report, options)
                continue
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
        yield sample


class _Sized:
    """The sample stream with a length, so the writer's progress bar knows the total."""

    def __init__(self, samples: Iterator[dict[str, Any]], count: int) -> None:
        self.samples, self.count = samples, count

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return self.samples

    def __len__(self) -> int:
        return self.count


def estimate_raw_bytes(paths: Sequence[Path], count: int, max_side: int | None,
                       sample: int = 256) -> tuple[int, int]:
    """Estimate the raw (decoded, resized) size of ``count`` images from up to ``sample`` evenly
    spaced headers. Returns (bytes, images probed)."""
    if count == 0 or not paths:
        return 0, 0
    step = max(1, len(paths) // sample)
    total, probed = 0, 0
    for path in paths[::step][:sample]:
        try:
            info = _image.probe_image(path)
        except InvalidSampleError:
            continue
        width, height = info.display_size
        h, w = _image.scaled_size(height, width, max_side)
        total += h * w * 3 + 32  # + average alignment padding
        probed += 1
    return (total * count // probed if probed else 0), probed


def total_ram() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 8 << 30


def choose_codec(options: ConvertOptions, paths: Sequence[Path], count: int) -> tuple[str, str]:
    """Resolve ``codec="auto"``: raw when the raw dataset fits in half the RAM, else JPEG.

    Raw reads ~9x faster than JPEG while cached; JPEG is 9-15x smaller and as fast once the data
    no longer fits the page cache (measurements in docs/converters.md)."""
    if options.codec != "auto":
        return options.codec, "requested"
    estimate, probed = estimate_raw_bytes(paths, count, options.max_side)
    ram = total_ram()
    choice = "raw" if estimate <= RAW_RAM_FRACTION * ram else "jpeg"
    reason = (f"auto: raw size ~{estimate / 2**30:.2f} GiB for {count} images (from {probed} "
              f"headers), RAM {ram / 2**30:.1f} GiB -> {choice} "
              f"({'fits' if choice == 'raw' else 'exceeds'} {RAW_RAM_FRACTION:.0%} of RAM)")
    return choice, reason


def _class_infos(classes: Sequence[tuple[str, int]]) -> list[Any]:
    import detfmt

    class_info = getattr(detfmt, "ClassInfo", None)
    if class_info is None:
        return [name for name, _ in classes]
    return [class_info(name=name, source_id=int(source_id)) for name, source_id in classes]


def convert_records(
    records: Iterable[SourceImage],
    *,
    count: int,
    paths: Sequence[Path],
    classes: Sequence[tuple[str, int]],
    dst: str | os.PathLike[str],
    report: ConversionReport,
    options: ConvertOptions,
    metadata: dict[str, str] | None = None,
    box_fields: dict[str, str] | None = None,
) -> ConversionReport:
    """Stream ``records`` (``count`` of them; ``paths`` their image files, for the codec
    estimate) into a detfmt dataset at ``dst`` and save the report beside it."""
    import detfmt

    start = time.perf_counter()
    codec, reason = choose_codec(options, paths, count)
    report.codec, report.codec_reason = codec, reason
    report.max_side, report.workers = options.max_side, options.workers
    report.classes = [{"id": i, "name": n, "source_id": int(s)}
                      for i, (n, s) in enumerate(classes)]
    if options.verbose:
        print(f"codec: {codec} ({reason})", file=sys.stderr)
    meta = {"detfmt.convert.source_format": report.source_format,
            "detfmt.convert.source": report.source}
    meta.update(metadata or {})
    try:
        detfmt.write(
            _Sized(_samples(records, report, options), count),
            dst,
            classes=_class_infos(classes),
            codec=codec,
            max_side=options.max_side,
            overwrite=options.overwrite,
            workers=options.workers,
            jpeg_quality=options.jpeg_quality,
            progress=options.progress,
            metadata=meta,
            **({"box_fields": box_fields} if box_fields else {}),
        )
    except InvalidSampleError as error:
        if error.rule in ("IMAGE_INVALID", "IMAGE_MISSING") and not isinstance(
                error, ConversionError):
            raise ConversionError(error.message, rule=error.rule,
                                  path=error.path, index=error.index) from error
        raise
    report.seconds = time.perf_counter() - start
    report.written = True
    report.save(report_path(dst))
    return report
