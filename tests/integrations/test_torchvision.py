"""torchvision: targets equal the batch's boxes, images cropped to the real extent; the recipe
trains Faster R-CNN and its loss falls."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("torchvision")

import detfmt.augment as A
from detfmt.errors import UsageError
from detfmt.integrations.pipeline import AugmentedBatches
from detfmt.integrations.torchvision import to_torchvision
from detfmt.torch import Batch, Loader

from ._recipes import falling, run_recipe


def _pipeline() -> A.Compose:
    g = torch.Generator().manual_seed(1)
    return A.Compose(
        [A.Letterbox((200, 240)), A.RandomAffine(degrees=5), A.RandomFlip(), A.RandomHSV()],
        generator=g,
    )


def test_targets_are_the_batch_boxes_and_images_the_real_extent(chess_train):
    pairs = AugmentedBatches(
        Loader(chess_train, batch_size=3, seed=2), _pipeline(), lambda b: (b, to_torchvision(b))
    )
    seen = 0
    for batch, (images, targets) in pairs:
        for i, (image, target) in enumerate(zip(images, targets, strict=True)):
            h, w = batch.sizes[i].tolist()
            assert image.shape == (3, h, w) and image.dtype == torch.float32
            assert torch.equal(image, batch.images[i, :, :h, :w].float() / 255)
            keep = batch.mask[i]
            assert torch.equal(target["boxes"], batch.boxes[i][keep])
            assert torch.equal(target["labels"], batch.classes[i][keep].long() + 1)
            assert int(target["image_id"]) == int(batch.indices[i])
            seen += int(keep.sum())
    assert seen > 0


def test_without_crop_the_extent_is_in_the_target():
    batch = Batch(
        images=torch.zeros(1, 3, 10, 12, dtype=torch.uint8),
        boxes=torch.tensor([[[1.0, 1.0, 5.0, 4.0]]]),
        classes=torch.tensor([[2]]),
        mask=torch.tensor([[True]]),
        sizes=torch.tensor([[8, 6]]),
    )
    images, targets = to_torchvision(batch, crop=False, label_offset=0)
    assert images[0].shape == (3, 10, 12) and targets[0]["extent"].tolist() == [8, 6]
    assert targets[0]["labels"].tolist() == [2]
    with pytest.raises(UsageError, match="beyond its extent"):
        to_torchvision(batch.replace(sizes=torch.tensor([[3, 3]])))


def test_recipe_trains_and_the_loss_falls(chess_train):
    torch.manual_seed(0)
    losses = run_recipe("torchvision", train_path=chess_train, STEPS=6)["losses"]
    assert len(losses) == 12 and all(x == x for x in losses)
    assert falling(losses), losses


def test_crowd_and_zero_area_boxes_do_not_reach_the_model_unless_asked():
    """torchvision's R-CNN raises on boxes without positive width and height; the default
    targets leave them (and crowd boxes, as the reference training does) out, counted."""
    import torchvision

    from .test_crowd_and_degenerate import crowd_batch

    batch = crowd_batch()
    batch = batch.replace(images=torch.randint(0, 255, batch.images.shape, dtype=torch.uint8))
    torch.manual_seed(0)
    model = torchvision.models.detection.fasterrcnn_mobilenet_v3_large_320_fpn(
        weights=None, weights_backbone=None, num_classes=7, min_size=64, max_size=64
    )
    model.train()
    images, targets = to_torchvision(batch)
    assert [int(t["removed_crowd"]) for t in targets] == [2, 0]
    assert [int(t["removed_degenerate"]) for t in targets] == [1, 1]
    losses = model(images, targets)
    assert all(torch.isfinite(v) for v in losses.values())
    images, targets = to_torchvision(batch, drop_degenerate=False)
    with pytest.raises(AssertionError, match="positive height and width"):
        model(images, targets)
