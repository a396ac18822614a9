"""Which output pixels a warp takes from a sample's valid region, per row, and fill for the rest.

Output pixel (u, v) belongs to the region when its centre's source point p (the inverse
matrix, continuous pixels, perspective divided) lies in ``[0, w) x [0, h)``: the rule
`_warp.warp_images` applies per pixel on tensors. The OpenCV backend warps with a replicated
edge and then writes the fill over the pixels outside, found here in float64 on the host: the
pixels of a row inside a convex region are one span [lo, hi), so a scale and translation (the
default pipelines) costs a few slices and a rotation one or two slices per row.
"""

from __future__ import annotations

import math

import numpy as np

# Below this the perspective divide is guarded, as in `_warp.sampling_grid`.
_TINY_W = 1e-8


def cut_to_region(
    dst: np.ndarray, inverse: np.ndarray, region: tuple[int, int], fill: int
) -> None:
    """Write ``fill`` into every pixel of ``dst`` (H, W, ...) whose centre maps outside
    ``region`` (h, w) through ``inverse`` (3, 3: output -> source, detfmt's continuous
    convention, pixel i spanning [i, i + 1))."""
    out_size = dst.shape[:2]
    m = np.asarray(inverse, dtype=np.float64)
    rectangle = inside_rectangle(m, out_size, region)
    if rectangle is not None:
        fill_around(dst, rectangle, fill)
        return
    spans = inside_spans(m, out_size, region)
    if spans is not None:
        fill_outside(dst, *spans, fill)
    else:
        dst[~_inside_per_pixel(m, out_size, region)] = fill


def inside_rectangle(
    inverse: np.ndarray, out_size: tuple[int, int], region: tuple[int, int]
) -> tuple[int, int, int, int] | None:
    """(r0, r1, c0, c1): for a scale and translation, the output pixels inside the region are
    rows [r0, r1) x columns [c0, c1) (empty: r0 == r1 or c0 == c1); None for any other map.

    In Python floats: numpy's per-call cost was most of the work of the per-row spans.
    """
    m = np.asarray(inverse, dtype=np.float64)
    if not (m[0, 1] == 0 and m[1, 0] == 0 and m[2, 0] == 0 and m[2, 1] == 0 and m[2, 2] > 0):
        return None
    (sx, _, tx), (_, sy, ty), (_, _, weight) = m.tolist()
    out_h, out_w = out_size
    h, w = region
    c0, c1 = _span_1d(sx / weight, (sx * 0.5 + tx) / weight, w, out_w)
    r0, r1 = _span_1d(sy / weight, (sy * 0.5 + ty) / weight, h, out_h)
    if c0 >= c1 or r0 >= r1:
        return 0, 0, 0, 0
    return r0, r1, c0, c1


def fill_around(dst: np.ndarray, rectangle: tuple[int, int, int, int], fill: int) -> None:
    """Write ``fill`` into ``dst`` (H, W, ...) outside rows [r0, r1) x columns [c0, c1)."""
    r0, r1, c0, c1 = rectangle
    if r0 >= r1 or c0 >= c1:
        dst[:] = fill
        return
    dst[:r0] = fill
    dst[r1:] = fill
    dst[r0:r1, :c0] = fill
    dst[r0:r1, c1:] = fill


def _span_1d(step: float, start: float, size: float, count: int) -> tuple[int, int]:
    """[lo, hi): the integers u in [0, count) with ``0 <= step u + start < size``."""
    lo, hi = 0, count
    for slope, offset, strict in ((step, start, False), (-step, size - start, True)):
        if slope == 0.0:
            if not (offset > 0 if strict else offset >= 0):
                return 0, 0
            continue
        root = min(max(-offset / slope, -1.0), math.ldexp(1.0, 40))
        if slope > 0:  # u >= root (u > root)
            lo = max(lo, math.floor(root) + 1 if strict else math.ceil(root))
        else:  # u <= root (u < root)
            hi = min(hi, math.ceil(root) if strict else math.floor(root) + 1)
    lo = min(max(lo, 0), count)
    return lo, max(min(hi, count), lo)


def inside_spans(
    inverse: np.ndarray, out_size: tuple[int, int], region: tuple[int, int]
) -> tuple[np.ndarray, np.ndarray] | None:
    """(H,) int64 ``lo``, ``hi``: row v's pixels inside the region are ``lo[v] <= u < hi[v]``
    (``lo == hi`` for none); None where the perspective weight is not positive over the whole
    output (a horizon: the region may then be two spans in a row).

    Each bound of the region is a linear inequality in u for a fixed row while the weight is
    positive (always, for an affine map).
    """
    out_h, out_w = out_size
    h, w = region
    m = np.asarray(inverse, dtype=np.float64)
    y = np.arange(out_h, dtype=np.float64) + 0.5
    corners = np.array([[0.0, 0.0], [out_w, 0.0], [0.0, out_h], [out_w, out_h]])
    weights = corners @ m[2, :2] + m[2, 2]
    if not (weights > _TINY_W).all():
        return None
    # Per row: X = a_x u + b_x, Y = a_y u + b_y, W = a_w u + b_w (u the pixel index).
    a_x, a_y, a_w = m[0, 0], m[1, 0], m[2, 0]
    b_x = m[0, 0] * 0.5 + m[0, 1] * y + m[0, 2]
    b_y = m[1, 0] * 0.5 + m[1, 1] * y + m[1, 2]
    b_w = m[2, 0] * 0.5 + m[2, 1] * y + m[2, 2]
    lo = np.zeros(out_h)
    hi = np.full(out_h, float(out_w))
    # X >= 0, w W - X > 0, Y >= 0, h W - Y > 0 (W > 0: the same as 0 <= p < size).
    for slope, offset, strict in (
        (a_x, b_x, False),
        (w * a_w - a_x, w * b_w - b_x, True),
        (a_y, b_y, False),
        (h * a_w - a_y, h * b_w - b_y, True),
    ):
        lo, hi = _cut(lo, hi, slope, offset, strict)
    lo = np.clip(lo, 0, out_w).astype(np.int64)
    hi = np.clip(hi, 0, out_w).astype(np.int64)
    return lo, np.maximum(hi, lo)


def _cut(
    lo: np.ndarray, hi: np.ndarray, slope: float, offset: np.ndarray, strict: bool
) -> tuple[np.ndarray, np.ndarray]:
    """Narrow the spans [lo, hi) to the integers u with ``slope u + offset >= 0`` (``> 0``)."""
    if slope == 0.0:
        holds = offset > 0 if strict else offset >= 0
        return lo, np.where(holds, hi, lo)
    with np.errstate(over="ignore", invalid="ignore"):
        root = np.clip(-offset / slope, -1.0, math.ldexp(1.0, 40))
    if slope > 0:  # u >= root (u > root)
        first = np.floor(root) + 1 if strict else np.ceil(root)
        return np.maximum(lo, first), hi
    end = np.ceil(root) if strict else np.floor(root) + 1  # u <= root (u < root)
    return lo, np.minimum(hi, end)


def _inside_per_pixel(
    m: np.ndarray, out_size: tuple[int, int], region: tuple[int, int]
) -> np.ndarray:
    """(H, W) bool: p per pixel, divided as `_warp.sampling_grid` divides, inside the region."""
    out_h, out_w = out_size
    h, w = region
    v, u = np.meshgrid(np.arange(out_h) + 0.5, np.arange(out_w) + 0.5, indexing="ij")
    mapped = m @ np.stack([u.ravel(), v.ravel(), np.ones(u.size)])
    weight = np.where(np.abs(mapped[2]) < _TINY_W, _TINY_W, mapped[2])
    x = (mapped[0] / weight).reshape(out_h, out_w)
    y = (mapped[1] / weight).reshape(out_h, out_w)
    return (x >= 0) & (x < w) & (y >= 0) & (y < h)


def fill_outside(dst: np.ndarray, lo: np.ndarray, hi: np.ndarray, fill: int) -> None:
    """Write ``fill`` into the pixels of ``dst`` (H, W, ...) outside the spans [lo, hi).

    Consecutive rows with the same span are one slice: an axis-aligned region is at most three
    runs of rows.
    """
    height, width = dst.shape[:2]
    lo = np.where(hi > lo, lo, width)  # an empty row: all of it is outside
    starts = np.flatnonzero(np.diff(lo, prepend=-1) | np.diff(hi, prepend=-1))
    ends = [*starts[1:].tolist(), height]
    for start, end, left, right in zip(
        starts.tolist(), ends, lo[starts].tolist(), hi[starts].tolist(), strict=True
    ):
        if left > 0:
            dst[start:end, :left] = fill
        if right < width:
            dst[start:end, max(right, left):] = fill
