"""Render dataset samples with their boxes and class names into one PNG grid.

The quickest check that a conversion went right is to look at it: ``detfmt show DS --out g.png``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from detfmt.errors import UsageError, WriteError

__all__ = ["default_indices", "render_grid", "render_sample"]

_PALETTE = [(230, 25, 75), (60, 180, 75), (255, 225, 25), (0, 130, 200), (245, 130, 48),
            (145, 30, 180), (70, 240, 240), (240, 50, 230), (210, 245, 60), (250, 190, 212),
            (0, 128, 128), (220, 190, 255), (170, 110, 40), (255, 250, 200), (128, 0, 0),
            (170, 255, 195), (128, 128, 0), (255, 215, 180), (0, 0, 128), (255, 255, 255)]


def default_indices(n: int, count: int = 16) -> list[int]:
    """``count`` indices spread evenly over the dataset (always including the first)."""
    if n <= 0:
        return []
    count = min(count, n)
    return sorted({int(i) for i in np.linspace(0, n - 1, count).round()})


def render_sample(sample: Any, class_names: Sequence[str], cell: int = 320) -> Image.Image:
    """One sample as a PIL image scaled to fit ``cell`` px, boxes drawn, names written."""
    image = Image.fromarray(np.ascontiguousarray(sample.image))
    scale = min(cell / image.width, cell / image.height, 4.0)
    size = (max(1, round(image.width * scale)), max(1, round(image.height * scale)))
    image = image.resize(size, Image.Resampling.BILINEAR)
    draw = ImageDraw.Draw(image)
    font = ImageFont.load_default()
    crowd = np.asarray(sample.fields.get("iscrowd", np.zeros(len(sample.boxes))), bool)
    for k, (box, cls) in enumerate(zip(sample.boxes, sample.classes, strict=True)):
        color = _PALETTE[int(cls) % len(_PALETTE)]
        x0, y0, x1, y1 = (float(v) * scale for v in box)
        draw.rectangle([x0, y0, max(x0, x1 - 1), max(y0, y1 - 1)], outline=color,
                       width=1 if crowd[k] else 2)
        name = class_names[int(cls)] if 0 <= int(cls) < len(class_names) else str(int(cls))
        label = f"{name} (crowd)" if crowd[k] else name
        left, top, right, bottom = draw.textbbox((x0, y0), label, font=font)
        ty = y0 - (bottom - top) - 2 if y0 - (bottom - top) - 2 >= 0 else y0
        draw.rectangle([x0, ty, x0 + (right - left) + 3, ty + (bottom - top) + 2], fill=color)
        dark = 0.299 * color[0] + 0.587 * color[1] + 0.114 * color[2] < 128
        draw.text((x0 + 1, ty), label, fill=(255, 255, 255) if dark else (0, 0, 0), font=font)
    return image


def render_grid(
    dataset: Any,
    out: str | os.PathLike[str],
    indices: Sequence[int] | None = None,
    *,
    cell: int = 320,
    columns: int | None = None,
) -> Path:
    """Draw ``indices`` (default: 16 spread over the dataset) of a dataset (path or opened)
    into a PNG grid at ``out``, each captioned with its index, file name and box count."""
    from detfmt.api import open_dataset

    out = Path(out)
    if not out.parent.is_dir():  # before any sample is drawn
        raise UsageError("the output's folder does not exist (create it first)",
                         path=out.parent)
    ds = open_dataset(dataset) if isinstance(dataset, (str, os.PathLike)) else dataset
    try:
        n = len(ds)
        chosen = list(indices) if indices else default_indices(n)
        if not chosen:
            raise UsageError("the dataset is empty: nothing to show")
        for i in chosen:
            if not -n <= i < n:
                raise UsageError(f"index {i} is out of range for {n} samples")
        columns = columns or math.ceil(math.sqrt(len(chosen)))
        names = ds.class_names
        tiles = []
        for i in chosen:
            sample = ds[i]
            file_name = sample.fields.get("file_name", "")
            tiles.append((render_sample(sample, names, cell),
                          f"#{sample.index} {file_name} ({len(sample.boxes)} boxes)"[:60]))
    finally:
        if ds is not dataset:
            ds.close()
    caption = 14
    rows = [tiles[r:r + columns] for r in range(0, len(tiles), columns)]
    heights = [max(tile.height for tile, _ in row) + caption + 4 for row in rows]
    grid = Image.new("RGB", (columns * (cell + 4), sum(heights)), (32, 32, 32))
    draw = ImageDraw.Draw(grid)
    font = ImageFont.load_default()
    y = 0
    for row, height in zip(rows, heights, strict=True):
        for slot, (tile, text) in enumerate(row):
            x = slot * (cell + 4) + 2
            draw.text((x, y + 2), text, fill=(230, 230, 230), font=font)
            grid.paste(tile, (x, y + 2 + caption))
        y += height
    try:
        grid.save(out, format="PNG")
    except OSError as error:
        raise WriteError(f"cannot write the grid: {error.strerror or error}", path=out,
                         errno=getattr(error, "errno", None)) from error
    return out
