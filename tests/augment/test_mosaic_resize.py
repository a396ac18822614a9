"""Mosaic(resize=S): the long-side resize folded into the mosaic and the warp after it.

The reference is the unfused pipeline, Letterbox(S, center=False) -> Mosaic -> warp, replayed
with the same parameters: boxes, classes, mask and sizes must be identical, pixels within
interpolation tolerance (one bilinear resample instead of two; tile edges are cut instead of
blended), and the pixels must sit where the boxes say.
"""

from __future__ import annotations

import contextlib

import pytest
import torch

import detfmt.augment as A

from ._helpers import make_batch

pytest.importorskip("cv2")

SIZE = 64


def _clip_to_sizes(batch, sizes):
    """Boxes inside each sample's valid region (as every real label is)."""
    limit = torch.cat([sizes.flip(-1), sizes.flip(-1)], -1)[:, None].to(batch.boxes.dtype)
    boxes = torch.where(batch.mask[..., None], torch.minimum(batch.boxes, limit), 0.0)
    wide = (boxes[..., 2] - boxes[..., 0] > 1) & (boxes[..., 3] - boxes[..., 1] > 1)
    mask = batch.mask & wide
    return batch.replace(
        sizes=sizes.to(torch.int32),
        boxes=torch.where(mask[..., None], boxes, 0.0),
        mask=mask,
        classes=torch.where(mask, batch.classes, -1),
    )


def _batch(seed: int, height: int = 40, width: int = 52):
    """Stored sizes below, at and above S: tiles are scaled up, kept and scaled down."""
    batch = make_batch(6, height, width, 4, seed=seed, smooth=True)
    sizes = torch.tensor([[40, 52], [21, 52], [40, 30], [13, 17], [40, 40], [33, 11]])
    return _clip_to_sizes(batch, sizes)


def _warp_steps(degrees: float, shear: float = 0.0, perspective: float = 0.0):
    return [
        A.RandomAffine(degrees=degrees, shear=shear, perspective=perspective, size=SIZE),
        A.RandomFlip(p=0.5, about="canvas"),
        A.RandomFlip(p=0.5, vertical=True, about="canvas"),
    ]


def _levels(batch, first: int):
    """Each sample one flat level of its own (``first``, ``first + 40``, ...)."""
    levels = (first + 40 * torch.arange(len(batch))).to(torch.uint8)[:, None, None, None]
    return batch.replace(images=levels.expand_as(batch.images).clone())


def _pipelines(seed: int, degrees: float = 0.0, shear: float = 0.0, perspective: float = 0.0,
               flat: bool = False, levels: bool = False):
    """(fused, reference) pipelines whose ring buffers hold the same samples (constant 200
    images with ``flat``, a flat level per sample with ``levels``); the fused one draws the
    parameters, the reference (a leading Letterbox step) replays them."""
    first = _batch(seed + 100, 48, 60)
    first = _clip_to_sizes(first, torch.tensor([[48, 60], [30, 60], [48, 20], [9, 9], [48, 60],
                                                [20, 20]]))
    if flat:
        first = first.replace(images=torch.full_like(first.images, 200))
    if levels:
        first = _levels(first, 10)
    fused_mosaic = A.Mosaic(p=0.7, buffer_size=8, resize=SIZE,
                            generator=torch.Generator().manual_seed(seed))
    warm = fused_mosaic.sample(first)
    fused_mosaic(first, warm)
    ref_mosaic = A.Mosaic(p=0.7, buffer_size=8)
    letterbox = A.Letterbox(SIZE, center=False)
    A.Compose([letterbox, ref_mosaic])(first, [{}, warm])
    steps = _warp_steps(degrees, shear, perspective)
    fused = A.Compose([fused_mosaic, *steps], generator=torch.Generator().manual_seed(seed))
    reference = A.Compose([letterbox, ref_mosaic, *steps])
    return fused, reference


def _run(pipeline, batch, backend, params=None):
    previous = A.get_cpu_backend()
    A.set_cpu_backend(backend)
    try:
        return pipeline(batch, params=params), pipeline.last_params
    finally:
        A.set_cpu_backend(previous)


def _assert_same_targets(a, b):
    assert torch.equal(a.boxes, b.boxes)
    assert torch.equal(a.mask, b.mask)
    assert torch.equal(a.classes, b.classes)
    assert torch.equal(a.sizes, b.sizes)


def _uniform_neighbourhood(images):
    """(B, C, H, W) bool: the pixel equals its 8 neighbours (off a seam or a ring)."""
    padded = torch.nn.functional.pad(images.int(), (1, 1, 1, 1), mode="replicate")
    height, width = images.shape[-2:]
    same = torch.ones(images.shape, dtype=torch.bool)
    for dy in range(3):
        for dx in range(3):
            same &= padded[..., dy : dy + height, dx : dx + width] == images.int()
    return same


def _compare(seed, batch, backend, angles=(0.0, 0.0, 0.0)):
    """Run both; targets identical, the tiles in the same places, the pixels inside them close.

    A constant image locates the tiles: the reference is exactly 200 where a pixel's source
    point lies inside tiles and 114 elsewhere, blended on the ring where a tile meets the fill
    inside the canvas; there the fused pixel must be 200 and 114 too (on the ring it is
    either: a cut). A flat level per sample locates the seams between tiles, where the
    reference blends two tiles and the fused path cuts them: pixels are compared away from
    both.
    """
    fused, reference = _pipelines(seed, *angles)
    out, params = _run(fused, batch, backend)
    assert (params[0]["tiles"] >= len(batch)).any()  # partners from the ring buffer too
    want, _ = _run(reference, batch, backend, [{}, *params])
    _assert_same_targets(out, want)
    flat = batch.replace(images=torch.full_like(batch.images, 200))
    fused, reference = _pipelines(seed, *angles, flat=True)
    fused_flat, _ = _run(fused, flat, backend, params)
    ref_flat, _ = _run(reference, flat, backend, [{}, *params])
    inside, outside = ref_flat.images == 200, ref_flat.images == 114
    assert (fused_flat.images[inside] == 200).all()
    assert (fused_flat.images[outside] == 114).all()
    ring = (~inside & ~outside).float().mean().item()
    assert ring < 0.2  # 64 px outputs of tiles scaled up to 5x: the blended rings are wide
    fused, reference = _pipelines(seed, *angles, levels=True)
    tiles, _ = _run(reference, _levels(batch, 30), backend, [{}, *params])
    away = inside & _uniform_neighbourhood(tiles.images)
    assert away.float().mean().item() > 0.5
    diff = (out.images.int() - want.images.int()).abs()[away]
    assert (diff <= 4).float().mean().item() >= 0.99, (diff <= 4).float().mean()
    assert diff.float().mean().item() < 1.0
    return out, want


@pytest.mark.parametrize("backend", ["opencv", "torch"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_fused_resize_equals_letterbox_then_mosaic(backend, seed):
    """Same boxes, mask, classes and sizes bit for bit; pixels within interpolation tolerance
    (the fused path resamples once: the unfused one twice, and it blends tile edges)."""
    out, want = _compare(seed, _batch(seed), backend)
    if backend == "torch":  # torch resizes the gathered tiles, then places them
        diff = (out.images.int() - want.images.int()).abs()
        assert (diff <= 1).float().mean().item() >= 0.999 and diff.max().item() <= 2


@pytest.mark.parametrize("angles", [(12.0, 4.0, 0.0), (8.0, 0.0, 0.001)])
def test_fused_resize_under_rotation_and_perspective(angles):
    _compare(7, _batch(7), "opencv", angles)


def test_fused_pixels_sit_inside_their_boxes():
    """White boxes on black: every output box is white inside (1 px in from its edges) and no
    white pixel lies more than 1 px outside every box. Tiles scaled up, down and not at all."""
    batch = _batch(11)
    _, _, height, width = batch.images.shape
    ys = torch.arange(height)[:, None] + 0.5
    xs = torch.arange(width)[None, :] + 0.5
    images = torch.zeros_like(batch.images)
    for i in range(len(batch)):
        x1, y1, x2, y2 = batch.boxes[i, 0].tolist()
        inside = (xs >= x1) & (xs < x2) & (ys >= y1) & (ys < y2)
        images[i, :, inside] = 255
    keep = torch.zeros_like(batch.mask)
    keep[:, 0] = batch.mask[:, 0]
    batch = batch.replace(images=images, mask=keep, boxes=torch.where(keep[..., None],
                          batch.boxes, 0.0), classes=torch.where(keep, batch.classes, -1))
    fused = A.Compose(
        [A.Mosaic(p=0.8, resize=SIZE), *_warp_steps(0.0)],
        generator=torch.Generator().manual_seed(12),
    )
    out, _ = _run(fused, batch, "opencv")
    ys = torch.arange(SIZE)[:, None] + 0.5
    xs = torch.arange(SIZE)[None, :] + 0.5
    checked = 0
    for i in range(len(batch)):
        white = out.images[i, 0] > 127
        near = torch.zeros_like(white)
        for x1, y1, x2, y2 in out.boxes[i][out.mask[i]].tolist():
            core = (xs >= x1 + 1) & (xs < x2 - 1) & (ys >= y1 + 1) & (ys < y2 - 1)
            assert white[core].all()
            checked += int(core.any())
            near |= (xs >= x1 - 1) & (xs < x2 + 1) & (ys >= y1 - 1) & (ys < y2 + 1)
        assert not (white & ~near).any()
    assert checked >= 3


def test_fused_resize_is_deterministic_and_replays():
    batch = _batch(21)
    runs = []
    for _ in range(2):
        fused, _ = _pipelines(21)
        runs.append(_run(fused, batch, "opencv"))
    (a, params), (b, _) = runs
    assert torch.equal(a.images, b.images) and torch.equal(a.boxes, b.boxes)
    fused, _ = _pipelines(21)
    again, _ = _run(fused, batch, "opencv", params)
    assert torch.equal(again.images, a.images)


@pytest.mark.parametrize("degrees", [0.0, 20.0])
def test_fused_warp_reads_nothing_stale_from_scratch(degrees):
    """The warp writes every output pixel (tiles, then fill only where no tile lands): the
    same parameters give the same pixels whatever an earlier call left in the scratch."""
    from detfmt.augment import _opencv

    batch = _batch(23)
    runs = []
    for junk in (7, 250):
        with contextlib.ExitStack() as stack:  # the sets this thread and pool threads borrow
            for _ in range(4):
                stack.enter_context(_opencv._borrowed_scratch())
                for name in ("warped", "tile", "window"):
                    _opencv._scratch(name, (4 * SIZE, 4 * SIZE, 4)).fill(junk)
        fused, _ = _pipelines(23, degrees=degrees)
        runs.append(_run(fused, batch, "opencv")[0].images)
    assert torch.equal(runs[0], runs[1])


def test_resized_mosaic_alone_is_the_canvas_the_warp_reads():
    """Standalone, Mosaic(resize) builds the (2S, 2S) canvas; an identity warp of it equals the
    fused path's identity warp, and its boxes are the composed pipeline's."""
    batch = _batch(31)
    mosaic = A.Mosaic(p=0.7, resize=SIZE, generator=torch.Generator().manual_seed(31))
    canvas, _ = _run(mosaic, batch, "opencv")
    params = mosaic.last_params
    assert canvas.images.shape == (6, 3, 2 * SIZE, 2 * SIZE)
    ref = A.Compose([A.Letterbox(SIZE, center=False), A.Mosaic(p=0.7)])
    want, _ = _run(ref, batch, "opencv", [{}, params])
    _assert_same_targets(canvas, want)
    torch_canvas, _ = _run(mosaic, batch, "torch", params)  # torch: resize, then place
    diff = (torch_canvas.images.int() - want.images.int()).abs()
    assert (diff <= 1).float().mean().item() >= 0.999 and diff.max().item() <= 2
    diff = (canvas.images.int() - want.images.int()).abs()
    assert (diff <= 4).float().mean().item() >= 0.95
    identity = A.Compose([A.Mosaic(p=0.7, resize=SIZE), A.Warp(torch.eye(3))])
    fused, _ = _run(identity, batch, "opencv", [params, {}])
    assert torch.equal(fused.images, canvas.images)


@pytest.mark.parametrize("backend", ["opencv", "torch"])
def test_yolo_train_with_mixup_and_close_mosaic(backend):
    """The preset with MixUp, and with mosaic=0 (Letterbox + affine), on both backends."""
    batch = _batch(41)
    for kwargs in ({"mixup": 0.5}, {"mosaic": 0.0}, {"mosaic": 0.5, "flipud": 0.5}):
        pipeline = A.presets.yolo_train(SIZE, buffer_size=8, **kwargs,
                                        generator=torch.Generator().manual_seed(42))
        for _ in range(2):
            out, _ = _run(pipeline, batch, backend)
        assert out.images.shape == (6, 3, SIZE, SIZE)
        assert (out.boxes[out.mask] >= 0).all() and (out.boxes[out.mask] <= SIZE).all()
        assert not (out.boxes[~out.mask] != 0).any()


@pytest.mark.parametrize("size", [48, 640, 1280])
def test_tile_extent_is_the_letterbox_content(size):
    """Mosaic places a resized tile at its letterbox content size, round(h r) x round(w r)
    (`Letterbox.fit`): the extent `mapped_extent` gives for `Letterbox.plan`'s matrix."""
    from detfmt.augment._geometry import GeometryState, mapped_extent

    letterbox = A.Letterbox(size, center=False)
    side = torch.arange(1, 3 * size + 5)
    for other in (1, 3, size // 3, size - 1, size, size + 1, 2 * size + 3):
        for sizes in (torch.stack([side, torch.full_like(side, other)], dim=-1),
                      torch.stack([torch.full_like(side, other), side], dim=-1)):
            state = GeometryState(
                batch_size=len(sizes), image_size=(size, size), sizes=sizes,
                unmapped_boxes=torch.zeros(len(sizes), 1, 4),
                mask=torch.zeros(len(sizes), 1, dtype=torch.bool), device=sizes.device,
            )
            plan = letterbox.plan(state, {})
            want = mapped_extent(sizes, (size, size), plan.matrix, plan.out_size, affine=True)
            fit = letterbox.fit(sizes[:, 0].double(), sizes[:, 1].double())
            got = torch.stack([fit.height, fit.width], dim=-1).to(want.dtype)
            assert torch.equal(got, want)
            assert torch.equal(fit.matrix.to(torch.float32), plan.matrix)
