"""Native (numba) kernels of the CPU augmentation, used when numba is installed (``detfmt[fast]``).

`recolour` runs `RandomHSV` on one image in a single GIL-free pass (`_hsv_numba`) instead of
OpenCV's five; the bytes are the same. The kernel applies Ultralytics' LUTs in closed form:
`lut_parameters` finds, per sample, parameters that reproduce its tables entry for entry
(float32 gains, an integer hue shift); a sample for which none do is left to OpenCV. Loading
numba and the cached kernel takes about a second, once per process, on the first recoloured
batch; with an empty numba cache, compiling it takes a few CPU-seconds, and only the kernel of
the layout in use (planar or RGB) is compiled. Without numba, or with ``DETFMT_HSV=opencv``,
the OpenCV calls run.
"""

from __future__ import annotations

import os
import threading
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["lut_parameters", "recolour", "recolour_kernels"]

_lock = threading.Lock()
_state: dict[str, Any] = {"loaded": False, "kernels": None}


def recolour_kernels() -> tuple[Any, Any] | None:
    """``(recolour_planar, recolour_rgb)`` from `_hsv_numba` (imported on the first call, not
    compiled: each compiles on its first use, `_ready`); None without numba or with
    ``DETFMT_HSV=opencv``."""
    if not _state["loaded"]:
        with _lock:
            if not _state["loaded"]:
                _state["kernels"] = _load()
                _state["loaded"] = True
    return _state["kernels"]


def _load() -> tuple[Any, Any] | None:
    if os.environ.get("DETFMT_HSV", "").lower() == "opencv":
        return None
    try:
        from detfmt.augment._hsv_numba import recolour_planar, recolour_rgb
    except ImportError:
        return None
    return recolour_planar, recolour_rgb


def _ready(kernel: Any, planar: bool) -> bool:
    """Compile (or load from numba's cache) one kernel on its first use, once per process;
    False where it does not compile (OpenCV then gives the bytes). Only the kernel a pipeline
    uses is compiled: a cold start (empty cache) pays one compile, not both (issue 27)."""
    key = "planar" if planar else "rgb"
    state = _state.setdefault("ready", {})
    if key not in state:
        with _lock:
            if key not in state:
                state[key] = _warm_up(kernel, planar)
    return state[key]


def _warm_up(kernel: Any, planar: bool) -> bool:
    pixel = np.zeros(12, np.uint8)
    identity = np.array([0.0, 1.0, 1.0], np.float32)
    rects = np.array([[0, 0, 3, 1]], np.int64)
    try:  # resolve the signature now (the cache lookup happens on a call)
        targets = list(np.zeros((3, 3), np.uint8)) if planar else [np.zeros(9, np.uint8)]
        kernel(pixel[:9], 3, 1, 3, rects, 0, identity, *targets)
    except Exception as error:  # a numba that cannot compile it: OpenCV still gives the bytes
        warnings.warn(f"detfmt: the native HSV kernel did not compile ({error!r}); RandomHSV "
                      "runs through OpenCV", RuntimeWarning, stacklevel=4)
        return False
    return True


def lut_parameters(gains: np.ndarray, tables: np.ndarray) -> np.ndarray:
    """(B, 3) float32 ``(k, g_s, g_v)`` with which the kernel's closed forms give exactly the
    (B, 3, 256) uint8 hue, saturation and value ``tables`` made from ``gains`` (B, 3); NaN in a
    row where they do not.

    Hue: ``(h + k) mod 180`` on the levels 0..179 that OpenCV's 8-bit HSV produces.
    Saturation, value: ``trunc(clip(float32(x) g, 0, 255))`` for x in 0..255, g the float32
    nearest ``1 + r`` or, where that truncates differently right below an integer (the tables
    come from a float64 product), one of its float32 neighbours.
    """
    gains = np.asarray(gains, dtype=np.float64).reshape(-1, 3)
    tables = np.asarray(tables, dtype=np.uint8).reshape(-1, 3, 256)
    params = np.full((len(tables), 3), np.nan, dtype=np.float32)
    shifts = tables[:, 0, 0].astype(np.int64)
    hue_ok = (tables[:, 0, :180] == (np.arange(180) + shifts[:, None]) % 180).all(axis=1)
    params[hue_ok, 0] = shifts[hue_ok]
    x = np.arange(256, dtype=np.float32)
    nearest = (gains[:, 1:] + 1).astype(np.float32)  # (B, 2)
    found = np.zeros(nearest.shape, dtype=bool)
    for ulps in (0, 1, -1, 2, -2):
        candidate = nearest
        for _ in range(abs(ulps)):
            candidate = np.nextafter(candidate, np.float32(np.inf if ulps > 0 else -np.inf))
        with np.errstate(invalid="ignore", over="ignore"):
            got = np.trunc(np.clip(x * candidate[..., None], np.float32(0), np.float32(255)))
        exact = (got == tables[:, 1:]).all(axis=-1) & ~found
        params[:, 1:][exact] = candidate[exact]
        found |= exact
        if found.all():  # the nearest float32 gain nearly always is the one
            break
    return params


def _flat(array: np.ndarray) -> np.ndarray | None:
    return array.reshape(-1) if array.flags.c_contiguous else None


def recolour(
    image: np.ndarray,
    parameters: np.ndarray | None,
    dst: np.ndarray | list[np.ndarray],
    content: Sequence[tuple[int, int, int, int]] | None = None,
    fill: int = 0,
) -> bool:
    """Ultralytics' HSV jitter of one (H, W, 3 or 4) uint8 RGB(A) ``image`` with one row of
    `lut_parameters`, written as RGB into ``dst`` (an (H, W, 3) array or three (H, W) planes).

    ``content``: the disjoint rectangles (x0, y0, x1, y1) of ``image`` that hold the image;
    only they are read, and every other pixel of ``dst`` gets what the grey level ``fill``
    recolours to (the kernel's own result for that colour, as if ``image`` held it there).
    None: the whole image.

    False, with nothing written, where the kernel is not loaded, the parameters are missing or
    NaN, or a layout is not contiguous (the caller then runs OpenCV). A rectangle outside the
    image is a ValueError, raised before anything is written.
    """
    if parameters is None:
        return False
    kernels = recolour_kernels()
    if kernels is None:
        return False
    source = _flat(image)
    targets = [_flat(plane) for plane in dst] if isinstance(dst, list) else [_flat(dst)]
    if source is None or any(t is None for t in targets):
        return False
    height, width, channels = image.shape
    if content is None:
        rects = np.array([[0, 0, width, height]], np.int64)
    else:
        rects = np.array(content, np.int64).reshape(-1, 4)
    params = np.ascontiguousarray(parameters, np.float32).reshape(3)
    planar, rgb = kernels
    kernel = planar if len(targets) == 3 else rgb
    if not _ready(kernel, len(targets) == 3):
        return False
    code = kernel(source, channels, height, width, rects, int(fill), params, *targets)
    if code < 0:
        raise ValueError(f"content rectangles must lie within the {width}x{height} image "
                         f"with x0 <= x1 and y0 <= y1, got {rects.tolist()}")
    return code == 0
