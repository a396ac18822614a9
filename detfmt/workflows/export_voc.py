"""``detfmt export voc DS OUT``: a Pascal VOC folder (JPEGImages, Annotations, ImageSets/Main).

Each image becomes ``JPEGImages/<stem>.<ext>`` and ``Annotations/<stem>.xml`` (size, and one
``<object>`` per box with ``name``, ``pose``, ``truncated``, ``difficult`` and ``bndbox``);
``ImageSets/Main/<split>.txt`` lists the stems of each split (a split root exports every split;
a single dataset exports under its card's split name, else ``train``). Stems are unique across
splits, as VOC keeps every image in one folder. Boxes are VOC's 1-based inclusive pixel indices
of the exported image (`detfmt.convert.voc.to_voc_box`, the inverse of the import rule), written
as integers when they are whole and with up to 3 decimals otherwise; ``difficult`` and
``truncated`` come from the per-box fields of those names (0 without them).
"""

from __future__ import annotations

import dataclasses
import os
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np

from detfmt.convert.voc import to_voc_box
from detfmt.workflows._copy import Source, label_blocks
from detfmt.workflows._export import ExportImages, ImageFormat, export_parts, staged_folder

__all__ = ["VocExport", "export_voc"]


@dataclasses.dataclass
class VocExport:
    """What `export_voc` wrote."""

    path: Path
    splits: dict[str, int]  # images per split
    boxes: int
    images_copied: int
    images_encoded: int

    def lines(self) -> list[str]:
        parts = ", ".join(f"{name} {count}" for name, count in self.splits.items())
        return [f"{self.path}: {parts} images, {self.boxes} boxes",
                f"  images: {self.images_copied} copied as stored, {self.images_encoded} "
                "encoded"]


def export_voc(
    src: Source,
    out: str | os.PathLike[str],
    *,
    image_format: ImageFormat = "png",
    overwrite: bool = False,
) -> VocExport:
    """Export a dataset (or every split of a split root) as a Pascal VOC folder.

    Args:
        src: a dataset path, a split root, a URL or an opened dataset.
        out: the folder to create (it appears complete or not at all).
        image_format: how raw and zstd images are encoded ("png" or "jpg"); JPEG and PNG
            payloads are written as stored.
        overwrite: replace an earlier export at ``out``.
    """
    images = ExportImages(image_format)
    with export_parts(src) as parts, staged_folder(out, overwrite) as stage:
        for folder in ("JPEGImages", "Annotations", "ImageSets/Main"):
            (stage / folder).mkdir(parents=True)
        taken: set[str] = set()
        counts, boxes = {}, 0
        for part in parts:
            stems, written = _export_part(part.ds, stage, images, taken)
            (stage / "ImageSets" / "Main" / f"{part.name}.txt").write_text(
                "".join(f"{stem}\n" for stem in stems), encoding="utf-8")
            counts[part.name] = len(stems)
            boxes += written
    return VocExport(Path(os.path.abspath(os.fspath(out))), counts, boxes, images.copied,
                     images.encoded)


def _export_part(ds, stage: Path, images: ExportImages, taken: set[str]
                 ) -> tuple[list[str], int]:
    sizes = np.asarray(ds.sizes)
    names = ds.class_names
    stems, written = [], 0
    for labels in label_blocks(ds, np.arange(len(ds), dtype=np.int64)):
        for row, i in enumerate(labels.indices.tolist()):
            keep = labels.mask[row]
            stem = images.stem(ds, i, taken)
            file_name = images.write(ds, i, stage / "JPEGImages", stem)
            height, width = (int(v) for v in sizes[i])
            flags = {key: labels.fields[key][row][keep] if key in labels.fields else None
                     for key in ("difficult", "truncated")}
            xml = _annotation(file_name, width, height, labels.boxes[row][keep],
                              [names[c] for c in labels.classes[row][keep].tolist()], flags)
            ET.ElementTree(xml).write(stage / "Annotations" / f"{stem}.xml", encoding="utf-8",
                                      xml_declaration=False)
            stems.append(stem)
            written += int(keep.sum())
    return stems, written


def _annotation(file_name: str, width: int, height: int, boxes: np.ndarray, names: list[str],
                flags: dict[str, np.ndarray | None]) -> ET.Element:
    root = ET.Element("annotation")
    ET.SubElement(root, "folder").text = "JPEGImages"
    ET.SubElement(root, "filename").text = file_name
    size = ET.SubElement(root, "size")
    for key, value in (("width", width), ("height", height), ("depth", 3)):
        ET.SubElement(size, key).text = str(value)
    ET.SubElement(root, "segmented").text = "0"
    for k, (box, name) in enumerate(zip(boxes.astype(np.float64).tolist(), names, strict=True)):
        obj = ET.SubElement(root, "object")
        ET.SubElement(obj, "name").text = name
        ET.SubElement(obj, "pose").text = "Unspecified"
        for key in ("truncated", "difficult"):
            values = flags[key]
            ET.SubElement(obj, key).text = str(int(values[k] != 0) if values is not None else 0)
        bndbox = ET.SubElement(obj, "bndbox")
        for key, value in zip(("xmin", "ymin", "xmax", "ymax"), to_voc_box(box), strict=True):
            ET.SubElement(bndbox, key).text = _number(value)
    ET.indent(root)
    return root


def _number(value: float) -> str:
    rounded = round(value, 3)
    if rounded == int(rounded):
        return str(int(rounded))
    return f"{rounded:.3f}".rstrip("0")
