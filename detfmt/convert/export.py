"""detfmt -> COCO instances JSON, in the coordinates of the original images.

Each stored box is mapped back with the per-image transform the writer recorded
(stored = orig * s + t, so orig = (stored - t) / s); images keep their original ``file_name``,
``width`` and ``height`` (``orig_size``) and categories their original ids and names.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from detfmt.convert.errors import ConversionError

__all__ = ["coco_dict", "to_coco"]


def _open(dataset: Any):
    import detfmt

    if isinstance(dataset, (str, os.PathLike)):
        return detfmt.open(dataset), True
    return dataset, False


def _image_ids(ds: Any) -> np.ndarray:
    """COCO image ids: the stored ``source_id`` when every sample has a distinct one >= 0,
    else 1..N in dataset order."""
    n = len(ds)
    source = ds.image_fields.get("source_id") if hasattr(ds, "image_fields") else None
    if source is not None and n and (np.asarray(source) >= 0).all() and len(
            np.unique(source)) == n:
        return np.asarray(source, dtype=np.int64)
    return np.arange(1, n + 1, dtype=np.int64)


def coco_dict(ds: Any) -> dict[str, Any]:
    """Build the COCO instances dict of an opened dataset (labels only; no pixel is decoded)."""
    n = len(ds)
    header = ds.header
    category_ids = [c.source_id if c.source_id is not None else i
                    for i, c in enumerate(header.classes)]
    if len(set(category_ids)) != len(category_ids):
        category_ids = list(range(len(header.classes)))
    sizes = np.asarray(ds.sizes, dtype=np.int64)  # stored (h, w)
    fields = getattr(ds, "image_fields", {})
    orig = np.asarray(fields["orig_size"], np.int64) if "orig_size" in fields else sizes
    transform = (np.asarray(fields["scale_offset"], np.float64) if "scale_offset" in fields
                 else np.tile([1.0, 1.0, 0.0, 0.0], (n, 1)))
    names_stored = "file_name" in header.image_fields
    ids = _image_ids(ds)
    counts = np.asarray(ds.counts)
    box_fields = dict(getattr(ds, "box_fields", {}))
    images, annotations = [], []
    for i in range(n):
        file_name = ds.string_field("file_name", i) if names_stored else ""
        images.append({"id": int(ids[i]), "file_name": file_name or f"{i:08d}",
                       "height": int(orig[i, 0]), "width": int(orig[i, 1])})
        k = int(counts[i])
        if k == 0:
            continue
        sx, sy, tx, ty = transform[i]
        stored = np.asarray(ds.boxes[i, :k], dtype=np.float64)
        x0 = (stored[:, 0] - tx) / sx
        y0 = (stored[:, 1] - ty) / sy
        x1 = (stored[:, 2] - tx) / sx
        y1 = (stored[:, 3] - ty) / sy
        classes = np.asarray(ds.classes[i, :k])
        extra = {name: np.asarray(values[i, :k]) for name, values in box_fields.items()}
        for j in range(k):
            w, h = float(x1[j] - x0[j]), float(y1[j] - y0[j])
            annotation = {
                "id": len(annotations) + 1,
                "image_id": int(ids[i]),
                "category_id": int(category_ids[int(classes[j])]),
                "bbox": [round(float(x0[j]), 3), round(float(y0[j]), 3), round(w, 3),
                         round(h, 3)],
                "area": round(w * h, 3),
                "iscrowd": int(extra["iscrowd"][j]) if "iscrowd" in extra else 0,
                "segmentation": [],
            }
            for name, values in extra.items():
                if name != "iscrowd":
                    annotation[name] = values[j].item()
            annotations.append(annotation)
    return {
        "info": {"description": f"exported by detfmt from {getattr(ds, 'path', '')}",
                 "version": "1.0"},
        "images": images,
        "annotations": annotations,
        "categories": [{"id": int(cid), "name": c.name, "supercategory": ""}
                       for cid, c in zip(category_ids, header.classes, strict=True)],
    }


def to_coco(dataset: Any, out_json: str | os.PathLike[str]) -> dict[str, int]:
    """Write a detfmt dataset (a path or an opened `Dataset`) as a COCO instances JSON file.

    Boxes are mapped back to the original image coordinates (within float32 precision, well
    under 0.5 px); per-box fields other than ``iscrowd`` (e.g. VOC's ``difficult``) are kept as
    extra annotation keys. Returns {"images": N, "annotations": A}.
    """
    ds, opened = _open(dataset)
    try:
        data = coco_dict(ds)
    finally:
        if opened:
            ds.close()
    out = Path(out_json)
    try:
        out.write_bytes(msgspec.json.encode(data))
    except OSError as error:
        raise ConversionError(f"cannot write {out}: {error.strerror}", rule="WRITE_FAILED",
                              path=out) from error
    return {"images": len(data["images"]), "annotations": len(data["annotations"])}
