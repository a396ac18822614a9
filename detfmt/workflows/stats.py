"""``detfmt stats DS``: what is in a dataset, from its labels only (no pixel is decoded).

Images and boxes per class; the boxes-per-image histogram; box width, height, area and aspect
(width / height) percentiles in stored pixels and in the original image's pixels (through each
image's ``scale_offset``); COCO's small / medium / large counts (box area below 32², below 96²,
else; in original pixels, as COCO counts them, and in stored pixels, what the model sees); the
distribution of image sizes, stored and original. Labels are read a bounded block at a time
through the reader's checks; the per-box values are kept as float32 arrays to take percentiles.
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Any

import numpy as np

from detfmt.reading.protocol import DatasetLike
from detfmt.workflows._copy import Source, label_blocks, opened

__all__ = ["PERCENTILES", "BoxTable", "compute_stats", "format_stats", "stats"]

PERCENTILES = (0, 1, 5, 25, 50, 75, 95, 99, 100)
COCO_SMALL, COCO_MEDIUM = 32**2, 96**2
TOP_SIZES = 10


@dataclasses.dataclass
class BoxTable:
    """Every box of a dataset as flat arrays (what the statistics and the plot are made of):
    ``boxes`` (T, 4) stored xyxy, ``original`` (T, 4) xyxy in original pixels, ``classes`` (T,),
    ``image`` (T,) the sample each box belongs to; per sample ``sizes`` (N, 2) stored (h, w),
    ``orig_sizes`` (N, 2) and ``counts`` (N,)."""

    boxes: np.ndarray
    original: np.ndarray
    classes: np.ndarray
    image: np.ndarray
    sizes: np.ndarray
    orig_sizes: np.ndarray
    counts: np.ndarray
    class_names: list[str]
    location: str

    @classmethod
    def read(cls, ds: DatasetLike) -> BoxTable:
        n = len(ds)
        fields = ds.schema.image_fields
        sizes = np.asarray(ds.sizes, np.int64).reshape(n, 2)
        orig = np.asarray(ds.image_field("orig_size"), np.int64) if "orig_size" in fields \
            else sizes
        transform = (np.asarray(ds.image_field("scale_offset"), np.float64)
                     if "scale_offset" in fields else np.tile([1.0, 1.0, 0.0, 0.0], (n, 1)))
        boxes, classes, image = [], [], []
        for labels in label_blocks(ds, np.arange(n, dtype=np.int64)):
            mask = labels.mask
            boxes.append(labels.boxes[mask])
            classes.append(labels.classes[mask])
            image.append(np.repeat(labels.indices[:, None], mask.shape[1], axis=1)[mask])
        stored = np.concatenate(boxes).astype(np.float32) if boxes else np.zeros((0, 4),
                                                                                  np.float32)
        owner = np.concatenate(image).astype(np.int64) if image else np.zeros(0, np.int64)
        sx, sy, tx, ty = (transform[owner, k][:, None] for k in range(4))
        original = ((stored.astype(np.float64) - np.hstack([tx, ty, tx, ty]))
                    / np.hstack([sx, sy, sx, sy])).astype(np.float32)
        counts = np.bincount(owner, minlength=n).astype(np.int64)
        return cls(stored, original, np.concatenate(classes).astype(np.int64) if classes else
                   np.zeros(0, np.int64), owner, sizes, orig, counts, list(ds.class_names),
                   ds.location)


def _percentiles(values: np.ndarray) -> dict[str, float] | None:
    if not len(values):
        return None
    found = np.percentile(values.astype(np.float64), PERCENTILES)
    return {f"p{p}": round(float(v), 3) for p, v in zip(PERCENTILES, found, strict=True)}


def _box_sizes(xyxy: np.ndarray) -> dict[str, Any]:
    width = (xyxy[:, 2] - xyxy[:, 0]).astype(np.float64)
    height = (xyxy[:, 3] - xyxy[:, 1]).astype(np.float64)
    area = width * height
    proper = (width > 0) & (height > 0)
    return {
        "width": _percentiles(width),
        "height": _percentiles(height),
        "area": _percentiles(area),
        "aspect": _percentiles(width[proper] / height[proper]),
        "coco_area": {"small": int((area < COCO_SMALL).sum()),
                      "medium": int(((area >= COCO_SMALL) & (area < COCO_MEDIUM)).sum()),
                      "large": int((area >= COCO_MEDIUM).sum())},
    }


def _image_sizes(sizes: np.ndarray) -> dict[str, Any]:
    common = collections.Counter(map(tuple, sizes.tolist())).most_common(TOP_SIZES)
    return {"height": _percentiles(sizes[:, 0]), "width": _percentiles(sizes[:, 1]),
            "distinct": len({tuple(s) for s in sizes.tolist()}),
            "most_common": [{"height": h, "width": w, "images": c} for (h, w), c in common]}


def compute_stats(ds: DatasetLike, table: BoxTable | None = None) -> dict[str, Any]:
    """The statistics of an opened dataset as plain data (what ``detfmt stats --json`` prints;
    the keys are documented in docs/workflows.md)."""
    table = table or BoxTable.read(ds)
    n, num_classes = len(ds), len(table.class_names)
    boxes_per_class = np.bincount(table.classes, minlength=num_classes)
    pairs = np.unique(table.image * max(num_classes, 1) + table.classes)
    images_per_class = np.bincount(pairs % max(num_classes, 1), minlength=num_classes)
    histogram = np.bincount(table.counts, minlength=1)
    degenerate = ((table.boxes[:, 2] <= table.boxes[:, 0]) |
                  (table.boxes[:, 3] <= table.boxes[:, 1]))
    return {
        "path": ds.location,
        "num_samples": n,
        "num_boxes": len(table.classes),
        "images_without_boxes": int((table.counts == 0).sum()),
        "degenerate_boxes": int(degenerate.sum()),
        "classes": [{"id": i, "name": name, "images": int(images_per_class[i]),
                     "boxes": int(boxes_per_class[i])}
                    for i, name in enumerate(table.class_names)],
        "boxes_per_image": {
            "mean": round(float(table.counts.mean()), 3) if n else 0.0,
            "percentiles": _percentiles(table.counts),
            "histogram": {str(k): int(v) for k, v in enumerate(histogram) if v},
        },
        "box_size": {"stored": _box_sizes(table.boxes), "original": _box_sizes(table.original)},
        "image_size": {"stored": _image_sizes(table.sizes),
                       "original": _image_sizes(table.orig_sizes)},
    }


def stats(src: Source) -> dict[str, Any]:
    """`compute_stats` of a dataset path, URL or opened dataset."""
    with opened(src) as ds:
        return compute_stats(ds)


def format_stats(data: dict[str, Any], *, max_classes: int = 100) -> list[str]:
    """The statistics as the lines ``detfmt stats`` prints."""
    lines = [f"{data['path']}: {data['num_samples']} images, {data['num_boxes']} boxes, "
             f"{data['images_without_boxes']} images without boxes"
             + (f", {data['degenerate_boxes']} zero-area boxes" if data["degenerate_boxes"]
                else "")]
    classes = data["classes"]
    width = max([len(c["name"]) for c in classes[:max_classes]] + [5])
    lines.append(f"  classes ({len(classes)}):  {'name':<{width}} {'images':>8} {'boxes':>8}")
    for c in sorted(classes, key=lambda c: -c["boxes"])[:max_classes]:
        lines.append(f"    {c['id']:>4} {c['name']:<{width}} {c['images']:>8} {c['boxes']:>8}")
    if len(classes) > max_classes:
        lines.append(f"    ... {len(classes) - max_classes} more (--json lists all)")
    per_image = data["boxes_per_image"]
    lines.append(f"  boxes per image: mean {per_image['mean']:g}, "
                 + _short(per_image["percentiles"]))
    shown = list(per_image["histogram"].items())
    lines.append("    histogram: " + ", ".join(f"{k}: {v}" for k, v in shown[:16])
                 + (" ..." if len(shown) > 16 else ""))
    for frame in ("stored", "original"):
        sizes = data["box_size"][frame]
        lines.append(f"  box size, {frame} pixels:")
        for key in ("width", "height", "area", "aspect"):
            lines.append(f"    {key:<7} {_short(sizes[key])}")
        coco = sizes["coco_area"]
        lines.append(f"    COCO small {coco['small']}, medium {coco['medium']}, "
                     f"large {coco['large']}")
    for frame in ("stored", "original"):
        sizes = data["image_size"][frame]
        common = ", ".join(f"{s['width']}x{s['height']} ({s['images']})"
                           for s in sizes["most_common"][:5])
        lines.append(f"  image size, {frame}: height {_short(sizes['height'])}")
        lines.append(f"    width {_short(sizes['width'])}; {sizes['distinct']} distinct, "
                     f"most common (WxH): {common}")
    return lines


def _short(percentiles: dict[str, float] | None) -> str:
    if percentiles is None:
        return "none"
    keys = ("p0", "p5", "p50", "p95", "p100")
    names = ("min", "p5", "median", "p95", "max")
    return ", ".join(f"{name} {percentiles[key]:g}" for name, key in zip(names, keys,
                                                                          strict=True))
