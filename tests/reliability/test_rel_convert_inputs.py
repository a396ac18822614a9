"""Issue 12, property 5: converters' inputs are confined, tried as an attacker would.

A source dataset is untrusted. Its annotation files name the files to read, and the folders may
hold symlinks, FIFOs, devices and undecodable names. Every converter must read only regular files
inside the image and label folders the user gave, decode names and labels as UTF-8, and turn every
malformed number into a typed error or a counted skip. Each attack runs with both policies:
``on_error="error"`` must raise a `DetfmtError` with the listed rule (never hang, never a bare
exception), and ``on_error="skip"`` must skip and count the image while converting the rest. The
"secret" outside the folder is a valid image, so reading it would succeed silently.

Symlinks leaving a folder are followed by default (DVC, git-annex and symlink exports are made
of them: tests/convert/test_layouts.py); the attacks through them run in the strict mode meant
for untrusted archives, ``symlinks="refuse"``. Names from annotation files are confined in both.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

import detfmt
from detfmt import convert as dconvert
from detfmt.convert import ConversionError, from_coco, from_voc, from_yolo
from detfmt.errors import DetfmtError
from tests.convert.conftest import save_image

pytestmark = pytest.mark.timeout(60)  # a FIFO read by today's code blocks forever

GOOD_BOX = [2, 2, 10, 10]


def _secret(tmp_path: Path) -> Path:
    """A valid image outside every folder given to the converter."""
    return save_image(tmp_path / "outside" / "secret.jpg", 40, 30, seed=99)


def _coco(tmp_path: Path, names: list[str]) -> tuple[Path, Path]:
    """An image folder with good.jpg and a JSON naming good.jpg plus ``names`` (each with a
    box, so a silently read attack file would keep its box)."""
    images = tmp_path / "img"
    save_image(images / "good.jpg", 40, 30)
    entries = ["good.jpg", *names]
    js = tmp_path / "ann.json"
    js.write_text(json.dumps({
        "images": [{"id": i + 1, "file_name": name} for i, name in enumerate(entries)],
        "annotations": [{"id": i + 1, "image_id": i + 1, "category_id": 1, "bbox": GOOD_BOX}
                        for i in range(len(entries))],
        "categories": [{"id": 1, "name": "x"}]}))
    return js, images


def _outcome(run, on_error: str, rule: str | set[str]):
    rules = {rule} if isinstance(rule, str) else rule
    if on_error == "error":
        with pytest.raises(DetfmtError) as info:
            run(on_error="error")
        assert isinstance(info.value, ConversionError)
        assert info.value.rule in rules, info.value
        return None
    report = run(on_error="skip")
    assert report.balanced
    assert sum(report.images_skipped.values()) >= 1
    assert set(report.images_skipped) <= rules, report.images_skipped
    return report


# ------------------------------------------------------------------ COCO file names and files


def _coco_attack(tmp_path: Path, kind: str) -> list[str]:
    secret = _secret(tmp_path)
    images = tmp_path / "img"
    images.mkdir(parents=True, exist_ok=True)
    if kind == "absolute":
        return [str(secret)]
    if kind == "dotdot":
        return ["../outside/secret.jpg"]
    if kind == "dotdot_inside":  # resolves inside the folder, but names '..'
        (images / "sub").mkdir()
        return ["sub/../good.jpg"]
    if kind == "nul":
        return ["good.jpg\x00.png"]
    if kind == "symlink_out":
        (images / "link.jpg").symlink_to(secret)
        return ["link.jpg"]
    if kind == "symlink_dir_out":
        (images / "outdir").symlink_to(secret.parent, target_is_directory=True)
        return ["outdir/secret.jpg"]
    if kind == "symlink_loop":
        (images / "a.jpg").symlink_to(images / "b.jpg")
        (images / "b.jpg").symlink_to(images / "a.jpg")
        return ["a.jpg"]
    if kind == "fifo":
        os.mkfifo(images / "pipe.jpg")
        return ["pipe.jpg"]
    if kind == "device":
        (images / "zero.jpg").symlink_to("/dev/zero")
        return ["zero.jpg"]
    if kind == "directory":
        (images / "dir.jpg").mkdir()
        return ["dir.jpg"]
    raise AssertionError(kind)


COCO_ATTACKS = ["absolute", "dotdot", "dotdot_inside", "nul", "symlink_out", "symlink_dir_out",
                "symlink_loop", "fifo", "device", "directory"]


@pytest.mark.parametrize("kind", COCO_ATTACKS)
@pytest.mark.parametrize("on_error", ["error", "skip"])
def test_coco_reads_only_regular_files_inside_the_image_folder(tmp_path, kind, on_error):
    names = _coco_attack(tmp_path, kind)
    js, images = _coco(tmp_path, names)
    strict = {"symlinks": "refuse"} if kind.endswith("_out") else {}
    report = _outcome(lambda **kw: from_coco(js, images, tmp_path / "ds", workers=0, **strict,
                                             **kw), on_error, "PATH_UNSAFE")
    if report is not None:
        assert report.images_kept == 1
        with detfmt.open(tmp_path / "ds") as ds:
            assert [ds[i].fields["file_name"] for i in range(len(ds))] == ["good.jpg"]


# ----------------------------------------------------------------------- YOLO trees and lists


def _yolo_tree(tmp_path: Path) -> tuple[Path, Path]:
    images, labels = tmp_path / "images", tmp_path / "labels"
    save_image(images / "good.jpg", 40, 30)
    labels.mkdir(parents=True)
    (labels / "good.txt").write_text("0 0.5 0.5 0.2 0.2\n")
    return images, labels


@pytest.mark.parametrize("kind,rule", [
    ("image_symlink_out", "PATH_UNSAFE"),
    ("label_symlink_out", "PATH_UNSAFE"),
    ("label_fifo", "PATH_UNSAFE"),
    ("image_fifo", "PATH_UNSAFE"),
    ("label_not_utf8", "LABEL_ENCODING"),
    ("image_name_not_utf8", "NAME_ENCODING"),
])
@pytest.mark.parametrize("on_error", ["error", "skip"])
def test_yolo_tree_attacks(tmp_path, kind, rule, on_error):
    images, labels = _yolo_tree(tmp_path)
    secret = _secret(tmp_path)
    outside_label = tmp_path / "outside" / "secret.txt"
    outside_label.write_text("0 0.5 0.5 0.9 0.9\n")
    if kind == "image_symlink_out":
        (images / "evil.jpg").symlink_to(secret)
    elif kind == "label_symlink_out":
        save_image(images / "evil.jpg", 40, 30, seed=1)
        (labels / "evil.txt").symlink_to(outside_label)
    elif kind == "label_fifo":
        save_image(images / "evil.jpg", 40, 30, seed=1)
        os.mkfifo(labels / "evil.txt")
    elif kind == "image_fifo":
        os.mkfifo(images / "evil.jpg")
    elif kind == "label_not_utf8":
        save_image(images / "evil.jpg", 40, 30, seed=1)
        (labels / "evil.txt").write_bytes(b"0 0.5 0.5 0.2 0.2 \xff\xfe\n")
    elif kind == "image_name_not_utf8":
        name = os.fsdecode(b"evil\xff.jpg")
        save_image(images / name, 40, 30, seed=1)
    strict = {"symlinks": "refuse"} if kind.endswith("_out") else {}
    report = _outcome(lambda **kw: from_yolo(images, labels, tmp_path / "ds", names=["x"],
                                             workers=0, **strict, **kw), on_error, rule)
    if report is not None:
        assert report.images_kept == 1 and report.boxes_kept == 1
        with detfmt.open(tmp_path / "ds") as ds:
            assert ds[0].fields["file_name"] == "good.jpg"


def test_yolo_directory_symlinks_loop_and_leave(tmp_path):
    """A folder link back to the image folder is walked once; one leaving it is not followed
    in the strict mode."""
    images, labels = _yolo_tree(tmp_path)
    secret = _secret(tmp_path)
    (images / "loop").symlink_to(images, target_is_directory=True)
    (images / "away").symlink_to(secret.parent, target_is_directory=True)
    (labels / "loop").symlink_to(labels, target_is_directory=True)
    report = from_yolo(images, labels, tmp_path / "ds", names=["x"], workers=0,
                       symlinks="refuse")
    assert (report.images_source, report.images_kept, report.boxes_kept) == (1, 1, 1)


@pytest.mark.parametrize("line", ["{secret}", "../outside/secret.jpg", "./../outside/secret.jpg"])
def test_yolo_list_entries_are_confined_to_the_dataset_root(tmp_path, line):
    root = tmp_path / "ds_root"
    save_image(root / "images" / "good.jpg", 40, 30)
    (root / "labels").mkdir(parents=True)
    (root / "labels" / "good.txt").write_text("0 0.5 0.5 0.2 0.2\n")
    secret = _secret(tmp_path)
    (tmp_path / "outside" / "secret.txt").write_text("0 0.5 0.5 0.9 0.9\n")
    (root / "train.txt").write_text(f"./images/good.jpg\n{line.format(secret=secret)}\n")
    (root / "data.yaml").write_text("path: .\ntrain: train.txt\nnames: [x]\n")
    with pytest.raises(ConversionError) as info:
        dconvert.convert("yolo", root / "data.yaml", tmp_path / "out", workers=0)
    assert info.value.rule == "PATH_UNSAFE"
    reports = dconvert.convert("yolo", root / "data.yaml", tmp_path / "out", workers=0,
                      on_error="skip")
    assert reports["train"].images_kept == 1 and reports["train"].images_skipped == {
        "PATH_UNSAFE": 1}


# ------------------------------------------------------------------------------------- VOC

VOC_XML = ("<annotation><filename>{name}</filename><object><name>x</name><bndbox>"
           "<xmin>{b[0]}</xmin><ymin>{b[1]}</ymin><xmax>{b[2]}</xmax><ymax>{b[3]}</ymax>"
           "</bndbox></object></annotation>")


def _voc(tmp_path: Path) -> tuple[Path, Path]:
    ann, img = tmp_path / "Annotations", tmp_path / "JPEGImages"
    save_image(img / "good.jpg", 40, 30)
    ann.mkdir(parents=True)
    (ann / "good.xml").write_text(VOC_XML.format(name="good.jpg", b=(2, 2, 10, 10)))
    return ann, img


@pytest.mark.parametrize("kind", ["dotdot", "absolute", "xml_fifo", "xml_symlink_out"])
@pytest.mark.parametrize("on_error", ["error", "skip"])
def test_voc_attacks(tmp_path, kind, on_error):
    ann, img = _voc(tmp_path)
    secret = _secret(tmp_path)
    if kind == "dotdot":
        (ann / "evil.xml").write_text(VOC_XML.format(name="../outside/secret.jpg",
                                                     b=(2, 2, 10, 10)))
    elif kind == "absolute":
        (ann / "evil.xml").write_text(VOC_XML.format(name=secret, b=(2, 2, 10, 10)))
    elif kind == "xml_fifo":
        os.mkfifo(ann / "evil.xml")
    elif kind == "xml_symlink_out":
        outside_xml = tmp_path / "outside" / "evil.xml"
        outside_xml.write_text(VOC_XML.format(name="good.jpg", b=(1, 1, 30, 20)))
        (ann / "evil.xml").symlink_to(outside_xml)
    strict = {"symlinks": "refuse"} if kind.endswith("_out") else {}
    report = _outcome(lambda **kw: from_voc(ann, img, tmp_path / "ds", workers=0, **strict,
                                            **kw), on_error, "PATH_UNSAFE")
    if report is not None:
        assert report.images_kept == 1 and report.boxes_kept == 1


def test_voc_image_set_ids_are_confined(tmp_path):
    _voc(tmp_path)
    (tmp_path / "outside" / "x.xml").parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / "outside" / "x.xml").write_text(VOC_XML.format(name="good.jpg", b=(1, 1, 9, 9)))
    sets = tmp_path / "ImageSets" / "Main"
    sets.mkdir(parents=True)
    (sets / "train.txt").write_text("good\n../outside/x\n")
    with pytest.raises(ConversionError) as info:
        dconvert.convert("voc", tmp_path, tmp_path / "out", workers=0)
    assert info.value.rule == "PATH_UNSAFE"


# --------------------------------------------------------------------------- malformed numbers

# Rows the pre-branch converter stored as (wrong or dropped) boxes, or failed on untyped.
BAD_YOLO_ROWS = [
    "0 nan 0.5 0.2 0.2", "0 inf 0.5 0.2 0.2", "0 -inf 0.5 0.2 0.2", "0 1e999 0.5 0.2 0.2",
    "0 1_0 0.5 0.2 0.2", "0 \u0660.5 0.5 0.2 0.2", "0 1e5 0.5 0.2 0.2", "0 -0.5 0.5 0.2 0.2",
]
# Regression guards: rows the pre-branch converter already refused with a typed error.
BAD_YOLO_ROWS += [
    "0 0x1p-1 0.5 0.2 0.2", "0 0.5 0.5 0.2", "0 0.5 0.5 0.2 0.2 0.3", "0 0.1 0.1 0.2 0.2 0.3",
    "99999999999999999999 0.5 0.5 0.2 0.2", "0x0 0.5 0.5 0.2 0.2", "nan 0.5 0.5 0.2 0.2",
    "0 0.5 0.5 0.2 0.2 " + "0.5 " * 5, "0 - 0.5 0.2 0.2", "0 . 0.5 0.2 0.2",
]


@pytest.mark.parametrize("row", BAD_YOLO_ROWS)
def test_yolo_malformed_numbers_are_typed_or_counted(tmp_path, row):
    images, labels = _yolo_tree(tmp_path)
    save_image(images / "bad.jpg", 40, 30, seed=2)
    (labels / "bad.txt").write_text(f"0 0.5 0.5 0.1 0.1\n{row}\n")
    with pytest.raises(ConversionError) as info:
        from_yolo(images, labels, tmp_path / "ds", names=["x"], workers=0)
    assert info.value.rule in {"LABEL_MALFORMED", "LABEL_OUT_OF_RANGE", "UNKNOWN_CLASS"}
    assert info.value.path.endswith("bad.txt")
    report = from_yolo(images, labels, tmp_path / "ds", names=["x"], workers=0,
                       on_error="skip")
    assert report.balanced and report.images_kept == 1 and sum(
        report.images_skipped.values()) == 1
    assert report.boxes_dropped[f"image_skipped:{info.value.rule}"] == 2


BAD_VOC_NUMBERS = [
    ("bndbox", "nan"), ("bndbox", "inf"), ("bndbox", "1e999"), ("bndbox", ""),
    ("bndbox", "1_0"), ("size", "1e400"), ("size", "-5"), ("difficult", "inf"),
    ("difficult", "1e999"), ("size", "99999999999999999999999"),
]
BAD_VOC_NUMBERS += [("bndbox", "0x10"), ("size", "nan"), ("truncated", "nan")]  # guards


@pytest.mark.parametrize("where,token", BAD_VOC_NUMBERS)
def test_voc_malformed_numbers_are_typed_or_counted(tmp_path, where, token):
    ann, img = _voc(tmp_path)
    save_image(img / "bad.jpg", 40, 30, seed=2)
    box = {"xmin": "2", "ymin": "2", "xmax": "10", "ymax": "10"}
    size, flags = "<size><width>40</width><height>30</height></size>", ""
    if where == "bndbox":
        box["xmax"] = token
    elif where == "size":
        size = f"<size><width>{token}</width><height>30</height></size>"
    else:
        flags = f"<{where}>{token}</{where}>"
    body = "".join(f"<{k}>{v}</{k}>" for k, v in box.items())
    (ann / "bad.xml").write_text(f"<annotation><filename>bad.jpg</filename>{size}<object>"
                                 f"<name>x</name>{flags}<bndbox>{body}</bndbox></object>"
                                 "</annotation>")
    with pytest.raises(ConversionError) as info:
        from_voc(ann, img, tmp_path / "ds", workers=0)
    assert info.value.rule == "XML_INVALID" and info.value.path.endswith("bad.xml")
    report = from_voc(ann, img, tmp_path / "ds", workers=0, on_error="skip")
    assert report.balanced and report.images_kept == 1
    assert report.images_skipped == {"XML_INVALID": 1}


@pytest.mark.parametrize("field,value", [
    ("iscrowd", 300), ("iscrowd", -1), ("ann_id", 2**64 - 1), ("ann_id", 2**70),
    ("image_id", 2**63), ("image_id", -(2**63) - 1), ("category_id", 2**80),
    ("width", -5), ("height", 2**40),
])
def test_coco_out_of_range_integers_are_typed(tmp_path, field, value):
    images = tmp_path / "img"
    save_image(images / "good.jpg", 40, 30)
    image = {"id": 1, "file_name": "good.jpg", "width": 40, "height": 30}
    ann = {"id": 1, "image_id": 1, "category_id": 1, "bbox": GOOD_BOX}
    if field in ("width", "height"):
        image[field] = value
    elif field == "image_id":
        image["id"] = ann["image_id"] = value
    elif field == "ann_id":
        ann["id"] = value
    else:
        ann[field] = value
    js = tmp_path / "ann.json"
    js.write_text(json.dumps({"images": [image], "annotations": [ann],
                              "categories": [{"id": 1, "name": "x"}]}))
    with pytest.raises(ConversionError) as info:
        from_coco(js, images, tmp_path / "ds", workers=0)
    assert info.value.rule == "JSON_INVALID" and str(js) in str(info.value)


def test_coco_overflowing_float_is_typed(tmp_path):  # a regression guard (typed before)
    images = tmp_path / "img"
    save_image(images / "good.jpg", 40, 30)
    js = tmp_path / "ann.json"
    js.write_text('{"images": [{"id": 1, "file_name": "good.jpg"}], "annotations": [{"id": 1, '
                  '"image_id": 1, "category_id": 1, "bbox": [1e999, 2, 5, 5]}], '
                  '"categories": [{"id": 1, "name": "x"}]}')
    with pytest.raises(ConversionError) as info:
        from_coco(js, images, tmp_path / "ds", workers=0)
    assert info.value.rule == "JSON_INVALID"


def test_names_file_not_utf8_is_typed(tmp_path):
    images, labels = _yolo_tree(tmp_path)
    names = tmp_path / "names.txt"
    names.write_bytes(b"caf\xe9\n")
    with pytest.raises(ConversionError) as info:
        from_yolo(images, labels, tmp_path / "ds", names=names, workers=0)
    assert info.value.rule == "NAMES_INVALID"


def test_no_box_from_an_attack_reaches_the_dataset(tmp_path):
    """End to end with every YOLO attack at once: the dataset holds exactly the good image and
    its box, unchanged."""
    images, labels = _yolo_tree(tmp_path)
    secret = _secret(tmp_path)
    (images / "a.jpg").symlink_to(secret)
    os.mkfifo(images / "b.jpg")
    save_image(images / "c.jpg", 40, 30, seed=5)
    (labels / "c.txt").write_text("0 nan 0.5 0.2 0.2\n")
    save_image(images / "d.jpg", 40, 30, seed=6)
    (labels / "d.txt").write_text("0 1.5 0.5 0.2 0.2\n")
    report = from_yolo(images, labels, tmp_path / "ds", names=["x"], workers=0,
                       on_error="skip", symlinks="refuse")
    assert report.images_kept == 1 and report.balanced
    with detfmt.open(tmp_path / "ds") as ds:
        assert len(ds) == 1
        np.testing.assert_allclose(ds[0].boxes, [[16, 12, 24, 18]])
