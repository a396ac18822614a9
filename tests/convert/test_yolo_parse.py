"""YOLO parsing and policy tests (stand-in writer)."""

from __future__ import annotations

import numpy as np
import pytest

from detfmt.convert import ConversionError, from_yolo
from detfmt.convert.names import load_names, parse_yaml_names
from detfmt.convert.yolo import find_pairs
from tests.convert.conftest import save_image, shared_dataset


def _tree(tmp_path, labels: dict[str, str], images=("a", "b")):
    for i, stem in enumerate(images):
        save_image(tmp_path / "images" / "train" / f"{stem}.jpg", 100, 50, seed=i)
    for stem, text in labels.items():
        path = tmp_path / "labels" / "train" / f"{stem}.txt"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path / "images", tmp_path / "labels"


@pytest.mark.parametrize("text,expected", [
    ("names:\n  0: person\n  1: 'traffic light'\nnc: 2\n", {0: "person", 1: "traffic light"}),
    ("names: [person, \"traffic light\"]  # two\n", {0: "person", 1: "traffic light"}),
    ("names: ['a',\n  'b', 'c']\n", {0: "a", 1: "b", 2: "c"}),
    ("path: .\nnames:\n- a\n- b # comment\ntrain: x\n", {0: "a", 1: "b"}),
    ("names: {0: a, 2: c}\n", {0: "a", 2: "c"}),
])
def test_yaml_names_forms(text, expected):
    assert parse_yaml_names(text) == expected


def test_yaml_without_names_is_an_error(tmp_path):
    path = tmp_path / "data.yaml"
    path.write_text("train: images\n")
    with pytest.raises(ConversionError) as info:
        load_names(path)
    assert info.value.rule == "NAMES_MISSING"


def test_boxes_polygons_quirks(tmp_path, recorder):
    images, labels = _tree(tmp_path, {
        "a": "0 0.5 0.5 0.2 0.4\n\n1 0.1 0.1 0.3 0.1 0.2 0.3\n",  # box + triangle segment
        "orphan": "0 0.5 0.5 0.1 0.1\n1 0.5 0.5 0.1 0.1\n",
    }, images=("a", "b", "c"))
    (labels / "train" / "c.txt").write_text("")  # empty label file
    report = from_yolo(images, labels, tmp_path / "out", names=["p", "q"])
    assert report.balanced
    assert report.images_kept == 3 and report.boxes_kept == 2
    assert report.notes == {"image_without_label": 1, "label_without_image": 1,
                            "empty_label_file": 1}
    assert report.boxes_dropped == {"label_without_image": 2}
    a, b, c = recorder.samples
    np.testing.assert_allclose(a["boxes"], [[40, 15, 60, 35], [10, 5, 30, 15]])
    np.testing.assert_array_equal(a["classes"], [0, 1])
    assert a["file_name"] == "train/a.jpg"
    assert b["boxes"].shape == (0, 4) and c["boxes"].shape == (0, 4)


@pytest.mark.parametrize("line,rule", [
    ("0 0.5 0.5 0.2", "LABEL_MALFORMED"),             # 4 numbers
    ("0 0.5 0.5 0.2 0.2 0.9", "LABEL_MALFORMED"),     # 6 numbers
    ("0 0.1 0.1 0.2 0.2 0.3", "LABEL_MALFORMED"),     # odd polygon, 5 coords
    ("0 0.5 0.5 0.2 zero", "LABEL_MALFORMED"),
    ("0.5 0.5 0.5 0.2 0.2", "LABEL_MALFORMED"),       # fractional class id
    ("7 0.5 0.5 0.2 0.2", "UNKNOWN_CLASS"),
    ("-1 0.5 0.5 0.2 0.2", "UNKNOWN_CLASS"),
])
@pytest.mark.parametrize("on_error", ["error", "skip"])
def test_bad_label_lines(tmp_path, recorder, line, rule, on_error):
    images, labels = _tree(tmp_path, {"a": f"0 0.5 0.5 0.1 0.1\n{line}\n", "b": ""})
    if on_error == "error":
        with pytest.raises(ConversionError) as info:
            from_yolo(images, labels, tmp_path / "out", names=["p", "q"])
        assert info.value.rule == rule and info.value.path.endswith("a.txt")
        assert "line 2" in str(info.value)
        return
    report = from_yolo(images, labels, tmp_path / "out", names=["p", "q"], on_error="skip",
                       allow_empty=True)
    assert report.images_skipped == {rule: 1} and report.balanced
    assert report.boxes_dropped == {f"image_skipped:{rule}": 2}
    assert len(recorder.samples) == 1


def test_names_from_classes_txt_and_missing(tmp_path, recorder):
    images, labels = _tree(tmp_path, {"a": "1 0.5 0.5 0.1 0.1\n"})
    with pytest.raises(ConversionError) as info:
        from_yolo(images, labels, tmp_path / "out")
    assert info.value.rule == "NAMES_MISSING"
    (labels / "classes.txt").write_text("zero\none\n")
    report = from_yolo(images, labels, tmp_path / "out2")
    assert [getattr(c, "name", c) for c in recorder.kwargs["classes"]] == ["zero", "one"]
    assert report.notes.get("label_without_image", 0) == 0  # classes.txt is not a label file


def test_coco128_pairs_and_quirks():
    root = shared_dataset("coco128-yolo")
    pairs, orphans = find_pairs(root / "images", root / "object_detection" / "labels")
    assert len(pairs) == 128
    assert sorted(i.stem for i, label in pairs if label is None) == ["000000000250",
                                                                     "000000000508"]
    assert sorted(p.stem for p in orphans) == ["000000000656", "000000000659"]
    names = load_names(root / "object_detection" / "config.yaml")
    assert len(names) == 80 and names[0] == "person" and names[79] == "toothbrush"
