"""YOLO txt (Ultralytics layout) -> detfmt.

``images/…/x.jpg`` pairs with ``labels/…/x.txt`` (same relative path, suffix ``.txt``). Each label
line is ``class cx cy w h`` normalised to the displayed image (Ultralytics measures images with
their EXIF rotation applied), or ``class x1 y1 x2 y2 … xn yn`` (a segment polygon, n >= 3) whose
bounding box is used. Any other field count (4 or 6 numbers, an odd polygon), a non-number or a
class id outside ``names`` makes the image invalid: an error, or skipped with ``on_error="skip"``
(Ultralytics also drops such an image as corrupt rather than train on partial labels).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from detfmt.convert._pipeline import ConvertOptions, SourceImage, convert_records
from detfmt.convert.errors import ConversionError
from detfmt.convert.names import load_names
from detfmt.convert.report import ConversionReport

__all__ = ["IMAGE_SUFFIXES", "find_pairs", "from_yolo", "parse_label_file"]

IMAGE_SUFFIXES = frozenset({".bmp", ".dng", ".jpeg", ".jpg", ".mpo", ".png", ".tif", ".tiff",
                            ".webp", ".pfm"})  # Ultralytics' IMG_FORMATS
NAMES_FILES = ("classes.txt",)  # LabelImg writes the class list into the labels folder


def _walk(root: Path, keep) -> dict[str, Path]:
    """{relative path without suffix: file} under root, following directory symlinks."""
    found: dict[str, Path] = {}
    for folder, dirs, files in os.walk(root, followlinks=True):
        dirs.sort()
        for name in sorted(files):
            path = Path(folder) / name
            if keep(path):
                key = path.relative_to(root).with_suffix("").as_posix()
                found.setdefault(key, path)
    return found


def find_pairs(images_dir: Path, labels_dir: Path) -> tuple[list[tuple[Path, Path | None]],
                                                             list[Path]]:
    """Return ([(image, label file or None)], [label files without an image]), sorted."""
    images: list[tuple[str, Path]] = []
    for folder, dirs, files in os.walk(images_dir, followlinks=True):
        dirs.sort()
        for name in sorted(files):
            path = Path(folder) / name
            if path.suffix.lower() in IMAGE_SUFFIXES:
                images.append((path.relative_to(images_dir).with_suffix("").as_posix(), path))
    labels = _walk(labels_dir, lambda p: p.suffix == ".txt" and not (
        p.parent == labels_dir and p.name in NAMES_FILES))
    pairs = [(path, labels.get(key)) for key, path in images]
    stems = {key for key, _ in images}
    orphans = [path for key, path in sorted(labels.items()) if key not in stems]
    return pairs, orphans


def parse_label_file(
    path: Path, class_ids: dict[int, int]
) -> tuple[np.ndarray, np.ndarray, int, ConversionError | None]:
    """Parse one label file: (normalised xyxy boxes (K,4), contiguous classes (K,), number of
    non-blank lines, error or None). ``class_ids`` maps YOLO ids to contiguous ids."""
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as error:
        return np.zeros((0, 4)), np.zeros(0, np.int32), 0, ConversionError(
            f"cannot read label file: {error}", rule="LABEL_MALFORMED", path=path)
    lines = [(n, line.split()) for n, line in enumerate(text.splitlines(), 1) if line.strip()]
    boxes = np.zeros((len(lines), 4), dtype=np.float64)
    classes = np.zeros(len(lines), dtype=np.int32)
    for row, (number, fields) in enumerate(lines):
        where = f"line {number}"
        try:
            values = [float(v) for v in fields]
        except ValueError:
            return boxes, classes, len(lines), ConversionError(
                f"{where}: not a number in {' '.join(fields)!r}", rule="LABEL_MALFORMED",
                path=path)
        count = len(values) - 1
        if not (count == 4 or (count >= 6 and count % 2 == 0)):
            return boxes, classes, len(lines), ConversionError(
                f"{where}: {count} numbers after the class id; expected 4 (cx cy w h) or an "
                "even count >= 6 (a polygon)", rule="LABEL_MALFORMED", path=path)
        label = values[0]
        if label != int(label) if np.isfinite(label) else True:
            return boxes, classes, len(lines), ConversionError(
                f"{where}: class id {fields[0]!r} is not an integer", rule="LABEL_MALFORMED",
                path=path)
        if int(label) not in class_ids:
            return boxes, classes, len(lines), ConversionError(
                f"{where}: class id {int(label)} is not in names (ids {min(class_ids)}.."
                f"{max(class_ids)})", rule="UNKNOWN_CLASS", path=path)
        classes[row] = class_ids[int(label)]
        if count == 4:
            cx, cy, w, h = values[1:]
            boxes[row] = (cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2)
        else:
            xs, ys = values[1::2], values[2::2]
            boxes[row] = (min(xs), min(ys), max(xs), max(ys))
    return boxes, classes, len(lines), None


def _records(pairs, class_ids, images_dir: Path, report: ConversionReport
             ) -> Iterator[SourceImage]:
    for image, label in pairs:
        file_name = image.relative_to(images_dir).as_posix()
        if label is None:
            report.note("image_without_label", image, "no label file: kept with zero boxes")
            boxes, classes, error = np.zeros((0, 4)), np.zeros(0, np.int32), None
        else:
            boxes, classes, lines, error = parse_label_file(label, class_ids)
            if error is not None:
                boxes = np.zeros((lines, 4))  # every line of the file is lost with the image
                classes = np.zeros(lines, np.int32)
            elif lines == 0:
                report.note("empty_label_file", label, "kept with zero boxes (background)")
        yield SourceImage(path=image, file_name=file_name, boxes=boxes, classes=classes,
                          normalized=True, error=error)


def from_yolo(
    images_dir: str | os.PathLike[str],
    labels_dir: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    names: str | os.PathLike[str] | list[str] | dict[int, str] | None = None,
    **options: Any,
) -> ConversionReport:
    """Convert a YOLO txt dataset (``images_dir`` + ``labels_dir`` trees) into detfmt at ``dst``.

    ``names``: a list, a {id: name} mapping, a data YAML (its ``names:`` key) or a names file;
    when omitted, ``labels_dir/classes.txt`` is used if present. Contiguous ids follow the YOLO
    ids in increasing order; the YOLO id is kept as each class's ``source_id``. An image without
    a label file, or with an empty one, has zero boxes; label files without an image are reported
    and their boxes counted as dropped (``label_without_image``). Options: `ConvertOptions`.
    """
    opts = ConvertOptions(**options)
    images_dir, labels_dir = Path(images_dir), Path(labels_dir)
    for folder, rule in ((images_dir, "IMAGE_MISSING"), (labels_dir, "LABEL_MISSING")):
        if not folder.is_dir():
            raise ConversionError("folder not found", rule=rule, path=folder)
    if names is None:
        if not (labels_dir / "classes.txt").is_file():
            raise ConversionError("class names are needed: pass names= (a list, a data YAML "
                                  "or a names file)", rule="NAMES_MISSING", path=labels_dir)
        names = labels_dir / "classes.txt"
    table = load_names(names)
    order = sorted(table)
    class_ids = {yolo_id: i for i, yolo_id in enumerate(order)}
    classes = [(table[yolo_id], yolo_id) for yolo_id in order]
    pairs, orphans = find_pairs(images_dir, labels_dir)
    report = ConversionReport("yolo", os.fspath(images_dir), os.fspath(dst))
    for label in orphans:
        _, _, lines, _ = parse_label_file(label, class_ids)
        report.boxes_source += lines
        report.note("label_without_image", None if lines else label, "label file without an image")
        report.drop_boxes("label_without_image", label, lines, "label file without an image")
    return convert_records(
        _records(pairs, class_ids, images_dir, report),
        count=len(pairs),
        paths=[image for image, _ in pairs],
        classes=classes,
        dst=dst,
        report=report,
        options=opts,
    )
