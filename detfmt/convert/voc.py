"""Pascal VOC XML -> detfmt.

VOC stores 1-based, inclusive pixel indices: a box covering the whole W-pixel-wide image is
``xmin=1, xmax=W``. detfmt boxes are continuous coordinates where pixel i spans [i, i+1), so the
conversion is explicit and exact: ``x0 = xmin - 1``, ``y0 = ymin - 1``, ``x1 = xmax``,
``y1 = ymax`` (the same as Detectron2's ``load_voc_instances``); `to_voc_box` is its inverse.
``difficult`` and ``truncated`` become per-box fields (uint8, 0 when absent).
"""

from __future__ import annotations

import dataclasses
import os
import xml.etree.ElementTree as ET
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from detfmt.convert._pipeline import ConvertOptions, SourceImage, convert_records
from detfmt.convert.errors import ConversionError
from detfmt.convert.report import ConversionReport

__all__ = ["VocAnnotation", "from_voc", "parse_voc_xml", "to_voc_box"]

_IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".JPG", ".JPEG", ".PNG")


@dataclasses.dataclass
class VocAnnotation:
    """One parsed XML file: boxes are still VOC's 1-based inclusive integers (as floats)."""

    xml: Path
    filename: str | None
    size: tuple[int, int] | None  # (width, height) as stated, None when absent or zero
    names: list[str]
    boxes: np.ndarray  # (K, 4) xmin, ymin, xmax, ymax
    difficult: np.ndarray  # (K,) uint8
    truncated: np.ndarray  # (K,) uint8


def to_voc_box(box: Sequence[float]) -> tuple[float, float, float, float]:
    """Inverse of the import rule: detfmt continuous xyxy -> VOC 1-based inclusive indices."""
    x0, y0, x1, y1 = box
    return x0 + 1.0, y0 + 1.0, x1, y1


def _text(node: ET.Element, tag: str) -> str | None:
    child = node.find(tag)
    return None if child is None or child.text is None else child.text.strip()


def _flag(node: ET.Element, tag: str, xml: Path) -> int:
    text = _text(node, tag)
    if text is None or text == "":
        return 0
    try:
        return 1 if int(float(text)) else 0
    except ValueError as error:
        raise ConversionError(f"<{tag}> is not a number: {text!r}", rule="XML_INVALID",
                              path=xml) from error


def parse_voc_xml(xml: Path) -> VocAnnotation:
    """Parse one VOC annotation file.

    Raises:
        ConversionError: ``XML_INVALID`` when the file is not well-formed XML, an object lacks
            its ``name`` or ``bndbox``, or a coordinate is not a number.
    """
    try:
        root = ET.parse(xml).getroot()
    except (ET.ParseError, OSError) as error:
        raise ConversionError(f"malformed XML: {error}", rule="XML_INVALID", path=xml) from error
    if root.tag != "annotation":
        raise ConversionError(f"root element is <{root.tag}>, not <annotation>",
                              rule="XML_INVALID", path=xml)
    size = None
    size_node = root.find("size")
    if size_node is not None:
        try:
            width = int(float(_text(size_node, "width") or 0))
            height = int(float(_text(size_node, "height") or 0))
        except ValueError as error:
            raise ConversionError(f"<size> is not numeric: {error}", rule="XML_INVALID",
                                  path=xml) from error
        size = (width, height) if width > 0 and height > 0 else None
    names, boxes, difficult, truncated = [], [], [], []
    for number, obj in enumerate(root.iter("object"), 1):
        name = _text(obj, "name")
        box = obj.find("bndbox")
        if not name or box is None:
            raise ConversionError(f"object {number} lacks <name> or <bndbox>",
                                  rule="XML_INVALID", path=xml)
        try:
            boxes.append([float(_text(box, key) or "nan")
                          for key in ("xmin", "ymin", "xmax", "ymax")])
        except ValueError as error:
            raise ConversionError(f"object {number}: bndbox coordinate is not a number "
                                  f"({error})", rule="XML_INVALID", path=xml) from error
        names.append(name)
        difficult.append(_flag(obj, "difficult", xml))
        truncated.append(_flag(obj, "truncated", xml))
    return VocAnnotation(
        xml=xml,
        filename=_text(root, "filename") or None,
        size=size,
        names=names,
        boxes=np.array(boxes, dtype=np.float64).reshape(-1, 4),
        difficult=np.array(difficult, dtype=np.uint8),
        truncated=np.array(truncated, dtype=np.uint8),
    )


def _image_for(xml: Path, filename: str | None, images_dir: Path) -> Path:
    if filename:
        candidate = images_dir / filename
        if candidate.exists():
            return candidate
    for suffix in _IMAGE_SUFFIXES:  # <filename> missing or stale: try the XML's own stem
        candidate = images_dir / (xml.stem + suffix)
        if candidate.exists():
            return candidate
    return images_dir / (filename or xml.stem + ".jpg")


def _count_objects(xml: Path) -> int:
    try:
        return sum(1 for _ in ET.parse(xml).getroot().iter("object"))
    except (ET.ParseError, OSError):
        return 0


def _records(xmls: list[Path], images_dir: Path, class_ids: dict[str, int],
             report: ConversionReport) -> Iterator[SourceImage]:
    for xml in xmls:
        try:
            ann = parse_voc_xml(xml)
        except ConversionError as error:
            count = _count_objects(xml)
            yield SourceImage(path=images_dir / (xml.stem + ".jpg"), file_name=xml.stem,
                              boxes=np.zeros((count, 4)), classes=np.zeros(count, np.int32),
                              error=error)
            continue
        image = _image_for(xml, ann.filename, images_dir)
        if ann.filename and image.name != ann.filename:
            report.note("filename_from_xml_stem", xml,
                        f"<filename>{ann.filename}</filename> not found; using {image.name}")
        error = None
        unknown = sorted({n for n in ann.names if n not in class_ids})
        if unknown:
            error = ConversionError(f"class names {unknown} are not in the given classes",
                                    rule="UNKNOWN_CLASS", path=xml)
        boxes = ann.boxes.copy()
        boxes[:, :2] -= 1.0  # VOC 1-based inclusive -> continuous [x0, x1)
        yield SourceImage(
            path=image,
            file_name=image.relative_to(images_dir).as_posix(),
            boxes=boxes,
            classes=np.array([class_ids.get(n, -1) for n in ann.names], dtype=np.int32),
            fields={"difficult": ann.difficult, "truncated": ann.truncated},
            declared_size=ann.size,
            error=error,
        )


def from_voc(
    annotations_dir: str | os.PathLike[str],
    images_dir: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    classes: Sequence[str] | None = None,
    **options: Any,
) -> ConversionReport:
    """Convert a Pascal VOC dataset (one XML per image) into a detfmt dataset at ``dst``.

    ``classes``: the class names in contiguous-id order; when omitted they are collected from
    all XML files and sorted. An object whose name is not in a given list makes its image
    invalid (error, or skipped with ``on_error="skip"``). Boxes follow the 1-based rule in the
    module doc; ``difficult``/``truncated`` are per-box fields. Options: `ConvertOptions`.
    """
    opts = ConvertOptions(**options)
    annotations_dir, images_dir = Path(annotations_dir), Path(images_dir)
    for folder, rule in ((annotations_dir, "LABEL_MISSING"), (images_dir, "IMAGE_MISSING")):
        if not folder.is_dir():
            raise ConversionError("folder not found", rule=rule, path=folder)
    xmls = sorted(annotations_dir.rglob("*.xml"))
    if classes is None:
        found: set[str] = set()
        for xml in xmls:  # first pass: names only; broken files are reported by the second
            try:
                found.update(parse_voc_xml(xml).names)
            except ConversionError:
                continue
        classes = sorted(found)
    if len(set(classes)) != len(classes):
        raise ConversionError("duplicate class names", rule="USAGE")
    class_ids = {name: i for i, name in enumerate(classes)}
    report = ConversionReport("voc", os.fspath(annotations_dir), os.fspath(dst))
    return convert_records(
        _records(xmls, images_dir, class_ids, report),
        count=len(xmls),
        paths=[images_dir / (xml.stem + ".jpg") for xml in xmls],
        classes=[(name, i) for i, name in enumerate(classes)],
        dst=dst,
        report=report,
        options=opts,
        metadata={"detfmt.convert.voc_boxes": "x0=xmin-1, y0=ymin-1, x1=xmax, y1=ymax"},
        box_fields={"difficult": "|u1", "truncated": "|u1"},
    )
