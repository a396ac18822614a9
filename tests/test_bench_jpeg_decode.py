"""tools/bench_jpeg_decode.py's DCT-downscale baseline decodes at 1/2, the size `decode_scale=2`
gives, not at 1/8 (simplejpeg picks the largest factor that keeps its minimum size)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

simplejpeg = pytest.importorskip("simplejpeg")
pytest.importorskip("cv2")
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tools"))

import bench_jpeg_decode  # noqa: E402


@pytest.mark.parametrize("shape", [(480, 640), (427, 640), (333, 501)])
def test_half_baseline_decodes_at_half_size(shape: tuple[int, int]) -> None:
    rng = np.random.default_rng(0)
    image = rng.integers(0, 256, (*shape, 3), dtype=np.uint8)
    payload = simplejpeg.encode_jpeg(image, quality=90, colorspace="RGB")
    got = bench_jpeg_decode.decode_half(payload, shape)
    assert got.shape == (-(-shape[0] // 2), -(-shape[1] // 2), 3)
