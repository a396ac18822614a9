"""The batch type shared by the loader and the augmentation modules.

A `Batch` is a plain container of tensors, so every module takes and returns the same thing and
users can build one by hand. Images are uint8 (B, 3, H, W) (usually a channels_last view of an
HWC buffer) until an augmentation converts them to float; boxes are xyxy in continuous pixel
coordinates of the image as stored in the batch (pixel i spans [i, i + 1)); padding slots have
mask False, zero boxes and class -1.

Per-box extras (the dataset's per-box fields, e.g. ``iscrowd`` and ``ann_id``) are declared by
name in ``box_fields``: each is a (B, M, ...) tensor in ``extras`` whose slot i describes box i,
so every module that reorders, widens or drops box slots moves them with the boxes. The
declaration, not the shape, says what is per-box: a per-image (B, 2) extra in a batch with 2
box slots is not mistaken for one.

Stored samples: the `Loader` may hand a transform that reads pixels only through per-sample
arrays (one that declares ``accepts_stored_samples``, see `detfmt.augment.Augmentation`:
`Mosaic`, a `Compose` that starts with one, or a module of yours) the samples as
they are stored (``samples``: read-only views of a memory-mapped dataset, or decoded arrays)
instead of copying them into a padded batch first; ``images`` is then a placeholder of the
batch's shape that holds only the pad value. Replacing ``images`` drops ``samples`` (they
describe the images they came with), and `materialized` (which `to` calls) writes them into
real images, so a consumer that reads pixels from ``images`` is never handed the placeholder
by a path that knows about ``samples``.
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any

import numpy as np
import torch

from detfmt.errors import UsageError


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
        box_fields: names of the ``extras`` that are per-box: (B, M, ...) tensors aligned with
            the box slots (padding slots 0). The loader declares the dataset's per-box fields.
            Checked on construction: a per-box extra whose slots disagree with ``mask`` (a
            module that widened the boxes and not it) is a `UsageError`, never a silent
            misalignment.
        samples: per-sample (h, w, C) uint8 HWC arrays of the valid regions, where ``images``
            is a placeholder holding only the pad value (see the module docstring); else None.
    """

    images: torch.Tensor
    boxes: torch.Tensor
    classes: torch.Tensor
    mask: torch.Tensor
    sizes: torch.Tensor | None = None
    indices: torch.Tensor | None = None
    extras: dict[str, Any] = dataclasses.field(default_factory=dict)
    box_fields: tuple[str, ...] = ()
    samples: tuple[np.ndarray, ...] | None = None

    def __post_init__(self) -> None:
        self.box_fields = tuple(self.box_fields)
        if self.samples is not None:
            self.samples = tuple(self.samples)
            if len(self.samples) != len(self.images):
                raise UsageError(f"samples holds {len(self.samples)} arrays for a batch of "
                                 f"{len(self.images)} images: one per sample")
        if not self.box_fields:
            return
        slots = tuple(self.mask.shape)
        for name in self.box_fields:
            value = self.extras.get(name)
            if not isinstance(value, torch.Tensor) or tuple(value.shape[:2]) != slots:
                shape = tuple(value.shape) if isinstance(value, torch.Tensor) else type(value)
                raise UsageError(
                    f"per-box field {name!r} (Batch.box_fields) must be an extras tensor of "
                    f"shape (B, M, ...) = {slots}..., got {shape}: a module that reorders, "
                    "widens or drops box slots must move Batch.per_box() with them "
                    "(docs/augment.md, Per-box extras)"
                )

    def per_box(self) -> dict[str, torch.Tensor]:
        """The per-box extras (``box_fields``), by name."""
        return {name: self.extras[name] for name in self.box_fields}

    def __len__(self) -> int:
        return int(self.images.shape[0])

    def replace(self, **changes: Any) -> Batch:
        """Return a copy with some fields replaced (tensors are shared, not copied). New
        ``images`` drop ``samples`` unless they are given too."""
        if "images" in changes and "samples" not in changes:
            changes["samples"] = None
        return dataclasses.replace(self, **changes)

    def materialized(self) -> Batch:
        """The batch with ``samples`` written into real channels_last images (the pad value
        around each sample's valid region); itself when it has none."""
        if self.samples is None:
            return self
        images = self.images.contiguous(memory_format=torch.channels_last)
        hwc = images.permute(0, 2, 3, 1).numpy()
        for slot, sample in zip(hwc, self.samples, strict=True):
            height, width = sample.shape[:2]
            slot[:height, :width] = sample
        return self.replace(images=images)

    def to(self, device: torch.device | str, non_blocking: bool = False) -> Batch:
        """Move every tensor to ``device`` (non-blocking when the source is pinned); sample
        views are written into the images first (`materialized`)."""
        batch = self.materialized()

        def move(value: Any) -> Any:
            if isinstance(value, torch.Tensor):
                return value.to(device, non_blocking=non_blocking)
            return value

        return Batch(
            images=move(batch.images),
            boxes=move(batch.boxes),
            classes=move(batch.classes),
            mask=move(batch.mask),
            sizes=move(batch.sizes),
            indices=move(batch.indices),
            extras={key: move(value) for key, value in batch.extras.items()},
            box_fields=batch.box_fields,
        )


def accepts_stored_samples(transform: object, *, warn: bool = False) -> bool:
    """Whether ``transform`` (an augmentation module or any callable) declares
    ``accepts_stored_samples`` (`detfmt.augment.Augmentation`). The attribute's former name,
    ``takes_sample_views``, still counts for one release (``warn``: with a
    DeprecationWarning)."""
    declared = getattr(transform, "accepts_stored_samples", None)
    if declared is None and getattr(transform, "takes_sample_views", None) is True:
        if warn:
            warnings.warn("takes_sample_views is deprecated: declare accepts_stored_samples "
                          "(see detfmt.augment.Augmentation)", DeprecationWarning, stacklevel=4)
        return True
    return declared is True
