"""``detfmt stats`` (checked against a brute-force count) and ``detfmt export yolo | voc | coco``
(re-importable by our converters with the same boxes; ids and supercategories kept) on the real
datasets (issue 13 items 5 and 6)."""

from __future__ import annotations

import builtins
import json
import os
from pathlib import Path

import numpy as np
import pytest

import detfmt
from detfmt import convert
from detfmt.cli import main
from detfmt.errors import TargetExistsError, UsageError
from detfmt.workflows import compute_stats, export_voc, export_yolo, split
from tests.workflows.conftest import labels_by_name


def _brute_force(path):
    """Per-class images and boxes, box counts and COCO areas in original pixels, sample by
    sample through ds[i]."""
    with detfmt.open(path) as ds:
        images = np.zeros(len(ds.class_names), int)
        boxes = np.zeros(len(ds.class_names), int)
        areas, counts = [], []
        for i in range(len(ds)):
            sample = ds[i]
            counts.append(len(sample.boxes))
            boxes += np.bincount(sample.classes, minlength=len(boxes))
            images[np.unique(sample.classes)] += 1
            sx, sy, tx, ty = sample.fields["scale_offset"]
            for x0, y0, x1, y1 in sample.boxes.astype(np.float64):
                areas.append(((x1 - tx) / sx - (x0 - tx) / sx) * ((y1 - ty) / sy - (y0 - ty) / sy))
    areas = np.array(areas)
    return images, boxes, np.array(counts), areas


@pytest.mark.parametrize("name", ["coco128", "raccoon", "chess_coco"])
def test_stats_agree_with_a_brute_force_count(name, request):
    path = request.getfixturevalue(name)
    images, boxes, counts, areas = _brute_force(path)
    with detfmt.open(path) as ds:
        data = compute_stats(ds)
    assert [c["images"] for c in data["classes"]] == images.tolist()
    assert [c["boxes"] for c in data["classes"]] == boxes.tolist()
    assert data["num_boxes"] == counts.sum() and data["num_samples"] == len(counts)
    assert data["boxes_per_image"]["histogram"] == {
        str(k): int(v) for k, v in enumerate(np.bincount(counts)) if v}
    coco = data["box_size"]["original"]["coco_area"]
    assert coco == {"small": int((areas < 32**2).sum()),
                    "medium": int(((areas >= 32**2) & (areas < 96**2)).sum()),
                    "large": int((areas >= 96**2).sum())}
    assert data["box_size"]["original"]["area"]["p50"] == pytest.approx(np.median(areas),
                                                                         rel=1e-4)
    assert data["images_without_boxes"] == int((counts == 0).sum())


def test_stats_cli_json_text_and_split_roots(coco128, tmp_path, capsys):
    assert main(["stats", str(coco128), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["num_samples"] == 128 and data["num_boxes"] == 929
    assert main(["stats", str(coco128), "--max-classes", "3"]) == 0
    text = capsys.readouterr().out
    assert "person" in text and "77 more" in text and "COCO small" in text
    split(coco128, tmp_path / "sp", val=0.25, seed=0)
    assert main(["stats", str(tmp_path / "sp"), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert {k: v["num_samples"] for k, v in data.items()} == {"train": 96, "val": 32}


def test_plot_is_written(chess_sample, tmp_path):
    pytest.importorskip("matplotlib")
    assert main(["stats", str(chess_sample), "--plot", str(tmp_path / "labels.png")]) == 0
    data = (tmp_path / "labels.png").read_bytes()
    assert data.startswith(b"\x89PNG") and len(data) > 20_000


def test_plot_without_matplotlib_names_the_extra(chess_sample, tmp_path, monkeypatch):
    real = builtins.__import__

    def no_matplotlib(name, *args, **kwargs):
        if name.split(".")[0] == "matplotlib":
            raise ImportError(name)
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    from detfmt.workflows.plot import plot_stats

    with pytest.raises(UsageError, match=r"detfmt\[plot\]"):
        plot_stats(chess_sample, tmp_path / "x.png")
    assert not (tmp_path / "x.png").exists()


def _close(a: dict, b: dict, tolerance: float = 2e-3) -> None:
    """Same files, classes and boxes (within ``tolerance`` pixels); fields aside."""
    assert sorted(a) == sorted(b)
    for name in a:
        rows_a, rows_b = a[name], b[name]
        assert [r[0] for r in rows_a] == [r[0] for r in rows_b], name
        np.testing.assert_allclose([r[1] for r in rows_a], [r[1] for r in rows_b],
                                   atol=tolerance)


def _by_stem(labels: dict) -> dict:
    return {Path(name).stem: rows for name, rows in labels.items()}


def test_yolo_export_round_trip_keeps_splits_boxes_and_jpeg_bytes(coco128, tmp_path):
    split(coco128, tmp_path / "sp", val=0.25, seed=1)
    report = export_yolo(tmp_path / "sp", tmp_path / "yolo")
    assert report.splits == {"train": 96, "val": 32} and report.images_copied == 128
    data = (tmp_path / "yolo" / "data.yaml").read_text()
    assert "train: images/train" in data and "val: images/val" in data
    with detfmt.open(tmp_path / "sp", split="val") as ds:  # JPEG payloads, as stored
        stem = Path(ds.string_field("file_name", 0)).stem
        assert (tmp_path / "yolo" / "images" / "val" / f"{stem}.jpg").read_bytes() == \
            bytes(ds.payload(0))
    convert.convert("yolo", tmp_path / "yolo", tmp_path / "back", max_side=None,
                    progress=False)
    for name in ("train", "val"):  # the same images in the same split, the same boxes
        _close(_by_stem(labels_by_name(tmp_path / "sp" / name)),
               _by_stem(labels_by_name(tmp_path / "back" / name)))
        with detfmt.open(tmp_path / "back", split=name) as ds:
            assert ds.class_names == detfmt.open(coco128).class_names


def test_yolo_export_of_raw_images_encodes_them_once(raccoon, tmp_path):
    assert main(["export", "yolo", str(raccoon), str(tmp_path / "yolo")]) == 0
    assert len(list((tmp_path / "yolo" / "images" / "train").glob("*.png"))) == 200
    convert.convert("yolo", tmp_path / "yolo", tmp_path / "back", max_side=None,
                    progress=False, split="train")
    _close(_by_stem(labels_by_name(raccoon)), _by_stem(labels_by_name(tmp_path / "back")))
    with detfmt.open(tmp_path / "back") as back, detfmt.open(raccoon) as source:  # lossless
        np.testing.assert_array_equal(back[0].image, source[0].image)


def test_voc_export_round_trip(chess_coco, tmp_path):
    report = export_voc(chess_coco, tmp_path / "voc")
    assert report.splits == {"train": 16} and report.images_encoded == 16  # zstd -> PNG
    assert len((tmp_path / "voc" / "ImageSets" / "Main" / "train.txt").read_text().split()) == 16
    with detfmt.open(chess_coco) as ds:
        names = ",".join(ds.class_names)
    assert main(["convert", "voc", str(tmp_path / "voc"), str(tmp_path / "back"),
                 "--max-side", "0", "--classes", names, "--no-progress",
                 "--split", "train"]) == 0
    _close(_by_stem(labels_by_name(chess_coco)), _by_stem(labels_by_name(tmp_path / "back")))


def test_coco_export_keeps_annotation_ids_and_supercategories(chess_coco_json, chess_coco,
                                                              tmp_path):
    source_json, _ = chess_coco_json
    original = json.loads(Path(source_json).read_text())
    assert main(["export", "coco", str(chess_coco), str(tmp_path / "out.json")]) == 0
    exported = json.loads((tmp_path / "out.json").read_text())
    assert {c["id"]: c["supercategory"] for c in exported["categories"]} == {
        c["id"]: c["supercategory"] for c in original["categories"]}
    key = {a["id"]: (a["image_id"], a["category_id"]) for a in original["annotations"]}
    assert {a["id"]: (a["image_id"], a["category_id"]) for a in exported["annotations"]} == key
    for annotation in exported["annotations"]:
        assert "ann_id" not in annotation
    # a filtered copy keeps both; a merge that repeats ids falls back to 1..A
    assert main(["filter", str(chess_coco), str(tmp_path / "f"), "--min-boxes", "10"]) == 0
    assert main(["export", "coco", str(tmp_path / "f"), str(tmp_path / "f.json")]) == 0
    kept = json.loads((tmp_path / "f.json").read_text())
    assert {a["id"] for a in kept["annotations"]} <= set(key)
    assert kept["categories"][1]["supercategory"] == original["categories"][1]["supercategory"]
    assert main(["merge", str(chess_coco), str(chess_coco), str(tmp_path / "twice")]) == 0
    assert main(["export", "coco", str(tmp_path / "twice"), str(tmp_path / "t.json")]) == 0
    twice = [a["id"] for a in json.loads((tmp_path / "t.json").read_text())["annotations"]]
    assert twice == list(range(1, 2 * len(key) + 1))


def test_export_never_replaces_foreign_files_and_leaves_nothing_half_written(
        chess_sample, tmp_path, monkeypatch):
    out = tmp_path / "out"
    out.mkdir()
    (out / "mine.txt").write_text("keep")
    with pytest.raises(TargetExistsError):
        export_yolo(chess_sample, out, overwrite=True)
    assert (out / "mine.txt").read_text() == "keep"
    export_yolo(chess_sample, tmp_path / "y")
    with pytest.raises(TargetExistsError):
        export_yolo(chess_sample, tmp_path / "y")
    export_voc(chess_sample, tmp_path / "y", overwrite=True)  # an earlier export: replaced
    assert (tmp_path / "y" / "Annotations").is_dir() and not (tmp_path / "y" / "labels").exists()

    from detfmt.workflows import _export

    calls = []

    def failing(self, ds, i, folder, stem):
        calls.append(i)
        if len(calls) > 3:
            raise OSError(28, "No space left on device")
        return real(self, ds, i, folder, stem)

    real = _export.ExportImages.write
    monkeypatch.setattr(_export.ExportImages, "write", failing)
    with pytest.raises(detfmt.errors.WriteError, match="No space"):
        export_yolo(chess_sample, tmp_path / "z")
    assert not (tmp_path / "z").exists()
    assert [e for e in os.listdir(tmp_path) if e.startswith(".")] == []
