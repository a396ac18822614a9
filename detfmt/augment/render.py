"""Draw a batch with its boxes to a PNG grid, to look at what augmentation did (boxes drawn as
`detfmt show` draws them: `detfmt.render`)."""

from __future__ import annotations

import math
import os
from collections.abc import Sequence

import numpy as np
import torch
from PIL import Image, ImageDraw

from detfmt.augment._base import image_hw
from detfmt.errors import UsageError
from detfmt.render import draw_boxes
from detfmt.torch.batch import Batch


def _to_uint8_hwc(images: torch.Tensor) -> np.ndarray:
    x = images.detach().to("cpu")
    if x.dtype != torch.uint8:
        x = (x.to(torch.float32) * 255.0).round().clamp(0, 255).to(torch.uint8)
    return x.permute(0, 2, 3, 1).contiguous().numpy()


def render_batch(
    batch: Batch,
    path: str | os.PathLike[str] | None,
    class_names: Sequence[str] | None = None,
    *,
    columns: int | None = None,
) -> Image.Image:
    """Tile the batch into one image, draw valid boxes with class labels, save it as PNG.

    Box [x1, x2) covers pixels x1 .. x2 - 1, so outlines sit on the box's own pixels
    (`detfmt.render.draw_boxes`). Float
    images are taken as [0, 1] (call before `Normalize`). Returns the PIL image; ``path=None``
    only returns it.
    """
    height, width = image_hw(batch.images)
    pixels = _to_uint8_hwc(batch.images)
    n = len(batch)
    if n == 0:
        raise UsageError("cannot render an empty batch")
    columns = columns or math.ceil(math.sqrt(n))
    rows = math.ceil(n / columns)
    sheet = Image.new("RGB", (columns * width, rows * height), (0, 0, 0))
    draw = ImageDraw.Draw(sheet)
    boxes = batch.boxes.detach().to("cpu", torch.float32).numpy()
    classes = batch.classes.detach().to("cpu").numpy()
    mask = batch.mask.detach().to("cpu").numpy()
    for i in range(n):
        ox, oy = (i % columns) * width, (i // columns) * height
        sheet.paste(Image.fromarray(pixels[i]), (ox, oy))
        valid = mask[i]
        draw_boxes(draw, boxes[i][valid], classes[i][valid], class_names, origin=(ox, oy))
    if path is not None:
        sheet.save(os.fspath(path), format="PNG")
    return sheet
