"""`draw_boxes`: outlines and class-name tabs on a PIL image, the same for every renderer."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from PIL import ImageDraw, ImageFont

from detfmt.render.palette import class_colour, text_colour

__all__ = ["draw_boxes"]


def draw_boxes(
    draw: ImageDraw.ImageDraw,
    boxes: np.ndarray,
    classes: np.ndarray,
    class_names: Sequence[str] | None = None,
    *,
    origin: tuple[float, float] = (0.0, 0.0),
    scale: float = 1.0,
    crowd: np.ndarray | None = None,
) -> None:
    """Draw xyxy ``boxes`` (K, 4) with ``classes`` (K,) at ``origin`` + ``scale`` * box.

    Box [x1, x2) covers pixels x1 .. x2 - 1, so outlines sit on the box's own pixels (2 px
    wide, inward; 1 px for crowd boxes). Each box gets a tab with its class name (the index
    where ``class_names`` does not name it; "(crowd)" added) above its top edge, or inside it
    at the image's top.
    """
    font = ImageFont.load_default()
    ox, oy = origin
    crowd = np.zeros(len(boxes), bool) if crowd is None else np.asarray(crowd, bool)
    for k, (box, cls) in enumerate(zip(boxes, classes, strict=True)):
        cls = int(cls)
        colour = class_colour(cls)
        x0, y0, x1, y1 = (float(v) * scale for v in box)
        x0, x1, y0, y1 = x0 + ox, x1 + ox, y0 + oy, y1 + oy
        draw.rectangle([x0, y0, max(x0, x1 - 1), max(y0, y1 - 1)], outline=colour,
                       width=1 if crowd[k] else 2)
        named = class_names is not None and 0 <= cls < len(class_names)
        name = class_names[cls] if named else str(cls)  # type: ignore[index]
        label = f"{name} (crowd)" if crowd[k] else name
        left, top, right, bottom = draw.textbbox((x0, y0), label, font=font)
        ty = y0 - (bottom - top) - 2 if y0 - (bottom - top) - 2 >= oy else y0
        draw.rectangle([x0, ty, x0 + (right - left) + 3, ty + (bottom - top) + 2], fill=colour)
        draw.text((x0 + 1, ty), label, fill=text_colour(colour), font=font)
