"""A canvas described by tiles instead of built: what a module that defers its canvas hands the
warp after it (`Augmentation.apply_deferred`). Plain numpy data, no OpenCV."""

from __future__ import annotations

import dataclasses

import numpy as np

__all__ = ["Tile", "TiledSource"]


@dataclasses.dataclass(frozen=True)
class Tile:
    """``canvas[y0:y1, x0:x1] = array[y0 - top : y1 - top, x0 - left : x1 - left]``.

    A scaled tile (``scale_x``, ``scale_y`` != 1: `Mosaic` with ``resize``) shows ``array``
    scaled about its origin, then moved by (left, top): canvas point (x, y) holds array point
    ((x - left) / scale_x, (y - top) / scale_y), inside the rectangle only; the warp reads it
    straight from ``array``.
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
