"""Which of a sample's boxes become a model's training targets: crowd and zero-area boxes.

torchvision's reference COCO preparation (``references/detection/coco_utils.py``,
``ConvertCocoPolysToMask``) and transformers' (``prepare_coco_detection_annotation`` of the DETR
family's image processors) both drop crowd annotations (``iscrowd`` = 1), then boxes without
positive width and height (torchvision's detection models raise on those in training). The
converters do the same by default and count what they removed, per image, so nothing goes
unseen.
"""

from __future__ import annotations

import dataclasses

import torch

from detfmt.errors import UsageError
from detfmt.torch.batch import Batch

CROWD_FIELD = "iscrowd"


@dataclasses.dataclass(frozen=True)
class Objects:
    """One image's targets: kept boxes (n, 4) float32 xyxy, classes (n,) int64 (no offset),
    crowd flags (n,) int64, and how many valid boxes were removed as crowd and as zero-area
    (0-dim int64 tensors: counting them needs no host sync)."""

    boxes: torch.Tensor
    classes: torch.Tensor
    iscrowd: torch.Tensor
    removed_crowd: torch.Tensor
    removed_degenerate: torch.Tensor


def crowd_flags(batch: Batch) -> torch.Tensor | None:
    """``batch``'s per-box ``iscrowd`` (B, M), or None when it has none.

    An ``iscrowd`` extra that is not declared per-box (``batch.box_fields``) is refused: its
    slots may not be the boxes' (the converters never guess from its shape).
    """
    if CROWD_FIELD in batch.box_fields:
        return batch.extras[CROWD_FIELD]
    if CROWD_FIELD in batch.extras:
        raise UsageError(
            "batch.extras['iscrowd'] is not declared per-box: pass box_fields=('iscrowd', ...) "
            "when building the Batch (the Loader declares the dataset's per-box fields)"
        )
    return None


def image_objects(
    batch: Batch,
    i: int,
    crowd: torch.Tensor | None,
    *,
    drop_crowd: bool,
    drop_degenerate: bool,
) -> Objects:
    """Sample ``i``'s valid boxes, less crowd ones (``drop_crowd``), then less those without
    positive width and height (``drop_degenerate``), in slot order."""
    valid = batch.mask[i]
    boxes = batch.boxes[i].to(torch.float32)
    flags = (
        crowd[i].to(device=valid.device, dtype=torch.int64) != 0
        if crowd is not None
        else torch.zeros_like(valid)
    )
    keep = valid
    removed_crowd = torch.zeros((), dtype=torch.int64, device=valid.device)
    if drop_crowd:
        removed_crowd = (keep & flags).sum()
        keep = keep & ~flags
    removed_degenerate = torch.zeros_like(removed_crowd)
    if drop_degenerate:
        degenerate = (boxes[:, 2] <= boxes[:, 0]) | (boxes[:, 3] <= boxes[:, 1])
        removed_degenerate = (keep & degenerate).sum()
        keep = keep & ~degenerate
    return Objects(
        boxes=boxes[keep],
        classes=batch.classes[i][keep].to(torch.int64),
        iscrowd=flags[keep].to(torch.int64),
        removed_crowd=removed_crowd,
        removed_degenerate=removed_degenerate,
    )
