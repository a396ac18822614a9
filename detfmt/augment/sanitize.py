"""Which boxes survive a transform: pluggable rules, and the `SanitizeBoxes` module.

A rule sees a `BoxChange` (the boxes before, after (unclipped) and after clipping) and returns
a (B, M) keep mask. Every caller ANDs it with the current mask, so a slot never turns from
False to True, and dropped slots are reset to padding (boxes 0, class -1).
"""

from __future__ import annotations

import dataclasses
from typing import Protocol

import torch

from detfmt.augment._base import Augmentation, Params, image_hw
from detfmt.augment._matrix import clip_boxes
from detfmt.augment._slots import where_kept
from detfmt.errors import UsageError
from detfmt.torch.batch import Batch


@dataclasses.dataclass(frozen=True)
class BoxChange:
    """Boxes around one transform.

    Attributes:
        before: (B, M, 4) boxes before the transform (source pixels).
        after: (B, M, 4) transformed boxes, not clipped.
        clipped: (B, M, 4) ``after`` clipped to the output image.
        area_scale: (B,) the area factor the transform applies on purpose (s**2 for a zoom s);
            Ultralytics compares areas against ``before`` scaled by it.
        image_size: (height, width) of the output.
    """

    before: torch.Tensor
    after: torch.Tensor
    clipped: torch.Tensor
    area_scale: torch.Tensor
    image_size: tuple[int, int]


class BoxRule(Protocol):
    """A keep rule: (B, M) bool from a `BoxChange`."""

    def __call__(self, change: BoxChange) -> torch.Tensor: ...


def _wh(boxes: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return boxes[..., 2] - boxes[..., 0], boxes[..., 3] - boxes[..., 1]


@dataclasses.dataclass(frozen=True)
class UltralyticsCandidates:
    """Ultralytics ``box_candidates``: w, h > wh_thr px, aspect < ar_thr, area ratio > area_thr.

    The area ratio is clipped area over the original area times ``area_scale`` (their
    ``instances.scale(s)``); 0.10 is their value without segments.
    """

    wh_thr: float = 2.0
    ar_thr: float = 100.0
    area_thr: float = 0.1
    eps: float = 1e-16

    def __call__(self, change: BoxChange) -> torch.Tensor:
        w1, h1 = _wh(change.before)
        w2, h2 = _wh(change.clipped)
        area1 = w1 * h1 * change.area_scale[:, None]
        ar = torch.maximum(w2 / (h2 + self.eps), h2 / (w2 + self.eps))
        return (
            (w2 > self.wh_thr)
            & (h2 > self.wh_thr)
            & (w2 * h2 / (area1 + self.eps) > self.area_thr)
            & (ar < self.ar_thr)
        )


@dataclasses.dataclass(frozen=True)
class AlbumentationsFilter:
    """Albumentations ``filter_bboxes``: visibility is clipped area / unclipped transformed area."""

    min_area: float = 0.0
    min_visibility: float = 0.0
    min_width: float = 0.0
    min_height: float = 0.0
    max_accept_ratio: float | None = None

    def __call__(self, change: BoxChange) -> torch.Tensor:
        w, h = _wh(change.after)
        wc, hc = _wh(change.clipped)
        area = w * h
        clipped_area = wc * hc
        keep = (
            (area >= 1e-7)
            & (clipped_area >= self.min_area)
            & (clipped_area >= self.min_visibility * area)
            & (wc >= self.min_width)
            & (hc >= self.min_height)
        )
        if self.max_accept_ratio is not None:
            ratio = torch.maximum(wc / hc.clamp_min(1e-12), hc / wc.clamp_min(1e-12))
            keep &= ratio <= self.max_accept_ratio
        return keep


@dataclasses.dataclass(frozen=True)
class TorchvisionSanitize:
    """torchvision ``SanitizeBoundingBoxes``: w, h >= min_size and w * h >= min_area."""

    min_size: float = 1.0
    min_area: float = 1.0

    def __call__(self, change: BoxChange) -> torch.Tensor:
        w, h = _wh(change.clipped)
        return (w >= self.min_size) & (h >= self.min_size) & (w * h >= self.min_area)


@dataclasses.dataclass(frozen=True)
class CenterInImage:
    """Keep boxes whose unclipped centre lies strictly inside the output (SSD crop rule)."""

    def __call__(self, change: BoxChange) -> torch.Tensor:
        height, width = change.image_size
        cx = 0.5 * (change.after[..., 0] + change.after[..., 2])
        cy = 0.5 * (change.after[..., 1] + change.after[..., 3])
        return (cx > 0) & (cx < width) & (cy > 0) & (cy < height)


@dataclasses.dataclass(frozen=True)
class AllOf:
    """Keep boxes that pass every rule."""

    rules: tuple[BoxRule, ...]

    def __call__(self, change: BoxChange) -> torch.Tensor:
        keep = torch.ones(change.after.shape[:2], dtype=torch.bool, device=change.after.device)
        for rule in self.rules:
            keep = keep & rule(change)
        return keep


def drop_boxes(batch: Batch, keep: torch.Tensor, boxes: torch.Tensor) -> Batch:
    """Write ``boxes`` where ``keep & mask``, padding elsewhere (boxes 0, class -1, per-box
    extras 0); slots keep their places, so per-box extras stay with their boxes."""
    keep = keep & batch.mask
    return batch.replace(
        boxes=torch.where(keep[..., None], boxes, torch.zeros_like(boxes)).to(batch.boxes.dtype),
        classes=torch.where(keep, batch.classes, torch.full_like(batch.classes, -1)),
        mask=keep,
        extras={**batch.extras, **where_kept(batch.per_box(), keep)},
    )


def keeps_moved_box(
    after: torch.Tensor, clipped: torch.Tensor, image_size: tuple[int, int]
) -> torch.Tensor:
    """The one rule for boxes a module moves (every module that moves boxes applies it): (B, M)
    True where the box still describes something in the output image.

    - A box with positive width and height after the move is kept while its part inside the
      image (``clipped``) has positive width and height: one cut down to a line or a point has
      left the image.
    - A zero-area box (zero width or height after the move; SPEC allows them) is kept while it
      touches the image (its clipped form is then itself, or the part of a line inside): the
      module did not make it degenerate, the annotation is.

    Modules may drop more with their own box filters (e.g. Ultralytics' ``box_candidates``
    drops boxes 2 px wide or less), never fewer.
    """
    height, width = image_size
    w, h = _wh(after)
    wc, hc = _wh(clipped)
    visible = (wc > 0) & (hc > 0)
    degenerate = ((w == 0) & (h >= 0)) | ((h == 0) & (w >= 0))
    touches = (
        (after[..., 0] <= width)
        & (after[..., 2] >= 0)
        & (after[..., 1] <= height)
        & (after[..., 3] >= 0)
    )
    return visible | (degenerate & touches)


class SanitizeBoxes(Augmentation):
    """Clip boxes to the image and drop those failing ``rule`` (default: torchvision's).

    Used alone, "before" and "after" are the current boxes, so rules comparing them (area ratio,
    visibility) only see the clipping; geometric modules pass the real before/after instead.
    """

    def __init__(self, rule: BoxRule | None = None) -> None:
        super().__init__()
        if rule is not None and not callable(rule):
            raise UsageError(f"rule must be callable, got {type(rule)!r}")
        self.rule = rule if rule is not None else TorchvisionSanitize()

    def apply(self, batch: Batch, params: Params) -> Batch:
        height, width = image_hw(batch.images)
        boxes = batch.boxes.to(torch.float32)
        clipped = clip_boxes(boxes, height, width)
        change = BoxChange(
            before=boxes,
            after=boxes,
            clipped=clipped,
            area_scale=torch.ones(boxes.shape[0], device=boxes.device),
            image_size=(height, width),
        )
        keep = keeps_moved_box(boxes, clipped, (height, width)) & self.rule(change)
        return drop_boxes(batch, keep, clipped)
