"""OpenCV kernels for uint8 CPU batches: the fused warp and Ultralytics' HSV, per sample.

Samples are uint8 HWC views of a channels_last batch, processed in a thread pool over samples
(OpenCV releases the GIL; OpenCV itself at 1 thread). Per sample, the window of the source the
output can reach (all of a plain image; part of a `Mosaic` canvas that is never built, see
`TiledSource`) is staged with a 1 px replicated border in per-thread scratch buffers, warped
with ``BORDER_CONSTANT`` (OpenCV 5's vectorised warp covers that border mode, not
``BORDER_TRANSPARENT``), optionally recoloured by `RandomHSV`, and written with ``dst=`` into a
channels_last output. RGB stays RGB: with OpenCV 5 the 3-channel warp is the faster one and the
HSV kernel reads RGB faster than RGBA (docs/bench/warp_staging.md). Semantics match
`_warp.warp_images` and `color.apply_hsv_gains` (docs/augment.md, "CPU backend").
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import math
import os
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import torch

from detfmt.augment._memory import channels_last, reused_empty
from detfmt.augment._native import lut_parameters, recolour, recolour_kernels
from detfmt.augment._region_cut import cut_to_region, fill_around, inside_rectangle
from detfmt.augment.tiles import Tile, TiledSource

_pool_lock = threading.Lock()
_pools: dict[int, ThreadPoolExecutor] = {}


def _forget_pools_in_child() -> None:
    """A forked child has none of its parent's threads: the inherited pools would queue work
    that no thread runs (a hang). It starts its own on first use."""
    global _pool_lock
    _pool_lock = threading.Lock()
    _pools.clear()


os.register_at_fork(after_in_child=_forget_pools_in_child)


def _cv2() -> Any:
    import cv2  # optional dependency: imported only when the backend runs

    return cv2


def _for_each_sample(count: int, fn: Callable[[int], None]) -> None:
    """Run ``fn(i)`` for every sample on torch's thread count (`pool_threads`), OpenCV at 1 thread.

    The calling thread works too, beside ``threads - 1`` pool threads, each taking the next
    sample until none is left: one hand-off per helper and call, not one future per sample.
    OpenCV's thread count is process-global: it is 1 while any thread runs here and restored
    when the last one leaves (`opencv_single_threaded`), so other OpenCV users, like the
    benchmark's reference side, keep their own setting.
    """
    from detfmt.augment._backend import opencv_single_threaded, pool_threads

    cv2 = _cv2()
    threads = max(1, min(pool_threads(), count))
    with opencv_single_threaded(cv2):
        if threads == 1:
            with _borrowed_scratch():
                for i in range(count):
                    fn(i)
            return
        with _pool_lock:
            pool = _pools.get(threads - 1)
            if pool is None:
                pool = _pools[threads - 1] = ThreadPoolExecutor(threads - 1, "detfmt-augment-cv")
        _share_samples(pool, threads - 1, count, fn)


def _share_samples(
    pool: ThreadPoolExecutor, helpers: int, count: int, fn: Callable[[int], None]
) -> None:
    """``fn`` over range(count) by this thread and ``helpers`` pool tasks; after a failure no
    one takes another sample, and the first error is raised once every taker has stopped."""
    taken = iter(range(count))
    lock = threading.Lock()
    failed = threading.Event()

    def work() -> None:
        with _borrowed_scratch():
            while not failed.is_set():
                with lock:
                    i = next(taken, None)
                if i is None:
                    return
                try:
                    fn(i)
                except BaseException:
                    failed.set()
                    raise

    futures = [pool.submit(work) for _ in range(helpers)]
    error: BaseException | None = None
    try:
        work()
    except BaseException as mine:
        error = mine
    for future in futures:
        if future.cancel():  # never started: the samples are all taken
            continue
        failure = future.exception()
        if error is None and failure is not None:
            error = failure
    if error is not None:
        raise error


def _hwc(images: torch.Tensor) -> np.ndarray:
    """(B, H, W, C) numpy view of (B, C, H, W) images (one huge-page copy if not channels_last)."""
    return channels_last(images).permute(0, 2, 3, 1).numpy()


def _empty_like_batch(
    batch: int, channels: int, height: int, width: int, planar: bool = False
) -> torch.Tensor:
    """An uninitialised uint8 (B, C, H, W) output, channels_last or (``planar``) contiguous,
    in a buffer this thread reuses once the consumer has dropped it (`reused_empty`)."""
    if planar:
        return reused_empty((batch, channels, height, width))
    return reused_empty((batch, height, width, channels)).permute(0, 3, 1, 2)


def _sample_targets(out: torch.Tensor, planar: bool) -> list[Any]:
    """Per sample, where its pixels go: an (H, W, C) view of a channels_last ``out``, or (with
    ``planar``) the list of its C (H, W) planes."""
    if planar:
        return [list(sample) for sample in out.numpy()]
    return list(out.permute(0, 2, 3, 1).numpy())


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
# Scratch sets no thread is using: a thread borrows one while it processes samples
# (`_borrowed_scratch`), so they outlive the threads (a loader starts new ones every epoch, and
# each new set would be first-touched again).
_spare_scratch: list[dict[str, np.ndarray]] = []


@contextlib.contextmanager
def _borrowed_scratch() -> Iterator[None]:
    with _pool_lock:
        buffers = _spare_scratch.pop() if _spare_scratch else {}
    previous = getattr(_scratch_local, "buffers", None)
    _scratch_local.buffers = buffers
    try:
        yield
    finally:
        _scratch_local.buffers = previous
        with _pool_lock:
            _spare_scratch.append(buffers)


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
    window: tuple[int, int, int, int], rects: list[tuple[int, int, int, int]]
) -> list[tuple[int, int, int, int]]:
    """The parts of ``window`` that none of ``rects`` (x0, y0, x1, y1; they do not overlap)
    covers, as rectangles.

    Cut into bands of rows at every rectangle edge; in each band the gaps between the
    rectangles that span it are the uncovered ones. Filling only these (a mosaic is mostly
    tiles) instead of the whole window spares a pass over most of its pixels.
    """
    x0, y0, x1, y1 = window
    edges = sorted({y0, y1, *(r[1] for r in rects), *(r[3] for r in rects)})
    edges = [y for y in edges if y0 <= y <= y1]
    gaps = []
    for top, bottom in itertools.pairwise(edges):
        spans = sorted((r[0], r[2]) for r in rects if r[1] <= top and bottom <= r[3])
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
    source: TiledSource, b: int, window: tuple[int, int, int, int]
) -> np.ndarray:
    """Canvas b's pixels in ``window`` with a 1 px replicated border, as a (h + 2, w + 2,
    C) array in this thread's scratch (staged pixel p is window pixel p - 1).

    The border makes a ``BORDER_CONSTANT`` warp read the window's edge up to it (a
    replicated edge; OpenCV's own ``BORDER_REPLICATE`` was ~2.5x slower per 640 px letterbox:
    it loses the fast path for the pixels that map outside).
    """
    x0, y0, x1, y1 = window
    tiles = source.tiles[b]
    channels = source.channels
    for tile in tiles:
        if tile.covers(x0, y0, x1, y1):
            part = tile.array[y0 - tile.top : y1 - tile.top, x0 - tile.left : x1 - tile.left]
            return _stage_crop(part, "window")
    out = _scratch("window", (y1 - y0 + 2, x1 - x0 + 2, channels))
    inner = out[1:-1, 1:-1]
    rects = [(t.x0, t.y0, t.x1, t.y1) for t in tiles]
    for fx0, fy0, fx1, fy1 in _uncovered(window, rects):
        _fill(inner[fy0 - y0 : fy1 - y0, fx0 - x0 : fx1 - x0], source.fill)
    for tile in tiles:
        ix0, iy0 = max(tile.x0, x0), max(tile.y0, y0)
        ix1, iy1 = min(tile.x1, x1), min(tile.y1, y1)
        if ix1 <= ix0 or iy1 <= iy0:
            continue
        part = tile.array[iy0 - tile.top : iy1 - tile.top, ix0 - tile.left : ix1 - tile.left]
        target = inner[iy0 - y0 : iy1 - y0, ix0 - x0 : ix1 - x0]
        np.copyto(target, part)
    _replicate_border(out)
    return out


@dataclasses.dataclass(frozen=True)
class _TileWarp:
    """One scaled-tile warp: output pixels ``roi`` (u0, v0, u1, v1) read ``tile.array[crop]``
    (x0, y0, x1, y1) staged with a 1 px border through ``inverse`` (OpenCV, output ROI ->
    staged crop); ``rect_inverse`` (output ROI -> the tile's canvas rectangle) for the mask."""

    tile: Tile
    roi: tuple[int, int, int, int]
    crop: tuple[int, int, int, int]
    inverse: np.ndarray
    rect_inverse: np.ndarray


def _translations(xy: np.ndarray) -> np.ndarray:
    """(N, 3, 3) translations by (N, 2) offsets."""
    out = np.tile(np.eye(3), (len(xy), 1, 1))
    out[:, :2, 2] = xy
    return out


def _plan_tiles(
    tiles: list[list[Tile]],
    forward: np.ndarray,
    windows: list[list[int]],
    out_size: tuple[int, int],
) -> list[list[_TileWarp]]:
    """The warps of each canvas's scaled tiles, the numbers of all tiles at once (numpy, float64).

    ``tiles[b]`` are canvas b's tiles (an empty list: nothing to plan); ``forward[b]`` (3, 3)
    maps canvas b -> output; ``windows[b]`` is the part of it the output can read
    (`source_windows`). A tile's ROI is the output pixels whose centres its rectangle holds
    (for an axis-aligned map exactly those, else their bounding box; the whole output when the
    rectangle crosses the horizon); its crop, the array's pixels under the rectangle and the
    window (where the window cuts the rectangle, no output pixel reads past the cut). Tiles
    whose ROI or crop is empty are left out. One pass for the whole batch: per sample, the
    fixed cost of a few dozen small numpy calls was most of the work.
    """
    owner = [b for b, mine in enumerate(tiles) for _ in mine]
    flat = [t for mine in tiles for t in mine]
    plans: list[list[_TileWarp]] = [[] for _ in tiles]
    if not flat:
        return plans
    out_h, out_w = out_size
    count = len(flat)
    rects = np.array([(t.x0, t.y0, t.x1, t.y1) for t in flat], dtype=np.float64)
    place = np.array([(t.left, t.top, t.scale_x, t.scale_y) for t in flat], dtype=np.float64)
    shapes = np.array([t.array.shape[:2] for t in flat], dtype=np.float64)
    forward = np.asarray(forward, dtype=np.float64)[owner]  # (N, 3, 3)
    window = np.array(windows, dtype=np.float64)[owner]  # (N, 4)
    corners = np.stack(
        [rects[:, [0, 1]], rects[:, [2, 1]], rects[:, [0, 3]], rects[:, [2, 3]]], axis=1
    )
    mapped = np.concatenate([corners, np.ones((count, 4, 1))], axis=-1) @ forward.transpose(0, 2, 1)
    w = mapped[..., 2]
    finite = (w > 1e-12).all(axis=1)
    xy = mapped[..., :2] / np.where(finite[:, None], w, 1.0)[..., None]
    # Output pixel i holds centre i + 0.5: [low, high) holds pixels ceil(low - 0.5) ...
    low = np.ceil(xy.min(axis=1) - 0.5)
    high = np.ceil(xy.max(axis=1) - 0.5)
    size = np.array([out_w, out_h], dtype=np.float64)
    low = np.where(finite[:, None], np.clip(low, 0, size), 0)
    high = np.where(finite[:, None], np.clip(high, 0, size), size)
    lo_xy = np.maximum(rects[:, :2], window[:, :2])
    hi_xy = np.minimum(rects[:, 2:], window[:, 2:])
    crop_lo = np.maximum(np.floor((lo_xy - place[:, :2]) / place[:, 2:]), 0)
    crop_hi = np.minimum(np.ceil((hi_xy - place[:, :2]) / place[:, 2:]), shapes[:, ::-1])
    # Staged pixel p is array pixel p + crop_lo - 1; output pixel q is roi pixel q + low.
    to_canvas = np.tile(np.eye(3), (count, 1, 1))
    to_canvas[:, 0, 0], to_canvas[:, 1, 1] = place[:, 2], place[:, 3]
    to_canvas[:, :2, 2] = place[:, :2]
    to_roi = _translations(-low) @ forward
    inverse = opencv_inverse(to_roi @ to_canvas @ _translations(crop_lo - 1))
    rect_inverse = opencv_inverse(to_roi @ _translations(rects[:, :2]))
    keep = (high > low).all(axis=1) & (crop_hi > crop_lo).all(axis=1)
    rois = np.concatenate([low, high], axis=1).astype(np.int64).tolist()
    crops = np.concatenate([crop_lo, crop_hi], axis=1).astype(np.int64).tolist()
    for i in np.flatnonzero(keep).tolist():
        plans[owner[i]].append(
            _TileWarp(flat[i], tuple(rois[i]), tuple(crops[i]), inverse[i], rect_inverse[i])
        )
    return plans


def _stage_crop(part: np.ndarray, name: str = "tile") -> np.ndarray:
    """``part`` with a 1 px replicated border, in scratch.

    The border lets bilinear samples near the crop's edge read the edge pixel (a replicated
    edge) instead of being blended with the constant of a ``BORDER_CONSTANT`` warp. One
    ``copyMakeBorder`` (the copy and the ring in one pass; numpy's column copies of a
    3-channel ring are strided byte loops).
    """
    height, width, channels = part.shape
    out = _scratch(name, (height + 2, width + 2, channels))
    if height and width:
        cv2 = _cv2()
        cv2.copyMakeBorder(part, 1, 1, 1, 1, cv2.BORDER_REPLICATE, dst=out)
    return out


def _fill(part: np.ndarray, fill: float) -> None:
    """``part`` (h, w, C) = ``fill`` in every channel; RGBA as one word per pixel (a byte
    fill of a strided 4-channel view loops per pixel)."""
    value = round(fill)
    if part.ndim == 3 and part.shape[-1] == 4 and part.strides[-1] == 1 and part.strides[-2] == 4:
        words = part.view(np.uint32)[..., 0]
        words.fill(value * 0x01010101)
    else:
        part.fill(value)


def _replicate_border(out: np.ndarray) -> None:
    """Copy the edge of ``out[1:-1, 1:-1]`` into the 1 px ring around it."""
    if out.shape[-1] == 4 and out.flags.c_contiguous:
        out = out.view(np.uint32)[..., 0]  # one word per RGBA pixel: columns copy ~5x faster
    out[0, 1:-1] = out[1, 1:-1]
    out[-1, 1:-1] = out[-2, 1:-1]
    out[:, 0] = out[:, 1]
    out[:, -1] = out[:, -2]


def _warp_tiles(
    plans: list[_TileWarp],
    dst: np.ndarray,
    *,
    fill: float,
    perspective: bool,
    axis_aligned: bool,
    flags: int,
    fill_gaps: bool = True,
) -> list[tuple[int, int, int, int]] | None:
    """Warp each planned tile straight from its array into ``dst`` (H, W, C), fill elsewhere.

    Returns the rectangles (x0, y0, x1, y1) the tiles wrote, outside which ``dst`` is fill, for
    an axis-aligned map; None otherwise. ``fill_gaps=False`` leaves the pixels outside them
    unwritten (for a caller that writes its output's fill itself).

    Each ROI pixel gets one bilinear sample of the stored image (`_plan_tiles`), so a pixel is
    the tile under its centre and a tile edge is a cut, not a blend. For an axis-aligned map
    the ROI is exactly the tile's pixels, and each of them samples inside the staged crop (its
    border holds the edge pixels), so ``BORDER_CONSTANT`` never blends in the constant and keeps
    OpenCV 5's vectorised path (``BORDER_TRANSPARENT`` leaves it: ~3x slower). Under a
    rotation, shear or perspective the tile is warped over its bounding box and copied through
    a mask of the pixels whose centres the rectangle holds (a nearest-neighbour warp of the
    rectangle).
    """
    cv2 = _cv2()
    content = None
    if axis_aligned:  # the ROIs are disjoint and every pixel of one is written
        content = [plan.roi for plan in plans]
        if fill_gaps:
            out_h, out_w = dst.shape[:2]
            for x0, y0, x1, y1 in _uncovered((0, 0, out_w, out_h), content):
                _fill(dst[y0:y1, x0:x1], fill)
    else:
        dst.fill(round(fill))
    warp = cv2.warpPerspective if perspective else cv2.warpAffine
    for plan in plans:
        tile, (u0, v0, u1, v1), (ax0, ay0, ax1, ay1) = plan.tile, plan.roi, plan.crop
        image = _stage_crop(tile.array[ay0:ay1, ax0:ax1])
        m = plan.inverse if perspective else plan.inverse[:2]
        roi = dst[v0:v1, u0:u1]
        if axis_aligned:
            warp(_plane(image), m, (u1 - u0, v1 - v0), dst=_plane(roi), flags=flags,
                 borderMode=cv2.BORDER_CONSTANT)
            continue
        warped = _scratch("tile_warped", roi.shape)
        warp(_plane(image), m, (u1 - u0, v1 - v0), dst=_plane(warped), flags=flags,
             borderMode=cv2.BORDER_REPLICATE)
        # Rectangle pixel (i, j) spans [x0 + i, x0 + i + 1): nearest reads it for every output
        # centre that lands in that span, so the mask is the centres inside the rectangle.
        rect = _scratch("tile_rect", (tile.y1 - tile.y0, tile.x1 - tile.x0))
        rect.fill(255)
        mask = _scratch("tile_mask", roi.shape[:2])
        m_rect = plan.rect_inverse if perspective else plan.rect_inverse[:2]
        warp(rect, m_rect, (u1 - u0, v1 - v0), dst=mask,
             flags=cv2.INTER_NEAREST | cv2.WARP_INVERSE_MAP, borderMode=cv2.BORDER_CONSTANT,
             borderValue=0)
        cv2.copyTo(_plane(warped), mask, _plane(roi))
    return content


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
    planar: bool = False,
) -> torch.Tensor:
    """`_warp.warp_images` for uint8 CPU images with ``cv2.warpAffine`` / ``warpPerspective``.

    Each sample reads only the window of its valid region the output can reach
    (`source_windows`), staged with a 1 px replicated border. The region is cut
    exactly, as in the torch path: it is warped with its edge replicated, then the pixels whose
    centres map outside it get ``fill`` (`_region_cut`), before any recolouring. ``source``
    replaces ``images`` with a `TiledSource` (a `Mosaic` canvas that is never built; its valid
    region is ``sizes``, the tiles' extent, else the whole canvas). ``hsv`` (B, 3) gains:
    apply `RandomHSV` to the warped pixels before they are written (RGB images only; what
    `hsv_opencv` of the result gives, without the intermediate batch). Returns channels_last
    uint8 images, or contiguous (B, C, H, W) ones with ``planar`` (each sample's planes
    written as it is finished, not by a later copy of the whole batch).
    """
    cv2 = _cv2()
    if source is None:
        source = image_source(images, sizes)
    batch, channels = len(source.tiles), source.channels
    out_h, out_w = out_size
    out = _empty_like_batch(batch, channels, out_h, out_w, planar)
    targets = _sample_targets(out, planar)
    inverse = opencv_matrices(matrix)
    regions = source.sizes
    if sizes is not None:
        pairs = zip(sizes.tolist(), regions, strict=True)
        regions = [(min(h, ch), min(w, cw)) for (h, w), (ch, cw) in pairs]
    if source.crop:
        windows = source_windows(inverse, out_size, regions).tolist()
    else:
        windows = [[0, 0, w, h] for h, w in regions]
    mode = cv2.INTER_LINEAR if interpolation == "bilinear" else cv2.INTER_NEAREST
    flags = mode | cv2.WARP_INVERSE_MAP
    border = (float(fill),) * 4
    perspective = not affine_only
    if hsv is not None and channels != 3:
        raise ValueError("hsv needs RGB images")
    native, tables, used = _hsv_tables(hsv) if hsv is not None else (None, None, None)
    forward = matrix.detach().to("cpu", torch.float64).numpy()
    to_source = np.linalg.inv(forward)  # output -> source, detfmt's convention (as the torch path)
    tiled = [any(tile.scaled for tile in tiles) for tiles in source.tiles]
    plans = _plan_tiles(
        [tiles if tiled[i] else [] for i, tiles in enumerate(source.tiles)],
        forward,
        windows,
        out_size,
    )
    axis_aligned = [m[0, 1] == 0 and m[1, 0] == 0 and not perspective for m in forward]
    # Warped straight into the output when nothing follows and the layouts agree, else into
    # this thread's scratch (a planar output) and then recoloured/converted into it.
    direct = tables is None and (not planar or channels == 1)

    def warp_target(i: int) -> np.ndarray:
        if direct:
            target = targets[i]
            return target[0][..., None] if planar else target
        return _scratch("warped", (out_h, out_w, channels))

    # Recoloured samples: where the warp knows which rectangles hold the sample (a scale and
    # translation), the scratch outside them is left unwritten and `_hsv_into` writes the
    # recoloured fill there instead of recolouring fill pixels.
    recoloured = tables is not None

    def finish(i: int, warped: np.ndarray, content: list[tuple[int, int, int, int]] | None = None
               ) -> None:
        if tables is not None:
            _hsv_into(warped, native[i], tables[i], used[i], targets[i], content, fill)
        elif not direct:
            _convert_into(warped, targets[i])

    def one(i: int) -> None:
        x0, y0, x1, y1 = windows[i]
        warped = warp_target(i)
        if tiled[i]:
            content = _warp_tiles(
                plans[i],
                warped,
                fill=fill,
                perspective=perspective,
                axis_aligned=axis_aligned[i],
                flags=flags,
                fill_gaps=not recoloured,
            )
            finish(i, warped, content)
            return
        if x1 <= x0 or y1 <= y0:  # the output sees none of the canvas
            if recoloured:
                finish(i, warped, [])
                return
            warped.fill(round(fill))
            finish(i, warped)
            return
        image = _read_window(source, i, (x0, y0, x1, y1))
        # Staged coordinates: the inverse map followed by a shift of (1 - x0, 1 - y0).
        m = inverse[i].copy()
        m[0] -= (x0 - 1) * m[2]
        m[1] -= (y0 - 1) * m[2]
        warp = cv2.warpPerspective if perspective else cv2.warpAffine
        # The window is the valid region wherever the output reads up to its edge, so its
        # replicated border is the region's edge; the fill then cuts the region exactly.
        rectangle = inside_rectangle(to_source[i], out_size, regions[i])
        if rectangle is None:  # rotation, shear, perspective: warp all, then fill outside
            target, size = warped, (out_w, out_h)
        else:  # scale and translation: warp only the pixels inside, fill the rest
            r0, r1, c0, c1 = rectangle
            content = [(c0, r0, c1, r1)] if r1 > r0 and c1 > c0 else []
            if not recoloured:
                fill_around(warped, rectangle, round(fill))
            if not content:
                finish(i, warped, content)
                return
            m[:, 2] += m[:, 0] * c0 + m[:, 1] * r0  # output pixel (u, v) is ROI pixel + (c0, r0)
            target, size = warped[r0:r1, c0:c1], (c1 - c0, r1 - r0)
        warp(
            _plane(image),
            m if perspective else m[:2],
            size,
            dst=_plane(target),
            flags=flags,
            borderMode=cv2.BORDER_CONSTANT,
            borderValue=border,
        )
        if rectangle is None:
            cut_to_region(warped, to_source[i], regions[i], round(fill))
            finish(i, warped)
        else:
            finish(i, warped, content)

    _for_each_sample(batch, one)
    return out


def _convert_into(image: np.ndarray, dst: np.ndarray | list[np.ndarray]) -> None:
    """An (H, W, C) image into an (H, W, C) view or a list of C planes."""
    if isinstance(dst, list):
        _cv2().split(image, dst)
    else:
        np.copyto(dst, image)


def planar_copy(images: torch.Tensor) -> torch.Tensor:
    """A contiguous copy of channels_last uint8 (B, C, H, W) images, one ``cv2.split`` per
    sample (a de-interleave, where torch's copy of a permuted view is a strided gather)."""
    batch, channels, height, width = images.shape
    out = _empty_like_batch(batch, channels, height, width, planar=True)
    targets = _sample_targets(out, planar=True)
    src = images.permute(0, 2, 3, 1).numpy()

    def one(i: int) -> None:
        _convert_into(src[i], targets[i])

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


def _hsv_tables(gains: torch.Tensor) -> tuple[np.ndarray, np.ndarray, list[list[bool]]]:
    """The native kernel's `lut_parameters` (B, 3), the LUTs (B, 3, 256) and, per sample and
    plane, whether the LUT must run at all.

    A table that is the identity on the levels that occur (hue < 180 in OpenCV's 8-bit HSV;
    the hue table is when floor(r_h 180) = 0) is skipped.
    """
    values = gains.detach().to("cpu", torch.float64).numpy()
    tables = hsv_luts(values)
    identity = np.arange(256, dtype=np.uint8)
    used = ~(tables[:, :, :180] == identity[:180]).all(axis=-1)
    used[:, 1:] |= ~(tables[:, 1:, 180:] == identity[180:]).all(axis=-1)
    if recolour_kernels() is None:  # OpenCV recolours: no closed forms to look for
        return np.full((len(tables), 3), np.nan, np.float32), tables, used.tolist()
    return lut_parameters(values, tables), tables, used.tolist()


def _hsv_into(
    image: np.ndarray,
    parameters: np.ndarray,
    tables: np.ndarray,
    used: list[bool],
    dst: np.ndarray | list[np.ndarray],
    content: list[tuple[int, int, int, int]] | None = None,
    fill: float = 0.0,
) -> None:
    """Ultralytics' HSV LUTs on one RGB or RGBA (H, W, C) image, written as RGB into ``dst``
    (an (H, W, 3) view, or a list of 3 planes).

    The native kernel where numba is installed (`_native.recolour`: the same bytes in one
    pass); else cvtColor, split, one LUT per plane where ``used``, merge, cvtColor, into this
    thread's scratch buffers (a 3-channel LUT is slower than split + 3 single-channel ones +
    merge). ``content``: the disjoint rectangles (x0, y0, x1, y1) of ``image`` that are
    written; every other pixel is ``fill`` (and is not read: it gets the fill's recoloured
    value, the kernel's own result for that colour).
    """
    if recolour(image, parameters, dst, content, round(fill)):
        return
    if content is not None:
        height, width = image.shape[:2]
        for x0, y0, x1, y1 in _uncovered((0, 0, width, height), content):
            _fill(image[y0:y1, x0:x1], fill)
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
    if isinstance(dst, list):
        rgb = _scratch("rgb", (height, width, 3))
        cv2.cvtColor(hsv, cv2.COLOR_HSV2RGB, dst=rgb)
        cv2.split(rgb, dst)
    else:
        cv2.cvtColor(hsv, cv2.COLOR_HSV2RGB, dst=dst)


def hsv_opencv(images: torch.Tensor, gains: torch.Tensor) -> torch.Tensor:
    """`color.apply_hsv_gains` for uint8 RGB CPU images, Ultralytics' OpenCV calls per sample."""
    batch, channels, height, width = images.shape
    src = _hwc(images)
    out = _empty_like_batch(batch, channels, height, width)
    targets = _sample_targets(out, planar=False)
    native, tables, used = _hsv_tables(gains)

    def one(i: int) -> None:
        _hsv_into(src[i], native[i], tables[i], used[i], targets[i])

    _for_each_sample(batch, one)
    return out
