"""COCO parsing and policy tests (stand-in writer: no dependency on the core writer)."""

from __future__ import annotations

import numpy as np
import pytest

from detfmt.convert import ConversionError, from_coco, parse_coco
from tests.convert.conftest import save_image, shared_dataset, write_coco

CATS = [{"id": 7, "name": "cat"}, {"id": 3, "name": "dog"}, {"id": 90, "name": "unused"}]


def _two_images(tmp_path):
    save_image(tmp_path / "img" / "a.jpg", 64, 48, seed=1)
    save_image(tmp_path / "img" / "b.png", 32, 32, seed=2)
    return [{"id": 10, "file_name": "a.jpg", "width": 64, "height": 48},
            {"id": 11, "file_name": "b.png", "width": 32, "height": 32}]


def test_categories_remapped_iscrowd_kept_empty_image_kept(tmp_path, recorder):
    images = _two_images(tmp_path)
    anns = [
        {"id": 1, "image_id": 10, "category_id": 7, "bbox": [1, 2, 10, 20], "iscrowd": 0},
        {"id": 2, "image_id": 10, "category_id": 3, "bbox": [5, 5, 3, 4], "iscrowd": 1,
         "segmentation": {"counts": [1, 2], "size": [48, 64]}},
    ]
    js = write_coco(tmp_path / "ann.json", images, anns, CATS)
    report = from_coco(js, tmp_path / "img", tmp_path / "out", codec="raw")
    assert report.balanced and report.images_kept == 2 and report.boxes_kept == 2
    assert len(recorder.kwargs["classes"]) == 3
    names = [getattr(c, "name", c) for c in recorder.kwargs["classes"]]
    assert names == ["dog", "cat", "unused"]  # sorted by original id 3, 7, 90
    first, second = recorder.samples
    np.testing.assert_array_equal(first["classes"], [1, 0])
    np.testing.assert_array_equal(first["iscrowd"], [0, 1])
    np.testing.assert_allclose(first["boxes"], [[1, 2, 11, 22], [5, 5, 8, 9]])
    assert first["source_id"] == 10 and first["file_name"] == "a.jpg"
    assert second["boxes"].shape == (0, 4) and second["iscrowd"].shape == (0,)
    # annotation ids are kept (every annotation has one that fits int32): issue 13 item 6
    assert recorder.kwargs["box_fields"] == {"iscrowd": "|u1", "ann_id": "<i4"}
    np.testing.assert_array_equal(first["ann_id"], [1, 2])
    assert second["ann_id"].shape == (0,)
    assert (tmp_path / "out.report.json").is_file()


@pytest.mark.parametrize("ids", [[1, None], [5, 5], [1, 2**31]])
def test_annotation_ids_kept_only_when_all_present_distinct_and_int32(tmp_path, recorder, ids):
    images = _two_images(tmp_path)
    anns = [{"image_id": 10, "category_id": 7, "bbox": [1, 2, 3, 4]},
            {"image_id": 11, "category_id": 3, "bbox": [1, 1, 2, 2]}]
    for ann, ann_id in zip(anns, ids, strict=True):
        if ann_id is not None:
            ann["id"] = ann_id
    js = write_coco(tmp_path / "ann.json", images, anns, CATS)
    from_coco(js, tmp_path / "img", tmp_path / "out", codec="raw")
    assert recorder.kwargs["box_fields"] == {"iscrowd": "|u1"}
    assert "ann_id" not in recorder.samples[0]


def test_box_policy_counts_every_box(tmp_path, recorder):
    images = _two_images(tmp_path)
    anns = [
        {"image_id": 10, "category_id": 7, "bbox": [1, 1, 5, 5]},        # kept
        {"image_id": 10, "category_id": 7, "bbox": [1, 1, 0, 5]},        # w = 0 -> degenerate
        {"image_id": 10, "category_id": 7, "bbox": [1, 1, 5, -2]},       # h < 0 -> degenerate
        {"image_id": 10, "category_id": 7, "bbox": [60, 40, 10, 10]},    # clipped to 64x48
        {"image_id": 10, "category_id": 7, "bbox": [100, 100, 5, 5]},    # outside -> dropped
        {"image_id": 999, "category_id": 7, "bbox": [1, 1, 5, 5]},       # orphan annotation
    ]
    js = write_coco(tmp_path / "ann.json", images, anns, CATS)
    report = from_coco(js, tmp_path / "img", tmp_path / "out", codec="raw")
    assert report.balanced
    assert report.boxes_source == 6 and report.boxes_kept == 2
    assert report.boxes_dropped == {"box_degenerate": 2, "box_outside": 1,
                                    "annotation_orphan": 1}
    assert report.boxes_fixed == {"box_clipped": 1}
    np.testing.assert_allclose(recorder.samples[0]["boxes"], [[1, 1, 6, 6], [60, 40, 64, 48]])


def test_nan_boxes_in_python_style_json_are_dropped(tmp_path, recorder):
    images = _two_images(tmp_path)
    text = ('{"images": %s, "categories": [{"id": 7, "name": "cat"}], "annotations": ['
            '{"image_id": 10, "category_id": 7, "bbox": [NaN, 1, 2, 3]},'
            '{"image_id": 10, "category_id": 7, "bbox": [1, 1, 2, 3]}]}')
    import json
    js = tmp_path / "nan.json"
    js.write_text(text % json.dumps(images))
    report = from_coco(js, tmp_path / "img", tmp_path / "out", codec="raw")
    assert report.boxes_dropped == {"box_nonfinite": 1} and report.boxes_kept == 1


@pytest.mark.parametrize("text,where", [
    ("{not json", "malformed"),
    ('{"images": [{"id": 1}]}', "file_name"),
    ('{"images": [], "annotations": [{"image_id": 1, "category_id": 1, "bbox": [1, 2, 3]}]}',
     "bbox"),
    ('[1, 2]', "object"),
])
def test_malformed_json_is_a_typed_error(tmp_path, recorder, text, where):
    js = tmp_path / "bad.json"
    js.write_text(text)
    (tmp_path / "img").mkdir()
    with pytest.raises(ConversionError) as info:
        from_coco(js, tmp_path / "img", tmp_path / "out")
    assert info.value.rule == "JSON_INVALID" and info.value.path == str(js)
    assert where in str(info.value)


def test_duplicate_image_id_is_an_error(tmp_path):
    js = write_coco(tmp_path / "a.json", [{"id": 1, "file_name": "x.jpg"}] * 2, [], CATS)
    with pytest.raises(ConversionError, match="duplicate image id") as info:
        parse_coco(js)
    assert info.value.rule == "DUPLICATE_ID"


@pytest.mark.parametrize("on_error", ["error", "skip"])
def test_unknown_category(tmp_path, recorder, on_error):
    images = _two_images(tmp_path)
    anns = [{"image_id": 10, "category_id": 7, "bbox": [1, 1, 5, 5]},
            {"image_id": 10, "category_id": 55, "bbox": [1, 1, 5, 5]},
            {"image_id": 11, "category_id": 3, "bbox": [1, 1, 5, 5]}]
    js = write_coco(tmp_path / "ann.json", images, anns, CATS)
    if on_error == "error":
        with pytest.raises(ConversionError) as info:
            from_coco(js, tmp_path / "img", tmp_path / "out", on_error=on_error)
        assert info.value.rule == "UNKNOWN_CLASS" and "55" in str(info.value)
        return
    report = from_coco(js, tmp_path / "img", tmp_path / "out", on_error=on_error)
    assert report.images_skipped == {"UNKNOWN_CLASS": 1}
    assert report.boxes_dropped == {"image_skipped:UNKNOWN_CLASS": 2}
    assert report.balanced and [s["source_id"] for s in recorder.samples] == [11]


@pytest.mark.parametrize("on_error", ["error", "skip"])
def test_missing_image(tmp_path, recorder, on_error):
    images = [*_two_images(tmp_path), {"id": 12, "file_name": "gone.jpg"}]
    anns = [{"image_id": 12, "category_id": 7, "bbox": [1, 1, 5, 5]}]
    js = write_coco(tmp_path / "ann.json", images, anns, CATS)
    if on_error == "error":
        with pytest.raises(ConversionError) as info:
            from_coco(js, tmp_path / "img", tmp_path / "out")
        assert info.value.rule == "IMAGE_MISSING" and info.value.path.endswith("gone.jpg")
        return
    report = from_coco(js, tmp_path / "img", tmp_path / "out", on_error="skip",
                       allow_empty=True)
    assert report.images_skipped == {"IMAGE_MISSING": 1} and report.balanced
    assert [issue.path for issue in report.issues if issue.reason == "IMAGE_MISSING"] == [
        str(tmp_path / "img" / "gone.jpg")]


@pytest.mark.parametrize("workers", [0, 2])
def test_corrupt_image_skipped_and_listed(tmp_path, recorder, workers):
    images = _two_images(tmp_path)
    data = (tmp_path / "img" / "a.jpg").read_bytes()
    (tmp_path / "img" / "a.jpg").write_bytes(data[: len(data) // 2])  # truncated JPEG
    (tmp_path / "img" / "c.jpg").write_bytes(b"\xff\xd8\xff\xe0 not really a jpeg")
    images.append({"id": 12, "file_name": "c.jpg", "width": 4, "height": 4})
    anns = [{"image_id": 10, "category_id": 7, "bbox": [1, 1, 5, 5]}]
    js = write_coco(tmp_path / "ann.json", images, anns, CATS)
    report = from_coco(js, tmp_path / "img", tmp_path / "out", on_error="skip",
                       workers=workers, allow_empty=True)
    assert report.images_skipped == {"IMAGE_INVALID": 2} and report.balanced
    assert sorted(i.path for i in report.issues if i.reason == "IMAGE_INVALID") == [
        str(tmp_path / "img" / "a.jpg"), str(tmp_path / "img" / "c.jpg")]
    assert [s["source_id"] for s in recorder.samples] == [11]


def test_chess_parse_counts():
    root = shared_dataset("chess-coco") / "valid"
    index = parse_coco(root / "_annotations.coco.json")
    assert len(index) == 58 and len(index.boxes) == 386 and index.orphans == 0
    assert [cid for _, cid in index.categories] == list(range(14))
    assert index.starts[-1] == 386


def test_lax_numbers_accepted(tmp_path, recorder):
    save_image(tmp_path / "img" / "a.jpg", 64, 48, seed=1)
    js = tmp_path / "lax.json"
    js.write_text('{"images": [{"id": 1.0, "file_name": "a.jpg", "width": "64", "height": 48.0}],'
                  '"categories": [{"id": 1, "name": "x"}], "annotations": [{"image_id": 1,'
                  '"category_id": 1, "bbox": [1, "2", 3, 4], "iscrowd": true}]}')
    report = from_coco(js, tmp_path / "img", tmp_path / "out")
    assert report.boxes_kept == 1 and not report.notes
    np.testing.assert_array_equal(recorder.samples[0]["iscrowd"], [1])


def test_file_name_with_folder_falls_back_to_basename(tmp_path, recorder):
    save_image(tmp_path / "img" / "a.jpg", 64, 48, seed=1)
    js = write_coco(tmp_path / "a.json", [{"id": 1, "file_name": "train2017/a.jpg"}], [], CATS)
    report = from_coco(js, tmp_path / "img", tmp_path / "out", allow_empty=True)
    assert report.images_kept == 1 and report.notes == {"file_name_basename": 1}
    assert recorder.samples[0]["file_name"] == "train2017/a.jpg"  # the original name is kept
