"""One rule for zero-area boxes (SPEC allows them), the same in every module (docs/augment.md):
a zero-area box is kept while it touches the image, a box that clipping cut to a line or a point
has left the image and is dropped; box filters may drop more, the same for both."""

from __future__ import annotations

import pytest
import torch

import detfmt.augment as A
from detfmt.augment._base import Augmentation
from detfmt.torch import Batch

from .test_real_loaders import loader_like


def with_thin_boxes(batch: Batch, width: float) -> Batch:
    """Each valid box made ``width`` wide (0: a vertical line) at its left edge; every third a
    point (0 x 0) or a ``width`` x ``width`` box there."""
    boxes = batch.boxes.clone()
    boxes[..., 2] = boxes[..., 0] + width
    point = torch.zeros_like(batch.mask)
    point[:, ::3] = True
    boxes[..., 3] = torch.where(point, boxes[..., 1] + width, boxes[..., 3])
    return batch.replace(boxes=torch.where(batch.mask[..., None], boxes, 0.0))


def modules() -> dict[str, object]:
    g = torch.Generator().manual_seed(5)
    return {
        "letterbox": A.Letterbox((40, 56)),
        "affine": A.RandomAffine(degrees=10, translate=0.3, box_filter=None, generator=g),
        "perspective": A.RandomAffine(perspective=1e-3, box_filter=None, generator=g),
        "affine-ultralytics-filter": A.RandomAffine(translate=0.3, generator=g),
        "flip-valid": A.RandomFlip(p=0.5, generator=g),
        "flip-canvas": A.RandomFlip(p=0.5, about="canvas", generator=g),
        "iou-crop": A.RandomIoUCrop(generator=g),
        "warp": A.Warp(torch.tensor([[1.5, 0.0, -20.0], [0.0, 1.5, -10.0], [0.0, 0.0, 1.0]])),
        "multiscale": A.MultiScaleResize(imgsz=48, stride=8, generator=g),
        "mosaic": A.Mosaic(p=0.8, generator=g),
        "mosaic-resize-affine": A.Compose(
            [A.Mosaic(resize=40), A.RandomAffine(size=40, box_filter=None)], generator=g
        ),
        "mixup": A.MixUp(generator=g),
        "sanitize-center": A.SanitizeBoxes(A.CenterInImage()),
        "sanitize-torchvision": A.SanitizeBoxes(),
        "hsv": A.RandomHSV(generator=g),
        "compact": A.compact,
        "yolo_train": A.presets.yolo_train(48, mixup=0.5, buffer_size=0, generator=g),
    }


def run(module, batch: Batch, params=None) -> Batch:
    if isinstance(module, Augmentation):
        return module(batch, params)
    return module(batch)


# Modules whose own box filter drops boxes this thin (0.001 px and 0 alike): the rule then
# only says both go the same way.
FILTERS_THIN = {"affine-ultralytics-filter", "sanitize-torchvision", "yolo_train"}


@pytest.mark.parametrize("name", list(modules()))
def test_a_zero_area_box_goes_where_a_thin_box_at_its_place_goes(name, backend):
    """Replayed with the same parameters, each module keeps a zero-area box exactly when it
    keeps a 0.001 px wide box at the same place (which has area, so only leaving the image or a box
    filter drops it)."""
    module = modules()[name]
    kept_zero = 0
    for step, shape in enumerate([(4, 48, 64, 5), (3, 40, 56, 7)]):
        base = loader_like(*shape, seed=20 + step)
        zero_out = run(module, with_thin_boxes(base, 0.0))
        params = getattr(module, "last_params", None)
        thin_out = run(module, with_thin_boxes(base, 1e-3), params)
        assert torch.equal(zero_out.mask, thin_out.mask)
        kept = zero_out.boxes[zero_out.mask]
        assert ((kept[:, 2] - kept[:, 0] == 0) | (kept[:, 3] - kept[:, 1] == 0)).all() or (
            name in ("affine", "perspective", "mosaic-resize-affine")  # rotation gives area
        )
        kept_zero += len(kept)
    if name in FILTERS_THIN:
        assert kept_zero == 0
    else:
        assert kept_zero > 0  # zero-area boxes in the image are kept


def test_clipping_to_a_line_drops_and_a_zero_area_box_touching_the_image_stays(backend):
    """A translation by -20 px: the 10 px box ending at x = 20 is cut to the line x = 0 (it has
    left the image); the line at x = 20 lands on the image's edge and stays; the line at x = 25
    stays inside; the line at x = 5 has left."""
    boxes = torch.tensor([[[10.0, 10, 20, 20], [20, 10, 20, 20], [25, 10, 25, 20], [5, 10, 5, 20]]])
    batch = Batch(
        images=torch.zeros((1, 3, 32, 48), dtype=torch.uint8),
        boxes=boxes,
        classes=torch.tensor([[0, 1, 2, 3]]),
        mask=torch.ones((1, 4), dtype=torch.bool),
    )
    shift = torch.tensor([[1.0, 0.0, -20.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
    out = A.Warp(shift)(batch)
    assert out.mask.tolist() == [[False, True, True, False]]
    assert out.boxes[0, 1].tolist() == [0.0, 10.0, 0.0, 20.0]
    assert out.boxes[0, 2].tolist() == [5.0, 10.0, 5.0, 20.0]
