"""Image rules: EXIF orientation per source format, colour modes, corrupt files."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from detfmt.convert import from_coco, from_yolo
from detfmt.errors import InvalidSampleError
from detfmt.writing import image as _image
from tests.convert.conftest import write_coco


def _rotated_jpeg(path):
    """Stored 40x20 (w x h) black image, white block at stored x 0..10, y 0..5, EXIF 6: it is
    displayed 20x40 with the block at x 15..20, y 0..10 (rotated 90 degrees clockwise)."""
    pixels = np.zeros((20, 40, 3), np.uint8)
    pixels[0:5, 0:10] = 255
    exif = Image.Exif()
    exif[_image.EXIF_ORIENTATION] = 6
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(pixels).save(path, quality=95, exif=exif.tobytes())
    return path


def _mean_in(image, box):
    x0, y0, x1, y1 = (round(float(v)) for v in box)
    return image[y0:y1, x0:x1].mean(), image.mean()


def test_probe_reports_orientation(tmp_path):
    info = _image.probe_image(_rotated_jpeg(tmp_path / "r.jpg"))
    assert (info.width, info.height, info.orientation) == (40, 20, 6)
    assert info.display_size == (20, 40)


def test_yolo_boxes_refer_to_the_displayed_image(tmp_path, recorder):
    _rotated_jpeg(tmp_path / "images" / "r.jpg")
    (tmp_path / "labels").mkdir()
    (tmp_path / "labels" / "r.txt").write_text("0 0.875 0.125 0.25 0.25\n")
    from_yolo(tmp_path / "images", tmp_path / "labels", tmp_path / "out", names=["block"])
    sample = recorder.samples[0]
    assert sample["image"].shape == (40, 20, 3)
    np.testing.assert_allclose(sample["boxes"], [[15, 0, 20, 10]])
    inside, overall = _mean_in(sample["image"], sample["boxes"][0])
    assert inside > 200 and overall < 60


@pytest.mark.parametrize("declared,frame", [((20, 40), "displayed"), ((40, 20), "stored"),
                                            (None, "displayed")])
def test_coco_frame_follows_the_declared_size(tmp_path, recorder, declared, frame):
    _rotated_jpeg(tmp_path / "img" / "r.jpg")
    image = {"id": 1, "file_name": "r.jpg"}
    if declared:
        image.update(width=declared[0], height=declared[1])
    bbox = [15, 0, 5, 10] if frame == "displayed" else [0, 0, 10, 5]
    js = write_coco(tmp_path / "a.json", [image],
                    [{"image_id": 1, "category_id": 1, "bbox": bbox}], [{"id": 1, "name": "b"}])
    report = from_coco(js, tmp_path / "img", tmp_path / "out")
    sample = recorder.samples[0]
    if frame == "stored":
        assert isinstance(sample["image"], np.ndarray)
        assert report.notes == {"exif_stored_frame": 1}
    assert sample["image"].shape == ((40, 20, 3) if frame == "displayed" else (20, 40, 3))
    inside, overall = _mean_in(sample["image"], sample["boxes"][0])
    assert inside > 200 and overall < 60


@pytest.mark.parametrize("mode,fmt", [("L", "JPEG"), ("CMYK", "JPEG"), ("RGBA", "PNG"),
                                      ("P", "PNG"), ("I;16", "PNG"), ("LA", "PNG"),
                                      ("1", "PNG")])
def test_modes_become_rgb_uint8(tmp_path, mode, fmt):
    rng = np.random.default_rng(0)
    if mode == "I;16":
        image = Image.fromarray(rng.integers(0, 65536, (12, 10), dtype=np.uint16))
        assert image.mode.startswith("I;16")
    else:
        image = Image.fromarray(rng.integers(0, 256, (12, 10, 3), dtype=np.uint8)).convert(mode)
    path = tmp_path / f"x.{fmt.lower()}"
    image.save(path, format=fmt)
    array = _image.load_rgb(path)
    assert array.shape == (12, 10, 3) and array.dtype == np.uint8
    if mode == "I;16":  # 16-bit scaled by 1/257, not clipped
        expected = np.rint(np.asarray(image, np.float64) / 257.0)
        np.testing.assert_allclose(array[:, :, 0], expected, atol=1)


def test_corrupt_and_truncated_are_typed_errors_naming_the_file(tmp_path):
    good = tmp_path / "good.jpg"
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (64, 64, 3), np.uint8)).save(good)
    truncated = tmp_path / "trunc.jpg"
    truncated.write_bytes(good.read_bytes()[:400])
    garbage = tmp_path / "garbage.jpg"
    garbage.write_bytes(b"definitely not an image")
    for path in (truncated, garbage):
        for check in (_image.load_rgb, _image.check_decodes):
            with pytest.raises(InvalidSampleError) as info:
                check(path)
            assert info.value.rule == "IMAGE_INVALID" and info.value.path == str(path)
    with pytest.raises(InvalidSampleError) as info:
        _image.probe_image(tmp_path / "missing.jpg")
    assert info.value.rule == "IMAGE_MISSING"
