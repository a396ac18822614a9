"""The numba kernel of `detfmt.augment._native`: Ultralytics' HSV jitter in one pass per pixel.

Ultralytics recolours with OpenCV: RGB -> 8-bit HSV, one LUT per plane, HSV -> RGB (five
passes over the image, three of them through scratch planes). This kernel computes the same
bytes in one vectorised pass, each step as OpenCV's SIMD path does it:

- RGB -> HSV: OpenCV's integer algorithm (``hsv_shift`` 12, its ``sdiv``/``hdiv`` tables). Every
  product in it stays below 2**24, so float32 holds it exactly, and the tables' entries equal
  ``rint(float32(k) / float32(x))`` for every x (checked over all 256), so no table is read.
- the LUTs: Ultralytics' tables (`_opencv.hsv_luts`) in closed form: hue ``(h + k) mod 180``,
  saturation and value ``trunc(clip(x g, 0, 255))`` in float32, with the integer k and the
  float32 gains g that `_native.lut_parameters` found to give every entry of the tables.
- HSV -> RGB: OpenCV's float32 vector code, truncating to uint8. Its ``1 - s*h`` terms are
  computed with one rounding (a fused multiply-add), as OpenCV's x86-64 AVX2 / AVX-512 and
  aarch64 builds compile them.

Within those rules the result equals OpenCV's byte for byte (tests/augment/test_hsv_kernel.py
compares all 2**24 colours). Where OpenCV runs its scalar code instead (the last ``width % n``
pixels of a row, n its vector step: 32 pixels with AVX2, 64 where OpenCV 4.14 or later
dispatches its colour code to AVX-512, which the CPU decides; or a build without FMA), OpenCV
itself differs from its vector path by at most one level (it rounds there); this kernel always
follows the vector path, so its bytes do not depend on the image's width or the CPU.
"""

from __future__ import annotations

import numpy as np
from numba import njit, types
from numba.extending import intrinsic

__all__ = ["recolour_planar", "recolour_rgb"]


@intrinsic
def _one_minus_product(typingctx, a, b):
    """1 - a*b in float32 with a single rounding (an FMA, as OpenCV's compiled vector code)."""
    def codegen(context, builder, signature, args):
        x, y = args
        one = context.get_constant(types.float32, 1.0)
        return builder.fma(builder.fneg(x), y, one)

    return types.float32(types.float32, types.float32), codegen


@njit(inline="always")
def _pixel(r, g, b, hue_shift, sat_gain, val_gain):  # pragma: no cover
    """Recoloured (r, g, b) as float32 values in [0, 256) (truncated by the caller)."""
    one = np.float32(1.0)
    half = np.float32(2048.0)
    scale = np.float32(1.0 / 4096.0)
    # RGB -> HSV, OpenCV's integer algorithm in exact float32 arithmetic.
    v = max(r, max(g, b))
    diff = v - min(r, min(g, b))
    sdiv = np.rint(np.float32(255 << 12) / max(v, one))
    hdiv = np.rint(np.float32(180 << 12) / (np.float32(6.0) * max(diff, one)))
    s = np.floor((diff * sdiv + half) * scale)
    if v == r:
        hn = g - b
    elif v == g:
        hn = b - r + np.float32(2.0) * diff
    else:
        hn = r - g + np.float32(4.0) * diff
    h = np.floor((hn * hdiv + half) * scale)
    h = h + np.float32(180.0) if h < 0 else h
    # The LUTs in closed form (`_native.lut_parameters` checked they equal the tables).
    hue = h + hue_shift
    hue = hue - np.float32(180.0) if hue >= np.float32(180.0) else hue
    sat = np.trunc(min(max(s * sat_gain, np.float32(0.0)), np.float32(255.0)))
    val = np.trunc(min(max(v * val_gain, np.float32(0.0)), np.float32(255.0)))
    # HSV -> RGB, OpenCV's float32 vector code.
    hh = hue * np.float32(6.0 / 180.0)
    sf = sat * np.float32(1.0 / 255.0)
    vf = val * np.float32(1.0 / 255.0)
    sector = np.trunc(hh)
    frac = hh - sector
    # OpenCV then reduces the sector mod 6; hue < 180 here, so hh < 6 and that is the identity.
    t0 = vf
    t1 = vf * (one - sf)
    t2 = vf * _one_minus_product(sf, frac)
    t3 = vf * _one_minus_product(sf, one - frac)
    # Each channel is t0 (max), t1 (min) or t2/t3 (the middle one) by sector, as OpenCV selects.
    red = t0 if sector < 1 else (t2 if sector < 2 else (t1 if sector < 4 else
                                                       (t3 if sector < 5 else t0)))
    green = t3 if sector < 1 else (t0 if sector < 3 else (t2 if sector < 4 else t1))
    blue = t1 if sector < 2 else (t3 if sector < 3 else (t0 if sector < 5 else t2))
    return red, green, blue


@njit(inline="always")
def _rgba(word):  # pragma: no cover
    """The r, g, b bytes of a little-endian RGBA word as float32 (32-bit integer steps: numba
    widens ``word & 255`` to int64, which AVX2 converts to float only lane by lane)."""
    low = np.uint32(255)
    return (np.float32(np.int32(word & low)),
            np.float32(np.int32((word >> np.uint32(8)) & low)),
            np.float32(np.int32((word >> np.uint32(16)) & low)))


@njit(inline="always")
def _byte(x):  # pragma: no cover
    return np.uint8(np.int32(x * np.float32(255.0)))


# The loops over one run of pixels are separate functions: a row loop around a per-pixel
# index in one function is not vectorised (an order of magnitude slower), a call per row is.
@njit(boundscheck=False, error_model="numpy")
def _planar_run(src, channels, hue_shift, sat_gain, val_gain, red, green, blue):  # pragma: no cover
    if channels == 4:
        words = src.view(np.uint32)
        for p in range(red.shape[0]):
            r, g, b = _rgba(words[p])
            r, g, b = _pixel(r, g, b, hue_shift, sat_gain, val_gain)
            red[p] = _byte(r)
            green[p] = _byte(g)
            blue[p] = _byte(b)
    else:
        for p in range(red.shape[0]):
            r, g, b = _pixel(np.float32(src[3 * p]), np.float32(src[3 * p + 1]),
                             np.float32(src[3 * p + 2]), hue_shift, sat_gain, val_gain)
            red[p] = _byte(r)
            green[p] = _byte(g)
            blue[p] = _byte(b)


@njit(boundscheck=False, error_model="numpy")
def _rgb_run(src, channels, hue_shift, sat_gain, val_gain, dst):  # pragma: no cover
    if channels == 4:
        words = src.view(np.uint32)
        for p in range(dst.shape[0] // 3):
            r, g, b = _rgba(words[p])
            r, g, b = _pixel(r, g, b, hue_shift, sat_gain, val_gain)
            dst[3 * p] = _byte(r)
            dst[3 * p + 1] = _byte(g)
            dst[3 * p + 2] = _byte(b)
    else:
        for p in range(dst.shape[0] // 3):
            r, g, b = _pixel(np.float32(src[3 * p]), np.float32(src[3 * p + 1]),
                             np.float32(src[3 * p + 2]), hue_shift, sat_gain, val_gain)
            dst[3 * p] = _byte(r)
            dst[3 * p + 1] = _byte(g)
            dst[3 * p + 2] = _byte(b)


@njit(inline="always")
def _next_run(starts, ends, width, y):  # pragma: no cover
    """The flat pixel range [a, b) of row y's span, extended over the following rows while the
    spans are whole rows (one long run: the vector loop's remainder once, not per row), and
    the row after it."""
    a = y * width + starts[y]
    if starts[y] == 0 and ends[y] == width:
        while y + 1 < starts.shape[0] and starts[y + 1] == 0 and ends[y + 1] == width:
            y += 1
        return a, (y + 1) * width, y + 1
    return a, y * width + ends[y], y + 1


@njit(inline="always")
def _fill_colour(fill, hue_shift, sat_gain, val_gain):  # pragma: no cover
    level = np.float32(fill)
    r, g, b = _pixel(level, level, level, hue_shift, sat_gain, val_gain)
    return _byte(r), _byte(g), _byte(b)


@njit(inline="always")
def _check(rects, height, width, params):  # pragma: no cover
    """0: go on; 1: decline (a NaN parameter: no closed form); -1: a rectangle outside the
    image or inverted (nothing may be written through it)."""
    for k in range(3):
        if np.isnan(params[k]):
            return 1
    for k in range(rects.shape[0]):
        x0, y0, x1, y1 = rects[k, 0], rects[k, 1], rects[k, 2], rects[k, 3]
        if not (0 <= x0 <= x1 <= width and 0 <= y0 <= y1 <= height):
            return -1
    return 0


@njit(inline="always")
def _row_spans(rects, height, width):  # pragma: no cover
    """Per row, the columns [starts, ends) from the leftmost to the rightmost rectangle that
    holds it ([0, 0) where none does)."""
    starts = np.full(height, width, np.int64)
    ends = np.zeros(height, np.int64)
    for k in range(rects.shape[0]):
        x0, y0, x1, y1 = rects[k, 0], rects[k, 1], rects[k, 2], rects[k, 3]
        if x1 <= x0:
            continue
        for y in range(y0, y1):
            starts[y] = min(starts[y], x0)
            ends[y] = max(ends[y], x1)
    for y in range(height):
        if ends[y] <= starts[y]:
            starts[y] = 0
            ends[y] = 0
    return starts, ends


@njit(inline="always")
def _gaps(rects, starts, ends):  # pragma: no cover
    """(K, 3) int64 rows (y, lo, hi): the columns [lo, hi) of row y inside its span that no
    rectangle holds (rectangles of one row side by side leave them rarely: `Mosaic`'s tiles
    meet)."""
    order = np.argsort(rects[:, 0])
    count = 0
    found = np.empty((0, 3), np.int64)
    for step in range(2):  # count, then write
        if step == 1:
            found = np.empty((count, 3), np.int64)
            count = 0
        for y in range(starts.shape[0]):
            if ends[y] <= starts[y]:
                continue
            cover = starts[y]
            for k in order:
                x0, y0, x1, y1 = rects[k, 0], rects[k, 1], rects[k, 2], rects[k, 3]
                if y0 <= y < y1 and x1 > x0:
                    if x0 > cover:
                        if step == 1:
                            found[count, 0] = y
                            found[count, 1] = cover
                            found[count, 2] = x0
                        count += 1
                    cover = max(cover, x1)
    return found


@njit(inline="always")
def _fill_rgb(dst, lo, hi, fr, fg, fb):  # pragma: no cover
    for p in range(lo, hi):
        dst[3 * p] = fr
        dst[3 * p + 1] = fg
        dst[3 * p + 2] = fb


@njit(nogil=True, cache=True, boundscheck=False, error_model="numpy")
def recolour_planar(src, channels, height, width, rects, fill, params, red, green,
                    blue):  # pragma: no cover
    """``src``: flat uint8 RGB (``channels`` 3) or RGBA (4) pixels, ``height`` rows of
    ``width``; ``rects`` (N, 4) int64 x0, y0, x1, y1: the pixels that hold the image (they do
    not overlap). Writes three flat planes: the pixels inside ``rects`` recoloured from ``src``
    with ``params`` (hue shift, saturation gain, value gain: `_native.lut_parameters`), every
    other pixel the recoloured grey ``fill`` (``src`` is not read there, but for the gaps
    between rectangles of a row, which are overwritten). Returns `_check`'s code; nothing is
    written unless it is 0."""
    code = _check(rects, height, width, params)
    if code != 0:
        return code
    hue_shift, sat_gain, val_gain = params[0], params[1], params[2]
    starts, ends = _row_spans(rects, height, width)
    fr, fg, fb = _fill_colour(fill, hue_shift, sat_gain, val_gain)
    y = 0
    while y < height:
        row = y * width
        a, b, y = _next_run(starts, ends, width, y)
        if b > a:
            _planar_run(src[a * channels:b * channels], channels, hue_shift, sat_gain, val_gain,
                        red[a:b], green[a:b], blue[a:b])
        if b - a < width:  # one row, not all of it
            for lo, hi in ((row, a), (max(a, b), row + width)):
                red[lo:hi] = fr
                green[lo:hi] = fg
                blue[lo:hi] = fb
    if rects.shape[0] > 1:
        gaps = _gaps(rects, starts, ends)
        for k in range(gaps.shape[0]):
            lo = gaps[k, 0] * width + gaps[k, 1]
            hi = gaps[k, 0] * width + gaps[k, 2]
            red[lo:hi] = fr
            green[lo:hi] = fg
            blue[lo:hi] = fb
    return 0


@njit(nogil=True, cache=True, boundscheck=False, error_model="numpy")
def recolour_rgb(src, channels, height, width, rects, fill, params, dst):  # pragma: no cover
    """As `recolour_planar`, into flat RGB ``dst``."""
    code = _check(rects, height, width, params)
    if code != 0:
        return code
    hue_shift, sat_gain, val_gain = params[0], params[1], params[2]
    starts, ends = _row_spans(rects, height, width)
    fr, fg, fb = _fill_colour(fill, hue_shift, sat_gain, val_gain)
    y = 0
    while y < height:
        row = y * width
        a, b, y = _next_run(starts, ends, width, y)
        if b > a:
            _rgb_run(src[a * channels:b * channels], channels, hue_shift, sat_gain, val_gain,
                     dst[3 * a:3 * b])
        if b - a < width:
            for lo, hi in ((row, a), (max(a, b), row + width)):
                _fill_rgb(dst, lo, hi, fr, fg, fb)
    if rects.shape[0] > 1:
        gaps = _gaps(rects, starts, ends)
        for k in range(gaps.shape[0]):
            row = gaps[k, 0] * width
            _fill_rgb(dst, row + gaps[k, 1], row + gaps[k, 2], fr, fg, fb)
    return 0

