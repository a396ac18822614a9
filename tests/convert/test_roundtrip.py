"""End to end with the real writer: source -> detfmt -> COCO JSON, every box within 0.5 px.

Real datasets come from ../shared/data (skipped cleanly when absent); the bundled chess sample
always runs.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import detfmt
from detfmt.convert import ConversionError, from_coco, from_voc, from_yolo, to_coco
from detfmt.convert.voc import parse_voc_xml
from detfmt.writing import image as _image
from tests.convert.conftest import save_image, shared_dataset, write_coco

SAMPLE = Path(detfmt.__file__).parent / "samples" / "chess"
TOL = 0.5


def _by_image(coco: dict) -> dict:
    boxes = defaultdict(list)
    for a in coco["annotations"]:
        boxes[a["image_id"]].append((a["category_id"], a.get("iscrowd", 0), a["bbox"]))
    return boxes


def _assert_coco_roundtrip(original: dict, exported: dict) -> None:
    assert [(c["id"], c["name"]) for c in sorted(original["categories"], key=lambda c: c["id"])
            ] == [(c["id"], c["name"]) for c in exported["categories"]]
    assert {(i["id"], i["file_name"], i["width"], i["height"]) for i in original["images"]} == {
        (i["id"], i["file_name"], i["width"], i["height"]) for i in exported["images"]}
    assert len(original["annotations"]) == len(exported["annotations"])
    want, got = _by_image(original), _by_image(exported)
    for image_id, items in want.items():
        theirs = got[image_id]
        assert [c for c, _, _ in items] == [c for c, _, _ in theirs]
        assert [k for _, k, _ in items] == [k for _, k, _ in theirs]
        a = np.array([b for _, _, b in items], np.float64)
        b = np.array([b for _, _, b in theirs], np.float64)
        a[:, 2:] += a[:, :2]  # compare corners, not widths
        b[:, 2:] += b[:, :2]
        assert np.abs(a - b).max() <= TOL, (image_id, np.abs(a - b).max())


@pytest.mark.parametrize("codec", ["raw", "zstd", "png"])
def test_bundled_chess_coco_roundtrip(tmp_path, codec):
    src = SAMPLE / "annotations.coco.json"
    report = from_coco(src, SAMPLE, tmp_path / "ds", codec=codec, max_side=200, workers=0)
    assert report.balanced and report.images_kept == 8 and report.boxes_kept == 34
    detfmt.verify(tmp_path / "ds")
    with detfmt.open(tmp_path / "ds") as ds:
        assert max(ds.sizes.max(axis=0)) == 200  # really resized, so the inverse map is tested
        assert [c.source_id for c in ds.header.classes] == list(range(14))
        assert "iscrowd" in [f.name for f in ds.schema.box_fields]
    to_coco(tmp_path / "ds", tmp_path / "out.json")
    _assert_coco_roundtrip(json.loads(src.read_text()),
                           json.loads((tmp_path / "out.json").read_text()))


@pytest.mark.parametrize("codec", ["raw", "zstd", "png"])
def test_chess_coco_roundtrip(tmp_path, codec):
    root = shared_dataset("chess-coco") / "valid"
    src = root / "_annotations.coco.json"
    report = from_coco(src, root, tmp_path / "ds", codec=codec, max_side=128, workers=2)
    assert report.balanced and (report.images_kept, report.boxes_kept) == (58, 386)
    assert not report.images_skipped and not report.boxes_dropped
    to_coco(tmp_path / "ds", tmp_path / "out.json")
    _assert_coco_roundtrip(json.loads(src.read_text()),
                           json.loads((tmp_path / "out.json").read_text()))


def test_coco128_yolo_roundtrip(tmp_path):
    root = shared_dataset("coco128-yolo")
    labels = root / "object_detection" / "labels"
    report = from_yolo(root / "images", labels, tmp_path / "ds",
                       names=root / "object_detection" / "config.yaml", codec="zstd",
                       max_side=160, workers=2)
    # the dataset's documented quirks, each accounted for
    assert report.balanced and report.images_kept == 128 and report.boxes_kept == 929
    assert report.notes["image_without_label"] == 2 and report.notes["label_without_image"] == 2
    assert sorted(Path(i.path).stem for i in report.issues
                  if i.reason == "image_without_label") == ["000000000250", "000000000508"]
    assert set(report.boxes_dropped) == {"label_without_image"}
    assert set(report.boxes_fixed) <= {"box_edge_rounding"}  # only float noise at the edges
    to_coco(tmp_path / "ds", tmp_path / "out.json")
    exported = json.loads((tmp_path / "out.json").read_text())
    assert [c["id"] for c in exported["categories"]] == list(range(80))
    got = _by_image(exported)
    for image in exported["images"]:
        path = root / "images" / image["file_name"]
        width, height = Image.open(path).size
        assert (image["width"], image["height"]) == (width, height)
        label = labels / Path(image["file_name"]).with_suffix(".txt")
        rows = np.loadtxt(label, ndmin=2) if label.exists() else np.zeros((0, 5))
        theirs = got[image["id"]]
        assert [int(c) for c in rows[:, 0]] == [c for c, _, _ in theirs]
        if len(rows):
            cx, cy, w, h = (rows[:, k] for k in range(1, 5))
            want = np.stack([(cx - w / 2) * width, (cy - h / 2) * height,
                             (cx + w / 2) * width, (cy + h / 2) * height], axis=1)
            want = np.clip(want, 0, [width, height, width, height])
            b = np.array([bb for _, _, bb in theirs], np.float64)
            b[:, 2:] += b[:, :2]
            assert np.abs(want - b).max() <= TOL


def test_raccoon_voc_roundtrip(tmp_path):
    root = shared_dataset("raccoon")
    report = from_voc(root / "annotations", root / "images", tmp_path / "ds", codec="raw",
                      max_side=128, workers=2)
    assert report.balanced and (report.images_kept, report.boxes_kept) == (200, 217)
    assert not report.boxes_fixed and not report.boxes_dropped
    to_coco(tmp_path / "ds", tmp_path / "out.json")
    exported = json.loads((tmp_path / "out.json").read_text())
    assert [c["name"] for c in exported["categories"]] == ["raccoon"]
    got = _by_image(exported)
    extras = defaultdict(list)
    for a in exported["annotations"]:
        extras[a["image_id"]].append((a["difficult"], a["truncated"]))
    for image in exported["images"]:
        ann = parse_voc_xml(root / "annotations" / Path(image["file_name"]).with_suffix(".xml"))
        assert (image["width"], image["height"]) == ann.size
        b = np.array([bb for _, _, bb in got[image["id"]]], np.float64).reshape(-1, 4)
        voc = np.stack([b[:, 0] + 1, b[:, 1] + 1, b[:, 0] + b[:, 2], b[:, 1] + b[:, 3]], axis=1)
        assert np.abs(voc - ann.boxes).max(initial=0) <= TOL
        assert extras[image["id"]] == list(zip(ann.difficult.tolist(), ann.truncated.tolist(),
                                               strict=True))


def test_corrupt_image_with_real_writer(tmp_path):
    save_image(tmp_path / "img" / "a.jpg", 64, 48)
    data = (tmp_path / "img" / "a.jpg").read_bytes()
    save_image(tmp_path / "img" / "b.jpg", 64, 48, seed=3)
    (tmp_path / "img" / "b.jpg").write_bytes(data[: len(data) // 3])
    js = write_coco(tmp_path / "a.json", [{"id": 1, "file_name": "a.jpg"},
                                          {"id": 2, "file_name": "b.jpg"}],
                    [{"image_id": 2, "category_id": 1, "bbox": [1, 1, 5, 5]}],
                    [{"id": 1, "name": "x"}])
    with pytest.raises(ConversionError) as info:
        from_coco(js, tmp_path / "img", tmp_path / "ds", workers=2)
    assert info.value.rule == "IMAGE_INVALID" and info.value.path.endswith("b.jpg")
    assert not (tmp_path / "ds").exists()
    report = from_coco(js, tmp_path / "img", tmp_path / "ds", workers=2, on_error="skip",
                       allow_empty=True)
    assert report.images_skipped == {"IMAGE_INVALID": 1}
    assert report.boxes_dropped == {"image_skipped:IMAGE_INVALID": 1}
    saved = json.loads((tmp_path / "ds.report.json").read_text())
    assert saved["balanced"] and saved["images_skipped"] == {"IMAGE_INVALID": 1}
    assert len(detfmt.open(tmp_path / "ds")) == 1


def test_exif_rotated_image_roundtrip(tmp_path):
    pixels = np.zeros((20, 40, 3), np.uint8)
    pixels[0:5, 0:10] = 255
    exif = Image.Exif()
    exif[_image.EXIF_ORIENTATION] = 6
    (tmp_path / "img").mkdir()
    Image.fromarray(pixels).save(tmp_path / "img" / "r.jpg", quality=95, exif=exif.tobytes())
    for declared, bbox in (((20, 40), [15, 0, 5, 10]), ((40, 20), [0, 0, 10, 5])):
        image = {"id": 1, "file_name": "r.jpg", "width": declared[0], "height": declared[1]}
        original = {"images": [image], "categories": [{"id": 1, "name": "b"}],
                    "annotations": [{"image_id": 1, "category_id": 1, "bbox": bbox}]}
        (tmp_path / "a.json").write_text(json.dumps(original))
        from_coco(tmp_path / "a.json", tmp_path / "img", tmp_path / "ds", overwrite=True,
                  codec="raw")
        with detfmt.open(tmp_path / "ds") as ds:
            sample = ds[0]
            x0, y0, x1, y1 = (round(float(v)) for v in sample.boxes[0])
            assert sample.image[y0:y1, x0:x1].mean() > 200
        to_coco(tmp_path / "ds", tmp_path / "out.json")
        _assert_coco_roundtrip(original, json.loads((tmp_path / "out.json").read_text()))
