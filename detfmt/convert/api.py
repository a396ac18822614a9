"""``convert`` and ``check_source``: the Python face of ``detfmt convert FORMAT SRC OUT``.

    from detfmt import convert
    reports = convert.convert("yolo", "data.yaml", "out")          # out/train, out/val, ...
    reports = convert.convert("yolo", "data.yaml", "out/val", split="val")   # one, at out/val
    reports = convert.convert("coco", "coco2017/", "out")          # standard layout, no flags
    reports = convert.convert("coco", ".", "out", split={"train": "a.json", "val": "b.json"})
    check = convert.check_source("voc", "VOC2007/")                # scan only, writes nothing

Every split is scanned before any is written, so a problem in ``val`` is found before ``train``
is converted, and two splits that share an image file are refused (``SPLIT_OVERLAP``).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from detfmt.convert._pipeline import (
    ConvertOptions,
    Scan,
    Source,
    check_scan,
    convert_source,
    plan_codec,
    prepare_source,
    remedy,
    scan_source,
    write_prepared,
)
from detfmt.convert.codec import size_advice
from detfmt.convert.errors import ConversionError
from detfmt.convert.layout import write_splits_index
from detfmt.convert.report import ConversionReport
from detfmt.convert.splits import Discovery, SplitSpec, discover
from detfmt.writing.splitroot import check_split_root

__all__ = ["SourceCheck", "SplitCheck", "check_source", "convert"]


def convert(
    source_format: str,
    src: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    *,
    split: SplitSpec = None,
    images: str | os.PathLike[str] | None = None,
    labels: str | os.PathLike[str] | None = None,
    names: Any = None,
    annotations: str | os.PathLike[str] | None = None,
    classes: Sequence[str] | None = None,
    allow_overlap: bool = False,
    **options: Any,
) -> dict[str, ConversionReport]:
    """Convert a COCO, YOLO or VOC source with its splits; returns {split: report} (the key is
    ``""`` for a source without splits).

    ``split``: None converts every split the source defines into ``dst/<split>`` (or, for a
    source without splits, one dataset at ``dst``); a name (or a list of one) writes only that
    split, directly at ``dst``; several names, or ``{name: path}`` definitions (COCO annotation
    files, YOLO image folders or list files, VOC image-set lists), write ``dst/<name>`` each.
    ``images``/``labels``/``names``/``annotations``/``classes`` override what is found (as the
    CLI options of the same names). ``allow_overlap``: write splits that share image files.
    Options: `ConvertOptions`. Layout and discovery rules: docs/converters.md.
    """
    opts = ConvertOptions(**options)
    found = discover(source_format, src, split=split, images=images, labels=labels,
                     names=names, annotations=annotations, classes=classes,
                     symlinks=opts.symlinks)
    dst = Path(dst)
    if not found.split_layout:
        (source,) = found.sources
        return {source.split or "": convert_source(source, dst, opts)}
    names_out = [source.split or "" for source in found.sources]
    check_split_root(dst, names_out, opts.overwrite)
    prepared: list[tuple[Source, Scan]] = []
    for source in found.sources:
        prepared.append((source, prepare_source(source, dst / (source.split or ""), opts)))
    _check_overlap(prepared, allow_overlap)
    _note_shared_content(prepared)
    for source, scan in prepared:  # every split's codec and size said before any is written
        plan_codec(source, scan, opts)
    reports: dict[str, ConversionReport] = {}
    for source, scan in prepared:
        split_name = source.split or ""
        reports[split_name] = write_prepared(source, scan, dst / split_name, opts)
    write_splits_index(dst, reports, found.sources[0].source_format, found.sources[0].source)
    return reports


def _identities(scan: Scan) -> np.ndarray:
    """The (device, inode) of every kept image, as one sortable key per file."""
    table = scan.table
    rows = np.flatnonzero(table.kept[:scan.records])
    pairs = np.ascontiguousarray(np.stack([table.device[rows], table.inode[rows]], axis=1))
    return np.unique(pairs.view(np.dtype((np.void, 16))).ravel())


def _example(source: Source, scan: Scan, key: np.void) -> str:
    """The name of the image of ``source`` whose identity is ``key``."""
    table = scan.table
    for row, record in enumerate(source.records(source.new_report(None))):
        if row >= scan.records:
            break
        pair = np.array([[table.device[row], table.inode[row]]], np.uint64)
        if table.kept[row] and pair.view(np.dtype((np.void, 16)))[0, 0] == key:
            return os.fspath(record.path)
    return ""


def split_overlaps(prepared: list[tuple[Source, Scan]]) -> list[tuple[int, int, np.ndarray]]:
    """(i, j, shared identities) for every two splits that hold the same image files."""
    keys = [_identities(scan) for _, scan in prepared]
    found = []
    for i in range(len(prepared)):
        for j in range(i + 1, len(prepared)):
            common = np.intersect1d(keys[i], keys[j])
            if len(common):
                found.append((i, j, common))
    return found


def _check_overlap(prepared: list[tuple[Source, Scan]], allow_overlap: bool) -> None:
    """Two splits must not hold the same image file: a model would be evaluated on images it
    was trained on. Files are compared by identity (device, inode), so links are caught."""
    for i, j, common in split_overlaps(prepared):
        (a, scan_a), (b, _) = prepared[i], prepared[j]
        example = _example(a, scan_a, common[0])
        message = (f"splits {a.split!r} and {b.split!r} share {len(common)} image files"
                   + (f" (e.g. {example})" if example else "")
                   + ": a model would be evaluated on images it was trained on")
        if allow_overlap:
            for _, scan in (prepared[i], prepared[j]):
                scan.report.note("split_overlap", None, count=len(common))
            continue
        raise ConversionError(message + ". Pass allow_overlap=True to write them anyway, or "
                              "convert one split with split=NAME", rule="SPLIT_OVERLAP",
                              path=a.source, affected=len(common))


def _note_shared_content(prepared: list[tuple[Source, Scan]]) -> None:
    """Different files with the same bytes in two splits: counted (a note), not refused."""
    digests = []
    for _, scan in prepared:
        table = scan.table
        rows = np.flatnonzero(table.hashed[:scan.records])
        digests.append(np.unique(table.digest[rows]))
    for i, (_, scan) in enumerate(prepared):
        others = [d for j, d in enumerate(digests) if j != i]
        if not others or not len(digests[i]):
            continue
        count = int(np.isin(digests[i], np.concatenate(others)).sum())
        if count:
            scan.report.note("duplicate_across_splits", None, count=count)


# -------------------------------------------------------------------------- check_source


@dataclasses.dataclass
class SplitCheck:
    """What a scan found in one split (or the whole source when it has no splits)."""

    split: str
    found: int  # images listed by the source
    usable: int  # images a conversion would keep
    missing: int  # images named but absent
    empty: int  # images without a label file or with an empty one (kept with zero boxes)
    corrupt: int  # undecodable images and malformed label files
    unsafe: int  # files outside their folder, FIFOs, devices, undecodable names
    duplicate_images: int  # images whose bytes equal another image's
    duplicate_rows: int  # label rows repeated in the same file
    orphan_labels: int  # label files without an image
    boxes: int
    boxes_usable: int
    report: ConversionReport
    would_fail: str | None  # why a default conversion would refuse this split
    codec: str = ""  # what codec="auto" would choose
    size_advice: str = ""  # the estimated size of each codec (see detfmt.convert.codec)

    def lines(self) -> list[str]:
        head = f"split {self.split}" if self.split else "source"
        lines = [f"{head}: {self.found} images found, {self.usable} usable; "
                 f"{self.boxes} boxes, {self.boxes_usable} usable",
                 f"  missing {self.missing}, empty {self.empty}, corrupt {self.corrupt}, "
                 f"unsafe {self.unsafe}, duplicate images {self.duplicate_images}, "
                 f"duplicate rows {self.duplicate_rows}, labels without image "
                 f"{self.orphan_labels}"]
        for reason, count in self.report.images_skipped.most_common():
            first = next((i for i in self.report.issues if i.reason == reason), None)
            example = f" (e.g. {first.path}: {first.detail})" if first else ""
            lines.append(f"  {reason}: {count}{example}"[:400])
        if self.codec:
            lines.append(f"  codec auto: {self.codec}"
                         + (f"; {self.size_advice}" if self.size_advice else ""))
        if self.would_fail:
            lines.append(f"  a conversion would stop: {self.would_fail}")
        return lines


@dataclasses.dataclass
class SourceCheck:
    """The result of `check_source`: one `SplitCheck` per split, and layout hints."""

    source_format: str
    source: str
    splits: list[SplitCheck]
    hints: list[str]
    split_layout: bool
    layout_error: ConversionError | None = None  # why the layout itself cannot be converted

    @property
    def ok(self) -> bool:
        """True when a default conversion would go through."""
        return self.layout_error is None and all(split.would_fail is None
                                                 for split in self.splits)

    def lines(self) -> list[str]:
        if self.layout_error is not None:
            return [f"{self.source_format} {self.source}: the layout cannot be converted as "
                    "found", *[f"hint: {hint}" for hint in self.hints]]
        layout = "one dataset per split" if self.split_layout else "one dataset"
        lines = [f"{self.source_format} {self.source}: {len(self.splits)} part(s), {layout}"]
        for split in self.splits:
            lines += split.lines()
        lines += [f"hint: {hint}" for hint in self.hints]
        return lines


_CORRUPT = ("IMAGE_INVALID", "LABEL_MALFORMED", "LABEL_OUT_OF_RANGE", "LABEL_ENCODING",
            "XML_INVALID", "UNKNOWN_CLASS")
_UNSAFE = ("PATH_UNSAFE", "NAME_ENCODING")


def _split_check(source: Source, scan: Scan, options: ConvertOptions) -> SplitCheck:
    report = scan.report
    skipped = report.images_skipped
    try:
        check_scan(scan, source, dataclasses.replace(options, on_error="error"))
        would_fail = None
    except ConversionError as error:
        would_fail = error.message
    return SplitCheck(
        split=source.split or "",
        found=report.images_source,
        usable=report.images_kept,
        missing=skipped.get("IMAGE_MISSING", 0),
        empty=report.notes.get("image_without_label", 0) + report.notes.get(
            "empty_label_file", 0),
        corrupt=sum(skipped.get(rule, 0) for rule in _CORRUPT),
        unsafe=sum(skipped.get(rule, 0) for rule in _UNSAFE),
        duplicate_images=scan.duplicate_images,
        duplicate_rows=report.boxes_dropped.get("box_duplicate", 0),
        orphan_labels=report.notes.get("label_without_image", 0),
        boxes=report.boxes_source,
        boxes_usable=report.boxes_kept,
        report=report,
        would_fail=would_fail,
    )


def _hints(found: Discovery, checks: list[SplitCheck]) -> list[str]:
    hints = list(found.hints)
    for check in checks:
        where = f"{check.split}: " if check.split else ""
        if check.found == 0:
            hints.append(f"{where}no images found; check the image folder (--images)")
        elif check.empty == check.found:
            hints.append(f"{where}no image has labels; check the label folder (--labels, or "
                         "the 'images' -> 'labels' folder rule)")
        if check.missing and check.usable:
            hints.append(f"{where}{check.missing} images named by the annotations are missing;"
                         " is the image folder right (--images)?")
        if check.orphan_labels:
            hints.append(f"{where}{check.orphan_labels} label files have no image (different "
                         "names or suffixes?)")
        if (check.corrupt or check.unsafe or check.missing) and check.usable:
            hints.append(f"{where}on_error='skip' converts the {check.usable} usable images "
                         "and lists what is left out")
        elif check.found and not check.usable:
            hints.append(f"{where}no image is usable: {remedy(check.report)}")
        if check.duplicate_images:
            hints.append(f"{where}{check.duplicate_images} images are byte-identical copies of "
                         "others")
    return hints


def check_source(
    source_format: str,
    src: str | os.PathLike[str],
    *,
    split: SplitSpec = None,
    images: str | os.PathLike[str] | None = None,
    labels: str | os.PathLike[str] | None = None,
    names: Any = None,
    annotations: str | os.PathLike[str] | None = None,
    classes: Sequence[str] | None = None,
    workers: int = 0,
    max_side: int | None = 1024,
    allow_empty: bool = False,
    symlinks: str = "follow",
) -> SourceCheck:
    """Scan a source as `convert` would (every image decode-checked, every file hashed) and
    count found, usable, missing, empty, corrupt, unsafe and duplicate files per split. Writes
    nothing. A layout that cannot be converted at all (no annotations found, an ambiguous image
    folder, a missing split) is a check that is not ``ok``, its reason a hint; only a wrong
    argument (``USAGE``) raises."""
    opts = ConvertOptions(workers=workers, on_error="skip", max_side=max_side,
                          allow_empty=allow_empty, symlinks=symlinks)
    try:
        found = discover(source_format, src, split=split, images=images, labels=labels,
                         names=names, annotations=annotations, classes=classes,
                         symlinks=symlinks)
    except ConversionError as error:
        if error.rule == "USAGE":
            raise
        where = f" ({error.path})" if error.path else ""
        return SourceCheck(source_format, os.fspath(src), [],
                           [f"{error.rule}: {error.message}{where}"], False,
                           layout_error=error)
    checks = []
    scans = []
    for source in found.sources:
        scan = scan_source(source, opts, decode=True)
        scans.append((source, scan))
        check = _split_check(source, scan, opts)
        if scan.report.images_kept:
            check.codec = plan_codec(source, scan, opts)
            check.size_advice = size_advice(check.codec, scan.report.size_estimates,
                                            scan.report.source_bytes)
        checks.append(check)
    hints = _hints(found, checks)
    for i, j, common in split_overlaps(scans):
        message = (f"splits {scans[i][0].split!r} and {scans[j][0].split!r} share "
                   f"{len(common)} image files; a conversion refuses that (--allow-overlap)")
        hints.insert(0, message)
        for check in (checks[i], checks[j]):
            check.would_fail = check.would_fail or message
    return SourceCheck(source_format, os.fspath(src), checks, hints, found.split_layout)
