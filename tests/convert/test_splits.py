"""Splits (issue 13 item 1): YOLO data.yaml, COCO standard/Roboflow layouts and --split
definitions, VOC image sets; one dataset per split, images never mixed, the OUT layout.

Small fixtures are built in every test; the real datasets under ../shared/data are used where
available (skipped cleanly otherwise).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

import detfmt
from detfmt import convert as dconvert
from detfmt.cli import main
from detfmt.convert import ConversionError
from detfmt.convert.splits import discover
from detfmt.errors import TargetExistsError
from tests.convert.conftest import save_image, shared_dataset

NAMES = "names: [a, b]\n"


def _yolo_split(root: Path, split: str, count: int, *, folder: str | None = None,
                seed: int = 0) -> list[str]:
    """``count`` images with one box each under images/<folder>/ (+ labels); returns the
    image paths relative to ``root``."""
    folder = folder or split
    names = []
    for i in range(count):
        stem = f"{split}_{i}"
        save_image(root / "images" / folder / f"{stem}.jpg", 48, 32, seed=seed + i)
        label = root / "labels" / folder / f"{stem}.txt"
        label.parent.mkdir(parents=True, exist_ok=True)
        label.write_text(f"{i % 2} 0.5 0.5 0.25 0.5\n")
        names.append(f"images/{folder}/{stem}.jpg")
    return names


def _file_names(path: Path) -> list[str]:
    with detfmt.open(path) as ds:
        return [ds[i].fields["file_name"] for i in range(len(ds))]


def _yolo_root(tmp_path: Path) -> tuple[Path, dict[str, list[str]]]:
    root = tmp_path / "src"
    expected = {"train": _yolo_split(root, "train", 4), "val": _yolo_split(root, "val", 3, seed=50)}
    (root / "data.yaml").write_text("path: .\ntrain: images/train\nval: images/val\n" + NAMES)
    return root, expected


def test_yolo_yaml_writes_one_dataset_per_split_without_mixing(tmp_path):
    root, expected = _yolo_root(tmp_path)
    reports = dconvert.convert("yolo", root / "data.yaml", tmp_path / "out", workers=0)
    assert list(reports) == ["train", "val"]
    for split, names in expected.items():
        assert _file_names(tmp_path / "out" / split) == names
        assert reports[split].images_kept == len(names) and reports[split].boxes_kept == len(names)
        assert (tmp_path / "out" / f"{split}.report.json").is_file()
        with detfmt.open(tmp_path / "out" / split) as ds:
            assert ds.header.metadata["card.split"] == split
            assert [c.name for c in ds.header.classes] == ["a", "b"]
    index = json.loads((tmp_path / "out" / "splits.json").read_text())
    assert index["format"] == "detfmt-splits/1" and list(index["splits"]) == ["train", "val"]
    assert index["splits"]["val"] == {"path": "val", "images": 3, "boxes": 3}


def test_split_by_name_is_written_directly_at_out(tmp_path):
    root, expected = _yolo_root(tmp_path)
    reports = dconvert.convert("yolo", root, tmp_path / "val_only", split="val", workers=0)
    assert list(reports) == ["val"]
    assert (tmp_path / "val_only" / "header.json").is_file()
    assert _file_names(tmp_path / "val_only") == expected["val"]
    assert (tmp_path / "val_only.report.json").is_file()


def test_yolo_list_files_and_lists_of_folders(tmp_path):
    root = tmp_path / "src"
    train = _yolo_split(root, "train", 3, folder="all") + _yolo_split(root, "extra", 2)
    val = _yolo_split(root, "val", 2, folder="all", seed=30)
    (root / "train.txt").write_text("".join(f"./{n}\n" for n in train[:3]))
    (root / "val.txt").write_text("".join(f"{n}\n" for n in val))
    (root / "data.yaml").write_text("path: .\ntrain: [train.txt, images/extra]\nval: val.txt\n"
                                    "test:\n" + NAMES)
    reports = dconvert.convert("yolo", root / "data.yaml", tmp_path / "out", workers=0)
    assert list(reports) == ["train", "val"]  # an empty test: is no split
    assert _file_names(tmp_path / "out" / "train") == train
    assert _file_names(tmp_path / "out" / "val") == val


def test_splits_sharing_an_image_are_refused(tmp_path):
    root = tmp_path / "src"
    names = _yolo_split(root, "x", 3, folder="all")
    (root / "train.txt").write_text("\n".join(names) + "\n")
    (root / "val.txt").write_text(names[2] + "\n")
    (root / "data.yaml").write_text("train: train.txt\nval: val.txt\n" + NAMES)
    with pytest.raises(ConversionError) as info:
        dconvert.convert("yolo", root / "data.yaml", tmp_path / "out", workers=0)
    assert info.value.rule == "SPLIT_OVERLAP" and info.value.affected == 1
    assert "x_2.jpg" in str(info.value) and "allow_overlap=True" in str(info.value)
    assert not (tmp_path / "out" / "train").exists()  # nothing written
    reports = dconvert.convert("yolo", root / "data.yaml", tmp_path / "out", workers=0,
                               allow_overlap=True)
    assert reports["val"].notes["split_overlap"] == 1


def test_a_problem_in_a_later_split_stops_before_any_split_is_written(tmp_path):
    root, _ = _yolo_root(tmp_path)
    (root / "labels" / "val" / "val_1.txt").write_text("0 0.5 0.5 0.2\n")
    with pytest.raises(ConversionError) as info:
        dconvert.convert("yolo", root, tmp_path / "out", workers=0)
    assert info.value.rule == "LABEL_MALFORMED"
    assert not (tmp_path / "out" / "train").exists()
    assert (tmp_path / "out" / "val.report.json").is_file()  # the failed split's report


def test_missing_split_is_an_error_and_split_selects_the_others(tmp_path):
    root = tmp_path / "src"
    _yolo_split(root, "train", 2)
    (root / "data.yaml").write_text("path: .\ntrain: images/train\nval: images/val\n" + NAMES)
    with pytest.raises(ConversionError) as info:
        dconvert.convert("yolo", root / "data.yaml", tmp_path / "out", workers=0)
    assert info.value.rule == "SPLIT_MISSING" and "images/val" in str(info.value)
    with pytest.raises(ConversionError) as info:
        dconvert.convert("yolo", root / "data.yaml", tmp_path / "o", split="test", workers=0)
    assert info.value.rule == "SPLIT_MISSING"
    dconvert.convert("yolo", root / "data.yaml", tmp_path / "out", split="train", workers=0)
    assert len(_file_names(tmp_path / "out")) == 2


def test_ultralytics_root_without_yaml_and_roboflow_yaml(tmp_path):
    root = tmp_path / "ultra"
    train = _yolo_split(root, "train", 2, folder="train2017")
    val = _yolo_split(root, "val", 1, folder="val2017", seed=9)
    (root / "labels" / "classes.txt").write_text("a\nb\n")
    dconvert.convert("yolo", root, tmp_path / "out", workers=0)
    assert _file_names(tmp_path / "out" / "train") == train
    assert _file_names(tmp_path / "out" / "val") == val
    robo = tmp_path / "robo"
    for split, count in (("train", 2), ("valid", 1)):
        for i in range(count):
            save_image(robo / split / "images" / f"{split}{i}.jpg", 40, 30, seed=i)
            (robo / split / "labels").mkdir(parents=True, exist_ok=True)
            (robo / split / "labels" / f"{split}{i}.txt").write_text("1 0.5 0.5 0.2 0.2\n")
    (robo / "data.yaml").write_text("train: ../train/images\nval: ../valid/images\nnc: 2\n"
                                    + NAMES)
    reports = dconvert.convert("yolo", robo, tmp_path / "robo_out", workers=0)
    assert {k: r.boxes_kept for k, r in reports.items()} == {"train": 2, "val": 1}


def _coco_json(path: Path, files: list[str], categories, start_id: int = 1) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    images = [{"id": start_id + i, "file_name": f} for i, f in enumerate(files)]
    anns = [{"id": start_id + i, "image_id": start_id + i, "category_id": categories[0]["id"],
             "bbox": [2, 2, 10, 8]} for i in range(len(files))]
    path.write_text(json.dumps({"images": images, "annotations": anns,
                                "categories": categories}))
    return path


def test_coco_standard_layout_found_without_flags(tmp_path):
    root = tmp_path / "coco"
    for split, count in (("train2017", 3), ("val2017", 2)):
        files = [f"{split}_{i}.jpg" for i in range(count)]
        for i, name in enumerate(files):
            save_image(root / split / name, 40, 30, seed=i)
        cats = [{"id": 1, "name": "p"}, {"id": 3, "name": "q"}] if split == "train2017" else [
            {"id": 3, "name": "q"}, {"id": 7, "name": "r"}]
        _coco_json(root / "annotations" / f"instances_{split}.json", files, cats)
    reports = dconvert.convert("coco", root, tmp_path / "out", workers=0)
    assert {k: r.images_kept for k, r in reports.items()} == {"train": 3, "val": 2}
    assert _file_names(tmp_path / "out" / "val") == ["val2017_0.jpg", "val2017_1.jpg"]
    for split in ("train", "val"):  # one class list for every split: ids agree
        with detfmt.open(tmp_path / "out" / split) as ds:
            assert [(c.name, c.source_id) for c in ds.header.classes] == [
                ("p", 1), ("q", 3), ("r", 7)]
    with detfmt.open(tmp_path / "out" / "val") as ds:
        assert ds[0].classes.tolist() == [1]  # q in the shared list


def test_coco_split_definitions_and_category_conflicts(tmp_path):
    images = tmp_path / "img"
    for i in range(4):
        save_image(images / f"{i}.jpg", 40, 30, seed=i)
    a = _coco_json(tmp_path / "a.json", ["0.jpg", "1.jpg"], [{"id": 1, "name": "p"}])
    b = _coco_json(tmp_path / "b.json", ["2.jpg", "3.jpg"], [{"id": 1, "name": "p"}])
    reports = dconvert.convert("coco", tmp_path, tmp_path / "out", images=images,
                               split={"train": "a.json", "val": b}, workers=0)
    assert _file_names(tmp_path / "out" / "train") == ["0.jpg", "1.jpg"]
    assert _file_names(tmp_path / "out" / "val") == ["2.jpg", "3.jpg"]
    assert list(reports) == ["train", "val"]
    _coco_json(b, ["2.jpg"], [{"id": 1, "name": "other"}])
    with pytest.raises(ConversionError) as info:
        dconvert.convert("coco", tmp_path, tmp_path / "out2", images=images,
                         split={"train": a, "val": b}, workers=0)
    assert info.value.rule == "SPLIT_CLASSES_DIFFER"


def _voc_root(root: Path, stems: list[str]) -> None:
    for i, stem in enumerate(stems):
        save_image(root / "JPEGImages" / f"{stem}.jpg", 40, 30, seed=i)
        (root / "Annotations").mkdir(parents=True, exist_ok=True)
        (root / "Annotations" / f"{stem}.xml").write_text(
            f"<annotation><filename>{stem}.jpg</filename><object><name>cat</name><bndbox>"
            "<xmin>2</xmin><ymin>2</ymin><xmax>9</xmax><ymax>9</ymax></bndbox></object>"
            "</annotation>")


def test_voc_image_sets_become_splits(tmp_path):
    root = tmp_path / "voc"
    _voc_root(root, ["000001", "000002", "000003", "000004"])
    sets = root / "ImageSets" / "Main"
    sets.mkdir(parents=True)
    (sets / "train.txt").write_text("000001\n000002\n")
    (sets / "val.txt").write_text("000003\n")
    (sets / "trainval.txt").write_text("000001\n000002\n000003\n")  # never a split of its own
    (sets / "cat_train.txt").write_text("000001  1\n")  # class lists are not splits
    reports = dconvert.convert("voc", root, tmp_path / "out", workers=0)
    assert {k: r.images_kept for k, r in reports.items()} == {"train": 2, "val": 1}
    assert _file_names(tmp_path / "out" / "val") == ["000003.jpg"]


def test_split_root_refuses_foreign_files_and_needs_overwrite(tmp_path):
    root, _ = _yolo_root(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    with pytest.raises(TargetExistsError):
        dconvert.convert("yolo", root, out, workers=0)
    (out / "notes.txt").unlink()
    dconvert.convert("yolo", root, out, workers=0)
    with pytest.raises(TargetExistsError):
        dconvert.convert("yolo", root, out, workers=0)
    dconvert.convert("yolo", root, out, workers=0, overwrite=True)
    assert len(_file_names(out / "train")) == 4


def test_cli_splits(tmp_path, capsys):
    root, expected = _yolo_root(tmp_path)
    assert main(["convert", "yolo", str(root / "data.yaml"), str(tmp_path / "out"),
                 "--workers", "0", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "splits train, val written" in out
    assert main(["convert", "yolo", str(root), str(tmp_path / "v"), "--split", "val",
                 "--workers", "0", "--no-progress"]) == 0
    assert _file_names(tmp_path / "v") == expected["val"]
    assert main(["convert", "yolo", str(root), str(tmp_path / "w"), "--split", "val",
                 "--split", "train=images/train", "--workers", "0"]) == 2
    assert "--split" in capsys.readouterr().err


# ------------------------------------------------------------------------ shared datasets


def test_shared_coco128_train_and_val_never_mix(tmp_path):
    """coco128 split 100/28 into an Ultralytics root with a data.yaml: each split holds exactly
    its own images, and every box matches its label file."""
    shared = shared_dataset("coco128-yolo")
    images = sorted((shared / "images" / "train2017").glob("*.jpg"))
    labels = shared / "object_detection" / "labels" / "train2017"
    root = tmp_path / "coco128"
    expected: dict[str, list[str]] = {"train": [], "val": []}
    for i, image in enumerate(images):
        split = "train" if i < 100 else "val"
        (root / "images" / split).mkdir(parents=True, exist_ok=True)
        (root / "labels" / split).mkdir(parents=True, exist_ok=True)
        shutil.copyfile(image, root / "images" / split / image.name)
        if (labels / f"{image.stem}.txt").is_file():
            shutil.copyfile(labels / f"{image.stem}.txt", root / "labels" / split /
                            f"{image.stem}.txt")
        expected[split].append(f"images/{split}/{image.name}")
    config = (shared / "object_detection" / "config.yaml").read_text()
    (root / "data.yaml").write_text("path: .\ntrain: images/train\nval: images/val\n" +
                                    config[config.index("names:"):])
    reports = dconvert.convert("yolo", root / "data.yaml", tmp_path / "out", max_side=64,
                               workers=2)
    assert {k: r.images_kept for k, r in reports.items()} == {"train": 100, "val": 28}
    assert sum(r.boxes_kept for r in reports.values()) == 929
    for split in ("train", "val"):
        assert _file_names(tmp_path / "out" / split) == expected[split]
    assert not set(expected["train"]) & set(expected["val"])
    with detfmt.open(tmp_path / "out" / "val") as ds:
        for i in range(len(ds)):
            sample = ds[i]
            stem = Path(sample.fields["file_name"]).stem
            rows = np.loadtxt(labels / f"{stem}.txt", ndmin=2)
            assert sample.classes.tolist() == rows[:, 0].astype(int).tolist()


def test_shared_chess_roboflow_and_standard_layout_without_flags(tmp_path):
    shared = shared_dataset("chess-coco")
    found = discover("coco", shared)  # the Roboflow export: valid/_annotations.coco.json
    assert found.split_layout and [(s.split, s.count) for s in found.sources] == [("val", 58)]
    # the standard layout, from the first 10 images of the real file (decoding all 58 large
    # JPEGs would only make the test slower): annotations/instances_val2017.json + val2017/
    coco = json.loads((shared / "valid" / "_annotations.coco.json").read_text())
    coco["images"] = coco["images"][:10]
    kept = {image["id"] for image in coco["images"]}
    coco["annotations"] = [a for a in coco["annotations"] if a["image_id"] in kept]
    root = tmp_path / "standard"
    (root / "annotations").mkdir(parents=True)
    (root / "annotations" / "instances_val2017.json").write_text(json.dumps(coco))
    (root / "val2017").symlink_to(shared / "valid", target_is_directory=True)
    assert main(["convert", "coco", str(root), str(tmp_path / "std"), "--max-side", "64",
                 "--workers", "2", "--no-progress"]) == 0
    with detfmt.open(tmp_path / "std" / "val") as ds:
        assert len(ds) == 10 and int(np.asarray(ds.counts).sum()) == len(coco["annotations"])
        assert [ds[i].fields["file_name"] for i in range(10)] == [
            image["file_name"] for image in coco["images"]]
    assert json.loads((tmp_path / "std" / "splits.json").read_text())["splits"]["val"][
        "images"] == 10


def test_shared_raccoon_image_sets(tmp_path):
    shared = shared_dataset("raccoon")
    root = tmp_path / "raccoon"
    (root / "ImageSets" / "Main").mkdir(parents=True)
    (root / "Annotations").symlink_to(shared / "annotations", target_is_directory=True)
    (root / "JPEGImages").symlink_to(shared / "images", target_is_directory=True)
    expected = {}
    for split, csv in (("train", "train_labels.csv"), ("test", "test_labels.csv")):
        rows = (shared / "data" / csv).read_text().splitlines()[1:]
        stems = sorted({Path(row.split(",")[0]).stem for row in rows})
        (root / "ImageSets" / "Main" / f"{split}.txt").write_text("\n".join(stems) + "\n")
        expected[split] = [f"{stem}.jpg" for stem in stems]
    reports = dconvert.convert("voc", root, tmp_path / "out", max_side=64, workers=2)
    assert {k: r.images_kept for k, r in reports.items()} == {"train": 160, "test": 40}
    for split, names in expected.items():
        assert _file_names(tmp_path / "out" / split) == names


def test_coco_single_file_of_a_standard_layout_finds_its_image_folder(tmp_path):
    root = tmp_path / "coco"
    save_image(root / "val2017" / "v.jpg", 40, 30)
    js = _coco_json(root / "annotations" / "instances_val2017.json", ["v.jpg"],
                    [{"id": 1, "name": "p"}])
    reports = dconvert.convert("coco", js, tmp_path / "out", workers=0)
    assert list(reports) == [""] and reports[""].images_kept == 1
    assert (tmp_path / "out" / "header.json").is_file()  # one file: one dataset at OUT


def test_split_names():
    from detfmt.convert.splits import split_name

    assert [split_name(n) for n in ("train2017", "val2014", "valid", "test", "train_a")] == [
        "train", "val", "val", "test", "train_a"]
