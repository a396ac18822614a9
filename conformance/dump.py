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
    """Verify the dataset at ``path`` completely, then describe every sample.

    Raises:
        detfmt.DetfmtError: the dataset violates a rule (``.rule`` names it).
    """
    import detfmt

    detfmt.verify(path)
    header = json.loads((Path(path) / "header.json").read_bytes())
    samples = []
    with detfmt.open(path) as dataset:
        box_fields = [field["name"] for field in header.get("box_fields", [])]
        image_fields = list(header.get("image_fields", []))
        for i in range(len(dataset)):
            sample = dataset[i]
            image = np.ascontiguousarray(sample.image, dtype=np.uint8)
            samples.append({
                "height": int(image.shape[0]),
                "width": int(image.shape[1]),
                "channels": int(image.shape[2]),
                "codec": dataset.codec(i),
                "count": len(sample.boxes),
                "pixels": base64.b64encode(image.tobytes()).decode("ascii"),
                "boxes_sha256": sha256(np.asarray(sample.boxes, "<f4").tobytes()),
                "classes_sha256": sha256(np.asarray(sample.classes, "<i4").tobytes()),
                "box_fields": {name: sha256(np.ascontiguousarray(sample.fields[name]).tobytes())
                               for name in box_fields},
                "image_fields": {name: _json_value(sample.fields[name]) for name in image_fields},
            })
    return {"header": header, "samples": samples}
