"""Per-box extras (`Batch.box_fields`) moved with their box slots.

Every module that reorders, widens or drops box slots does the same to the per-box extras, so
slot i of ``iscrowd`` or ``ann_id`` keeps describing box i. Padding slots hold 0, as the loader
pads them.
"""

from __future__ import annotations

import torch

PerBox = dict[str, torch.Tensor]


def _like(index: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
    """``index`` (B, K) viewed with ``value``'s trailing dims (B, K, 1, ...)."""
    return index.view(*index.shape, *[1] * (value.ndim - index.ndim))


def where_kept(per_box: PerBox, keep: torch.Tensor) -> PerBox:
    """Each value where ``keep`` (B, M), 0 elsewhere (a dropped box leaves a padding slot)."""
    out = {}
    for name, value in per_box.items():
        kept = _like(keep.to(value.device), value)
        out[name] = torch.where(kept, value, value.new_zeros(()))
    return out


def gather_slots(per_box: PerBox, order: torch.Tensor) -> PerBox:
    """Slots ``order`` (B, K) of each value: (B, K, ...)."""
    out = {}
    for name, value in per_box.items():
        index = _like(order.to(value.device), value).expand(*order.shape, *value.shape[2:])
        out[name] = torch.gather(value, 1, index)
    return out


def pad_slots(value: torch.Tensor, slots: int) -> torch.Tensor:
    """``value`` (B, M, ...) widened to ``slots`` slots with zeros."""
    missing = slots - value.shape[1]
    if missing <= 0:
        return value
    return torch.cat([value, value.new_zeros((value.shape[0], missing, *value.shape[2:]))], dim=1)
