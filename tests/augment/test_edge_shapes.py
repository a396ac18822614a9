"""Edge shapes a real dataset holds: very thin images, batches without box slots, grey images.

Each must go through the modules with valid targets, or fail with a typed error, never a raw
LinAlgError / IndexError / TypeError.
"""

from __future__ import annotations

import math

import pytest
import torch

import detfmt.augment as A
from detfmt.errors import UsageError
from detfmt.torch import Batch

from ._helpers import make_batch


def _thin_batch(height: int, width: int) -> Batch:
    """Two samples of a tall canvas, one of them 2 px wide, each with one box inside."""
    images = torch.zeros((2, 3, height, width), dtype=torch.uint8)
    sizes = torch.tensor([[height, 2], [height // 2, width]], dtype=torch.int32)
    for b, (h, w) in enumerate(sizes.tolist()):
        images[b, :, :h, :w] = 200
    boxes = torch.tensor([[[0.0, 10.0, 2.0, 200.0]], [[0.0, 0.0, float(width), 20.0]]])
    return Batch(
        images=images.contiguous(memory_format=torch.channels_last),
        boxes=boxes,
        classes=torch.tensor([[1], [2]]),
        mask=torch.ones((2, 1), dtype=torch.bool),
        sizes=sizes,
    )


@pytest.mark.parametrize(
    "make",
    [
        lambda: A.Letterbox(48),
        lambda: A.Compose([A.RandomFlip(p=1.0), A.Letterbox(48)]),
        lambda: A.Mosaic(resize=48, generator=torch.Generator().manual_seed(0)),
        lambda: A.presets.yolo_train(48, buffer_size=4, generator=torch.Generator().manual_seed(0)),
        lambda: A.presets.yolo_train(48, mosaic=0, generator=torch.Generator().manual_seed(0)),
    ],
    ids=["letterbox", "flip-letterbox", "mosaic-resize", "yolo_train", "yolo_train-no-mosaic"],
)
def test_a_thin_image_keeps_at_least_one_pixel(make, backend):
    """A 2 px wide, 300 px tall image scaled to 48 rounds to 0.32 px: it keeps one pixel (its
    width used to round to 0, a singular matrix on the torch backend and NaN on OpenCV)."""
    out = make()(_thin_batch(300, 4))
    assert torch.isfinite(out.boxes).all()
    oh, ow = out.images.shape[-2:]
    assert ((out.sizes >= 1) & (out.sizes <= torch.tensor([oh, ow]))).all()
    valid = out.boxes[out.mask]
    assert (valid[:, 2] > valid[:, 0]).all() and (valid[:, 3] > valid[:, 1]).all()


def test_letterbox_of_a_thin_image_is_one_pixel_wide(backend):
    out = A.Letterbox(48, center=False)(_thin_batch(300, 4))
    assert out.sizes[0].tolist() == [48, 1]
    assert (out.images[0, :, :, 1:] == 114).all() and (out.images[0, :, :, 0] == 200).all()
    assert out.mask[0, 0] and out.boxes[0, 0, 2].item() == pytest.approx(1.0)


def test_iou_crop_takes_batches_without_box_slots(backend):
    """A batch of images without boxes has zero box slots (the loader pads to the batch's
    largest count): no crop holds a box centre, so no sample is cropped."""
    batch = make_batch(3, 24, 32, 1, seed=1)
    empty = batch.replace(
        boxes=batch.boxes[:, :0], classes=batch.classes[:, :0], mask=batch.mask[:, :0]
    )
    crop = A.RandomIoUCrop(generator=torch.Generator().manual_seed(2))
    out = crop(empty)
    assert out.boxes.shape == (3, 0, 4) and not crop.last_params["cropped"].any()
    assert torch.equal(out.images, empty.images)
    out = A.Compose([A.RandomAffine(), A.RandomIoUCrop(), A.Letterbox(40)])(empty)
    assert out.images.shape == (3, 3, 40, 40)


def _grey(batch: Batch) -> Batch:
    return batch.replace(images=batch.images[:, :1].contiguous())


@pytest.mark.parametrize(
    "make",
    [
        lambda: A.RandomHSV(h=0.5, s=0.9, v=0.5),
        lambda: A.ColorJitter(brightness=0.4, contrast=0.4, saturation=0.4, hue=0.2),
    ],
    ids=["hsv", "jitter"],
)
def test_colour_modules_on_grey_images_equal_the_grey_rgb_image(make, backend):
    """A grey (1-channel) batch gets what the RGB image with three equal planes gets (hue and
    saturation leave grey alone), as one plane."""
    grey = _grey(make_batch(3, 16, 20, 2, seed=3))
    rgb = grey.replace(images=grey.images.expand(-1, 3, -1, -1).contiguous())
    module = make()
    want = module(rgb)
    got = module(grey, params=module.last_params)
    assert got.images.shape == grey.images.shape
    assert torch.equal(got.images[:, 0], want.images[:, 0])
    assert torch.equal(want.images[:, 0], want.images[:, 1])  # still grey
    assert not torch.equal(got.images, grey.images)  # the gains did something


def test_normalize_refuses_three_means_for_grey_images():
    """Broadcasting would make a (B, 1, H, W) batch (B, 3, H, W), silently."""
    grey = _grey(make_batch(2, 8, 8, 1, seed=4))
    with pytest.raises(UsageError, match="per channel"):
        A.Normalize()(grey)
    out = A.Normalize(mean=(0.5,), std=(0.25,))(grey)
    assert out.images.shape == grey.images.shape
    torch.testing.assert_close(out.images, (grey.images.float() / 255 - 0.5) / 0.25)
    with pytest.raises(UsageError):
        A.Normalize(mean=(0.5, 0.5), std=(0.2, 0.2))


def test_extent_of_a_rotated_region_cut_by_the_top_edge(backend):
    """The extent is the part of the mapped region inside the output, not the mapped corners:
    here the rightmost corner lies far above the output, and the region leaves the output's
    top edge at x = 18.1 while the corners reach column 56. A pixel is content when its centre
    is inside the region: the first row of centres (0.5 px down) leaves the 30 degree wedge
    0.5 / tan 30 = 0.9 px earlier, so the last content column may sit 3 columns before the
    extent."""
    angle = math.radians(-30)
    matrix = torch.tensor(
        [
            [math.cos(angle), -math.sin(angle), 8.0],
            [math.sin(angle), math.cos(angle), -8.0],
            [0.0, 0.0, 1.0],
        ]
    )
    images = torch.zeros((1, 3, 16, 48), dtype=torch.uint8)
    images[:, :, :12] = 200  # a 12 x 48 image at the top-left of a 16 x 48 canvas
    batch = Batch(
        images=images,
        boxes=torch.tensor([[[40.0, 0.0, 48.0, 4.0]]]),  # leaves the output: dropped
        classes=torch.tensor([[0]]),
        mask=torch.tensor([[True]]),
        sizes=torch.tensor([[12, 48]], dtype=torch.int32),
    )
    out = A.Warp(matrix, size=(16, 64))(batch)
    content = (out.images[0] != 114).any(dim=0)
    rows, cols = content.nonzero(as_tuple=True)
    h, w = out.sizes[0].tolist()
    assert not content[h:].any() and not content[:, w:].any()
    assert w <= int(cols.max()) + 3 and h <= int(rows.max()) + 2
    assert w < 30 and not out.mask.any()


def test_axis_aligned_extent_equals_the_general_clip():
    """The scale-and-translate shortcut of the mapped extent gives what the clip of a general
    quadrilateral gives: rectangles inside, across the edges, beyond them, flipped."""
    from detfmt.augment._geometry import _far_corner_inside_quad, _far_corner_inside_rectangle

    g = torch.Generator().manual_seed(5)
    n = 4000
    x0 = torch.rand(n, generator=g, dtype=torch.float64) * 240 - 80
    y0 = torch.rand(n, generator=g, dtype=torch.float64) * 240 - 80
    w = (torch.rand(n, generator=g, dtype=torch.float64) * 2 - 1) * 150  # < 0: flipped
    h = (torch.rand(n, generator=g, dtype=torch.float64) * 2 - 1) * 150
    x1, y1 = x0 + w, y0 + h
    quad = torch.stack([x0, y0, x1, y0, x1, y1, x0, y1], dim=-1).view(n, 4, 2)
    low = quad.new_tensor([0.0, 0.0])
    high = quad.new_tensor([64.0, 48.0])
    fast = _far_corner_inside_rectangle(quad, low, high)
    general = _far_corner_inside_quad(quad, 48.0, 64.0)
    assert torch.equal(fast, general)
    assert (fast == 0).all(dim=-1).any() and (fast == high).all(dim=-1).any()  # both cases seen
