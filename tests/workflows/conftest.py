"""Real datasets converted once per session for the workflow tests (issue 13): the bundled chess
sample (always present) and, when ../shared/data holds them, coco128 (YOLO), a chess-coco subset
(COCO, Roboflow export) and raccoon (Pascal VOC). Tests only read them."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import detfmt
from detfmt import convert
from tests.convert.conftest import shared_dataset

SAMPLE = Path(__file__).resolve().parents[2] / "detfmt" / "samples" / "chess"


def _quiet(**options):
    return {"progress": False, "workers": 2, "fingerprint": True, **options}


@pytest.fixture(scope="session")
def chess_sample(tmp_path_factory) -> Path:
    """The bundled 8-image chess sample (COCO JSON), stored as JPEG at 256 px."""
    out = tmp_path_factory.mktemp("sample") / "chess"
    convert.from_coco(SAMPLE / "annotations.coco.json", SAMPLE, out, max_side=256,
                      codec="jpeg", **_quiet())
    return out


@pytest.fixture(scope="session")
def coco128(tmp_path_factory) -> Path:
    """coco128 (YOLO txt labels, 80 classes), JPEG at 160 px."""
    root = shared_dataset("coco128-yolo")
    out = tmp_path_factory.mktemp("coco128") / "coco128"
    convert.from_yolo(root / "images", root / "object_detection" / "labels", out,
                      names=root / "object_detection" / "config.yaml", max_side=160,
                      codec="jpeg", **_quiet())
    return out


@pytest.fixture(scope="session")
def chess_coco_json(tmp_path_factory) -> tuple[Path, Path]:
    """(instances JSON of the first 16 images of chess-coco's valid split, image folder)."""
    root = shared_dataset("chess-coco") / "valid"
    data = json.loads((root / "_annotations.coco.json").read_text())
    keep = {image["id"] for image in data["images"][:16]}
    data["images"] = [i for i in data["images"] if i["id"] in keep]
    data["annotations"] = [a for a in data["annotations"] if a["image_id"] in keep]
    path = tmp_path_factory.mktemp("chess_json") / "instances.json"
    path.write_text(json.dumps(data))
    return path, root


@pytest.fixture(scope="session")
def chess_coco(chess_coco_json, tmp_path_factory) -> Path:
    """16 chess-coco images (COCO with annotation ids and supercategories), zstd at 256 px."""
    path, images = chess_coco_json
    out = tmp_path_factory.mktemp("chess_coco") / "chess"
    convert.from_coco(path, images, out, max_side=256, codec="zstd", **_quiet())
    return out


@pytest.fixture(scope="session")
def raccoon(tmp_path_factory) -> Path:
    """raccoon (Pascal VOC, one class, difficult/truncated fields), raw at 128 px."""
    root = shared_dataset("raccoon")
    out = tmp_path_factory.mktemp("raccoon") / "raccoon"
    convert.from_voc(root / "annotations", root / "images", out, max_side=128, codec="raw",
                     **_quiet())
    return out


def labels_by_name(path) -> dict[str, list[tuple]]:
    """{file name: sorted [(class name, rounded box, per-box fields...)]} of a dataset: what a
    copy must keep, whatever order or class ids it uses."""
    result = {}
    with detfmt.open(path) as ds:
        names = ds.class_names
        labels = ds.labels(np.arange(len(ds)))
        for row, i in enumerate(labels.indices.tolist()):
            keep = labels.mask[row]
            rows = []
            for k in np.flatnonzero(keep).tolist():
                extra = tuple(sorted((f, int(v[row][k])) for f, v in labels.fields.items()))
                rows.append((names[int(labels.classes[row][k])],
                             tuple(np.round(labels.boxes[row][k], 3).tolist()), extra))
            result[ds.string_field("file_name", i)] = sorted(rows)
    return result


def payloads_by_name(path) -> dict[str, bytes]:
    with detfmt.open(path) as ds:
        return {ds.string_field("file_name", i): bytes(ds.payload(i)) for i in range(len(ds))}
