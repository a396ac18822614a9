"""Colour modules against references: Ultralytics HSV LUTs in OpenCV's uint8 HSV, ColorJitter."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import detfmt.augment as A
from detfmt.augment.color import hsv_to_rgb_opencv, rgb_to_hsv_opencv

from ._helpers import make_batch

HSV_SHIFT = 12


def _div_tables():
    """OpenCV's RGB2HSV_b fixed-point tables (color_hsv.simd.hpp)."""
    i = np.arange(256, dtype=np.float64)
    with np.errstate(divide="ignore"):
        sdiv = np.where(i > 0, np.round((255 << HSV_SHIFT) / np.maximum(i, 1)), 0)
        hdiv = np.where(i > 0, np.round((180 << HSV_SHIFT) / (6.0 * np.maximum(i, 1))), 0)
    return sdiv.astype(np.int64), hdiv.astype(np.int64)


def reference_rgb_to_hsv(rgb: np.ndarray) -> np.ndarray:
    """uint8 (..., 3) RGB -> OpenCV 8-bit HSV with its integer arithmetic."""
    sdiv, hdiv = _div_tables()
    r, g, b = (rgb[..., k].astype(np.int64) for k in range(3))
    v = np.maximum(np.maximum(r, g), b)
    vmin = np.minimum(np.minimum(r, g), b)
    diff = v - vmin
    vr = v == r
    vg = v == g
    s = (diff * sdiv[v] + (1 << (HSV_SHIFT - 1))) >> HSV_SHIFT
    h = np.where(vr, g - b, np.where(vg, b - r + 2 * diff, r - g + 4 * diff))
    h = (h * hdiv[diff] + (1 << (HSV_SHIFT - 1))) >> HSV_SHIFT
    h = np.where(h < 0, h + 180, h)
    return np.stack([h, s, v], axis=-1).clip(0, 255).astype(np.uint8)


def reference_hsv_to_rgb(hsv: np.ndarray) -> np.ndarray:
    """OpenCV HSV2RGB_b: float32 sector table (HSV2RGB_native), then trunc(x * 255).

    OpenCV's vector path (most pixels) truncates; its scalar tail rounds, so real cv2 output
    can differ by one level on a few pixels.
    """
    h = hsv[..., 0].astype(np.float32) * np.float32(6.0 / 180.0)
    s = hsv[..., 1].astype(np.float32) * np.float32(1.0 / 255.0)
    v = hsv[..., 2].astype(np.float32) * np.float32(1.0 / 255.0)
    sector = np.floor(h).astype(np.int64)
    f = h - sector
    sector %= 6
    one = np.float32(1.0)
    tab = np.stack([v, v * (one - s), v * (one - s * f), v * (one - s * (one - f))], axis=-1)
    sector_data = np.array([[1, 3, 0], [1, 0, 2], [3, 0, 1], [0, 2, 1], [0, 1, 3], [2, 1, 0]])
    bgr = np.take_along_axis(tab, sector_data[sector], axis=-1)
    bgr = np.where((s == 0)[..., None], v[..., None], bgr)
    rgb = bgr[..., ::-1] * np.float32(255.0)
    return np.clip(np.trunc(rgb), 0, 255).astype(np.uint8)


def reference_random_hsv(rgb: np.ndarray, r: np.ndarray) -> np.ndarray:
    """Ultralytics RandomHSV (>= 8.3.79) with gains ``r`` (no +1), on an RGB uint8 image."""
    x = np.arange(0, 256, dtype=r.dtype)
    lut_hue = ((x + r[0] * 180) % 180).astype(np.uint8)
    lut_sat = np.clip(x * (r[1] + 1), 0, 255).astype(np.uint8)
    lut_val = np.clip(x * (r[2] + 1), 0, 255).astype(np.uint8)
    lut_sat[0] = 0
    hsv = reference_rgb_to_hsv(rgb)
    hsv = np.stack([lut_hue[hsv[..., 0]], lut_sat[hsv[..., 1]], lut_val[hsv[..., 2]]], axis=-1)
    return reference_hsv_to_rgb(hsv)


def _hwc(images: torch.Tensor) -> np.ndarray:
    return images.permute(0, 2, 3, 1).numpy()


def _fraction_within(a: np.ndarray, b: np.ndarray, levels: int) -> float:
    diff = np.abs(a.astype(np.int32) - b.astype(np.int32)).max(axis=-1)
    return float((diff <= levels).mean())


def test_rgb_hsv_conversions_match_opencv_integer_math():
    grid = (
        np.stack(
            np.meshgrid(
                np.arange(0, 256, 5), np.arange(0, 256, 3), np.arange(0, 256, 7), indexing="ij"
            ),
            axis=-1,
        )
        .reshape(-1, 3)
        .astype(np.uint8)
    )
    t = torch.from_numpy(grid).float().T[None, :, :, None]  # (1, 3, N, 1)
    ours = rgb_to_hsv_opencv(t)[0, :, :, 0].T.numpy().astype(np.int64)
    ref = reference_rgb_to_hsv(grid).astype(np.int64)
    assert np.array_equal(ours, ref)
    back = hsv_to_rgb_opencv(torch.from_numpy(ref.astype(np.float32)).T[None, :, :, None])
    back = back[0, :, :, 0].T.numpy().astype(np.int64)
    ref_back = reference_hsv_to_rgb(ref.astype(np.uint8)).astype(np.int64)
    assert np.abs(back - ref_back).max() <= 1 and (back == ref_back).mean() > 0.999


@pytest.mark.parametrize("gains", [(0.015, 0.7, 0.4), (0.5, 0.9, 0.9)])
def test_random_hsv_matches_numpy_reference(gains):
    g = torch.Generator().manual_seed(31)
    batch = make_batch(6, 48, 64, 2, seed=32)
    op = A.RandomHSV(h=gains[0], s=gains[1], v=gains[2], generator=g)
    out = op(batch)
    r = op.last_params["gains"].numpy()
    assert r.dtype == np.float64 and (np.abs(r) <= np.array(gains)).all()
    src, got = _hwc(batch.images), _hwc(out.images)
    fractions = []
    for i in range(len(batch)):
        ref = reference_random_hsv(src[i], r[i])
        fractions.append(_fraction_within(got[i], ref, 2))
    assert min(fractions) >= 0.99, fractions
    assert not torch.equal(out.images, batch.images)
    assert torch.equal(out.boxes, batch.boxes) and torch.equal(out.mask, batch.mask)


def test_random_hsv_matches_cv2_when_installed():
    cv2 = pytest.importorskip("cv2")
    g = torch.Generator().manual_seed(33)
    batch = make_batch(4, 48, 64, 2, seed=34)
    op = A.RandomHSV(h=0.3, s=0.7, v=0.4, generator=g)
    out = op(batch)
    r = op.last_params["gains"].numpy()
    for i, (src, got) in enumerate(zip(_hwc(batch.images), _hwc(out.images), strict=True)):
        img = np.ascontiguousarray(src[..., ::-1])  # Ultralytics works on BGR
        x = np.arange(0, 256, dtype=r.dtype)
        lut_hue = ((x + r[i, 0] * 180) % 180).astype(np.uint8)
        lut_sat = np.clip(x * (r[i, 1] + 1), 0, 255).astype(np.uint8)
        lut_val = np.clip(x * (r[i, 2] + 1), 0, 255).astype(np.uint8)
        lut_sat[0] = 0
        hue, sat, val = cv2.split(cv2.cvtColor(img, cv2.COLOR_BGR2HSV))
        im_hsv = cv2.merge((cv2.LUT(hue, lut_hue), cv2.LUT(sat, lut_sat), cv2.LUT(val, lut_val)))
        ref = cv2.cvtColor(im_hsv, cv2.COLOR_HSV2BGR)[..., ::-1]
        assert _fraction_within(got, ref, 2) >= 0.99
        assert _fraction_within(got, ref, 0) >= 0.98  # OpenCV's own rounding, reproduced


def test_zero_gains_keep_grey_and_value():
    batch = make_batch(2, 16, 16, 1, seed=35)
    grey = batch.images[:, :1].expand(-1, 3, -1, -1).contiguous()
    out = A.RandomHSV(h=0.0, s=0.0, v=0.0)(batch.replace(images=grey))
    assert torch.equal(out.images, grey)


def test_color_jitter_identity_and_brightness():
    batch = make_batch(3, 32, 32, 1, seed=36)
    jitter = A.ColorJitter(brightness=0.5, contrast=0.5, saturation=0.5, hue=0.1)
    ones = torch.ones(3)
    params = {"brightness": ones, "contrast": ones, "saturation": ones, "hue": torch.zeros(3)}
    out = jitter(batch, params)
    assert (out.images.int() - batch.images.int()).abs().max() <= 1
    half = dict(params, brightness=torch.full((3,), 0.5))
    out = jitter(batch, half)
    expected = (batch.images.float() * 0.5).round()
    assert (out.images.float() - expected).abs().max() <= 1
    grey = dict(params, saturation=torch.zeros(3))
    out = jitter(batch, grey).images.int()
    assert (out.max(dim=1).values - out.min(dim=1).values).max() <= 1


def test_color_jitter_hue_half_turn_swaps_complements():
    images = torch.zeros(1, 3, 4, 4, dtype=torch.uint8)
    images[:, 0] = 200  # pure red -> cyan after half a turn
    batch = make_batch(1, 4, 4, 1).replace(images=images)
    jitter = A.ColorJitter(hue=0.5)
    one = torch.ones(1)
    out = jitter(
        batch, {"brightness": one, "contrast": one, "saturation": one, "hue": torch.tensor([0.5])}
    )
    assert out.images[0, :, 0, 0].tolist() == [0, 200, 200]


def test_to_float_and_normalize():
    batch = make_batch(2, 8, 8, 1, seed=37)
    half = A.ToFloat(dtype=torch.float16)(batch)
    assert half.images.dtype == torch.float16
    assert torch.allclose(half.images.float(), batch.images.float() / 255, atol=1e-3)
    norm = A.Normalize(mean=(0.5, 0.5, 0.5), std=(0.25, 0.5, 1.0))(batch)
    x = batch.images.float() / 255
    expected = (x - 0.5) / torch.tensor([0.25, 0.5, 1.0]).view(1, 3, 1, 1)
    assert torch.allclose(norm.images, expected, atol=1e-6)
