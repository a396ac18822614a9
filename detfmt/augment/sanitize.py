"""Which boxes survive a transform: pluggable rules, and the `SanitizeBoxes` module.

A rule sees a `BoxChange` (the boxes before, after (unclipped) and after clipping) and returns
a (B, M) keep mask. Every caller ANDs it with the current mask, so a slot never turns from
False to True, and dropped slots are reset to padding (boxes 0, class -1).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol

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

    # Widths and heights, (B, M, 2), computed once for all the rules that read them (a memo in
    # the instance, not functools.cached_property: its lock does not trace under torch.compile).
    @property
    def before_wh(self) -> torch.Tensor:
        return self._memo_wh("_before_wh", self.before)

    @property
    def after_wh(self) -> torch.Tensor:
        return self._memo_wh("_after_wh", self.after)

    @property
    def clipped_wh(self) -> torch.Tensor:
        return self._memo_wh("_clipped_wh", self.clipped)

    def _memo_wh(self, key: str, boxes: torch.Tensor) -> torch.Tensor:
        value = self.__dict__.get(key)
        if value is None:
            value = _extent_wh(boxes)
            object.__setattr__(self, key, value)  # frozen: the fields stay as they are
        return value


class BoxRule(Protocol):
    """A keep rule: (B, M) bool from a `BoxChange`."""

    def __call__(self, change: BoxChange) -> torch.Tensor: ...


def _wh(boxes: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return boxes[..., 2] - boxes[..., 0], boxes[..., 3] - boxes[..., 1]


def _extent_wh(boxes: torch.Tensor) -> torch.Tensor:
    """(..., 2) widths and heights of xyxy boxes: `_wh`'s numbers in one subtraction."""
    return boxes[..., 2:] - boxes[..., :2]


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
        # On (w, h) pairs: w2 > thr and h2 > thr, and max(w2 / (h2 + eps), h2 / (w2 + eps)) <
        # ar_thr as both ratios below it (a NaN fails either way). A product of two numbers is
        # the same in either order, so prod(-1) is w * h.
        wh1, wh2 = change.before_wh, change.clipped_wh
        area1 = wh1.prod(-1) * change.area_scale[:, None]
        ratios = wh2 / (wh2.flip(-1) + self.eps)
        sides = ((wh2 > self.wh_thr) & (ratios < self.ar_thr)).all(-1)
        return sides & (wh2.prod(-1) / (area1 + self.eps) > self.area_thr)


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
    return batch.replace(**kept_box_fields(batch, keep, boxes))


def kept_box_fields(batch: Batch, keep: torch.Tensor, boxes: torch.Tensor) -> dict[str, Any]:
    """`drop_boxes`' new fields, for a caller that replaces more fields in the same copy."""
    keep = keep & batch.mask
    return {
        "boxes": torch.where(keep[..., None], boxes, torch.zeros_like(boxes)).to(
            batch.boxes.dtype
        ),
        "classes": torch.where(keep, batch.classes, torch.full_like(batch.classes, -1)),
        "mask": keep,
        "extras": {**batch.extras, **where_kept(batch.per_box(), keep)},
    }


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
    return _keeps_moved(after, _extent_wh(after), _extent_wh(clipped), image_size)


def keeps_moved(change: BoxChange) -> torch.Tensor:
    """`keeps_moved_box` of ``change`` (sharing its widths and heights with the box rules)."""
    return _keeps_moved(change.after, change.after_wh, change.clipped_wh, change.image_size)


def _keeps_moved(
    after: torch.Tensor,
    after_wh: torch.Tensor,
    clipped_wh: torch.Tensor,
    image_size: tuple[int, int],
) -> torch.Tensor:
    """`keeps_moved_box` on (w, h) pairs, in fewer ops: both sides positive is the smaller one
    positive; a zero-area box (w == 0 and h >= 0, or h == 0 and w >= 0) is one whose smaller
    side is 0; a NaN fails every test either way (amin/amax propagate it)."""
    height, width = image_size
    visible = clipped_wh.amin(-1) > 0
    degenerate = after_wh.amin(-1) == 0
    near = after[..., :2]
    if height == width:
        near_inside = near.amax(-1) <= width
    else:
        near_inside = (near[..., 0] <= width) & (near[..., 1] <= height)
    touches = near_inside & (after[..., 2:].amin(-1) >= 0)
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
