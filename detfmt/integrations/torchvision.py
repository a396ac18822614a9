"""torchvision detection models: `to_torchvision` turns a `Batch` into ``(images, targets)``.

torchvision's detection models (Faster/Mask R-CNN, RetinaNet, FCOS, SSD) take a list of float
images ``(3, h, w)`` in [0, 1] of any sizes and one target dict per image with ``boxes``
(``(N, 4)`` float xyxy pixels) and ``labels`` (``(N,)`` int64). A padded `Batch` holds each
image at the top-left of a shared canvas, its real extent in ``batch.sizes``: the images are
cropped to that extent, so the model never trains on the padding. torchvision is not imported.

Crowd and zero-area boxes are dropped by default, as torchvision's reference COCO preparation
(``references/detection/coco_utils.py``, ``ConvertCocoPolysToMask``) drops them; its detection
models raise on boxes without positive width and height in training. Each target counts what
was removed (``removed_crowd``, ``removed_degenerate``).
"""

from __future__ import annotations

import torch

from detfmt.errors import UsageError
from detfmt.integrations._objects import crowd_flags, image_objects
from detfmt.torch.batch import Batch


def to_torchvision(
    batch: Batch,
    *,
    label_offset: int = 1,
    crop: bool = True,
    dtype: torch.dtype = torch.float32,
    drop_crowd: bool = True,
    drop_degenerate: bool = True,
) -> tuple[list[torch.Tensor], list[dict[str, torch.Tensor]]]:
    """``(images, targets)`` for a torchvision detection model.

    Args:
        batch: a `Batch` with (B, 3, H, W) images (uint8, or float in [0, 1]).
        label_offset: added to the class ids. torchvision's R-CNN models reserve label 0 for
            the background (``num_classes`` counts it), so class c becomes c + 1 by default;
            pass 0 for RetinaNet and FCOS, which have no background class.
        crop: crop each image to its extent ``batch.sizes`` (a view, then the dtype copy);
            False keeps the whole canvas and puts the extent in ``target["extent"]``.
        dtype: float dtype of the images (uint8 is divided by 255).
        drop_crowd: leave out boxes whose per-box ``iscrowd`` (``batch.box_fields``) is set, as
            torchvision's reference training does (crowd regions are not objects to detect;
            the COCO evaluator ignores detections in them). False keeps them, flagged in
            ``iscrowd``.
        drop_degenerate: leave out boxes without positive width and height (SPEC allows
            zero-area boxes; torchvision's detection models stop with an AssertionError on
            them in training, and the reference preparation drops them). False keeps them.

    Returns:
        images: B tensors (3, h, w); targets: B dicts with ``boxes`` (N, 4) float32 xyxy pixels
        (the batch's valid boxes less the dropped ones, in slot order), ``labels`` (N,) int64,
        ``image_id`` (the dataset index when ``batch.indices`` is set, else the position),
        ``area`` (N,) box areas and ``iscrowd`` (N,) int64 as the reference targets have them,
        ``removed_crowd`` and ``removed_degenerate`` (0-dim int64: how many valid boxes were
        left out, to log or assert on) and, with ``crop=False``, ``extent`` (h, w).
    """
    if not dtype.is_floating_point:
        raise UsageError(f"dtype must be a float dtype, got {dtype}")
    images = batch.images
    if images.dim() != 4 or images.shape[1] != 3:
        raise UsageError(f"to_torchvision needs (B, 3, H, W) images, got {tuple(images.shape)}")
    height, width = int(images.shape[-2]), int(images.shape[-1])
    if batch.sizes is not None:
        extents = [(int(h), int(w)) for h, w in batch.sizes.tolist()]
    else:
        extents = [(height, width)] * len(batch)
    crowd = crowd_flags(batch)
    scale = 255.0 if images.dtype == torch.uint8 else 1.0
    out_images: list[torch.Tensor] = []
    targets: list[dict[str, torch.Tensor]] = []
    for i, (h, w) in enumerate(extents):
        if not (0 < h <= height and 0 < w <= width):
            raise UsageError(f"batch.sizes[{i}] = {(h, w)} is outside the canvas {(height, width)}")
        image = images[i, :, :h, :w] if crop else images[i]
        out_images.append(image.to(dtype) / scale)
        objects = image_objects(
            batch, i, crowd, drop_crowd=drop_crowd, drop_degenerate=drop_degenerate
        )
        boxes = objects.boxes
        target = {
            "boxes": boxes,
            "labels": objects.classes + int(label_offset),
            "image_id": torch.tensor(
                int(batch.indices[i]) if batch.indices is not None else i, dtype=torch.int64
            ),
            "area": (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1]),
            "iscrowd": objects.iscrowd,
            "removed_crowd": objects.removed_crowd,
            "removed_degenerate": objects.removed_degenerate,
        }
        if not crop:
            target["extent"] = torch.tensor([h, w], dtype=torch.int64)
        elif boxes.numel() and (
            bool((boxes[:, 2] > w + 1e-3).any()) or bool((boxes[:, 3] > h + 1e-3).any())
        ):
            raise UsageError(
                f"sample {i}: a box reaches beyond its extent {(h, w)}; batch.sizes does not "
                "cover the boxes (set sizes from the loader or the augmentation)"
            )
        targets.append(target)
    return out_images, targets
