"""Write → open → read returns exactly what was written (within JPEG tolerance for jpeg)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import detfmt
from tests.samples import CLASSES, make_samples


@st.composite
def datasets(draw):
    n = draw(st.integers(0, 6))
    samples = []
    for _ in range(n):
        h = draw(st.integers(1, 24))
        w = draw(st.integers(1, 24))
        seed = draw(st.integers(0, 2**31))
        rng = np.random.default_rng(seed)
        k = draw(st.integers(0, 4))
        xs = np.sort(rng.uniform(0, w, (k, 2)), axis=1)
        ys = np.sort(rng.uniform(0, h, (k, 2)), axis=1)
        boxes = np.stack([xs[:, 0], ys[:, 0], xs[:, 1], ys[:, 1]], 1).reshape(k, 4)
        samples.append({
            "image": rng.integers(0, 256, (h, w, 3), dtype=np.uint8),
            "boxes": boxes,
            "classes": rng.integers(0, len(CLASSES), k),
            "iscrowd": rng.integers(0, 2, k).astype(np.uint8),
            "file_name": draw(st.text(max_size=8)),
        })
    codec = draw(st.sampled_from(["raw", "zstd", "png"]))
    return samples, codec


@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=datasets())
def test_lossless_roundtrip(tmp_path_factory, data):
    samples, codec = data
    path = tmp_path_factory.mktemp("rt") / "ds"
    detfmt.write(samples, path, classes=CLASSES, codec=codec, box_fields={"iscrowd": "uint8"})
    ds = detfmt.open(path)
    assert len(ds) == len(samples)
    for i, sample in enumerate(samples):
        got = ds[i]
        np.testing.assert_array_equal(got.image, sample["image"])
        np.testing.assert_array_equal(got.boxes, sample["boxes"].astype(np.float32))
        np.testing.assert_array_equal(got.classes, sample["classes"])
        np.testing.assert_array_equal(got.iscrowd, sample["iscrowd"])
        assert got.file_name == sample["file_name"]
    if samples:
        batch = ds.batch(np.arange(len(samples))[::-1])
        for j, i in enumerate(range(len(samples))[::-1]):
            h, w = samples[i]["image"].shape[:2]
            np.testing.assert_array_equal(batch.images[j, :h, :w], samples[i]["image"])
            k = len(samples[i]["boxes"])
            assert batch.mask[j].sum() == k
            expected = samples[i]["boxes"].astype(np.float32)
            np.testing.assert_array_equal(batch.boxes[j, :k], expected)
    assert detfmt.verify(path).ok


def test_jpeg_roundtrip_within_tolerance(tmp_path):
    rng = np.random.default_rng(1)
    y, x = np.mgrid[0:64, 0:80]
    smooth = np.stack([x * 3, y * 3, (x + y) * 2], axis=-1).astype(np.uint8)
    samples = [{"image": smooth, "boxes": [[1, 2, 30, 40]], "classes": [1]},
               {"image": np.full((16, 16, 3), 200, np.uint8), "boxes": np.zeros((0, 4)),
                "classes": []}]
    detfmt.write(samples, tmp_path / "j", classes=CLASSES, codec="jpeg", jpeg_quality=95)
    ds = detfmt.open(tmp_path / "j")
    error = np.abs(ds[0].image.astype(int) - smooth.astype(int))
    assert error.mean() < 2.0, error.mean()
    assert ds.codec(0) == "jpeg"
    np.testing.assert_array_equal(ds[0].boxes, [[1, 2, 30, 40]])
    assert rng is not None and detfmt.verify(tmp_path / "j").ok


@pytest.mark.parametrize("codec", ["raw", "zstd", "png", "jpeg"])
def test_every_codec_verifies(tmp_path, codec):
    samples = make_samples(8, seed=3, fields=True)
    report = detfmt.write(samples, tmp_path / codec, classes=CLASSES, codec=codec,
                          box_fields={"iscrowd": "uint8"})
    assert report.codecs == {codec: 8}
    assert report.num_boxes == sum(len(s["boxes"]) for s in samples)
    assert detfmt.verify(tmp_path / codec).ok
    ds = detfmt.open(tmp_path / codec)
    assert ds.header.image.codecs == {codec: 8}
    assert [ds[i].source_id for i in range(8)] == [1000 + i for i in range(8)]
