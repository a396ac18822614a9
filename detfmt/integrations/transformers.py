"""Hugging Face ``transformers`` detection models (DETR, Deformable DETR, RT-DETR, ...).

The targets follow what transformers' own image processors produce (``DetrImageProcessor``,
``RTDetrImageProcessor``, read in transformers 5.x): ``pixel_values`` (B, 3, H, W) float, a
``pixel_mask`` (B, H, W) int64 that is 1 on real pixels (the canvas is the largest extent in
the batch, as the processors pad to the largest image), and per image a ``labels`` dict with
``class_labels`` (n,) int64, ``boxes`` (n, 4) float32 centre-x, centre-y, width, height
normalised by the padded canvas (the processors rescale them to the padded size when they pad),
``size`` (the canvas, [H, W]), ``orig_size`` (the image before any resize, [h, w]), ``image_id``,
``area`` and ``iscrowd``. transformers itself is not imported.

Like transformers' COCO preparation (``prepare_coco_detection_annotation``, shared by the DETR
family's processors), crowd annotations (``iscrowd`` = 1) and boxes without positive width and
height are left out of the targets by default (``iscrowd`` is then all 0, as theirs); each
``labels`` dict counts what was removed (``removed_crowd``, ``removed_degenerate``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from detfmt.errors import UsageError
from detfmt.integrations._objects import crowd_flags, image_objects
from detfmt.reading.opener import open_dataset
from detfmt.torch.batch import Batch

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def to_hf_detection(
    batch: Batch,
    *,
    normalize: bool = True,
    image_mean: Sequence[float] = IMAGENET_MEAN,
    image_std: Sequence[float] = IMAGENET_STD,
    orig_sizes: torch.Tensor | None = None,
    drop_crowd: bool = True,
    drop_degenerate: bool = True,
) -> dict[str, Any]:
    """Model inputs and ``labels`` for a transformers detection model from a `Batch`.

    Args:
        batch: (B, 3, H, W) images (uint8, or float in [0, 1]); ``sizes`` is the real extent of
            each image (the pixel mask), the whole canvas when None.
        normalize: subtract ``image_mean`` and divide by ``image_std`` after scaling to [0, 1]
            (DETR, Deformable DETR, Conditional DETR); RT-DETR's processor does not (False).
        orig_sizes: (B, 2) size of each image before resizing (e.g. ``ds.sizes[indices]``);
            default the extent.
        drop_crowd: leave out boxes whose per-box ``iscrowd`` (``batch.box_fields``) is set,
            as transformers' processors do; False keeps them, flagged in ``iscrowd``.
        drop_degenerate: leave out boxes without positive width and height, as the processors
            do after clipping; False keeps them.

    Returns:
        ``{"pixel_values", "pixel_mask", "labels"}`` as transformers' processors return them;
        pass it as ``model(**inputs)``.
    """
    images = batch.images
    if images.dim() != 4 or images.shape[1] != 3:
        raise UsageError(f"to_hf_detection needs (B, 3, H, W) images, got {tuple(images.shape)}")
    bsz, height, width = len(batch), int(images.shape[-2]), int(images.shape[-1])
    device = images.device
    if batch.sizes is not None:
        extent = batch.sizes.to(device=device, dtype=torch.int64)
        limit = torch.tensor([height, width], device=device)
        if bool((extent < 1).any()) or bool((extent > limit).any()):
            raise UsageError(f"batch.sizes is outside the canvas {(height, width)}")
        # The processors pad to the largest image of the batch: no wider canvas than that.
        height, width = int(extent[:, 0].max()), int(extent[:, 1].max())
        images = images[:, :, :height, :width]
    else:
        extent = torch.tensor([height, width], device=device).expand(bsz, 2)
    pixels = images.to(torch.float32)
    if images.dtype == torch.uint8:
        pixels = pixels / 255.0
    if normalize:
        mean = torch.tensor(image_mean, dtype=torch.float32, device=device)[None, :, None, None]
        std = torch.tensor(image_std, dtype=torch.float32, device=device)[None, :, None, None]
        pixels = (pixels - mean) / std
    rows = torch.arange(height, device=device)[None, :, None] < extent[:, 0, None, None]
    cols = torch.arange(width, device=device)[None, None, :] < extent[:, 1, None, None]
    pixel_mask = (rows & cols).to(torch.int64)
    pixels = pixels * pixel_mask[:, None]  # the processors pad after normalising, with 0
    if orig_sizes is None:
        orig_sizes = extent
    orig_sizes = torch.as_tensor(orig_sizes, dtype=torch.int64)
    if tuple(orig_sizes.shape) != (bsz, 2):
        raise UsageError(f"orig_sizes must be ({bsz}, 2), got {tuple(orig_sizes.shape)}")
    scale = torch.tensor([width, height, width, height], dtype=torch.float32, device=device)
    crowd = crowd_flags(batch)
    labels = []
    for i in range(bsz):
        objects = image_objects(
            batch, i, crowd, drop_crowd=drop_crowd, drop_degenerate=drop_degenerate
        )
        xyxy = objects.boxes.to(device)
        wh = xyxy[:, 2:] - xyxy[:, :2]
        cxcywh = torch.cat([xyxy[:, :2] + wh / 2, wh], dim=1) / scale
        labels.append(
            {
                "class_labels": objects.classes.to(device),
                "boxes": cxcywh,
                "size": torch.tensor([height, width], dtype=torch.int64, device=device),
                "orig_size": orig_sizes[i].to(device),
                "image_id": torch.tensor(
                    [int(batch.indices[i]) if batch.indices is not None else i], device=device
                ),
                "area": wh[:, 0] * wh[:, 1],
                "iscrowd": objects.iscrowd.to(device),
                "removed_crowd": objects.removed_crowd.to(device),
                "removed_degenerate": objects.removed_degenerate.to(device),
            }
        )
    return {"pixel_values": pixels, "pixel_mask": pixel_mask, "labels": labels}


def original_sizes(ds: Any, indices: Any) -> torch.Tensor:
    """(B, 2) int64 (height, width) of samples ``indices`` before any resize: the dataset's
    ``orig_size`` field where it has one (the source image a converter shrank with
    ``max_side``), else the stored size (nothing resized it)."""
    rows = np.asarray(indices, dtype=np.int64).reshape(-1)
    if "orig_size" in ds.schema.image_fields:
        sizes = np.asarray(ds.image_field("orig_size"))[rows]
    else:
        sizes = np.asarray(ds.sizes)[rows]
    return torch.as_tensor(np.asarray(sizes, dtype=np.int64).reshape(-1, 2))


class HFDetectionCollator:
    """``collate_fn`` / ``data_collator`` for `detfmt.torch.DetectionDataset` items.

    Pads the samples into a `Batch` (``detfmt.torch.collate``), runs ``transform`` (a
    ``detfmt.augment`` pipeline, e.g. `detfmt.augment.ShortestEdgeResize` for DETR recipes)
    if given, and returns `to_hf_detection`'s dict, so a ``torch.utils.data.DataLoader`` or
    ``transformers.Trainer`` feeds the model directly (docs/integrations.md has both recipes).
    ``orig_size`` is each image's size before any resize: with ``dataset`` (a detfmt dataset,
    its path, or the `DetectionDataset`), the dataset's ``orig_size`` field (`original_sizes`),
    so predictions scale back to the source images even where the converter shrank them;
    without it, the stored size. ``drop_crowd`` and ``drop_degenerate`` are
    `to_hf_detection`'s (the items carry the dataset's per-box fields, ``iscrowd`` among them).
    """

    def __init__(
        self,
        transform: Any = None,
        *,
        normalize: bool = True,
        image_mean: Sequence[float] = IMAGENET_MEAN,
        image_std: Sequence[float] = IMAGENET_STD,
        dataset: Any = None,
        drop_crowd: bool = True,
        drop_degenerate: bool = True,
    ) -> None:
        self.transform = transform
        self.drop_crowd = drop_crowd
        self.drop_degenerate = drop_degenerate
        self.normalize = normalize
        self.image_mean = tuple(image_mean)
        self.image_std = tuple(image_std)
        if isinstance(dataset, (str, os.PathLike)):
            dataset = open_dataset(dataset)
        self.dataset = getattr(dataset, "ds", dataset)  # a DetectionDataset: its dataset

    def __call__(self, samples: Sequence[dict[str, torch.Tensor]]) -> dict[str, Any]:
        from detfmt.torch.dataset import collate

        batch = collate(samples)
        return self.from_batch(batch)

    def from_batch(self, batch: Batch) -> dict[str, Any]:
        """The same conversion for a `Batch` from a `detfmt.torch.Loader` (its ``convert=``;
        pass the loader's own ``transform`` there, not here)."""
        orig_sizes = None
        if self.dataset is not None and batch.indices is not None:
            orig_sizes = original_sizes(self.dataset, batch.indices.cpu().numpy())
        elif batch.sizes is not None:  # the stored size, before the transform resizes it
            orig_sizes = batch.sizes.to(torch.int64).cpu()
        if self.transform is not None:
            batch = self.transform(batch)
        return to_hf_detection(
            batch,
            normalize=self.normalize,
            image_mean=self.image_mean,
            image_std=self.image_std,
            orig_sizes=orig_sizes,
            drop_crowd=self.drop_crowd,
            drop_degenerate=self.drop_degenerate,
        )
