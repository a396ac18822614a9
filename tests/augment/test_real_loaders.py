"""Augmentation under real loaders: batches that differ in shape and box slots, the valid extent
(`batch.sizes`) through every module, and no box dropped silently."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch

import detfmt.augment as A
from detfmt.errors import TooManyBoxesError, UsageError
from detfmt.torch import Batch

from ._helpers import make_batch
from .test_mosaic import reference_mosaic4

CONTENT = 200  # pixel value of real content in the extent tests (padding 0, border 114)



def loader_like(batch: int, height: int, width: int, slots: int, seed: int) -> Batch:
    """A batch as the Loader pads it: images at the top-left of the canvas, zero padding."""
    out = make_batch(batch, height, width, slots, seed=seed, smooth=True)
    g = torch.Generator().manual_seed(seed + 1000)
    h = torch.randint(height // 2, height + 1, (batch,), generator=g)
    w = torch.randint(width // 2, width + 1, (batch,), generator=g)
    h[0], w[0] = height, width  # one sample fills the canvas, as in a padded batch
    sizes = torch.stack([h, w], dim=1).to(torch.int32)
    limit = torch.stack([w, h, w, h], dim=1)[:, None].to(torch.float32)
    boxes = torch.minimum(out.boxes, limit)
    wide = (boxes[..., 2] - boxes[..., 0] > 1) & (boxes[..., 3] - boxes[..., 1] > 1)
    mask = out.mask & wide
    images = out.images.clone()
    rows = torch.arange(height)[None, :, None] < h[:, None, None]
    cols = torch.arange(width)[None, None, :] < w[:, None, None]
    images = images * (rows & cols)[:, None]
    return out.replace(
        images=images.contiguous(memory_format=torch.channels_last),
        boxes=torch.where(mask[..., None], boxes, 0.0),
        classes=torch.where(mask, out.classes, -1),
        mask=mask,
        sizes=sizes,
        indices=torch.arange(batch, dtype=torch.int64) + 100 * seed,
    )


# (B, H, W, M): canvas and box slots change from batch to batch, up and down.
SHAPES = [(4, 48, 64, 3), (5, 64, 56, 7), (3, 40, 40, 2), (4, 72, 80, 5), (4, 48, 64, 1)]


def pipelines() -> dict[str, object]:
    g = torch.Generator().manual_seed(7)
    return {
        "ultralytics": A.Compose(
            [
                A.Mosaic(buffer_size=6),
                A.RandomAffine(size=48),
                A.RandomFlip(p=0.5, about="canvas"),
                A.RandomHSV(),
            ],
            generator=g,
        ),
        "mosaic-alone": A.Mosaic(p=0.8, buffer_size=9, generator=g),
        "mosaic-letterbox": A.Compose([A.Mosaic(buffer_size=4), A.Letterbox(40)], generator=g),
        "mixup": A.MixUp(p=0.5, generator=g),
        "letterbox-flip": A.Compose([A.Letterbox((48, 40)), A.RandomFlip(p=0.5)], generator=g),
        "affine": A.RandomAffine(degrees=10, shear=2, perspective=1e-4, generator=g),
        "flip": A.RandomFlip(p=0.5, generator=g),
        "iou-crop": A.RandomIoUCrop(generator=g),
        "multiscale": A.MultiScaleResize(imgsz=48, stride=8, generator=g),
        "hsv": A.RandomHSV(generator=g),
        "jitter": A.ColorJitter(
            brightness=0.2, contrast=0.2, saturation=0.2, hue=0.05, generator=g
        ),
        "sanitize": A.SanitizeBoxes(),
        "float": A.Compose([A.RandomFlip(), A.ToFloat(), A.Normalize()], generator=g),
    }


@pytest.mark.parametrize("name", list(pipelines()))
def test_batches_of_varying_shape_and_slots_go_through(name, backend):
    """Each module (Mosaic's ring buffer included) takes a stream of loader-like batches."""
    module = pipelines()[name]
    for k, (b, h, w, m) in enumerate(SHAPES):
        batch = loader_like(b, h, w, m, seed=k)
        out = module(batch)
        assert out.images.shape[0] == b and out.boxes.shape[:2] == out.mask.shape
        assert out.classes.shape == out.mask.shape and out.sizes is not None
        oh, ow = out.images.shape[-2:]
        valid = out.boxes[out.mask]
        assert (valid[:, 0] >= 0).all() and (valid[:, 2] <= ow).all()
        assert (valid[:, 1] >= 0).all() and (valid[:, 3] <= oh).all()
        assert (out.classes[out.mask] >= 0).all() and (out.classes[~out.mask] == -1).all()
        assert ((out.sizes >= 1) & (out.sizes <= torch.tensor([oh, ow]))).all()


def _mosaic_reference(batch: Batch, held: list[tuple[np.ndarray, np.ndarray]], params, b: int):
    """Ultralytics' mosaic of sample b from its tiles (in the batch or held from earlier)."""
    hwc = batch.images.permute(0, 2, 3, 1).numpy()
    tiles, tile_boxes = [], []
    for t in params["tiles"][b].tolist():
        if t < len(batch):
            h, w = batch.sizes[t].tolist()
            tiles.append(hwc[t, :h, :w])
            tile_boxes.append(batch.boxes[t][batch.mask[t]].numpy())
        else:
            image, boxes = held[t - len(batch)]
            tiles.append(image)
            tile_boxes.append(boxes)
    xc, yc = params["center"][b].tolist()
    return reference_mosaic4(tiles, tile_boxes, xc, yc, tuple(batch.images.shape[-2:]))


@pytest.mark.parametrize("gather", [False, True], ids=["slices", "gather"])
def test_mosaic_buffer_partners_of_other_shapes_are_exact(gather):
    """Partners held from earlier batches (other canvas, other slot count) are placed exactly."""
    mosaic = A.Mosaic(buffer_size=8, generator=torch.Generator().manual_seed(3))
    mosaic._force_gather = gather
    first = loader_like(4, 56, 72, 9, seed=1)  # larger canvas and more slots than the next
    second = loader_like(4, 40, 48, 2, seed=2)
    mosaic(first)
    held = []
    for i in range(len(first)):
        h, w = first.sizes[i].tolist()
        image = first.images[i].permute(1, 2, 0).numpy()[:h, :w]
        held.append((image, first.boxes[i][first.mask[i]].numpy()))
    params = mosaic.sample(second)
    params["tiles"][:, 1:] = torch.tensor([4, 5, 7])  # every partner from the buffer
    params["apply"][:] = True
    out = mosaic(second, params)
    assert out.boxes.shape[1] == 4 * 9
    for b in range(len(second)):
        img4, boxes, extent = _mosaic_reference(second, held, params, b)
        assert np.array_equal(out.images[b].permute(1, 2, 0).numpy(), img4)
        got = out.boxes[b][out.mask[b]].numpy()
        assert got.shape == boxes.shape
        np.testing.assert_allclose(got, boxes, atol=1e-5)
        assert out.sizes[b].tolist() == extent


def test_mosaic_buffer_refuses_other_channels_and_dtypes_with_advice():
    mosaic = A.Mosaic(buffer_size=4, generator=torch.Generator().manual_seed(4))
    mosaic(loader_like(2, 32, 32, 2, seed=5))
    floats = loader_like(2, 32, 32, 2, seed=6)
    floats = floats.replace(images=floats.images.to(torch.float32) / 255)
    with pytest.raises(UsageError, match="before ToFloat"):
        mosaic(floats)


def _content_batch(seed: int) -> Batch:
    """Content is one flat value inside each sample's valid region, padded with the border value
    (a Loader with ``pad_value=114``), so every blend of content with padding stays above it."""
    batch = loader_like(6, 48, 64, 4, seed=seed)
    rows = torch.arange(48)[None, :, None] < batch.sizes[:, 0, None, None]
    cols = torch.arange(64)[None, None, :] < batch.sizes[:, 1, None, None]
    images = torch.where((rows & cols)[:, None], CONTENT, 114).expand(-1, 3, -1, -1)
    images = images.to(torch.uint8)
    return batch.replace(images=images.contiguous(memory_format=torch.channels_last))


def extent_modules() -> dict[str, object]:
    g = torch.Generator().manual_seed(11)
    return {
        "flip": A.RandomFlip(p=0.5, generator=g),
        "flip-vertical": A.RandomFlip(p=0.5, vertical=True, generator=g),
        "flip-canvas": A.RandomFlip(p=0.5, about="canvas", generator=g),
        "letterbox": A.Letterbox(56),
        "letterbox-top-left": A.Letterbox((40, 96), center=False),
        "affine": A.RandomAffine(degrees=15, shear=3, generator=g),
        "perspective": A.RandomAffine(perspective=5e-4, size=(40, 56), generator=g),
        "iou-crop": A.RandomIoUCrop(generator=g),
        "warp": A.Warp(torch.tensor([[0.5, 0.0, 3.0], [0.0, 0.75, 2.0], [0.0, 0.0, 1.0]])),
        "fused": A.Compose([A.Letterbox(64), A.RandomAffine(), A.RandomFlip()], generator=g),
        "mosaic": A.Mosaic(p=0.7, buffer_size=4, generator=g),
        "mosaic-affine": A.Compose([A.Mosaic(), A.RandomAffine(size=48)], generator=g),
        "multiscale": A.MultiScaleResize(imgsz=64, stride=8, generator=g),
        "mixup": A.MixUp(generator=g),
    }


@pytest.mark.parametrize("name", list(extent_modules()))
def test_sizes_is_the_real_image_extent(name, backend):
    """Outside ``sizes`` there is only border or padding; its last rows and columns hold content.

    Content is 200, the border and the padding 114: a pixel above 116 holds content. A warp
    cuts the valid region exactly (a pixel is content when its centre maps inside it, and is
    never blended with the border), so no pixel past ``sizes`` holds content, and the extent
    is never larger than the content by more than a pixel and the one it cuts.
    """
    module = extent_modules()[name]
    for seed in (21, 22):
        batch = _content_batch(seed)
        out = module(batch)
        real = out.images.to(torch.int16).amax(dim=1) > 116
        for b in range(len(out)):
            h, w = out.sizes[b].tolist()
            beyond = torch.ones_like(real[b])
            beyond[:h, :w] = False
            assert not real[b][beyond].any(), f"sample {b}: content outside sizes {h, w}"
            assert real[b, max(h - 2, 0) : h, :w].any(), f"sample {b}: rows below content {h}"
            assert real[b, :h, max(w - 2, 0) : w].any(), f"sample {b}: columns after content {w}"


def test_flip_about_valid_region_keeps_content_in_place():
    batch = _content_batch(31)
    g = torch.Generator().manual_seed(1)
    out = A.RandomFlip(p=1.0, generator=g)(batch)
    assert torch.equal(out.sizes, batch.sizes)
    for b in range(len(batch)):
        h, w = batch.sizes[b].tolist()
        assert (out.images[b, :, :h, :w] == CONTENT).all()


def test_compact_refuses_to_drop_valid_boxes():
    batch = loader_like(4, 32, 32, 6, seed=41)
    counts = batch.mask.sum(1)
    most = int(counts.max())
    kept = A.compact(batch, max_boxes=most)  # enough slots: nothing lost
    assert torch.equal(kept.mask.sum(1), counts)
    with pytest.raises(TooManyBoxesError) as info:
        A.compact(batch, max_boxes=most - 1)
    worst = int(torch.argmax((counts > most - 1).to(torch.int8)))
    assert info.value.index == int(batch.indices[worst])
    assert info.value.count == most and info.value.max_boxes == most - 1
    again = pickle.loads(pickle.dumps(info.value))
    assert (again.count, again.max_boxes, again.index) == (most, most - 1, info.value.index)


def test_compact_can_count_what_it_cut():
    batch = loader_like(4, 32, 32, 6, seed=42)
    counts = batch.mask.sum(1)
    out = A.compact(batch, max_boxes=2, overflow="count")
    assert out.boxes.shape == (4, 2, 4)
    assert torch.equal(out.extras["boxes_cut"], (counts - 2).clamp_min(0))
    assert torch.equal(out.mask.sum(1) + out.extras["boxes_cut"], counts)
    with pytest.raises(UsageError):
        A.compact(batch, max_boxes=2, overflow="drop")


def test_identity_geometry_is_a_copy_identical_to_the_warp():
    """A letterbox of images already at the target size skips the resample, same result."""
    from detfmt.augment._geometry import _copy_valid
    from detfmt.augment._warp import warp_images

    batch = loader_like(4, 48, 64, 3, seed=51)
    batch = batch.replace(sizes=torch.tensor([[48, 64], [30, 64], [48, 40], [20, 33]]))
    matrix = torch.eye(3).expand(4, 3, 3)
    for out_size in ((48, 64), (56, 72), (40, 50)):
        warped = warp_images(batch.images, matrix, out_size, fill=114.0, sizes=batch.sizes)
        copied = _copy_valid(batch.images, matrix, out_size, fill=114.0, sizes=batch.sizes)
        assert torch.equal(warped, copied), out_size
    # every sample's long side is already 64: the letterbox is the identity for all of them
    square = loader_like(3, 64, 64, 3, seed=52)
    square = square.replace(sizes=torch.tensor([[64, 64], [40, 64], [64, 30]], dtype=torch.int32))
    out = A.Letterbox(64, center=False)(square)
    ref = warp_images(
        square.images, torch.eye(3).expand(3, 3, 3), (64, 64), fill=114.0, sizes=square.sizes
    )
    assert torch.equal(out.images, ref) and torch.equal(out.sizes, square.sizes)
    assert torch.equal(out.boxes[out.mask], square.boxes[square.mask])


@pytest.mark.parametrize("path", ["slices", "gather", "resize"])
def test_mosaic_reads_its_buffer_as_the_last_samples_pushed_only(path):
    """A buffer that wrapped around and once held a larger batch (more box slots, a larger
    canvas, since evicted) gives the same mosaics as an empty buffer given only the samples it
    still holds, in the same order: what a resumed loader's refill relies on."""
    def make() -> A.Mosaic:
        mosaic = A.Mosaic(buffer_size=6, resize=24 if path == "resize" else None)
        mosaic._force_gather = path == "gather"
        return mosaic

    batches = [loader_like(4, 56, 72, 9, seed=1), loader_like(4, 40, 48, 2, seed=2),
               loader_like(4, 44, 40, 3, seed=3)]
    long, short = make(), make()
    for batch in batches:  # 12 samples: the first batch is evicted, the buffer wrapped
        long(batch)
    for batch in batches[1:]:  # the 6 held samples are the last 2 of batch 1 and batch 2
        short(batch)
    following = loader_like(4, 40, 48, 3, seed=4)
    params = long.sample(following)
    params["tiles"][:, 1:] = torch.tensor([[4, 6, 9], [5, 7, 8], [9, 4, 6], [8, 8, 5]])
    params["apply"][:] = True
    want, got = long(following, params), short(following, params)
    assert want.boxes.shape[1] == 4 * 3  # the held samples' slots, not the evicted batch's 9
    for name in ("images", "boxes", "classes", "mask", "sizes"):
        assert torch.equal(getattr(got, name), getattr(want, name)), name


@pytest.mark.parametrize("max_boxes", [None, 4, 9])
def test_compact_moves_per_box_extras_with_their_boxes(max_boxes):
    """The loader's per-box fields (``iscrowd``, ``ann_id``...) sit in ``extras`` as (B, M):
    compaction reorders them with the boxes, so box i and field i still describe one object."""
    batch = loader_like(5, 32, 32, 6, seed=43)
    g = torch.Generator().manual_seed(3)
    mask = batch.mask & (torch.rand(batch.mask.shape, generator=g) > 0.4)  # holes to close
    ids = torch.arange(30, dtype=torch.int64).view(5, 6) + 1
    batch = batch.replace(
        boxes=torch.where(mask[..., None], batch.boxes, 0.0),
        classes=torch.where(mask, batch.classes, -1),
        mask=mask,
        extras={"ann_id": torch.where(mask, ids, 0), "iscrowd": (ids % 2).to(torch.uint8),
                "per_image": torch.arange(5)},
        box_fields=("ann_id", "iscrowd"),
    )
    out = A.compact(batch, max_boxes=max_boxes)
    slots = out.mask.shape[1]
    assert out.extras["ann_id"].shape == (5, slots)
    for b in range(5):
        assert torch.equal(out.extras["ann_id"][b][out.mask[b]], ids[b][mask[b]])
        crowd = (ids[b][mask[b]] % 2).to(torch.uint8)
        assert torch.equal(out.extras["iscrowd"][b][out.mask[b]], crowd)
        assert torch.equal(out.boxes[b][out.mask[b]], batch.boxes[b][mask[b]])
    assert torch.equal(out.extras["per_image"], torch.arange(5))
