"""Leaving the padded batch: compaction and converters to Ultralytics and DETR targets."""

from __future__ import annotations

import torch

from detfmt.augment._base import image_hw
from detfmt.augment._slots import gather_slots, pad_slots, where_kept
from detfmt.errors import TooManyBoxesError, UsageError
from detfmt.torch.batch import Batch

OVERFLOW_MODES = ("raise", "count")


def compact(batch: Batch, max_boxes: int | None = None, *, overflow: str = "raise") -> Batch:
    """Move valid boxes to the front (stable) and keep ``max_boxes`` slots (default: as many).

    Per-box extras (``batch.box_fields``) move with their boxes; other extras stay as they are.

    A sample with more valid boxes than ``max_boxes`` is never cut silently:
    ``overflow="raise"`` (default) raises `TooManyBoxesError` naming the sample (this reads
    the counts on the host); ``overflow="count"`` keeps the first ``max_boxes`` and records how
    many each sample lost in ``extras["boxes_cut"]`` ((B,) int64, no host sync, so it suits
    ``torch.compile``), for the caller to log or check.
    """
    if overflow not in OVERFLOW_MODES:
        raise UsageError(f"overflow must be one of {OVERFLOW_MODES}, got {overflow!r}")
    slots = batch.boxes.shape[1]
    max_boxes = slots if max_boxes is None else int(max_boxes)
    if max_boxes < 0:
        raise UsageError(f"max_boxes must be >= 0, got {max_boxes!r}")
    counts = batch.mask.sum(dim=1)
    cut = (counts - max_boxes).clamp_min(0)
    if overflow == "raise" and max_boxes < slots and bool((cut > 0).any()):
        _raise_too_many(batch, counts, max_boxes)
    order = torch.sort((~batch.mask).to(torch.int8), dim=1, stable=True).indices[:, :max_boxes]
    take = min(max_boxes, slots)
    pad = max_boxes - take
    boxes = torch.gather(batch.boxes, 1, order[..., None].expand(-1, -1, 4))
    classes = torch.gather(batch.classes, 1, order)
    mask = torch.gather(batch.mask, 1, order)
    if pad:
        boxes = torch.cat([boxes, boxes.new_zeros((len(batch), pad, 4))], dim=1)
        classes = torch.cat([classes, classes.new_full((len(batch), pad), -1)], dim=1)
        mask = torch.cat([mask, mask.new_zeros((len(batch), pad))], dim=1)
    per_box = where_kept(gather_slots(batch.per_box(), order), mask[:, :take])
    extras = {**batch.extras, **{name: pad_slots(v, max_boxes) for name, v in per_box.items()}}
    if overflow == "count":
        extras["boxes_cut"] = cut.to(torch.int64)
    return batch.replace(boxes=boxes, classes=classes, mask=mask, extras=extras)


def _raise_too_many(batch: Batch, counts: torch.Tensor, max_boxes: int) -> None:
    position = int(torch.argmax((counts > max_boxes).to(torch.int8)))
    count = int(counts[position])
    index = int(batch.indices[position]) if batch.indices is not None else None
    where = f"dataset sample {index}" if index is not None else f"batch position {position}"
    raise TooManyBoxesError(
        f"{where} has {count} valid boxes, more than max_boxes={max_boxes}; raise max_boxes "
        "(after Mosaic/MixUp a sample can hold the boxes of 4 or 2 images) or pass "
        "overflow='count' to keep the first max_boxes and record the rest in "
        "extras['boxes_cut']",
        count=count,
        max_boxes=max_boxes,
        index=index,
    )


def xyxy_to_cxcywh(boxes: torch.Tensor) -> torch.Tensor:
    """(..., 4) xyxy -> cx, cy, w, h."""
    x1, y1, x2, y2 = boxes.unbind(-1)
    return torch.stack([(x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1], dim=-1)


def normalized_cxcywh(batch: Batch, use_sizes: bool = True) -> torch.Tensor:
    """(B, M, 4) cx, cy, w, h divided by each image's (w, h); padding slots stay 0.

    With ``use_sizes`` and ``batch.sizes`` set, the valid region is the reference (DETR
    normalises by the unpadded image); else the full image.
    """
    height, width = image_hw(batch.images)
    if use_sizes and batch.sizes is not None:
        wh = batch.sizes.to(torch.float32)[:, [1, 0]]
    else:
        wh = torch.tensor([width, height], dtype=torch.float32, device=batch.boxes.device)
        wh = wh.expand(len(batch), 2)
    scale = torch.cat([wh, wh], dim=-1)[:, None]
    out = xyxy_to_cxcywh(batch.boxes.to(torch.float32)) / scale
    return torch.where(batch.mask[..., None], out, 0.0)


def to_ultralytics(batch: Batch) -> dict[str, torch.Tensor]:
    """Ultralytics' collated targets: ``batch_idx`` (N,), ``cls`` (N, 1), ``bboxes`` (N, 4).

    ``bboxes`` are cx, cy, w, h normalised by the batch image size, rows in sample order.
    """
    boxes = normalized_cxcywh(batch, use_sizes=False)
    sample = torch.arange(len(batch), device=batch.mask.device)[:, None].expand_as(batch.mask)
    mask = batch.mask
    return {
        "batch_idx": sample[mask].to(torch.float32),
        "cls": batch.classes[mask].to(torch.float32)[:, None],
        "bboxes": boxes[mask],
    }


def to_detr(batch: Batch) -> list[dict[str, torch.Tensor]]:
    """DETR targets: per sample ``labels`` (n,) int64 and ``boxes`` (n, 4) normalised cxcywh."""
    boxes = normalized_cxcywh(batch, use_sizes=True)
    targets = []
    for i in range(len(batch)):
        keep = batch.mask[i]
        targets.append({"labels": batch.classes[i][keep].to(torch.int64), "boxes": boxes[i][keep]})
    return targets
