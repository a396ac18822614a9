"""OpenCV kernels for uint8 CPU batches: the fused warp and Ultralytics' HSV, per sample.

Samples are uint8 HWC views of a channels_last batch, processed in a thread pool over samples
(OpenCV releases the GIL; OpenCV itself at 1 thread). Per sample, the window of the source the
output can reach (all of a plain image; part of a `Mosaic` canvas that is never built, see
`TiledSource`) is staged as RGBA in per-thread scratch buffers (OpenCV's 4-channel bilinear warp
is ~2.4x faster than its 3-channel one, same values), warped, optionally recoloured by
`RandomHSV`, and written with ``dst=`` into a channels_last output. Semantics match
`_warp.warp_images` and `color.apply_hsv_gains` (docs/augment.md, "CPU backend").
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import torch

from detfmt.augment._memory import channels_last, empty_hwc

_pool_lock = threading.Lock()
_pools: dict[int, ThreadPoolExecutor] = {}


def _cv2() -> Any:
    import cv2  # optional dependency: imported only when the backend runs

    return cv2


def _for_each_sample(count: int, fn: Callable[[int], None]) -> None:
    """Run ``fn(i)`` for every sample on torch's thread count (`pool_threads`), OpenCV at 1 thread.

    OpenCV's thread count is process-global: it is 1 while any thread runs here and restored
    when the last one leaves (`opencv_single_threaded`), so other OpenCV users, like the
    benchmark's reference side, keep their own setting.
    """
    from detfmt.augment._backend import opencv_single_threaded, pool_threads

    cv2 = _cv2()
    threads = max(1, min(pool_threads(), count))
    with opencv_single_threaded(cv2):
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


def _hwc(images: torch.Tensor) -> np.ndarray:
    """(B, H, W, C) numpy view of (B, C, H, W) images (one huge-page copy if not channels_last)."""
    return channels_last(images).permute(0, 2, 3, 1).numpy()


def _empty_like_batch(batch: int, channels: int, height: int, width: int) -> torch.Tensor:
    """A fresh channels_last uint8 (B, C, H, W) output (huge-page backed when large)."""
    return empty_hwc((batch, height, width, channels), torch.uint8).permute(0, 3, 1, 2)


def _plane(array: np.ndarray) -> np.ndarray:
    """OpenCV sees (H, W, 1) as ambiguous; give it (H, W) for single-channel images."""
    return array[..., 0] if array.shape[-1] == 1 else array


def opencv_inverse(matrix: np.ndarray) -> np.ndarray:
    """(..., 3, 3) float64 inverse maps (output -> source) in OpenCV's pixel-centre convention.

    detfmt's pixel i spans [i, i + 1) (centre i + 0.5); OpenCV's centre is i. So
    M_cv = T(-0.5) @ M @ T(+0.5), and its inverse is passed with ``WARP_INVERSE_MAP`` (float64
    like the torch path's inverse).
    """
    shift = np.eye(3)
    shift[:2, 2] = 0.5
    unshift = np.eye(3)
    unshift[:2, 2] = -0.5
    return np.linalg.inv(unshift @ np.asarray(matrix, dtype=np.float64) @ shift)


def opencv_matrices(matrix: torch.Tensor) -> np.ndarray:
    """`opencv_inverse` of (B, 3, 3) source -> output matrices."""
    return opencv_inverse(matrix.detach().to("cpu", torch.float64).numpy())


@dataclasses.dataclass(frozen=True)
class Tile:
    """``canvas[y0:y1, x0:x1] = array[y0 - top : y1 - top, x0 - left : x1 - left]``.

    A scaled tile (``scale_x``, ``scale_y`` != 1: `Mosaic` with ``resize``) shows ``array``
    scaled about its origin, then moved by (left, top): canvas point (x, y) holds array point
    ((x - left) / scale_x, (y - top) / scale_y), inside the rectangle only; the warp reads it
    straight from ``array`` (`_warp_tiles`).
    """

    array: np.ndarray  # (h, w, C) uint8, HWC
    x0: int
    y0: int
    x1: int
    y1: int
    left: int
    top: int
    scale_x: float = 1.0
    scale_y: float = 1.0

    @property
    def scaled(self) -> bool:
        return self.scale_x != 1.0 or self.scale_y != 1.0

    def covers(self, x0: int, y0: int, x1: int, y1: int) -> bool:
        return self.x0 <= x0 and self.y0 <= y0 and x1 <= self.x1 and y1 <= self.y1

    def to_canvas(self) -> np.ndarray:
        """3x3 array -> canvas (continuous pixels): the scale, then (left, top)."""
        return np.array(
            [[self.scale_x, 0.0, self.left], [0.0, self.scale_y, self.top], [0.0, 0.0, 1.0]]
        )


@dataclasses.dataclass(frozen=True)
class TiledSource:
    """Per-sample source canvases that are never built whole: ``fill`` under rectangles of tiles.

    ``sizes[b]`` is sample b's canvas (height, width), ``tiles[b]`` the rectangles on it (they do
    not overlap). A plain image is one tile covering its valid region (`image_source`); `Mosaic`
    describes its (2H, 2W) canvas this way, so the warp after it reads the tiles directly and
    only the part of the canvas the warp can reach is ever written.
    """

    sizes: list[tuple[int, int]]
    tiles: list[list[Tile]]
    fill: float
    channels: int
    crop: bool = True


def image_source(images: torch.Tensor, sizes: torch.Tensor | None) -> TiledSource:
    """Each sample's valid region (``sizes``, else the whole image) as a one-tile source."""
    src = _hwc(images)
    batch, height, width, channels = src.shape
    regions = [tuple(r) for r in sizes.tolist()] if sizes is not None else [(height, width)] * batch
    tiles = [[Tile(src[i, :h, :w], 0, 0, w, h, 0, 0)] for i, (h, w) in enumerate(regions)]
    # crop=False: the whole valid region is read, so the matrix handed to OpenCV is the one it
    # always got and the pixels stay bit-identical (a shifted matrix moves OpenCV's float32
    # coordinate rounding, changing ~1e-5 of the pixels by a level or a few).
    return TiledSource(regions, tiles, 0.0, channels, crop=False)


def source_windows(
    inverse: np.ndarray, out_size: tuple[int, int], sizes: list[tuple[int, int]], margin: int = 2
) -> np.ndarray:
    """(B, 4) int windows x0, y0, x1, y1 of each canvas that the warp can read (may be empty).

    The output pixel centres at the four corners (OpenCV's integer centres) go through the
    inverse maps; their bounding box, widened by ``margin`` px for the interpolation footprint
    (bilinear reads floor(x) and floor(x) + 1), is clipped to the canvas. An affine map, or a
    perspective one with w > 0 at all four corners (w is affine, so then w > 0 everywhere on
    the rectangle), sends the output rectangle onto the convex hull of those corners, so no
    canvas pixel outside the window is read. Otherwise the window is the whole canvas.
    """
    out_h, out_w = out_size
    corners = np.array(
        [[0, 0, 1], [out_w - 1, 0, 1], [0, out_h - 1, 1], [out_w - 1, out_h - 1, 1]],
        dtype=np.float64,
    )
    mapped = corners @ inverse.transpose(0, 2, 1)  # (B, 4, 3)
    w = mapped[..., 2]
    finite = (w > 1e-12).all(axis=1) & np.isfinite(mapped).all(axis=(1, 2))
    xy = mapped[..., :2] / np.where(w > 1e-12, w, 1.0)[..., None]
    xy = np.nan_to_num(xy)
    canvas = np.array(sizes, dtype=np.float64).reshape(-1, 2)[:, ::-1]  # (B, 2) width, height
    bound = canvas + margin + 2
    low = np.floor(np.clip(xy.min(axis=1), -bound, bound)) - margin
    high = np.floor(np.clip(xy.max(axis=1), -bound, bound)) + margin + 1
    low = np.where(finite[:, None], np.clip(low, 0, canvas), 0)
    high = np.where(finite[:, None], np.clip(high, 0, canvas), canvas)
    return np.concatenate([low, high], axis=1).astype(np.int64)


_scratch_local = threading.local()


def _scratch(name: str, shape: tuple[int, ...]) -> np.ndarray:
    """A uint8 array of ``shape`` reused by this thread (fresh large arrays cost page faults)."""
    buffers = getattr(_scratch_local, "buffers", None)
    if buffers is None:
        buffers = _scratch_local.buffers = {}
    need = math.prod(shape)
    flat = buffers.get(name)
    if flat is None or flat.size < need:
        flat = buffers[name] = np.empty(max(need, 1), dtype=np.uint8)
    return flat[:need].reshape(shape)


def _uncovered(
    window: tuple[int, int, int, int], tiles: list[Tile]
) -> list[tuple[int, int, int, int]]:
    """The parts of ``window`` that no tile covers, as rectangles (tiles do not overlap).

    Cut into bands of rows at every tile edge; in each band the gaps between the tiles that
    span it are the uncovered rectangles. Filling only these (a mosaic window is mostly tiles)
    instead of the whole window saved ~0.3 ms per 640x640 mosaic sample.
    """
    x0, y0, x1, y1 = window
    edges = sorted({y0, y1, *(t.y0 for t in tiles), *(t.y1 for t in tiles)})
    edges = [y for y in edges if y0 <= y <= y1]
    gaps = []
    for top, bottom in itertools.pairwise(edges):
        spans = sorted((t.x0, t.x1) for t in tiles if t.y0 <= top and bottom <= t.y1)
        left = x0
        for a, b in spans:
            if a > left:
                gaps.append((left, top, min(a, x1), bottom))
            left = max(left, b)
            if left >= x1:
                break
        if left < x1:
            gaps.append((left, top, x1, bottom))
    return [g for g in gaps if g[2] > g[0] and g[3] > g[1]]


def _read_window(
    source: TiledSource, b: int, window: tuple[int, int, int, int], staged: int
) -> np.ndarray:
    """Canvas b's pixels in ``window`` as a (h, w, staged) array (a view when no copy is needed).

    With ``staged`` = 4 for RGB, the window is copied as RGBA: OpenCV's bilinear warp of 4
    channels is ~2.4x faster than of 3 (SIMD) and gives the same RGB values.
    """
    x0, y0, x1, y1 = window
    tiles = source.tiles[b]
    channels = source.channels
    if staged == channels:
        for tile in tiles:
            if tile.covers(x0, y0, x1, y1):
                return tile.array[y0 - tile.top : y1 - tile.top, x0 - tile.left : x1 - tile.left]
    out = _scratch("window", (y1 - y0, x1 - x0, staged))
    for fx0, fy0, fx1, fy1 in _uncovered(window, tiles):
        out[fy0 - y0 : fy1 - y0, fx0 - x0 : fx1 - x0] = round(source.fill)
    cv2 = _cv2()
    for tile in tiles:
        ix0, iy0 = max(tile.x0, x0), max(tile.y0, y0)
        ix1, iy1 = min(tile.x1, x1), min(tile.y1, y1)
        if ix1 <= ix0 or iy1 <= iy0:
            continue
        part = tile.array[iy0 - tile.top : iy1 - tile.top, ix0 - tile.left : ix1 - tile.left]
        target = out[iy0 - y0 : iy1 - y0, ix0 - x0 : ix1 - x0]
        if staged == 4 and channels == 3:
            cv2.cvtColor(part, cv2.COLOR_RGB2RGBA, dst=target)
        else:
            np.copyto(target, part)
    return out


def _output_span(low: float, high: float, size: int) -> tuple[int, int]:
    """Output pixels [a, b) whose centres i + 0.5 lie in [low, high), clipped to [0, size)."""
    a = min(max(math.ceil(low - 0.5), 0), size)
    b = min(max(math.ceil(high - 0.5), 0), size)
    return a, b


def _stage_crop(part: np.ndarray, staged: int) -> np.ndarray:
    """``part`` with a 1 px replicated border, as ``staged`` channels (RGB as RGBA), in scratch.

    The border lets bilinear samples near the crop's edge read the edge pixel (a replicated
    edge) instead of being skipped by ``BORDER_TRANSPARENT``.
    """
    height, width, channels = part.shape
    out = _scratch("tile", (height + 2, width + 2, staged))
    inner = out[1:-1, 1:-1]
    if staged == 4 and channels == 3:
        _cv2().cvtColor(part, _cv2().COLOR_RGB2RGBA, dst=inner)
    else:
        np.copyto(inner, part)
    out[0, 1:-1] = inner[0]
    out[-1, 1:-1] = inner[-1]
    out[:, 0] = out[:, 1]
    out[:, -1] = out[:, -2]
    return out


def _warp_tiles(
    tiles: list[Tile],
    forward: np.ndarray,
    dst: np.ndarray,
    window: tuple[int, int, int, int],
    *,
    fill: float,
    staged: int,
    perspective: bool,
    flags: int,
) -> None:
    """Warp each tile of one canvas straight from its array into ``dst`` (H, W, staged).

    ``forward`` (3, 3) maps canvas -> output; ``window`` is the part of the canvas the output
    can read (`source_windows`), so only tiles' pixels in it are staged. Per tile, the output
    pixels whose centres its
    rectangle holds (for an axis-aligned map, exactly those; else their bounding box) get one
    bilinear sample of the array through ``forward @ tile.to_canvas()``, read from the part of
    the array under the rectangle with a replicated 1 px border; the rest of ``dst`` is
    ``fill``. So a pixel is the tile under its centre and a tile edge is a cut, not a blend.
    Under a rotation, shear or perspective the tile is warped over its bounding box and copied
    through a mask of the pixels whose centres the rectangle holds (a nearest-neighbour warp of
    the rectangle).
    """
    cv2 = _cv2()
    out_h, out_w = dst.shape[:2]
    dst.fill(round(fill))
    axis_aligned = forward[0, 1] == 0 and forward[1, 0] == 0 and not perspective
    for tile in tiles:
        corners = np.array(
            [[tile.x0, tile.y0, 1], [tile.x1, tile.y0, 1], [tile.x0, tile.y1, 1],
             [tile.x1, tile.y1, 1]],
            dtype=np.float64,
        ) @ forward.T
        w = corners[:, 2]
        if (w > 1e-12).all():
            xy = corners[:, :2] / w[:, None]
            u0, u1 = _output_span(xy[:, 0].min(), xy[:, 0].max(), out_w)
            v0, v1 = _output_span(xy[:, 1].min(), xy[:, 1].max(), out_h)
        else:  # the rectangle crosses the horizon: every output pixel may see it
            u0, u1, v0, v1 = 0, out_w, 0, out_h
        if u1 <= u0 or v1 <= v0:
            continue
        # The array's pixels under the rectangle and the window (staged with a replicated 1 px
        # border; where the window cuts the rectangle no output pixel reads past the cut).
        height, width = tile.array.shape[:2]
        x0, y0 = max(tile.x0, window[0]), max(tile.y0, window[1])
        x1, y1 = min(tile.x1, window[2]), min(tile.y1, window[3])
        ax0 = max(math.floor((x0 - tile.left) / tile.scale_x), 0)
        ay0 = max(math.floor((y0 - tile.top) / tile.scale_y), 0)
        ax1 = min(math.ceil((x1 - tile.left) / tile.scale_x), width)
        ay1 = min(math.ceil((y1 - tile.top) / tile.scale_y), height)
        if ax1 <= ax0 or ay1 <= ay0:
            continue
        image = _stage_crop(tile.array[ay0:ay1, ax0:ax1], staged)
        # Staged pixel p is array pixel p + (ax0 - 1, ay0 - 1); output pixel q is dst (u0, v0) + q.
        from_stage = np.eye(3)
        from_stage[:2, 2] = (ax0 - 1, ay0 - 1)
        to_roi = np.eye(3)
        to_roi[:2, 2] = (-u0, -v0)
        m = opencv_inverse(to_roi @ forward @ tile.to_canvas() @ from_stage)
        warp = cv2.warpPerspective if perspective else cv2.warpAffine
        roi = dst[v0:v1, u0:u1]
        if axis_aligned:  # the span is exactly the tile's pixels: write them in place
            warp(_plane(image), m[:2], (u1 - u0, v1 - v0), dst=_plane(roi), flags=flags,
                 borderMode=cv2.BORDER_TRANSPARENT)
            continue
        warped = _scratch("tile_warped", roi.shape)
        warp(_plane(image), m if perspective else m[:2], (u1 - u0, v1 - v0), dst=_plane(warped),
             flags=flags, borderMode=cv2.BORDER_REPLICATE)
        # Rectangle pixel (i, j) spans [x0 + i, x0 + i + 1): nearest reads it for every output
        # centre that lands in that span, so the mask is the centres inside the rectangle.
        rect = _scratch("tile_rect", (tile.y1 - tile.y0, tile.x1 - tile.x0))
        rect.fill(255)
        from_rect = np.eye(3)
        from_rect[:2, 2] = (tile.x0, tile.y0)
        m_rect = opencv_inverse(to_roi @ forward @ from_rect)
        mask = _scratch("tile_mask", roi.shape[:2])
        warp(rect, m_rect if perspective else m_rect[:2], (u1 - u0, v1 - v0), dst=mask,
             flags=cv2.INTER_NEAREST | cv2.WARP_INVERSE_MAP, borderMode=cv2.BORDER_CONSTANT,
             borderValue=0)
        cv2.copyTo(_plane(warped), mask, _plane(roi))


def warp_images_opencv(
    images: torch.Tensor,
    matrix: torch.Tensor,
    out_size: tuple[int, int],
    *,
    fill: float,
    interpolation: str = "bilinear",
    sizes: torch.Tensor | None = None,
    affine_only: bool = False,
    source: TiledSource | None = None,
    hsv: torch.Tensor | None = None,
) -> torch.Tensor:
    """`_warp.warp_images` for uint8 CPU images with ``cv2.warpAffine`` / ``warpPerspective``.

    Each sample reads only the window of its source the output can reach (`source_windows`),
    RGB staged as RGBA. A sample's valid region is its canvas, so pixels outside it read as the
    constant border, as in the torch path. ``source`` replaces ``images`` with a `TiledSource`
    (a `Mosaic` canvas that is never built). ``hsv`` (B, 3) gains: apply `RandomHSV` to the
    warped pixels before they are written (RGB images only; what `hsv_opencv` of the result
    gives, without the intermediate batch). Returns channels_last uint8 images.
    """
    cv2 = _cv2()
    if source is None:
        source = image_source(images, sizes)
    batch, channels = len(source.tiles), source.channels
    out_h, out_w = out_size
    out = _empty_like_batch(batch, channels, out_h, out_w)
    dst = out.permute(0, 2, 3, 1).numpy()
    inverse = opencv_matrices(matrix)
    if source.crop:
        windows = source_windows(inverse, out_size, source.sizes).tolist()
    else:
        windows = [[0, 0, w, h] for h, w in source.sizes]
    mode = cv2.INTER_LINEAR if interpolation == "bilinear" else cv2.INTER_NEAREST
    flags = mode | cv2.WARP_INVERSE_MAP
    border = (float(fill),) * 4
    perspective = not affine_only
    staged = 4 if channels == 3 else channels
    if hsv is not None and channels != 3:
        raise ValueError("hsv needs RGB images")
    tables, used = _hsv_tables(hsv) if hsv is not None else (None, None)
    forward = matrix.detach().to("cpu", torch.float64).numpy()

    def one(i: int) -> None:
        x0, y0, x1, y1 = windows[i]
        target = dst[i]
        if any(tile.scaled for tile in source.tiles[i]):
            warped = _scratch("warped", (out_h, out_w, 4)) if staged == 4 else target
            _warp_tiles(
                source.tiles[i],
                forward[i],
                warped,
                (x0, y0, x1, y1),
                fill=fill,
                staged=staged,
                perspective=perspective,
                flags=flags,
            )
            if tables is not None:
                _hsv_into(warped, tables[i], used[i], target)
            elif staged == 4:
                cv2.cvtColor(warped, cv2.COLOR_RGBA2RGB, dst=target)
            return
        if x1 <= x0 or y1 <= y0:  # the output sees none of the canvas
            target.fill(round(fill))
            if tables is not None:
                _hsv_into(target, tables[i], used[i], target)
            return
        image = _read_window(source, i, (x0, y0, x1, y1), staged)
        # Window coordinates: the inverse map followed by a shift of (-x0, -y0).
        m = inverse[i].copy()
        m[0] -= x0 * m[2]
        m[1] -= y0 * m[2]
        warped = _scratch("warped", (out_h, out_w, 4)) if staged == 4 else _plane(target)
        warp = cv2.warpPerspective if perspective else cv2.warpAffine
        if not perspective:
            m = m[:2]
        warp(
            _plane(image),
            m,
            (out_w, out_h),
            dst=warped,
            flags=flags,
            borderMode=cv2.BORDER_CONSTANT,
            borderValue=border,
        )
        if tables is not None:
            _hsv_into(warped, tables[i], used[i], target)
        elif staged == 4:
            cv2.cvtColor(warped, cv2.COLOR_RGBA2RGB, dst=target)

    _for_each_sample(batch, one)
    return out


def hsv_luts(gains: np.ndarray) -> np.ndarray:
    """(B, 3, 256) uint8 hue, saturation, value LUTs for gains (B, 3) = r_h, r_s, r_v.

    Ultralytics' float64 tables truncated to uint8: hue ``(x + r_h 180) % 180``, saturation and
    value ``clip(x (1 + r), 0, 255)``; all samples at once (per sample it was ~0.1 ms of numpy).
    """
    x = np.arange(256, dtype=np.float64)
    r = np.asarray(gains, dtype=np.float64).reshape(-1, 3)
    tables = np.empty((len(r), 3, 256), dtype=np.uint8)
    tables[:, 0] = (x + r[:, 0:1] * 180) % 180
    tables[:, 1] = np.clip(x * (r[:, 1:2] + 1), 0, 255)
    tables[:, 2] = np.clip(x * (r[:, 2:3] + 1), 0, 255)
    return tables


def _hsv_tables(gains: torch.Tensor) -> tuple[np.ndarray, list[list[bool]]]:
    """LUTs (B, 3, 256) and, per sample and plane, whether the LUT must run at all.

    A table that is the identity on the levels that occur (hue < 180 in OpenCV's 8-bit HSV;
    the hue table is when floor(r_h 180) = 0) is skipped.
    """
    tables = hsv_luts(gains.detach().to("cpu", torch.float64).numpy())
    identity = np.arange(256, dtype=np.uint8)
    used = ~(tables[:, :, :180] == identity[:180]).all(axis=-1)
    used[:, 1:] |= ~(tables[:, 1:, 180:] == identity[180:]).all(axis=-1)
    return tables, used.tolist()


def _hsv_into(image: np.ndarray, tables: np.ndarray, used: list[bool], dst: np.ndarray) -> None:
    """Ultralytics' HSV LUTs on one RGB or RGBA (H, W, C) image, written as RGB into ``dst``.

    cvtColor, split, one LUT per plane where ``used``, merge, cvtColor, into this thread's
    scratch buffers (a 3-channel LUT is slower than split + 3 single-channel ones + merge).
    """
    cv2 = _cv2()
    height, width = image.shape[:2]
    hsv = _scratch("hsv", (height, width, 3))
    planes = [_scratch(f"plane{c}", (height, width)) for c in range(3)]
    cv2.cvtColor(image, cv2.COLOR_RGB2HSV, dst=hsv)
    cv2.split(hsv, planes)
    for plane, lut, needed in zip(planes, tables, used, strict=True):
        if needed:
            cv2.LUT(plane, lut, dst=plane)
    cv2.merge(planes, dst=hsv)
    cv2.cvtColor(hsv, cv2.COLOR_HSV2RGB, dst=dst)


def hsv_opencv(images: torch.Tensor, gains: torch.Tensor) -> torch.Tensor:
    """`color.apply_hsv_gains` for uint8 RGB CPU images, Ultralytics' OpenCV calls per sample."""
    batch, channels, height, width = images.shape
    src = _hwc(images)
    out = _empty_like_batch(batch, channels, height, width)
    dst = out.permute(0, 2, 3, 1).numpy()
    tables, used = _hsv_tables(gains)

    def one(i: int) -> None:
        _hsv_into(src[i], tables[i], used[i], dst[i])

    _for_each_sample(batch, one)
    return out
