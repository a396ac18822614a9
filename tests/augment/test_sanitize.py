"""Box rules: Albumentations visibility/area, torchvision min_size/min_area, SanitizeBoxes."""

from __future__ import annotations

import torch

import detfmt.augment as A
from detfmt.torch import Batch


def _change(before, after, size=(100, 100), area_scale=1.0):
    before = torch.tensor([before], dtype=torch.float32)
    after = torch.tensor([after], dtype=torch.float32)
    h, w = size
    clipped = torch.stack(
        [
            after[..., 0].clamp(0, w),
            after[..., 1].clamp(0, h),
            after[..., 2].clamp(0, w),
            after[..., 3].clamp(0, h),
        ],
        dim=-1,
    )
    return A.BoxChange(before, after, clipped, torch.tensor([area_scale]), size)


def test_albumentations_visibility_is_relative_to_the_transformed_box():
    # 40 x 10 boxes, 75%, 50% and 25% of them inside the 100 x 100 image.
    after = [[-10, 0, 30, 10], [-20, 20, 20, 30], [-30, 40, 10, 50]]
    change = _change([[0, 0, 1, 1]] * 3, after)  # "before" plays no part (albumentations#1230)
    keep = A.AlbumentationsFilter(min_visibility=0.5)(change)
    assert keep[0].tolist() == [True, True, False]
    keep = A.AlbumentationsFilter(min_area=150.0)(change)  # clipped areas 300, 200, 100
    assert keep[0].tolist() == [True, True, False]
    keep = A.AlbumentationsFilter(min_width=25.0, max_accept_ratio=2.5)(change)
    assert keep[0].tolist() == [False, False, False]  # widths 30/20/10 -> ratio 3 fails first


def test_torchvision_min_size_and_area():
    after = [[0, 0, 0.5, 10], [0, 0, 1, 1], [0, 0, 1, 0.9], [10, 10, 20, 20]]
    keep = A.TorchvisionSanitize()(_change([[0, 0, 1, 1]] * 4, after))
    assert keep[0].tolist() == [False, True, False, True]
    keep = A.TorchvisionSanitize(min_size=1.0, min_area=50.0)(_change([[0, 0, 1, 1]] * 4, after))
    assert keep[0].tolist() == [False, False, False, True]


def test_sanitize_boxes_clips_and_resets_dropped_slots():
    boxes = torch.tensor([[[-5.0, 2.0, 10.0, 8.0], [3.0, 3.0, 3.5, 9.0], [0, 0, 0, 0]]])
    batch = Batch(
        images=torch.zeros(1, 3, 10, 12, dtype=torch.uint8),
        boxes=boxes,
        classes=torch.tensor([[4, 5, -1]]),
        mask=torch.tensor([[True, True, False]]),
    )
    out = A.SanitizeBoxes()(batch)
    assert out.mask.tolist() == [[True, False, False]]
    assert out.boxes[0, 0].tolist() == [0.0, 2.0, 10.0, 8.0]
    assert out.boxes[0, 1].tolist() == [0.0, 0.0, 0.0, 0.0] and out.classes.tolist() == [
        [4, -1, -1]
    ]
    rule = A.AllOf((A.TorchvisionSanitize(), A.AlbumentationsFilter(min_width=20.0)))
    assert not A.SanitizeBoxes(rule)(batch).mask.any()
