"""YOLO txt (Ultralytics layout) -> detfmt.

``images/…/x.jpg`` pairs with ``labels/…/x.txt`` (same relative path, suffix ``.txt``). Each label
line is ``class cx cy w h`` normalised to the displayed image (Ultralytics measures images with
their EXIF rotation applied), or ``class x1 y1 x2 y2 … xn yn`` (a segment polygon, n >= 3) whose
bounding box is used. The image is invalid (an error, or skipped with ``on_error="skip"``, as
Ultralytics drops such an image as corrupt rather than train on partial labels) when a line has
another field count (4 or 6 numbers, an odd polygon), a token that is not a plain finite decimal
(``nan``, ``inf``, ``1e999``, ``0x10``, ``1_0``), a class id that is not an integer or not in
``names``, or a coordinate outside 0..1 (``LABEL_OUT_OF_RANGE``). A row repeated in one file is
kept once; the copies are counted as dropped (``box_duplicate``).

Splits (``data.yaml`` with ``train``/``val``/``test``) are found by `detfmt.convert.splits`.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from detfmt.convert._pipeline import ConvertOptions, Source, SourceImage, convert_source
from detfmt.convert.errors import ConversionError
from detfmt.convert.inputs import InputFolder, read_source_text
from detfmt.convert.names import load_names
from detfmt.convert.numbers import parse_decimal, parse_integer
from detfmt.convert.report import ConversionReport

__all__ = ["IMAGE_SUFFIXES", "LabelFile", "YoloImage", "find_pairs", "from_yolo",
           "label_for_image", "list_tree", "parse_label_file", "parse_label_text", "yolo_source"]

IMAGE_SUFFIXES = frozenset({".bmp", ".dng", ".jpeg", ".jpg", ".mpo", ".png", ".tif", ".tiff",
                            ".webp", ".pfm"})  # Ultralytics' IMG_FORMATS
NAMES_FILES = ("classes.txt",)  # LabelImg writes the class list into the labels folder
_CLASS_ID_RANGE = (-(2**31), 2**31 - 1)


@dataclasses.dataclass
class LabelFile:
    """One parsed label file: normalised xyxy ``boxes`` (K, 4), contiguous ``classes`` (K,),
    the number of non-blank ``rows``, ``duplicates`` removed, and the first ``error``."""

    boxes: np.ndarray
    classes: np.ndarray
    rows: int = 0
    duplicates: int = 0
    error: ConversionError | None = None


@dataclasses.dataclass
class YoloImage:
    """An image of a YOLO source and its label file, as named (``path``, ``label``; None: no
    label file) and as resolved inside their folders (``read_path``, ``label_read``), or why
    they may not be read (``error``, ``label_error``)."""

    path: Path
    label: Path | None
    file_name: str
    read_path: Path | None = None
    error: ConversionError | None = None
    label_read: Path | None = None
    label_error: ConversionError | None = None


def _bad(path, rule: str, message: str, rows: int) -> LabelFile:
    return LabelFile(np.zeros((0, 4)), np.zeros(0, np.int32), rows, 0,
                     ConversionError(message, rule=rule, path=path))


def parse_label_text(text: str, class_ids: dict[int, int],
                     path: str | os.PathLike[str] = "<label>") -> LabelFile:
    """Parse the text of one label file (rules in the module docstring)."""
    lines = [(n, line.split()) for n, line in enumerate(text.splitlines(), 1) if line.strip()]
    rows = len(lines)
    seen: set[tuple[float, ...]] = set()
    boxes: list[tuple[float, float, float, float]] = []
    classes: list[int] = []
    for number, fields in lines:
        where = f"line {number}"
        label = parse_integer(fields[0], *_CLASS_ID_RANGE)
        if label is None:
            return _bad(path, "LABEL_MALFORMED", f"{where}: class id {fields[0][:40]!r} is not "
                        "an integer", rows)
        values = [parse_decimal(token) for token in fields[1:]]
        if None in values:
            token = fields[1 + values.index(None)]
            return _bad(path, "LABEL_MALFORMED", f"{where}: {token[:40]!r} is not a finite "
                        "decimal number", rows)
        count = len(values)
        if not (count == 4 or (count >= 6 and count % 2 == 0)):
            return _bad(path, "LABEL_MALFORMED", f"{where}: {count} numbers after the class id; "
                        "expected 4 (cx cy w h) or an even count >= 6 (a polygon)", rows)
        if label not in class_ids:
            known = f"ids {min(class_ids)}..{max(class_ids)}" if class_ids else "no names"
            return _bad(path, "UNKNOWN_CLASS", f"{where}: class id {label} is not in names "
                        f"({known})", rows)
        outside = [v for v in values if not 0.0 <= v <= 1.0]  # type: ignore[operator]
        if outside:
            return _bad(path, "LABEL_OUT_OF_RANGE", f"{where}: coordinate {outside[0]!r} is "
                        "outside 0..1 (YOLO coordinates are fractions of the image)", rows)
        key = (float(label), *values)  # type: ignore[arg-type]
        if key in seen:
            continue
        seen.add(key)
        classes.append(class_ids[label])
        if count == 4:
            cx, cy, w, h = values  # type: ignore[misc]
            boxes.append((cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2))
        else:
            xs, ys = values[0::2], values[1::2]
            boxes.append((min(xs), min(ys), max(xs), max(ys)))  # type: ignore[type-var]
    return LabelFile(np.array(boxes, np.float64).reshape(-1, 4), np.array(classes, np.int32),
                     rows, rows - len(boxes))


def parse_label_file(path: str | os.PathLike[str], class_ids: dict[int, int],
                     read_from: str | os.PathLike[str] | None = None) -> LabelFile:
    """Read (a regular UTF-8 file of bounded size, from ``read_from`` when given: its resolved
    location) and parse one label file; messages name ``path``."""
    try:
        text = read_source_text(read_from or path, rule="LABEL_MALFORMED",
                                encoding_rule="LABEL_ENCODING")
    except ConversionError as error:
        named = ConversionError(error.message, rule=error.rule, path=path)
        return LabelFile(np.zeros((0, 4)), np.zeros(0, np.int32), 0, 0, named)
    return parse_label_text(text, class_ids, path)


def _is_image(name: str) -> bool:
    return os.path.splitext(name)[1].lower() in IMAGE_SUFFIXES


def _outcome(result: Path | ConversionError) -> tuple[Path | None, ConversionError | None]:
    return (None, result) if isinstance(result, ConversionError) else (result, None)


def list_tree(images: InputFolder, labels: InputFolder | None, *, beside: bool = False,
              file_name_base: Path | None = None) -> tuple[list[YoloImage], list[Path]]:
    """Pair every image under ``images`` with ``labels/<same relative path>.txt`` (``labels``
    None: with ``beside``, the label file next to each image; else no label files at all).

    Returns (images sorted, label files without an image). Files that may not be read (outside
    the folder, not regular, undecodable names) carry their ``error``; ``file_name`` is relative
    to ``file_name_base`` (default: the image folder)."""
    base = file_name_base or images.given
    found: list[YoloImage] = []
    keys: set[str] = set()
    label_files: dict[str, tuple[Path, Path | ConversionError]] = {}
    label_folder = labels if labels is not None else (images if beside else None)
    if label_folder is not None:
        for path, result in label_folder.walk(lambda name: name.endswith(".txt")):
            if path.parent == label_folder.given and path.name in NAMES_FILES:
                continue
            key = path.relative_to(label_folder.given).with_suffix("").as_posix()
            label_files.setdefault(key, (path, result))
    for path, result in images.walk(_is_image):
        key = path.relative_to(images.given).with_suffix("").as_posix()
        keys.add(key)
        read_path, error = _outcome(result)
        entry = YoloImage(path, None, _relative(path, base), read_path, error)
        if key in label_files:
            entry.label, label_result = label_files[key]
            entry.label_read, entry.label_error = _outcome(label_result)
        found.append(entry)
    orphans = [path for key, (path, result) in sorted(label_files.items())
               if key not in keys and not isinstance(result, ConversionError)]
    return found, orphans


def _relative(path: Path, base: Path) -> str:
    try:
        return path.relative_to(base).as_posix()
    except ValueError:
        return path.as_posix()


def label_for_image(image: str | os.PathLike[str]) -> Path:
    """Ultralytics' rule: the last ``/images/`` of the path becomes ``/labels/``, the suffix
    ``.txt`` (an image outside any ``images`` folder has its label beside it)."""
    text = os.fspath(image)
    sep_images, sep_labels = f"{os.sep}images{os.sep}", f"{os.sep}labels{os.sep}"
    if sep_images in text:
        head, tail = text.rsplit(sep_images, 1)
        text = head + sep_labels + tail
    return Path(os.path.splitext(text)[0] + ".txt")


def find_pairs(images_dir: Path, labels_dir: Path) -> tuple[list[tuple[Path, Path | None]],
                                                             list[Path]]:
    """Return ([(image, label file or None)], [label files without an image]), sorted."""
    entries, orphans = list_tree(InputFolder(images_dir, missing_rule="IMAGE_MISSING"),
                                 InputFolder(labels_dir, missing_rule="LABEL_MISSING"))
    return [(entry.path, entry.label) for entry in entries], orphans


def class_table(names: Any) -> tuple[dict[int, int], list[tuple[str, int]]]:
    """(YOLO id -> contiguous id, [(name, YOLO id)] in contiguous order) from ``names``."""
    table = load_names(names)
    order = sorted(table)
    return {yolo_id: i for i, yolo_id in enumerate(order)}, [(table[i], i) for i in order]


def _records(entries: Sequence[YoloImage], class_ids: dict[int, int],
             report: ConversionReport) -> Iterator[SourceImage]:
    for entry in entries:
        error = entry.error
        label = LabelFile(np.zeros((0, 4)), np.zeros(0, np.int32))
        if entry.label is None:
            report.note("image_without_label", entry.path, "no label file: kept with zero boxes")
        elif entry.label_error is not None:
            label.error = entry.label_error
        else:
            label = parse_label_file(entry.label, class_ids, entry.label_read)
            if label.error is None and label.rows == 0:
                report.note("empty_label_file", entry.label, "kept with zero boxes (background)")
        if label.error is not None:  # every row of the file is lost with the image
            error = error or label.error
            label = LabelFile(np.zeros((label.rows, 4)), np.zeros(label.rows, np.int32),
                              label.rows)
        yield SourceImage(path=entry.path, file_name=entry.file_name, boxes=label.boxes,
                          classes=label.classes, normalized=True, error=error,
                          read_path=entry.read_path if error is None else None,
                          label_path=entry.label if entry.label_read else None,
                          duplicates=label.duplicates)


def yolo_source(
    entries: Sequence[YoloImage],
    orphans: Sequence[Path],
    names: Any,
    *,
    source: str,
    root: Path | None,
    files: Sequence[Path] = (),
    split: str | None = None,
) -> Source:
    """The `Source` of a listed YOLO image set (see `list_tree`)."""
    class_ids, classes = class_table(names)

    def prelude(report: ConversionReport) -> None:
        for label in orphans:
            parsed = parse_label_file(label, class_ids)
            lines = parsed.rows
            report.boxes_source += lines
            report.note("label_without_image", None if lines else label,
                        "label file without an image")
            report.drop_boxes("label_without_image", label, lines, "label file without an image")

    return Source(
        source_format="yolo",
        source=source,
        classes=classes,
        count=len(entries),
        records=lambda report: _records(entries, class_ids, report),
        prelude=prelude,
        files=[*files, *orphans],
        root=root,
        split=split,
    )


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
    and their boxes counted as dropped (``label_without_image``). Only regular files inside the
    two folders are read. Options: `ConvertOptions`. For a data YAML with splits, see
    `detfmt.convert.convert`.
    """
    opts = ConvertOptions(**options)
    images = InputFolder(images_dir, missing_rule="IMAGE_MISSING", what="image folder",
                         symlinks=opts.symlinks)
    labels = InputFolder(labels_dir, missing_rule="LABEL_MISSING", what="label folder",
                         symlinks=opts.symlinks)
    files: list[Path] = []
    if names is None:
        if not (labels.given / "classes.txt").is_file():
            raise ConversionError("class names are needed: pass names= (a list, a data YAML "
                                  "or a names file)", rule="NAMES_MISSING", path=labels_dir)
        names = labels.given / "classes.txt"
    if isinstance(names, (str, os.PathLike)):
        files.append(Path(names))
    entries, orphans = list_tree(images, labels)
    root = Path(os.path.commonpath([os.path.abspath(images.given), os.path.abspath(labels.given)]))
    source = yolo_source(entries, orphans, names, source=os.fspath(images_dir), root=root,
                         files=files)
    return convert_source(source, dst, opts)
