"""Mosaic against a numpy port of Ultralytics' ``_mosaic4``; MixUp arithmetic and boxes."""

from __future__ import annotations

import numpy as np
import torch

import detfmt.augment as A

from ._helpers import make_batch


def reference_mosaic4(tiles, tile_boxes, xc: int, yc: int, s_hw):
    """Ultralytics ``_mosaic4`` + ``_cat_labels`` for HWC tiles (h_i, w_i <= s) and xyxy boxes."""
    sh, sw = s_hw
    img4 = np.full((sh * 2, sw * 2, 3), 114, dtype=np.uint8)
    out_boxes = []
    extent = [0, 0]  # the lowest and rightmost edge of a placed tile: the real image extent
    for i, (img, boxes) in enumerate(zip(tiles, tile_boxes, strict=True)):
        h, w = img.shape[:2]
        if i == 0:
            x1a, y1a, x2a, y2a = max(xc - w, 0), max(yc - h, 0), xc, yc
            x1b, y1b, x2b, y2b = w - (x2a - x1a), h - (y2a - y1a), w, h
        elif i == 1:
            x1a, y1a, x2a, y2a = xc, max(yc - h, 0), min(xc + w, sw * 2), yc
            x1b, y1b, x2b, y2b = 0, h - (y2a - y1a), min(w, x2a - x1a), h
        elif i == 2:
            x1a, y1a, x2a, y2a = max(xc - w, 0), yc, xc, min(sh * 2, yc + h)
            x1b, y1b, x2b, y2b = w - (x2a - x1a), 0, w, min(y2a - y1a, h)
        else:
            x1a, y1a, x2a, y2a = xc, yc, min(xc + w, sw * 2), min(sh * 2, yc + h)
            x1b, y1b, x2b, y2b = 0, 0, min(w, x2a - x1a), min(y2a - y1a, h)
        img4[y1a:y2a, x1a:x2a] = img[y1b:y2b, x1b:x2b]
        extent = [max(extent[0], y2a), max(extent[1], x2a)]
        padw, padh = x1a - x1b, y1a - y1b
        out_boxes.append(boxes + np.array([padw, padh, padw, padh], dtype=np.float32))
    boxes = np.concatenate(out_boxes, 0)
    shifted = boxes.copy()
    boxes[:, [0, 2]] = boxes[:, [0, 2]].clip(0, 2 * sw)
    boxes[:, [1, 3]] = boxes[:, [1, 3]].clip(0, 2 * sh)
    good = (boxes[:, 2] - boxes[:, 0] > 0) & (boxes[:, 3] - boxes[:, 1] > 0)
    # Ultralytics' remove_zero_area_boxes also drops boxes that had zero area before the
    # mosaic; detfmt keeps those while they touch the canvas (its one rule for zero-area boxes,
    # docs/augment.md); the affine that follows in yolo_train drops them as Ultralytics does.
    w, h = shifted[:, 2] - shifted[:, 0], shifted[:, 3] - shifted[:, 1]
    touches = (shifted[:, 0] <= 2 * sw) & (shifted[:, 2] >= 0)
    touches &= (shifted[:, 1] <= 2 * sh) & (shifted[:, 3] >= 0)
    good |= ((w == 0) | (h == 0)) & (w >= 0) & (h >= 0) & touches
    return img4, boxes[good], extent


def test_mosaic_matches_ultralytics_mosaic4():
    g = torch.Generator().manual_seed(41)
    batch = make_batch(6, 32, 40, 4, seed=42)
    sizes = torch.tensor([[32, 40], [20, 40], [32, 24], [17, 33], [32, 40], [25, 12]])
    batch = batch.replace(
        sizes=sizes.to(torch.int32),
        boxes=torch.minimum(batch.boxes, torch.cat([sizes.flip(-1), sizes.flip(-1)], -1)[:, None]),
    )
    mosaic = A.Mosaic(generator=g)
    out = mosaic(batch)
    params = mosaic.last_params
    assert out.images.shape == (6, 3, 64, 80) and out.boxes.shape == (6, 16, 4)
    hwc = batch.images.permute(0, 2, 3, 1).numpy()
    for b in range(len(batch)):
        tiles, tile_boxes = [], []
        for t in params["tiles"][b].tolist():
            h, w = sizes[t].tolist()
            tiles.append(hwc[t, :h, :w])
            tile_boxes.append(batch.boxes[t][batch.mask[t]].numpy())
        xc, yc = params["center"][b].tolist()
        assert 20 <= xc < 60 and 16 <= yc < 48
        img4, boxes, extent = reference_mosaic4(tiles, tile_boxes, xc, yc, (32, 40))
        assert np.array_equal(out.images[b].permute(1, 2, 0).numpy(), img4)
        assert out.sizes[b].tolist() == extent
        got = out.boxes[b][out.mask[b]].numpy()
        assert got.shape == boxes.shape
        np.testing.assert_allclose(got, boxes, atol=1e-5)
    assert not (out.boxes[~out.mask] != 0).any() and (out.classes[~out.mask] == -1).all()


def test_mosaic_then_affine_returns_single_image_size():
    g = torch.Generator().manual_seed(43)
    batch = make_batch(4, 32, 32, 3, seed=44)
    out = A.Compose([A.Mosaic(), A.RandomAffine(size=32)], generator=g)(batch)
    assert out.images.shape == (4, 3, 32, 32) and out.boxes.shape == (4, 12, 4)
    assert (out.boxes[..., 0::2] <= 32).all() and (out.boxes >= 0).all()


def test_mosaic_not_chosen_is_letterboxed_in_the_middle():
    batch = make_batch(2, 16, 20, 2, seed=45)
    out = A.Mosaic(p=0.0)(batch)
    assert torch.equal(out.images[:, :, 8:24, 10:30], batch.images)
    assert (out.images[:, :, :8] == 114).all()
    assert torch.allclose(
        out.boxes[:, :2][batch.mask],
        (batch.boxes + torch.tensor([10.0, 8.0, 10.0, 8.0]))[batch.mask],
    )
    assert not out.mask[:, 2:].any()


def test_mosaic_ring_buffer_supplies_earlier_samples():
    g = torch.Generator().manual_seed(46)
    mosaic = A.Mosaic(buffer_size=8, generator=g)
    first = make_batch(4, 16, 16, 2, seed=47)
    mosaic(first)
    second = make_batch(4, 16, 16, 2, seed=48)
    seen_buffer = False
    for _ in range(5):
        out = mosaic(second)
        tiles = mosaic.last_params["tiles"]
        assert (tiles < 4 + mosaic.buffer.filled).all()
        seen_buffer |= bool((tiles >= 4).any())
        assert out.images.shape == (4, 3, 32, 32)
    assert seen_buffer and mosaic.buffer.filled == 8


def test_mixup_blends_and_concatenates_boxes():
    g = torch.Generator().manual_seed(49)
    batch = make_batch(4, 16, 16, 3, seed=50)
    mixup = A.MixUp(generator=g)
    out = mixup(batch)
    p = mixup.last_params
    assert (p["partner"] != torch.arange(4)).all()
    r = p["ratio"]
    assert ((r > 0.2) & (r < 0.8)).all()  # Beta(32, 32) has sd 0.06 around 0.5
    rr = r[:, None, None, None]
    want = (batch.images.float() * rr + batch.images[p["partner"]].float() * (1 - rr)).floor()
    assert (out.images.float() - want).abs().max() <= 1
    assert out.boxes.shape == (4, 6, 4)
    assert torch.equal(out.boxes[:, :3], batch.boxes)
    assert torch.equal(out.mask[:, 3:], batch.mask[p["partner"]])
    none = A.MixUp(p=0.0, generator=g)(batch)
    assert torch.equal(none.images, batch.images) and not none.mask[:, 3:].any()


def test_beta_draws_have_the_right_moments():
    from detfmt.augment._random import beta_integer

    g = torch.Generator().manual_seed(51)
    x = beta_integer(g, 32, 32, (20000,), torch.device("cpu"))
    assert abs(x.mean().item() - 0.5) < 0.003
    assert abs(x.var().item() - 0.25 / 65) < 4e-4


def test_mosaic_slice_copy_equals_static_gather():
    """Eager CPU copies rectangles; the static-shape gather (GPU, compile) gives the same canvas."""
    first = make_batch(4, 24, 28, 3, seed=53)
    batch = make_batch(5, 24, 28, 3, seed=54)
    batch = batch.replace(sizes=torch.tensor([[24, 28], [20, 28], [24, 15], [9, 9], [24, 28]]))
    sliced_op = A.Mosaic(p=0.7, buffer_size=6, generator=torch.Generator().manual_seed(52))
    gather_op = A.Mosaic(p=0.7, buffer_size=6)
    gather_op._force_gather = True
    warm = sliced_op.sample(first)
    sliced_op(first, warm)
    gather_op(first, warm)  # same buffer contents in both
    params = sliced_op.sample(batch)
    assert (params["tiles"] >= 5).any() and not params["apply"].all()
    sliced, gathered = sliced_op(batch, params), gather_op(batch, params)
    assert torch.equal(sliced.images, gathered.images)
    assert torch.equal(sliced.boxes, gathered.boxes) and torch.equal(sliced.mask, gathered.mask)


def test_ring_buffer_push_wraps_around():
    """Slots cursor.. then 0.. in order; a batch larger than the buffer keeps its last samples."""
    mosaic = A.Mosaic(buffer_size=6, generator=torch.Generator().manual_seed(55))
    batches = [make_batch(n, 8, 8, 2, seed=56 + n) for n in (4, 5, 3)]
    for b in batches:
        mosaic(b)
    samples = [b.images[i] for b in batches for i in range(len(b))]
    boxes = [b.boxes[i] for b in batches for i in range(len(b))]
    # 12 samples pushed into 6 slots: slot k holds the last sample whose position is k mod 6.
    for k in range(6):
        assert torch.equal(mosaic.buffer.images[k], samples[6 + k])
        assert torch.equal(mosaic.buffer.boxes[k], boxes[6 + k])
    assert mosaic.buffer.cursor == 0 and mosaic.buffer.filled == 6
    big = make_batch(8, 8, 8, 2, seed=60)
    mosaic(big)
    for k in range(6):  # slots 0..5 got samples 0..7 in order: slot k ends with the last one
        assert torch.equal(mosaic.buffer.images[k], big.images[k + 6 if k < 2 else k])


def test_ring_buffer_grows_box_slots_without_copying_images():
    """More box slots than held reallocate the box fields only; a larger canvas the images."""
    mosaic = A.Mosaic(buffer_size=4, generator=torch.Generator().manual_seed(61))
    first = make_batch(2, 8, 8, 2, seed=62)
    mosaic(first)
    held = mosaic.buffer.images
    more = make_batch(2, 8, 8, 5, seed=63, all_valid=True)
    mosaic(more)
    assert mosaic.buffer.images.data_ptr() == held.data_ptr()
    assert mosaic.buffer.boxes.shape[1] == 5
    assert torch.equal(mosaic.buffer.boxes[:2, :2], first.boxes)
    assert (mosaic.buffer.classes[:2, 2:] == -1).all() and not mosaic.buffer.mask[:2, 2:].any()
    assert torch.equal(mosaic.buffer.boxes[2:4], more.boxes)
    wider = make_batch(1, 8, 12, 1, seed=64)
    mosaic(wider)
    assert mosaic.buffer.images.shape[-2:] == (8, 12)
    assert torch.equal(mosaic.buffer.images[1, :, :, :8], first.images[1])
    assert torch.equal(mosaic.buffer.images[2, :, :, :8], more.images[0])
