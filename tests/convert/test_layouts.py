"""Issue 29 items 1-6: `detfmt convert` finds real layouts with no flag where the files say it.

Every layout is built in tmp_path from a few real images and annotations of ../shared/data
(chess-coco: Roboflow COCO, raccoon: VOC, coco128-yolo: YOLO), copied so the layout is the only
thing that varies. The tests check what is written (splits, image counts, box counts and
values), not the wording of messages.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

import detfmt
from detfmt import convert as dconvert
from detfmt.cli import main
from detfmt.convert import ConversionError
from tests.convert.conftest import shared_dataset

# ---------------------------------------------------------------------------------- helpers


def _chess() -> tuple[Path, dict]:
    folder = shared_dataset("chess-coco") / "valid"
    return folder, json.loads((folder / "_annotations.coco.json").read_text())


def _coco_split(data: dict, images: list[dict]) -> dict:
    ids = {image["id"] for image in images}
    return {**data, "images": images,
            "annotations": [a for a in data["annotations"] if a["image_id"] in ids]}


def _build_coco(root: Path, folder_of, json_of, *, rename: bool = False) -> dict[str, dict]:
    """A train (3 images) / val (2 images) COCO source from chess-coco: the images of each
    split in ``folder_of(root, split)``, its JSON at ``json_of(root, split)``. ``rename``: both
    splits number their images 0.jpg, 1.jpg, ... (as many custom exports do)."""
    source, data = _chess()
    parts = {"train": data["images"][:3], "val": data["images"][3:5]}
    written = {}
    for split, images in parts.items():
        folder, js = folder_of(root, split), json_of(root, split)
        folder.mkdir(parents=True, exist_ok=True)
        js.parent.mkdir(parents=True, exist_ok=True)
        entries = []
        for n, image in enumerate(images):
            name = f"{n}.jpg" if rename else image["file_name"]
            shutil.copy(source / image["file_name"], folder / name)
            entries.append({**image, "file_name": name})
        part = _coco_split(data, entries)
        js.write_text(json.dumps(part))
        written[split] = part
    return written


def _xyxy(annotations: list[dict]) -> np.ndarray:
    boxes = np.array([a["bbox"] for a in annotations], np.float64).reshape(-1, 4)
    return np.concatenate([boxes[:, :2], boxes[:, :2] + boxes[:, 2:]], axis=1)


def _check_coco_written(out: Path, expected: dict[str, dict]) -> None:
    """out/<split> holds exactly the images of each split's JSON with their boxes."""
    index = json.loads((out / "splits.json").read_text())
    assert sorted(index["splits"]) == sorted(expected)
    for split, data in expected.items():
        with detfmt.open(out / split) as ds:
            assert len(ds) == len(data["images"])
            by_name = {ds[i].fields["file_name"]: ds[i] for i in range(len(ds))}
            assert sorted(by_name) == sorted(image["file_name"] for image in data["images"])
            for image in data["images"]:
                own = [a for a in data["annotations"] if a["image_id"] == image["id"]]
                sample = by_name[image["file_name"]]
                height, width = sample.image.shape[:2]
                scale = np.array([width / image["width"], height / image["height"]] * 2)
                got = np.sort(np.asarray(sample.boxes, np.float64), axis=0)
                want = np.sort(_xyxy(own) * scale, axis=0)
                np.testing.assert_allclose(got, want, atol=1e-2)


def _coco(root: Path, out: Path, **kw) -> dict:
    return dconvert.convert("coco", root, out, workers=0, max_side=256, **kw)


# ---------------------------------------------------------------------------- item 1: COCO

COCO_LAYOUTS = {
    "custom_json_year_folders": (lambda r, s: r / f"{s}2017",
                                 lambda r, s: r / "annotations" / f"custom_{s}.json"),
    "custom_json_plain_folders": (lambda r, s: r / s,
                                  lambda r, s: r / "annotations" / f"custom_{s}.json"),
    "instances_images_sub": (lambda r, s: r / "images" / s,
                             lambda r, s: r / "annotations" / f"instances_{s}.json"),
    "roboflow_valid": (lambda r, s: r / ("valid" if s == "val" else s),
                       lambda r, s: r / ("valid" if s == "val" else s) / "_annotations.coco.json"),
    "stem_is_split": (lambda r, s: r / "data" / f"{s}_images",
                      lambda r, s: r / "annotations" / f"{s}.json"),
    "json_beside_images": (lambda r, s: r / s,
                           lambda r, s: r / s / "labels_coco.json"),
}


@pytest.mark.parametrize("layout", sorted(COCO_LAYOUTS))
def test_coco_layouts_convert_without_flags(tmp_path, layout):
    folder_of, json_of = COCO_LAYOUTS[layout]
    expected = _build_coco(tmp_path / "src", folder_of, json_of)
    reports = _coco(tmp_path / "src", tmp_path / "out")
    assert sorted(reports) == ["train", "val"]
    _check_coco_written(tmp_path / "out", expected)


def _pixel_error(path: Path, stored: np.ndarray) -> float:
    """Mean absolute difference between a stored image and a source file resized to it."""
    from detfmt.writing import image as _image

    pixels = _image.resize_rgb(_image.load_rgb(path), *stored.shape[:2])
    return float(np.abs(pixels.astype(np.int16) - stored.astype(np.int16)).mean())


def test_coco_same_file_names_in_both_split_folders_go_by_split_name(tmp_path):
    """Both splits hold 0.jpg, 1.jpg: the folder named after the JSON's split wins."""
    root = tmp_path / "src"
    expected = _build_coco(root, *COCO_LAYOUTS["custom_json_year_folders"], rename=True)
    _coco(root, tmp_path / "out")
    _check_coco_written(tmp_path / "out", expected)
    for split, other in (("train", "val"), ("val", "train")):
        with detfmt.open(tmp_path / "out" / split) as ds:
            for i in range(len(ds)):
                stored, name = ds[i].image, ds[i].fields["file_name"]
                if (root / f"{other}2017" / name).exists():
                    assert (_pixel_error(root / f"{split}2017" / name, stored)
                            < _pixel_error(root / f"{other}2017" / name, stored))


def test_coco_cli_converts_custom_layout(tmp_path):
    expected = _build_coco(tmp_path / "src", *COCO_LAYOUTS["custom_json_year_folders"])
    argv = ["convert", "coco", str(tmp_path / "src"), str(tmp_path / "out"), "--workers", "0",
            "--max-side", "256", "--no-progress"]
    assert main(argv) == 0
    _check_coco_written(tmp_path / "out", expected)


def test_coco_ambiguous_image_folder_is_refused_listing_the_candidates(tmp_path):
    """Two folders hold the same files and neither is named after the split: no guess."""
    source, data = _chess()
    root = tmp_path / "src"
    images = data["images"][:2]
    for name in ("copy_a", "copy_b"):
        (root / name).mkdir(parents=True)
        for image in images:
            shutil.copy(source / image["file_name"], root / name / image["file_name"])
    (root / "annotations").mkdir()
    (root / "annotations" / "custom_train.json").write_text(json.dumps(_coco_split(data, images)))
    with pytest.raises(ConversionError) as info:
        _coco(root, tmp_path / "out")
    assert info.value.rule == "SOURCE_AMBIGUOUS"
    assert "copy_a" in str(info.value) and "copy_b" in str(info.value)
    assert not (tmp_path / "out").exists()


def test_coco_per_split_override_names_json_and_image_folder(tmp_path):
    """Images deeper than the search depth: --split NAME=ANN.json:IMAGES_DIR names them."""
    expected = _build_coco(tmp_path / "src", lambda r, s: r / "a" / "b" / "c" / s,
                           lambda r, s: r / "ann" / f"{s}.json")
    root = tmp_path / "src"
    argv = ["convert", "coco", str(root), str(tmp_path / "out"), "--workers", "0",
            "--max-side", "256", "--no-progress"]
    for split in ("train", "val"):
        argv += ["--split", f"{split}={root / 'ann' / f'{split}.json'}:{root / 'a/b/c' / split}"]
    assert main(argv) == 0
    _check_coco_written(tmp_path / "out", expected)
    reports = dconvert.convert(
        "coco", root, tmp_path / "out2", workers=0, max_side=256,
        split={"train": (root / "ann" / "train.json", root / "a/b/c/train")})
    assert reports["train"].images_kept == len(expected["train"]["images"])


def test_coco_single_json_argument_finds_images_by_content(tmp_path):
    expected = _build_coco(tmp_path / "src", *COCO_LAYOUTS["custom_json_year_folders"])
    js = tmp_path / "src" / "annotations" / "custom_val.json"
    reports = dconvert.convert("coco", js, tmp_path / "one", workers=0, max_side=256)
    assert reports[""].images_kept == len(expected["val"]["images"])
    assert reports[""].boxes_kept == len(expected["val"]["annotations"])


# ----------------------------------------------------------------------------- item 2: VOC


def _build_voc(root: Path, xml_folder: str, image_folder: str, count: int = 5) -> dict:
    shared = shared_dataset("raccoon")
    xmls = sorted((shared / "annotations").glob("raccoon-1*.xml"))[:count]
    boxes = {}
    for xml in xmls:
        (root / xml_folder).mkdir(parents=True, exist_ok=True)
        (root / image_folder).mkdir(parents=True, exist_ok=True)
        shutil.copy(xml, root / xml_folder / xml.name)
        shutil.copy(shared / "images" / f"{xml.stem}.jpg", root / image_folder / f"{xml.stem}.jpg")
        boxes[f"{xml.stem}.jpg"] = xml.read_text().count("<object>")
    return boxes


@pytest.mark.parametrize("xml_folder,image_folder", [
    ("annots", "images"), ("xml", "JPEGImages"), ("labels", "pics"), ("data/xml", "data/jpg"),
    ("all", "all"),
])
def test_voc_any_annotation_folder_name(tmp_path, xml_folder, image_folder):
    boxes = _build_voc(tmp_path / "src", xml_folder, image_folder)
    reports = dconvert.convert("voc", tmp_path / "src", tmp_path / "out", workers=0)
    assert list(reports) == [""]  # no ImageSets: one dataset
    with detfmt.open(tmp_path / "out") as ds:
        counts = {ds[i].fields["file_name"]: len(ds[i].boxes) for i in range(len(ds))}
    assert counts == boxes


def test_voc_cli_any_annotation_folder_name(tmp_path):
    boxes = _build_voc(tmp_path / "src", "annots", "images")
    assert main(["convert", "voc", str(tmp_path / "src"), str(tmp_path / "out"), "--workers",
                 "0", "--no-progress"]) == 0
    with detfmt.open(tmp_path / "out") as ds:
        assert len(ds) == len(boxes)
        assert sum(len(ds[i].boxes) for i in range(len(ds))) == sum(boxes.values())


def test_voc_devkit_folder_given_finds_its_dataset_and_image_sets(tmp_path):
    """SRC=VOCdevkit (the folder above VOC2007): the image sets still become splits; two
    datasets below it are not guessed between."""
    root = tmp_path / "VOCdevkit" / "VOC2007"
    boxes = _build_voc(root, "Annotations", "JPEGImages", count=5)
    stems = sorted(Path(name).stem for name in boxes)
    (root / "ImageSets" / "Main").mkdir(parents=True)
    (root / "ImageSets" / "Main" / "train.txt").write_text("\n".join(stems[:3]) + "\n")
    (root / "ImageSets" / "Main" / "val.txt").write_text("\n".join(stems[3:]) + "\n")
    reports = dconvert.convert("voc", tmp_path / "VOCdevkit", tmp_path / "out", workers=0)
    assert {name: r.images_kept for name, r in reports.items()} == {"train": 3, "val": 2}
    assert _boxes_per_image(tmp_path / "out" / "val") == {
        stem: boxes[f"{stem}.jpg"] for stem in stems[3:]}
    _build_voc(tmp_path / "VOCdevkit" / "VOC2012", "Annotations", "JPEGImages", count=2)
    with pytest.raises(ConversionError) as info:
        dconvert.convert("voc", tmp_path / "VOCdevkit", tmp_path / "out2", workers=0)
    assert info.value.rule == "SOURCE_AMBIGUOUS"


# ---------------------------------------------------------------------------- item 3: YOLO


def _coco128() -> tuple[Path, Path, list[str]]:
    shared = shared_dataset("coco128-yolo")
    images = shared / "images" / "train2017"
    labels = shared / "object_detection" / "labels" / "train2017"
    stems = sorted(p.stem for p in labels.glob("*.txt"))[:6]
    return images, labels, stems


def _rows(path: Path) -> int:
    return sum(1 for line in path.read_text().splitlines() if line.strip())


def _build_yolo(root: Path, image_dir, label_dir, yaml: str | None = "names: {names}\n"
                ) -> dict[str, dict[str, int]]:
    """train (4) / val (2) images from coco128 in ``image_dir(root, split)``, labels in
    ``label_dir(root, split)``; returns {split: {file stem: label rows}}."""
    images, labels, stems = _coco128()
    parts = {"train": stems[:4], "val": stems[4:6]}
    expected: dict[str, dict[str, int]] = {}
    for split, chosen in parts.items():
        for stem in chosen:
            target = image_dir(root, split)
            target.mkdir(parents=True, exist_ok=True)
            shutil.copy(images / f"{stem}.jpg", target / f"{stem}.jpg")
            own = label_dir(root, split)
            own.mkdir(parents=True, exist_ok=True)
            shutil.copy(labels / f"{stem}.txt", own / f"{stem}.txt")
            expected.setdefault(split, {})[stem] = _rows(labels / f"{stem}.txt")
    if yaml is not None:
        names = [f"c{i}" for i in range(80)]
        (root / "data.yaml").write_text(yaml.format(names=json.dumps(names)))
    return expected


def _boxes_per_image(path: Path) -> dict[str, int]:
    with detfmt.open(path) as ds:
        return {Path(ds[i].fields["file_name"]).stem: len(ds[i].boxes) for i in range(len(ds))}


def test_yolo_labels_option_is_honoured_with_split_definitions(tmp_path):
    """Labels in a folder of their own (annots/<split>): --labels with --split NAME=PATH."""
    root = tmp_path / "src"
    expected = _build_yolo(root, lambda r, s: r / "images" / s, lambda r, s: r / "annots" / s)
    # a partial label tree where the images -> labels rule looks: it must not be used instead
    (root / "labels" / "train").mkdir(parents=True)
    first = sorted(expected["train"])[0]
    shutil.copy(root / "annots" / "train" / f"{first}.txt", root / "labels" / "train")
    reports = dconvert.convert("yolo", root, tmp_path / "out", workers=0, labels=root / "annots",
                               split={"train": "images/train", "val": "images/val"})
    assert sorted(reports) == ["train", "val"]
    for split, rows in expected.items():
        assert _boxes_per_image(tmp_path / "out" / split) == rows
    argv = ["convert", "yolo", str(root), str(tmp_path / "cli"), "--workers", "0",
            "--no-progress", "--labels", str(root / "annots"), "--split", "train=images/train",
            "--split", "val=images/val"]
    assert main(argv) == 0
    assert _boxes_per_image(tmp_path / "cli" / "val") == expected["val"]


def test_yolo_labels_option_with_list_file_splits(tmp_path):
    """--split NAME=LIST.txt (a list of image paths) with --labels: labels from --labels."""
    root = tmp_path / "src"
    expected = _build_yolo(root, lambda r, s: r / "images" / s, lambda r, s: r / "annots" / s)
    for split in expected:
        (root / f"{split}.txt").write_text("".join(f"./images/{split}/{stem}.jpg\n"
                                                   for stem in expected[split]))
    reports = dconvert.convert("yolo", root, tmp_path / "out", workers=0, labels=root / "annots",
                               split={"train": "train.txt", "val": "val.txt"})
    assert sorted(reports) == ["train", "val"]
    for split, rows in expected.items():
        assert _boxes_per_image(tmp_path / "out" / split) == rows


def test_yolo_split_definition_with_its_own_label_folder(tmp_path):
    """--split NAME=IMAGES_DIR:LABELS_DIR: each split names its label folder."""
    root = tmp_path / "src"
    expected = _build_yolo(root, lambda r, s: r / "img" / s, lambda r, s: r / "ann" / s / "txt")
    argv = ["convert", "yolo", str(root), str(tmp_path / "out"), "--workers", "0",
            "--no-progress"]
    for split in ("train", "val"):
        argv += ["--split", f"{split}=img/{split}:{root / 'ann' / split / 'txt'}"]
    assert main(argv) == 0
    for split, rows in expected.items():
        assert _boxes_per_image(tmp_path / "out" / split) == rows


def test_yolo_labels_option_keeps_the_data_yaml(tmp_path):
    """--labels (or --images) given: the YAML is still found for names and splits."""
    root = tmp_path / "src"
    expected = _build_yolo(root, lambda r, s: r / "images" / s, lambda r, s: r / "txt" / s,
                           yaml="train: images/train\nval: images/val\nnames: {names}\n")
    reports = dconvert.convert("yolo", root, tmp_path / "out", workers=0, labels=root / "txt")
    assert sorted(reports) == ["train", "val"]
    for split, rows in expected.items():
        assert _boxes_per_image(tmp_path / "out" / split) == rows
    one = dconvert.convert("yolo", root, tmp_path / "one", workers=0,
                           images=root / "images" / "val", labels=root / "txt" / "val")
    assert _boxes_per_image(tmp_path / "one") == expected["val"]
    with detfmt.open(tmp_path / "one") as ds:
        assert len(ds.header.classes) == 80
    assert one[""].boxes_kept == sum(expected["val"].values())


@pytest.mark.parametrize("layout", ["beside", "parallel_labels", "split_first"])
def test_yolo_labels_beside_images_or_in_a_parallel_tree(tmp_path, layout):
    root = tmp_path / "src"
    image_dir = {"beside": lambda r, s: r / "images" / s,
                 "parallel_labels": lambda r, s: r / "images" / s,
                 "split_first": lambda r, s: r / s / "images"}[layout]
    label_dir = {"beside": lambda r, s: r / "images" / s,
                 "parallel_labels": lambda r, s: r / "labels" / s,
                 "split_first": lambda r, s: r / s / "labels"}[layout]
    expected = _build_yolo(root, image_dir, label_dir)
    reports = dconvert.convert("yolo", root, tmp_path / "out", workers=0)
    assert sorted(reports) == ["train", "val"]
    for split, rows in expected.items():
        assert _boxes_per_image(tmp_path / "out" / split) == rows


def test_yolo_flat_folder_with_labels_beside_and_classes_txt(tmp_path):
    root = tmp_path / "src"
    expected = _build_yolo(root, lambda r, s: r, lambda r, s: r, yaml=None)
    (root / "classes.txt").write_text("\n".join(f"c{i}" for i in range(80)) + "\n")
    reports = dconvert.convert("yolo", root, tmp_path / "out", workers=0)
    rows = {**expected["train"], **expected["val"]}
    assert reports[""].boxes_kept == sum(rows.values())
    assert _boxes_per_image(tmp_path / "out") == rows


# ------------------------------------------------------------------------ item 4: symlinks


def _symlinked_coco(tmp_path: Path) -> tuple[Path, dict[str, dict]]:
    """A DVC / git-annex style checkout: every image a symlink into a cache outside SRC."""
    root = tmp_path / "src"
    expected = _build_coco(root, *COCO_LAYOUTS["custom_json_year_folders"])
    cache = tmp_path / "cache"
    cache.mkdir()
    for image in sorted(root.glob("*2017/*.jpg")):
        target = cache / f"{abs(hash(image.name)):x}"
        shutil.move(image, target)
        image.symlink_to(target)
    return root, expected


def test_per_file_symlinks_are_followed_by_default(tmp_path):
    root, expected = _symlinked_coco(tmp_path)
    _coco(root, tmp_path / "out")
    _check_coco_written(tmp_path / "out", expected)
    assert main(["convert", "coco", str(root), str(tmp_path / "cli"), "--workers", "0",
                 "--max-side", "256", "--no-progress"]) == 0


def test_strict_mode_refuses_symlinks_and_never_advises_a_skip_that_keeps_nothing(tmp_path):
    root, _ = _symlinked_coco(tmp_path)
    with pytest.raises(ConversionError) as info:
        _coco(root, tmp_path / "out", symlinks="refuse")
    assert info.value.rule == "PATH_UNSAFE"
    assert "on_error='skip'" not in str(info.value)  # skipping every image converts nothing
    assert main(["convert", "coco", str(root), str(tmp_path / "cli"), "--workers", "0",
                 "--no-follow-symlinks", "--no-progress"]) == 2
    assert not (tmp_path / "cli" / "splits.json").exists()


def test_a_skip_hint_is_only_given_when_skipping_keeps_images(tmp_path):
    """Property: whenever a refusal advises on_error='skip', that conversion keeps images."""
    root, _ = _symlinked_coco(tmp_path)
    (root / "train2017" / sorted(os.listdir(root / "train2017"))[0]).unlink()
    advised = []
    for strict in ("refuse", "follow"):
        with pytest.raises(ConversionError) as info:
            _coco(root, tmp_path / f"out_{strict}", symlinks=strict)
        if "on_error='skip'" in str(info.value):
            advised.append(strict)
            reports = _coco(root, tmp_path / f"skip_{strict}", symlinks=strict,
                            on_error="skip")
            assert all(r.images_kept > 0 for r in reports.values())
    assert advised == ["follow"]  # one missing image of five: skipping keeps the others


@pytest.mark.parametrize("file_name", ["../outside.jpg", "/etc/hostname", "a\x00.jpg"])
def test_names_from_annotation_files_stay_confined_when_following_symlinks(tmp_path, file_name):
    source, data = _chess()
    root = tmp_path / "src"
    images = root / "images"
    images.mkdir(parents=True)
    good = data["images"][0]
    shutil.copy(source / good["file_name"], images / good["file_name"])
    shutil.copy(source / good["file_name"], root / "outside.jpg")
    bad = {**data["images"][1], "file_name": file_name}
    js = root / "ann.json"
    js.write_text(json.dumps(_coco_split(data, [good, bad])))
    reports = dconvert.convert("coco", js, tmp_path / "out", images=images, workers=0,
                               max_side=256, on_error="skip")
    assert reports[""].images_kept == 1
    assert dict(reports[""].images_skipped) == {"PATH_UNSAFE": 1}


# -------------------------------------------------------------------- item 5: --check-source


def _problem_source(root: Path) -> Path:
    """A COCO source with 3 good images, one zero-byte, one missing, one corrupt."""
    source, data = _chess()
    images = root / "images"
    images.mkdir(parents=True)
    entries = data["images"][:6]
    for image in entries[:3]:
        shutil.copy(source / image["file_name"], images / image["file_name"])
    (images / entries[3]["file_name"]).write_bytes(b"")
    (images / entries[5]["file_name"]).write_bytes(b"\xff\xd8\xff\xe0 not a jpeg")
    js = root / "ann.json"
    js.write_text(json.dumps(_coco_split(data, entries)))
    return js


def test_check_source_counts_equal_the_conversion(tmp_path):
    js = _problem_source(tmp_path / "src")
    check = dconvert.check_source("coco", js, images=tmp_path / "src" / "images", max_side=256)
    reports = dconvert.convert("coco", js, tmp_path / "out", images=tmp_path / "src" / "images",
                               workers=0, max_side=256, on_error="skip")
    (split,) = check.splits
    report = reports[""]
    assert (split.found, split.usable, split.boxes, split.boxes_usable) == (
        report.images_source, report.images_kept, report.boxes_source, report.boxes_kept)
    assert (split.usable, split.missing, split.corrupt) == (3, 1, 2)
    assert dict(split.report.images_skipped) == dict(report.images_skipped)
    zero = [i for i in report.issues if i.path.endswith(json.loads(js.read_text())
                                                        ["images"][3]["file_name"])]
    assert zero and "empty file" in zero[0].detail


def test_check_source_reports_a_layout_problem_and_exits_as_documented(tmp_path, capsys):
    """No annotations (or an ambiguous folder) is a failed check (exit 1), not a crash (2)."""
    (tmp_path / "empty").mkdir()
    check = dconvert.check_source("coco", tmp_path / "empty")
    assert not check.ok and check.hints
    assert main(["convert", "coco", str(tmp_path / "empty"), "--check-source"]) == 1
    good = _build_coco(tmp_path / "good", *COCO_LAYOUTS["custom_json_year_folders"])
    assert main(["convert", "coco", str(tmp_path / "good"), "--check-source", "--workers",
                 "0"]) == 0
    check = dconvert.check_source("coco", tmp_path / "good", max_side=256)
    assert {s.split: s.usable for s in check.splits} == {k: len(v["images"])
                                                         for k, v in good.items()}
    assert all(s.codec in ("raw", "jpeg") and s.report.size_estimates for s in check.splits)


def test_check_source_from_the_cli_names_cli_options(tmp_path, capsys):
    js = _problem_source(tmp_path / "src")
    code = main(["convert", "coco", str(js), "--images", str(tmp_path / "src" / "images"),
                 "--check-source", "--workers", "0"])
    out = capsys.readouterr().out
    assert code == 1
    assert "--on-error skip" in out and "on_error=" not in out


# -------------------------------------------------------------------- item 6: codec sizes


def test_report_estimates_each_codec_size_before_writing(tmp_path, capsys):
    boxes = _build_voc(tmp_path / "src", "annots", "images", count=8)
    reports = dconvert.convert("voc", tmp_path / "src", tmp_path / "raw", workers=0,
                               codec="auto")
    report = reports[""]
    assert set(report.size_estimates) == {"raw", "zstd", "jpeg", "png"}
    assert report.size_estimates["jpeg"] < report.size_estimates["raw"]
    assert report.source_bytes == sum(p.stat().st_size
                                      for p in (tmp_path / "src" / "images").iterdir())
    jpeg = dconvert.convert("voc", tmp_path / "src", tmp_path / "jpeg", workers=0,
                            codec="jpeg")[""]
    for codec, out in (("jpeg", "jpeg"), (report.codec, "raw")):
        stored = sum(p.stat().st_size for p in (tmp_path / out).rglob("*") if p.is_file())
        estimated = (jpeg if codec == "jpeg" else report).size_estimates[codec]
        assert 0.5 < estimated / stored < 1.5, (codec, estimated, stored)
    assert len(boxes) == report.images_kept
    saved = json.loads((tmp_path / "raw.report.json").read_text())
    assert saved["size_estimates"] == report.size_estimates
    capsys.readouterr()
    assert main(["convert", "voc", str(tmp_path / "src"), str(tmp_path / "cli"), "--workers",
                 "0", "--no-progress"]) == 0
    codec_line = next(line for line in capsys.readouterr().err.splitlines()
                      if line.startswith("codec"))
    assert all(f"{codec} ~" in codec_line for codec in ("raw", "zstd", "jpeg", "png"))


def test_every_split_codec_and_size_is_said_before_any_is_written(tmp_path, capsys,
                                                                   monkeypatch):
    import detfmt.writing.writer

    _build_coco(tmp_path / "src", *COCO_LAYOUTS["custom_json_year_folders"])
    real_write, said = detfmt.writing.writer.write, []

    def write(samples, path, **kwargs):
        said.append(capsys.readouterr().err)
        return real_write(samples, path, **kwargs)

    monkeypatch.setattr(detfmt.writing.writer, "write", write)
    _coco(tmp_path / "src", tmp_path / "out", verbose=True)
    assert len(said) == 2
    first = [line for line in said[0].splitlines() if line.startswith("codec")]
    assert [line.split(":")[0] for line in first] == ["codec [train]", "codec [val]"]
    assert all("jpeg ~" in line for line in first)
