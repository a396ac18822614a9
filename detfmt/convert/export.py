"""detfmt -> COCO instances JSON, in the coordinates of the original images.

Each stored box is mapped back with the per-image transform the writer recorded
(stored = orig * s + t, so orig = (stored - t) / s); images keep their original ``file_name``,
``width`` and ``height`` (``orig_size``), categories their original ids, names and
supercategories, and annotations their original ids when the converter stored them (``ann_id``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from detfmt.convert.coco import ANNOTATION_ID_FIELD, read_supercategories
from detfmt.convert.errors import ConversionError
from detfmt.reading.protocol import DatasetLike

__all__ = ["coco_dict", "to_coco"]


def _open(dataset: str | os.PathLike[str] | DatasetLike) -> tuple[DatasetLike, bool]:
    from detfmt.reading.opener import open_dataset

    if isinstance(dataset, (str, os.PathLike)):
        return open_dataset(dataset), True
    return dataset, False


def _image_ids(ds: DatasetLike) -> np.ndarray:
    """COCO image ids: the stored ``source_id`` when every sample has a distinct one >= 0,
    else 1..N in dataset order."""
    n = len(ds)
    if "source_id" in ds.schema.image_fields and n:
        source = np.asarray(ds.image_field("source_id"), dtype=np.int64)
        if (source >= 0).all() and len(np.unique(source)) == n:
            return source
    return np.arange(1, n + 1, dtype=np.int64)


_BLOCK = 4096  # samples whose labels are gathered at once: bounded memory on any N


def coco_dict(ds: DatasetLike) -> dict[str, Any]:
    """Build the COCO instances dict of an opened dataset of any kind (labels only; no pixel
    is decoded; every label goes through the reader's checks)."""
    n = len(ds)
    schema = ds.schema
    category_ids = [c.source_id if c.source_id is not None else i
                    for i, c in enumerate(schema.classes)]
    if len(set(category_ids)) != len(category_ids):
        category_ids = list(range(len(schema.classes)))
    sizes = np.asarray(ds.sizes, dtype=np.int64)  # stored (h, w)
    fields = schema.image_fields
    orig = np.asarray(ds.image_field("orig_size"), np.int64) if "orig_size" in fields else sizes
    transform = (np.asarray(ds.image_field("scale_offset"), np.float64)
                 if "scale_offset" in fields else np.tile([1.0, 1.0, 0.0, 0.0], (n, 1)))
    names_stored = "file_name" in fields
    ids = _image_ids(ds)
    images, annotations = [], []
    for start in range(0, n, _BLOCK):
        labels = ds.labels(np.arange(start, min(n, start + _BLOCK)))
        for row, i in enumerate(labels.indices.tolist()):
            file_name = ds.string_field("file_name", i) if names_stored else ""
            images.append({"id": int(ids[i]), "file_name": file_name or f"{i:08d}",
                           "height": int(orig[i, 0]), "width": int(orig[i, 1])})
            keep = labels.mask[row]
            if not keep.any():
                continue
            sx, sy, tx, ty = transform[i]
            stored = labels.boxes[row][keep].astype(np.float64)
            x0 = (stored[:, 0] - tx) / sx
            y0 = (stored[:, 1] - ty) / sy
            x1 = (stored[:, 2] - tx) / sx
            y1 = (stored[:, 3] - ty) / sy
            classes = labels.classes[row][keep]
            extra = {name: values[row][keep] for name, values in labels.fields.items()}
            for j in range(len(classes)):
                w, h = float(x1[j] - x0[j]), float(y1[j] - y0[j])
                annotation = {
                    "id": int(extra[ANNOTATION_ID_FIELD][j]) if ANNOTATION_ID_FIELD in extra
                    else -1,
                    "image_id": int(ids[i]),
                    "category_id": int(category_ids[int(classes[j])]),
                    "bbox": [round(float(x0[j]), 3), round(float(y0[j]), 3), round(w, 3),
                             round(h, 3)],
                    "area": round(w * h, 3),
                    "iscrowd": int(extra["iscrowd"][j]) if "iscrowd" in extra else 0,
                    "segmentation": [],
                }
                for name, values in extra.items():
                    if name not in ("iscrowd", ANNOTATION_ID_FIELD):
                        annotation[name] = values[j].item()
                annotations.append(annotation)
    _annotation_ids(annotations)
    supercategories = read_supercategories(ds.metadata)
    return {
        "info": {"description": f"exported by detfmt from {ds.location}", "version": "1.0"},
        "images": images,
        "annotations": annotations,
        "categories": [{"id": int(cid), "name": c.name,
                        "supercategory": supercategories.get(c.name, "")}
                       for cid, c in zip(category_ids, schema.classes, strict=True)],
    }


def _annotation_ids(annotations: list[dict[str, Any]]) -> None:
    """Keep the source's annotation ids (``ann_id``) when every box has a distinct one (a merge
    of two COCO sources may repeat ids), else number the annotations 1..A."""
    ids = [a["id"] for a in annotations]
    if all(i >= 0 for i in ids) and len(set(ids)) == len(ids):
        return
    for number, annotation in enumerate(annotations, 1):
        annotation["id"] = number


def to_coco(dataset: str | os.PathLike[str] | DatasetLike,
            out_json: str | os.PathLike[str]) -> dict[str, int]:
    """Write a detfmt dataset (a path, URL or opened dataset of any kind) as a COCO instances
    JSON file.

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
