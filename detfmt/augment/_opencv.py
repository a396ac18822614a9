"""OpenCV kernels for uint8 CPU batches: the fused warp and Ultralytics' HSV, per sample.

Each sample is a uint8 HWC view of a channels_last batch (no copy) handed to ``cv2`` with a
``dst=`` view of a preallocated channels_last output, in a thread pool over samples: OpenCV
releases the GIL, and one OpenCV thread per sample beats OpenCV's own row split for images this
small. Semantics match `_warp.warp_images` and `color.apply_hsv_gains` (docs/augment.md).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import torch

_pool_lock = threading.Lock()
_pools: dict[int, ThreadPoolExecutor] = {}


def _cv2() -> Any:
    import cv2  # optional dependency: imported only when the backend runs

    return cv2


def _for_each_sample(count: int, fn: Callable[[int], None]) -> None:
    """Run ``fn(i)`` for every sample on ``torch.get_num_threads()`` threads, OpenCV at 1 thread.

    OpenCV's thread count is process-global, so it is restored afterwards (other OpenCV users,
    like the benchmark's reference side, keep their own setting).
    """
    cv2 = _cv2()
    threads = max(1, min(torch.get_num_threads(), count))
    previous = cv2.getNumThreads()
    cv2.setNumThreads(1)
    try:
        if threads == 1:
            for i in range(count):
                fn(i)
            return
        with _pool_lock:
            pool = _pools.get(threads)
            if pool is None:
                pool = _pools[threads] = ThreadPoolExecutor(threads, "detfmt-augment-cv")
        for _ in pool.map(fn, range(count)):
            pass
    finally:
        cv2.setNumThreads(previous)


def _hwc(images: torch.Tensor) -> np.ndarray:
    """(B, H, W, C) numpy view of uint8 (B, C, H, W) images (one copy if not channels_last)."""
    if not images.is_contiguous(memory_format=torch.channels_last):
        images = images.contiguous(memory_format=torch.channels_last)
    return images.permute(0, 2, 3, 1).numpy()


def _empty_like_batch(batch: int, channels: int, height: int, width: int) -> torch.Tensor:
    return torch.empty(
        (batch, channels, height, width), dtype=torch.uint8, memory_format=torch.channels_last
    )


def _plane(array: np.ndarray) -> np.ndarray:
    """OpenCV sees (H, W, 1) as ambiguous; give it (H, W) for single-channel images."""
    return array[..., 0] if array.shape[-1] == 1 else array


def opencv_matrices(matrix: torch.Tensor) -> np.ndarray:
    """(B, 3, 3) float64 inverse maps (output -> source) in OpenCV's pixel-centre convention.

    detfmt's pixel i spans [i, i + 1) (centre i + 0.5); OpenCV's centre is i. So
    M_cv = T(-0.5) @ M @ T(+0.5), and its inverse is passed with ``WARP_INVERSE_MAP`` (float64
    like the torch path's inverse).
    """
    shift = torch.eye(3, dtype=torch.float64)
    shift[:2, 2] = 0.5
    unshift = torch.eye(3, dtype=torch.float64)
    unshift[:2, 2] = -0.5
    m_cv = unshift @ matrix.detach().to("cpu", torch.float64) @ shift
    return torch.linalg.inv(m_cv).numpy()


def warp_images_opencv(
    images: torch.Tensor,
    matrix: torch.Tensor,
    out_size: tuple[int, int],
    *,
    fill: float,
    interpolation: str = "bilinear",
    sizes: torch.Tensor | None = None,
    affine_only: bool = False,
) -> torch.Tensor:
    """`_warp.warp_images` for uint8 CPU images with ``cv2.warpAffine`` / ``warpPerspective``.

    A sample's valid region is passed as a view (``src[:h, :w]``), so pixels outside it read as
    the constant border, as in the torch path. Returns channels_last uint8 images.
    """
    cv2 = _cv2()
    batch, channels = images.shape[:2]
    out_h, out_w = out_size
    src = _hwc(images)
    out = _empty_like_batch(batch, channels, out_h, out_w)
    dst = out.permute(0, 2, 3, 1).numpy()
    inverse = opencv_matrices(matrix)
    regions = sizes.tolist() if sizes is not None else None
    mode = cv2.INTER_LINEAR if interpolation == "bilinear" else cv2.INTER_NEAREST
    flags = mode | cv2.WARP_INVERSE_MAP
    border = (float(fill),) * 4
    perspective = not affine_only

    def one(i: int) -> None:
        image = src[i] if regions is None else src[i, : regions[i][0], : regions[i][1]]
        target = _plane(dst[i])
        if perspective:
            warp, m = cv2.warpPerspective, inverse[i]
        else:
            warp, m = cv2.warpAffine, inverse[i, :2]
        warp(
            _plane(image),
            m,
            (out_w, out_h),
            dst=target,
            flags=flags,
            borderMode=cv2.BORDER_CONSTANT,
            borderValue=border,
        )

    _for_each_sample(batch, one)
    return out


def hsv_luts(gains: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Hue, saturation, value uint8 LUTs for one sample's gains (r_h, r_s, r_v), as Ultralytics.

    Float64 tables truncated to uint8: hue ``(x + r_h 180) % 180``, saturation and value
    ``clip(x (1 + r), 0, 255)``.
    """
    x = np.arange(256, dtype=np.float64)
    hue = ((x + gains[0] * 180) % 180).astype(np.uint8)
    sat = np.clip(x * (gains[1] + 1), 0, 255).astype(np.uint8)
    val = np.clip(x * (gains[2] + 1), 0, 255).astype(np.uint8)
    return hue, sat, val


def hsv_opencv(images: torch.Tensor, gains: torch.Tensor) -> torch.Tensor:
    """`color.apply_hsv_gains` for uint8 RGB CPU images, Ultralytics' OpenCV calls per sample.

    cvtColor, split, three single-channel LUTs, merge, cvtColor (one 3-channel LUT is slower).
    """
    cv2 = _cv2()
    batch, channels, height, width = images.shape
    src = _hwc(images)
    out = _empty_like_batch(batch, channels, height, width)
    dst = out.permute(0, 2, 3, 1).numpy()
    per_sample = gains.detach().to("cpu", torch.float64).numpy()

    def one(i: int) -> None:
        hsv = cv2.cvtColor(src[i], cv2.COLOR_RGB2HSV)
        planes = cv2.split(hsv)
        luts = hsv_luts(per_sample[i])
        cv2.merge([cv2.LUT(p, lut) for p, lut in zip(planes, luts, strict=True)], dst=hsv)
        cv2.cvtColor(hsv, cv2.COLOR_HSV2RGB, dst=dst[i])

    _for_each_sample(batch, one)
    return out
