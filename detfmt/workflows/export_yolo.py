"""``detfmt export yolo DS OUT``: an Ultralytics dataset (images, labels, data.yaml).

Layout: ``OUT/images/<split>/<stem>.<ext>``, ``OUT/labels/<split>/<stem>.txt`` (one
``class cx cy w h`` row per box, normalised to the exported image) and ``OUT/data.yaml`` with
``path`` (OUT, absolute, as Ultralytics resolves it), one key per split and ``names``. A split
root exports every split under its name (train and val stay apart); a single dataset exports
under its card's split name, else ``train``. An image without boxes gets an empty label file
(a background image, as Ultralytics reads it). Crowd boxes (``iscrowd`` 1) are left out, as
Ultralytics' own COCO conversion does, unless ``keep_crowd``; the report counts them.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import numpy as np
import yaml

from detfmt import errors
from detfmt.workflows._copy import Source, label_blocks
from detfmt.workflows._export import ExportImages, ImageFormat, export_parts, staged_folder

__all__ = ["YoloExport", "export_yolo"]


@dataclasses.dataclass
class YoloExport:
    """What `export_yolo` wrote."""

    path: Path
    splits: dict[str, int]  # images per split
    boxes: int
    crowd_skipped: int
    images_copied: int  # payload bytes written as they were stored (JPEG, PNG)
    images_encoded: int  # raw/zstd images encoded once

    def lines(self) -> list[str]:
        parts = ", ".join(f"{name} {count}" for name, count in self.splits.items())
        lines = [f"{self.path}: {parts} images, {self.boxes} boxes; data.yaml written",
                 f"  images: {self.images_copied} copied as stored, {self.images_encoded} "
                 "encoded"]
        if self.crowd_skipped:
            lines.append(f"  {self.crowd_skipped} crowd boxes left out (keep them with "
                         "keep_crowd=True)")
        return lines


def export_yolo(
    src: Source,
    out: str | os.PathLike[str],
    *,
    image_format: ImageFormat = "png",
    keep_crowd: bool = False,
    overwrite: bool = False,
) -> YoloExport:
    """Export a dataset (or every split of a split root) as an Ultralytics YOLO dataset.

    Args:
        src: a dataset path, a split root, a URL or an opened dataset.
        out: the folder to create (it appears complete or not at all).
        image_format: how raw and zstd images are encoded ("png", lossless, or "jpg"); JPEG
            and PNG payloads are written as stored.
        keep_crowd: export crowd boxes (``iscrowd`` 1) as ordinary boxes.
        overwrite: replace an earlier export at ``out``.
    """
    images = ExportImages(image_format)
    with export_parts(src) as parts, staged_folder(out, overwrite) as stage:
        names = parts[0].ds.class_names
        for part in parts[1:]:
            if part.ds.class_names != names:
                raise errors.IncompatibleDatasetsError(
                    f"split {part.name!r} has other classes than split {parts[0].name!r}; a "
                    "YOLO dataset has one class list", path=part.ds.location)
        counts, boxes, crowd = {}, 0, 0
        for part in parts:
            image_dir = stage / "images" / part.name
            label_dir = stage / "labels" / part.name
            image_dir.mkdir(parents=True)
            label_dir.mkdir(parents=True)
            written, skipped = _export_part(part.ds, image_dir, label_dir, images, keep_crowd)
            counts[part.name] = len(part.ds)
            boxes += written
            crowd += skipped
        target = Path(os.path.abspath(os.fspath(out)))
        data = {"path": str(target), **{name: f"images/{name}" for name in counts},
                "nc": len(names), "names": dict(enumerate(names))}
        text = yaml.safe_dump(data, sort_keys=False, allow_unicode=True)
        (stage / "data.yaml").write_text(f"# exported by detfmt from "
                                         f"{', '.join(p.ds.location for p in parts)}\n" + text,
                                         encoding="utf-8")
    return YoloExport(target, counts, boxes, crowd, images.copied, images.encoded)


def _export_part(ds, image_dir: Path, label_dir: Path, images: ExportImages,
                 keep_crowd: bool) -> tuple[int, int]:
    sizes = np.asarray(ds.sizes)
    taken: set[str] = set()
    written = skipped = 0
    for labels in label_blocks(ds, np.arange(len(ds), dtype=np.int64)):
        crowd_field = labels.fields.get("iscrowd")
        for row, i in enumerate(labels.indices.tolist()):
            keep = labels.mask[row].copy()
            if crowd_field is not None and not keep_crowd:
                crowd = keep & (crowd_field[row] != 0)
                skipped += int(crowd.sum())
                keep &= ~crowd
            stem = images.stem(ds, i, taken)
            images.write(ds, i, image_dir, stem)
            height, width = (float(v) for v in sizes[i])
            box = labels.boxes[row][keep].astype(np.float64)
            classes = labels.classes[row][keep]
            cx = (box[:, 0] + box[:, 2]) / 2 / width
            cy = (box[:, 1] + box[:, 3]) / 2 / height
            w = (box[:, 2] - box[:, 0]) / width
            h = (box[:, 3] - box[:, 1]) / height
            rows = [f"{int(c)} {x:.6f} {y:.6f} {bw:.6f} {bh:.6f}\n"
                    for c, x, y, bw, bh in zip(classes.tolist(), cx.tolist(), cy.tolist(),
                                               w.tolist(), h.tolist(), strict=True)]
            (label_dir / f"{stem}.txt").write_text("".join(rows), encoding="utf-8")
            written += len(rows)
    return written, skipped
