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
from detfmt.render import draw_boxes

__all__ = ["default_indices", "render_grid", "render_sample"]

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
    crowd = np.asarray(sample.fields.get("iscrowd", np.zeros(len(sample.boxes))), bool)
    draw_boxes(ImageDraw.Draw(image), np.asarray(sample.boxes), np.asarray(sample.classes),
               class_names, scale=scale, crowd=crowd)
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
    from detfmt.reading.opener import open_dataset

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
