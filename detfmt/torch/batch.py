"""The batch type shared by the loader and the augmentation modules.

A `Batch` is a plain container of tensors, so every module takes and returns the same thing and
users can build one by hand. Images are uint8 (B, 3, H, W) (usually a channels_last view of an
HWC buffer) until an augmentation converts them to float; boxes are xyxy in continuous pixel
coordinates of the image as stored in the batch (pixel i spans [i, i + 1)); padding slots have
mask False, zero boxes and class -1.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch


@dataclasses.dataclass
class Batch:
    """A detection batch: images, padded boxes/classes, their mask, and optional extras.

    Attributes:
        images: (B, 3, H, W) (or (B, H, W, 3) when the loader is asked for HWC) tensor.
        boxes: (B, M, 4) float32 xyxy pixel boxes; padding slots are zero.
        classes: (B, M) integer class ids; padding slots are -1.
        mask: (B, M) bool, True for real boxes.
        sizes: (B, 2) int32 (height, width) of each image's valid region, or None.
        indices: (B,) int64 dataset indices of the samples, or None.
        extras: other per-sample or per-box tensors (e.g. ``"iscrowd"``), or augmentation params.
    """

    images: torch.Tensor
    boxes: torch.Tensor
    classes: torch.Tensor
    mask: torch.Tensor
    sizes: torch.Tensor | None = None
    indices: torch.Tensor | None = None
    extras: dict[str, Any] = dataclasses.field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.images.shape[0])

    def replace(self, **changes: Any) -> Batch:
        """Return a copy with some fields replaced (tensors are shared, not copied)."""
        return dataclasses.replace(self, **changes)

    def to(self, device: torch.device | str, non_blocking: bool = False) -> Batch:
        """Move every tensor to ``device`` (non-blocking when the source is pinned)."""

        def move(value: Any) -> Any:
            if isinstance(value, torch.Tensor):
                return value.to(device, non_blocking=non_blocking)
            return value

        return Batch(
            images=move(self.images),
            boxes=move(self.boxes),
            classes=move(self.classes),
            mask=move(self.mask),
            sizes=move(self.sizes),
            indices=move(self.indices),
            extras={key: move(value) for key, value in self.extras.items()},
        )
