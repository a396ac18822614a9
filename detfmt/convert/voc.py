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

from detfmt.convert._pipeline import ConvertOptions, Source, SourceImage, convert_source
from detfmt.convert.errors import ConversionError
from detfmt.convert.inputs import MAX_LABEL_BYTES, InputFolder, name_problem, read_source_bytes
from detfmt.convert.numbers import parse_decimal, parse_integer
from detfmt.convert.report import ConversionReport

__all__ = ["VocAnnotation", "collect_classes", "from_voc", "image_names", "list_xmls",
           "parse_voc_xml", "to_voc_box", "voc_source"]

_INT_RANGE = (-(2**31), 2**31 - 1)

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
    value = parse_integer(text, *_INT_RANGE)
    if value is None:
        raise ConversionError(f"<{tag}> is not an integer: {text[:40]!r}", rule="XML_INVALID",
                              path=xml)
    return 1 if value else 0


def _size(node: ET.Element, tag: str, xml: Path) -> int:
    text = _text(node, tag) or "0"
    value = parse_integer(text, 0, 2**31 - 1)
    if value is None:
        raise ConversionError(f"<size><{tag}> is not an integer >= 0: {text[:40]!r}",
                              rule="XML_INVALID", path=xml)
    return value


def _coordinate(box: ET.Element, key: str, number: int, xml: Path) -> float:
    text = _text(box, key)
    value = parse_decimal(text) if text is not None else None
    if value is None:
        shown = "missing" if text is None else repr(text[:40])
        raise ConversionError(f"object {number}: <{key}> is not a finite number ({shown})",
                              rule="XML_INVALID", path=xml)
    return value


def parse_voc_xml(xml: Path, read_from: Path | None = None) -> VocAnnotation:
    """Parse one VOC annotation file (a regular file of bounded size, read from ``read_from``
    when given: its resolved location; messages name ``xml``).

    Raises:
        ConversionError: ``XML_INVALID`` when the file is not well-formed XML, an object lacks
            its ``name`` or ``bndbox``, or a number is not a plain finite decimal.
    """
    data = read_source_bytes(read_from or xml, rule="XML_INVALID", limit=MAX_LABEL_BYTES)
    try:
        root = ET.fromstring(data)
    except (ET.ParseError, ValueError) as error:
        raise ConversionError(f"malformed XML: {error}", rule="XML_INVALID", path=xml) from error
    if root.tag != "annotation":
        raise ConversionError(f"root element is <{root.tag}>, not <annotation>",
                              rule="XML_INVALID", path=xml)
    size = None
    size_node = root.find("size")
    if size_node is not None:
        width, height = _size(size_node, "width", xml), _size(size_node, "height", xml)
        size = (width, height) if width > 0 and height > 0 else None
    names, boxes, difficult, truncated = [], [], [], []
    for number, obj in enumerate(root.iter("object"), 1):
        name = _text(obj, "name")
        box = obj.find("bndbox")
        if not name or box is None:
            raise ConversionError(f"object {number} lacks <name> or <bndbox>",
                                  rule="XML_INVALID", path=xml)
        boxes.append([_coordinate(box, key, number, xml)
                      for key in ("xmin", "ymin", "xmax", "ymax")])
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


def _image_for(xml: Path, filename: str | None, images: InputFolder
               ) -> tuple[Path, Path | None, ConversionError | None]:
    """(image as named, resolved file, why it may not be read) for one XML file."""
    if filename:
        problem = name_problem(filename)
        if problem is not None:
            return Path(xml.stem), None, ConversionError(
                f"<filename> refused: {problem}", rule="PATH_UNSAFE", path=xml)
        candidate = images.given / filename
        if os.path.lexists(candidate):
            try:
                return candidate, images.resolve(candidate), None
            except ConversionError as error:
                return candidate, None, error
    for suffix in _IMAGE_SUFFIXES:  # <filename> missing or stale: try the XML's own stem
        candidate = images.given / (xml.stem + suffix)
        if os.path.lexists(candidate):
            try:
                return candidate, images.resolve(candidate), None
            except ConversionError as error:
                return candidate, None, error
    missing = images.given / (filename or xml.stem + ".jpg")
    return missing, None, ConversionError("image file not found", rule="IMAGE_MISSING",
                                          path=missing)


def image_names(xmls: Sequence[Path]) -> list[str]:
    """The image file each readable XML names (``<filename>``, else its stem + ``.jpg``):
    what locates the image folder of a source by content."""
    names = []
    for xml in xmls:
        try:
            ann = parse_voc_xml(xml, xml)
        except ConversionError:
            continue
        names.append(ann.filename or xml.stem + ".jpg")
    return names


def _records(xmls: list[tuple[Path, Path | ConversionError]], images: InputFolder,
             class_ids: dict[str, int], report: ConversionReport) -> Iterator[SourceImage]:
    for xml, resolved in xmls:
        try:
            if isinstance(resolved, ConversionError):
                raise resolved
            ann = parse_voc_xml(xml, resolved)
        except ConversionError as error:
            count = _count_objects(resolved) if isinstance(resolved, Path) else 0
            yield SourceImage(path=images.given / (xml.stem + ".jpg"), file_name=xml.stem,
                              boxes=np.zeros((count, 4)), classes=np.zeros(count, np.int32),
                              error=error)
            continue
        image, read_path, error = _image_for(xml, ann.filename, images)
        if error is None and ann.filename and image.name != ann.filename:
            report.note("filename_from_xml_stem", xml,
                        f"<filename>{ann.filename}</filename> not found; using {image.name}")
        unknown = sorted({n for n in ann.names if n not in class_ids})
        if error is None and unknown:
            error = ConversionError(f"class names {unknown} are not in the given classes",
                                    rule="UNKNOWN_CLASS", path=xml)
        boxes = ann.boxes.copy()
        boxes[:, :2] -= 1.0  # VOC 1-based inclusive -> continuous [x0, x1)
        yield SourceImage(
            path=image,
            file_name=_relative(image, images.given),
            boxes=boxes,
            classes=np.array([class_ids.get(n, -1) for n in ann.names], dtype=np.int32),
            fields={"difficult": ann.difficult, "truncated": ann.truncated},
            declared_size=ann.size,
            error=error,
            read_path=read_path,
            label_path=xml,
        )


def _relative(path: Path, base: Path) -> str:
    try:
        return path.relative_to(base).as_posix()
    except ValueError:
        return path.name


def _count_objects(xml: Path) -> int:
    try:
        data = read_source_bytes(xml, rule="XML_INVALID", limit=MAX_LABEL_BYTES)
        return sum(1 for _ in ET.fromstring(data).iter("object"))
    except (ET.ParseError, ValueError, ConversionError):
        return 0


def list_xmls(annotations: InputFolder, ids: list[str] | None = None
              ) -> list[tuple[Path, Path | ConversionError]]:
    """The XML files to convert, as (path, resolved path or why it may not be read): every
    ``*.xml`` under the folder, or ``<id>.xml`` for each id of an image-set list."""
    if ids is None:
        return list(annotations.walk(lambda name: name.endswith(".xml")))
    found: list[tuple[Path, Path | ConversionError]] = []
    for image_id in ids:
        try:
            path = annotations.child(image_id + ".xml")
        except ConversionError as error:
            found.append((Path(image_id), ConversionError(
                f"image-set id refused: {error.message}", rule=error.rule,
                path=annotations.given)))
            continue
        try:
            found.append((path, annotations.resolve(path, "LABEL_MISSING")))
        except ConversionError as error:
            found.append((path, error))
    return found


def collect_classes(xmls: list[tuple[Path, Path | ConversionError]]) -> set[str]:
    """Every object name in the readable XML files (broken files are reported later)."""
    found: set[str] = set()
    for xml, resolved in xmls:
        if isinstance(resolved, Path):
            try:
                found.update(parse_voc_xml(xml, resolved).names)
            except ConversionError:
                continue
    return found


def voc_source(xmls: list[tuple[Path, Path | ConversionError]], images_dir: str | os.PathLike[str],
               classes: Sequence[str], *, source: str, root: Path | None = None,
               split: str | None = None, symlinks: str = "follow") -> Source:
    """The `Source` of listed VOC XML files whose images lie in ``images_dir``."""
    images = InputFolder(images_dir, missing_rule="IMAGE_MISSING", what="image folder",
                         symlinks=symlinks)
    if len(set(classes)) != len(classes):
        raise ConversionError("duplicate class names", rule="USAGE")
    class_ids = {name: i for i, name in enumerate(classes)}
    return Source(
        source_format="voc",
        source=source,
        classes=[(name, i) for i, name in enumerate(classes)],
        count=len(xmls),
        records=lambda report: _records(xmls, images, class_ids, report),
        root=root,
        metadata={"detfmt.convert.voc_boxes": "x0=xmin-1, y0=ymin-1, x1=xmax, y1=ymax"},
        box_fields={"difficult": "|u1", "truncated": "|u1"},
        split=split,
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
    module doc; ``difficult``/``truncated`` are per-box fields. Only regular files inside the two
    folders are read. Options: `ConvertOptions`. For image-set lists (splits), see
    `detfmt.convert.convert`.
    """
    opts = ConvertOptions(**options)
    annotations = InputFolder(annotations_dir, missing_rule="LABEL_MISSING",
                              what="annotation folder", symlinks=opts.symlinks)
    InputFolder(images_dir, missing_rule="IMAGE_MISSING", what="image folder")
    xmls = list_xmls(annotations)
    if classes is None:
        classes = sorted(collect_classes(xmls))
    root = Path(os.path.commonpath([os.path.abspath(annotations_dir),
                                    os.path.abspath(images_dir)]))
    source = voc_source(xmls, images_dir, list(classes), source=os.fspath(annotations_dir),
                        root=root, symlinks=opts.symlinks)
    return convert_source(source, dst, opts)
