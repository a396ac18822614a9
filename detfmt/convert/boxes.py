"""The box policy shared by every converter (documented in docs/converters.md).

Boxes arrive as float64 xyxy in the pixels of the image as annotated. The policy, in order:
1. any NaN/inf coordinate: the box is dropped (``box_nonfinite``);
2. zero or negative width or height: dropped (``box_degenerate``), as COCO/Ultralytics tools do;
3. partly outside the image: clipped to it, kept and counted (``box_clipped``; when it moved by
   at most ``EDGE_TOLERANCE`` px, e.g. a normalised YOLO coordinate of 1.0000001, it is counted
   as ``box_edge_rounding`` instead, so real clips stand out);
4. nothing left inside the image after clipping: dropped (``box_outside``).
"""

from __future__ import annotations

import os

import numpy as np

from detfmt.convert.report import ConversionReport

__all__ = ["EDGE_TOLERANCE", "apply_box_policy"]

EDGE_TOLERANCE = 0.01  # pixels


def apply_box_policy(
    boxes: np.ndarray,
    width: int,
    height: int,
    report: ConversionReport,
    path: str | os.PathLike[str],
) -> tuple[np.ndarray, np.ndarray]:
    """Return (clipped boxes, keep mask) and record every drop and fix in ``report``."""
    boxes = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
    if _all_good(boxes, width, height):  # the common case, in a few vector ops
        return boxes, np.ones(len(boxes), dtype=bool)
    finite = np.isfinite(boxes).all(axis=1)
    with np.errstate(invalid="ignore"):
        positive = (boxes[:, 2] > boxes[:, 0]) & (boxes[:, 3] > boxes[:, 1])
    degenerate = finite & ~positive
    clipped = boxes.copy()
    np.clip(clipped[:, 0::2], 0.0, float(width), out=clipped[:, 0::2])
    np.clip(clipped[:, 1::2], 0.0, float(height), out=clipped[:, 1::2])
    with np.errstate(invalid="ignore"):
        inside = (clipped[:, 2] > clipped[:, 0]) & (clipped[:, 3] > clipped[:, 1])
        changed = (clipped != boxes).any(axis=1)
    outside = finite & positive & ~inside
    keep = finite & positive & inside
    moved = np.abs(np.nan_to_num(clipped - boxes)).max(axis=1)
    fixed = keep & changed & (moved > EDGE_TOLERANCE)
    rounded = keep & changed & (moved <= EDGE_TOLERANCE)
    report.drop_boxes("box_nonfinite", path, int((~finite).sum()), _first(boxes, ~finite))
    report.drop_boxes("box_degenerate", path, int(degenerate.sum()), _first(boxes, degenerate))
    report.drop_boxes(
        "box_outside", path, int(outside.sum()), _first(boxes, outside, width, height)
    )
    report.fix_boxes("box_clipped", path, int(fixed.sum()), _first(boxes, fixed, width, height))
    report.fix_boxes("box_edge_rounding", path, int(rounded.sum()),
                     _first(boxes, rounded, width, height))
    return clipped, keep


def _all_good(boxes: np.ndarray, width: int, height: int) -> bool:
    if not len(boxes):
        return True
    x0, y0, x1, y1 = boxes.T
    with np.errstate(invalid="ignore"):  # NaN compares False, so it falls to the slow path
        return bool((x0 >= 0).all() and (y0 >= 0).all() and (x1 <= width).all()
                    and (y1 <= height).all() and (x1 > x0).all() and (y1 > y0).all())


def _first(boxes: np.ndarray, which: np.ndarray, width: int = 0, height: int = 0) -> str:
    if not which.any():
        return ""
    box = ", ".join(f"{v:.9g}" for v in boxes[np.flatnonzero(which)[0]])
    size = f" in a {width}x{height} image" if width else ""
    return f"e.g. xyxy [{box}]{size}"
