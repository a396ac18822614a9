"""The canonical dump of a dataset (conformance/README.md), as produced by detfmt's own reader."""

from __future__ import annotations

import base64
import hashlib
import json
import os
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["canonical_dump", "sha256"]


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _json_value(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return value


def canonical_dump(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Verify the dataset (or 1.1 sharded root) at ``path`` completely, then describe every sample.

    Raises:
        detfmt.DetfmtError: the dataset violates a rule (``.rule`` names it).
    """
    import detfmt

    detfmt.verify(path)
    with detfmt.open(path) as dataset:
        if isinstance(dataset, detfmt.ShardedDataset):
            return _sharded_dump(path, dataset)
        header = json.loads((Path(path) / "header.json").read_bytes())
        box_fields = [field["name"] for field in header.get("box_fields", [])]
        image_fields = list(header.get("image_fields", []))
        samples = []
        for i in range(len(dataset)):
            sample = dataset[i]
            image = np.ascontiguousarray(sample.image, dtype=np.uint8)
            samples.append(_record(image, dataset.codec(i), sample.boxes, sample.classes,
                                   {name: sample.fields[name] for name in box_fields},
                                   {name: sample.fields[name] for name in image_fields}))
    return {"header": header, "samples": samples}


def _record(image: np.ndarray, codec: str, boxes: Any, classes: Any, box_fields: dict[str, Any],
            image_fields: dict[str, Any]) -> dict[str, Any]:
    return {
        "height": int(image.shape[0]),
        "width": int(image.shape[1]),
        "channels": int(image.shape[2]),
        "codec": codec,
        "count": len(boxes),
        "pixels": base64.b64encode(image.tobytes()).decode("ascii"),
        "boxes_sha256": sha256(np.asarray(boxes, "<f4").tobytes()),
        "classes_sha256": sha256(np.asarray(classes, "<i4").tobytes()),
        "box_fields": {name: sha256(np.ascontiguousarray(value).tobytes())
                       for name, value in box_fields.items()},
        "image_fields": {name: _json_value(value) for name, value in image_fields.items()},
    }


def _sharded_dump(path: str | os.PathLike[str], dataset: Any) -> dict[str, Any]:
    """The 1.1 dump: the manifest, then every sample in global order. Pixels and labels come from
    one ``batch`` over all samples, so the cross-shard gather and its re-padding (S-12) are what
    is checked; the batch must agree with ``dataset[i]`` sample by sample."""
    manifest = json.loads((Path(path) / "manifest.json").read_bytes())
    schema = manifest["schema"]
    box_fields = [field["name"] for field in schema.get("box_fields", [])]
    image_fields = list(schema.get("image_fields", []))
    n = len(dataset)
    samples: list[dict[str, Any]] = []
    if not n:
        return {"manifest": manifest, "samples": samples}
    batch = dataset.batch(np.arange(n))
    counts = batch.mask.sum(axis=1)
    m = int(counts.max())
    if batch.boxes.shape != (n, m, 4) or batch.classes.shape != (n, m):
        raise AssertionError(f"batch labels are {batch.boxes.shape}, not re-padded to {m} (S-12)")
    for i in range(n):
        count = int(counts[i])
        h, w = (int(v) for v in batch.sizes[i])
        if not (batch.mask[i, :count].all() and (batch.classes[i, count:] == -1).all()
                and not batch.boxes[i, count:].any()):
            raise AssertionError(f"sample {i}: batch padding is not classes -1, boxes 0 (S-12)")
        sample = dataset[i]
        image = np.ascontiguousarray(batch.images[i, :h, :w], dtype=np.uint8)
        single = (np.array_equal(image, sample.image)
                  and np.array_equal(batch.boxes[i, :count], sample.boxes)
                  and np.array_equal(batch.classes[i, :count], sample.classes))
        if not single:
            raise AssertionError(f"sample {i}: the batch differs from dataset[{i}]")
        k, j = dataset.locate(i)
        samples.append(_record(image, dataset.shard(k).codec(j), batch.boxes[i, :count],
                               batch.classes[i, :count],
                               {name: batch.fields[name][i, :count] for name in box_fields},
                               {name: sample.fields[name] for name in image_fields}))
    return {"manifest": manifest, "samples": samples}
