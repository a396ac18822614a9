"""Pascal VOC parsing and policy tests (stand-in writer)."""

from __future__ import annotations

import numpy as np
import pytest

from detfmt.convert import ConversionError, from_voc
from detfmt.convert.voc import parse_voc_xml, to_voc_box
from tests.convert.conftest import save_image, shared_dataset

XML = """<annotation><filename>{name}</filename>
<size><width>{w}</width><height>{h}</height><depth>3</depth></size>{objects}</annotation>"""
OBJ = """<object><name>{cls}</name><truncated>{t}</truncated><difficult>{d}</difficult>
<bndbox><xmin>{b[0]}</xmin><ymin>{b[1]}</ymin><xmax>{b[2]}</xmax><ymax>{b[3]}</ymax></bndbox>
</object>"""


def _voc(tmp_path, specs):
    """specs: {stem: [(cls, (xmin, ymin, xmax, ymax), difficult, truncated), ...]}"""
    for i, (stem, objects) in enumerate(specs.items()):
        save_image(tmp_path / "JPEGImages" / f"{stem}.jpg", 80, 60, seed=i)
        body = "".join(OBJ.format(cls=c, b=b, d=d, t=t) for c, b, d, t in objects)
        path = tmp_path / "Annotations" / f"{stem}.xml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(XML.format(name=f"{stem}.jpg", w=80, h=60, objects=body))
    return tmp_path / "Annotations", tmp_path / "JPEGImages"


def test_one_based_convention_and_fields(tmp_path, recorder):
    ann, img = _voc(tmp_path, {
        "x": [("dog", (1, 1, 80, 60), 1, 0), ("cat", (10, 20, 30, 40), 0, 1)], "y": []})
    report = from_voc(ann, img, tmp_path / "out")
    assert report.balanced and report.boxes_kept == 2 and report.images_kept == 2
    assert [getattr(c, "name", c) for c in recorder.kwargs["classes"]] == ["cat", "dog"]
    x, y = recorder.samples
    np.testing.assert_allclose(x["boxes"], [[0, 0, 80, 60], [9, 19, 30, 40]])  # whole image
    np.testing.assert_array_equal(x["classes"], [1, 0])
    np.testing.assert_array_equal(x["difficult"], [1, 0])
    np.testing.assert_array_equal(x["truncated"], [0, 1])
    assert y["boxes"].shape == (0, 4)
    assert to_voc_box(x["boxes"][1]) == (10, 20, 30, 40)


@pytest.mark.parametrize("on_error", ["error", "skip"])
def test_malformed_xml(tmp_path, recorder, on_error):
    ann, img = _voc(tmp_path, {"x": [("dog", (1, 1, 5, 5), 0, 0)], "y": []})
    (ann / "x.xml").write_text("<annotation><object><name>dog</name>")  # truncated
    if on_error == "error":
        with pytest.raises(ConversionError) as info:
            from_voc(ann, img, tmp_path / "out")
        assert info.value.rule == "XML_INVALID" and info.value.path.endswith("x.xml")
        return
    report = from_voc(ann, img, tmp_path / "out", on_error="skip", allow_empty=True)
    assert report.images_skipped == {"XML_INVALID": 1} and report.balanced


def test_bad_coordinate_is_xml_invalid(tmp_path):
    ann, _ = _voc(tmp_path, {"x": [("dog", (1, "one", 5, 5), 0, 0)]})
    with pytest.raises(ConversionError, match="not a finite number") as info:
        parse_voc_xml(ann / "x.xml")
    assert info.value.rule == "XML_INVALID"


@pytest.mark.parametrize("on_error", ["error", "skip"])
def test_unknown_class_with_given_classes(tmp_path, recorder, on_error):
    ann, img = _voc(tmp_path, {"x": [("wolf", (1, 1, 5, 5), 0, 0)], "y": [("dog", (2, 2, 9, 9),
                                                                            0, 0)]})
    if on_error == "error":
        with pytest.raises(ConversionError) as info:
            from_voc(ann, img, tmp_path / "out", classes=["cat", "dog"])
        assert info.value.rule == "UNKNOWN_CLASS" and "wolf" in str(info.value)
        return
    report = from_voc(ann, img, tmp_path / "out", classes=["cat", "dog"], on_error="skip")
    assert report.images_skipped == {"UNKNOWN_CLASS": 1} and report.boxes_kept == 1
    np.testing.assert_array_equal(recorder.samples[0]["classes"], [1])


def test_box_outside_image_is_clipped_and_counted(tmp_path, recorder):
    ann, img = _voc(tmp_path, {"x": [("dog", (0, 1, 90, 60), 0, 0), ("dog", (85, 1, 99, 9), 0, 0)]})
    report = from_voc(ann, img, tmp_path / "out")
    assert report.boxes_fixed == {"box_clipped": 1}
    assert report.boxes_dropped == {"box_outside": 1} and report.balanced
    np.testing.assert_allclose(recorder.samples[0]["boxes"], [[0, 0, 80, 60]])


def test_raccoon_parse():
    root = shared_dataset("raccoon")
    xmls = sorted((root / "annotations").glob("*.xml"))
    parsed = [parse_voc_xml(x) for x in xmls]
    assert len(parsed) == 200 and sum(len(p.names) for p in parsed) == 217
    assert {n for p in parsed for n in p.names} == {"raccoon"}
    assert sum(int(p.truncated.sum()) for p in parsed) == 59
