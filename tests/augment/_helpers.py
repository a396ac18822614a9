"""Shared builders for the augmentation tests (small images, seeded generators)."""

from __future__ import annotations

import torch

from detfmt.torch import Batch


def make_batch(
    batch: int = 4,
    height: int = 64,
    width: int = 80,
    slots: int = 6,
    *,
    seed: int = 0,
    min_side: float = 6.0,
    smooth: bool = False,
    all_valid: bool = False,
) -> Batch:
    """Random uint8 images with 1..slots valid random boxes per sample, padding after them."""
    g = torch.Generator().manual_seed(seed)
    if smooth:
        low = torch.randint(0, 256, (batch, 3, height // 8 + 1, width // 8 + 1), generator=g)
        images = torch.nn.functional.interpolate(
            low.float(), size=(height, width), mode="bilinear", align_corners=False
        )
        images = images.round().clamp(0, 255).to(torch.uint8)
    else:
        images = torch.randint(0, 256, (batch, 3, height, width), dtype=torch.uint8, generator=g)
    counts = torch.randint(1, slots + 1, (batch,), generator=g)
    if all_valid:
        counts = torch.full((batch,), slots)
    mask = torch.arange(slots)[None] < counts[:, None]
    wh = min_side + torch.rand(batch, slots, 2, generator=g) * torch.tensor(
        [width / 2 - min_side, height / 2 - min_side]
    )
    xy = torch.rand(batch, slots, 2, generator=g) * (torch.tensor([width, height]) - wh)
    boxes = torch.cat([xy, xy + wh], dim=-1)
    boxes = torch.where(mask[..., None], boxes, 0.0)
    classes = torch.where(mask, torch.randint(0, 5, (batch, slots), generator=g), -1)
    return Batch(images=images, boxes=boxes, classes=classes, mask=mask)


def box_masks_batch(batch: Batch) -> Batch:
    """Images whose channel c is 255 on the pixels of box c (3 boxes per sample), else 0.

    Box [x1, x2) covers the pixels whose centres lie inside it.
    """
    _, _, height, width = batch.images.shape
    ys = torch.arange(height)[None, :, None] + 0.5
    xs = torch.arange(width)[None, None, :] + 0.5
    channels = []
    for c in range(3):
        x1, y1, x2, y2 = (batch.boxes[:, c, i, None, None] for i in range(4))
        inside = (xs >= x1) & (xs < x2) & (ys >= y1) & (ys < y2) & batch.mask[:, c, None, None]
        channels.append(inside)
    images = torch.stack(channels, dim=1).to(torch.uint8) * 255
    return batch.replace(images=images)


def tight_boxes(images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per (sample, channel) bounding box [x_min, y_min, x_max + 1, y_max + 1) of pixels > 127."""
    on = images > 127
    b, c = on.shape[:2]
    boxes = torch.zeros(b, c, 4)
    present = on.flatten(2).any(-1)
    for i in range(b):
        for j in range(c):
            if present[i, j]:
                ys, xs = torch.nonzero(on[i, j], as_tuple=True)
                boxes[i, j] = torch.tensor(
                    [xs.min(), ys.min(), xs.max() + 1, ys.max() + 1], dtype=torch.float32
                )
    return boxes, present


def pixel_count(images: torch.Tensor) -> torch.Tensor:
    """(B, C) number of pixels > 127."""
    return (images > 127).flatten(2).sum(-1)
