"""``ds.batch(decode_scale=)``: JPEG decoded at 1/2, 1/4, 1/8 in the DCT domain (issue 27
item 1), only on request; sizes and boxes follow the pixels, on every kind of dataset."""

from __future__ import annotations

import numpy as np
import pytest

from detfmt import errors
from tests.datasets import make_dataset, make_sharded_root


def _shapes():
    return [(64, 96), (57, 41), (120, 80), (33, 130), (96, 96)]


def _smooth(h, w):
    yy, xx = np.mgrid[0:h, 0:w]
    return np.stack([(xx * 2) % 256, (yy * 2) % 256, ((xx + yy) // 2) % 256], -1).astype(np.uint8)


@pytest.fixture
def jpeg_ds(tmp_path):
    import detfmt

    samples = [{"image": _smooth(h, w), "boxes": np.array([[2, 4, w - 2, h - 4]], np.float32),
                "classes": np.array([1], np.int32)} for h, w in _shapes()]
    detfmt.write(samples, tmp_path / "ds", classes=["a", "b"], codec="jpeg")
    return detfmt.open(tmp_path / "ds")


@pytest.mark.parametrize("scale", [2, 4, 8])
def test_scaled_decode_sizes_boxes_and_pixels(jpeg_ds, scale):
    full = jpeg_ds.batch(range(5))
    small = jpeg_ds.batch(range(5), decode_scale=scale)
    want = [(-(-h // scale), -(-w // scale)) for h, w in _shapes()]
    assert small.sizes.tolist() == [list(s) for s in want]
    assert small.images.shape[1:3] == tuple(np.max(want, axis=0))
    for j, (h, w) in enumerate(want):
        fy, fx = h / _shapes()[j][0], w / _shapes()[j][1]
        assert np.allclose(small.boxes[j, 0], full.boxes[j, 0] * [fx, fy, fx, fy], atol=1e-4)
        # the scaled decode is the block average: close to subsampling the full decode
        ref = full.images[j, : h * scale : scale, : w * scale : scale].astype(int)
        got = small.images[j, :h, :w].astype(int)
        hh, ww = ref.shape[:2]
        assert np.abs(got[:hh, :ww] - ref).mean() < 12
        assert not small.images[j, h:].any() and not small.images[j, :h, w:].any()


def test_scale_one_is_the_stored_pixels(jpeg_ds):
    a, b = jpeg_ds.batch(range(5)), jpeg_ds.batch(range(5), decode_scale=1)
    assert np.array_equal(a.images, b.images) and np.array_equal(a.boxes, b.boxes)


def test_bad_scale_and_non_jpeg_are_usage_errors(jpeg_ds, tmp_path):
    with pytest.raises(errors.UsageError, match="decode_scale must be"):
        jpeg_ds.batch([0], decode_scale=3)
    raw = make_dataset(tmp_path / "raw", [(16, 16), (20, 12)])
    with pytest.raises(errors.UsageError, match="needs JPEG-stored samples"):
        raw.batch([0, 1], decode_scale=2)


def test_sharded_root_scales_like_a_directory(tmp_path):
    shapes = [(40, 64), (31, 50), (64, 40), (48, 48), (20, 90), (70, 30), (33, 33)]
    one = make_dataset(tmp_path / "one", shapes, codec="jpeg")
    root = make_sharded_root(tmp_path / "root", shapes, codec="jpeg")
    a = one.batch(range(7), decode_scale=2)
    b = root.batch(range(7), decode_scale=2)
    assert np.array_equal(a.images, b.images) and np.array_equal(a.sizes, b.sizes)
    assert np.array_equal(a.boxes, b.boxes)
