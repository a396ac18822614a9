"""Geometric modules: render test, identities, composition, per-sample independence, masks."""

from __future__ import annotations

import pytest
import torch

import detfmt.augment as A
from detfmt.augment import _matrix as mx
from detfmt.augment._geometry import GeometryState
from detfmt.errors import UsageError

from ._helpers import box_masks_batch, make_batch, pixel_count, tight_boxes


@pytest.mark.parametrize(
    ("degrees", "shear", "perspective", "tolerance"),
    [(0.0, 0.0, 0.0, 0.5), (45.0, 0.0, 0.0, 1.0), (30.0, 10.0, 0.0, 1.0), (15.0, 5.0, 5e-4, 1.0)],
)
def test_render_boxes_follow_warped_masks(degrees, shear, perspective, tolerance):
    """Each box drawn as a mask and warped with the image op has the transformed box's bbox."""
    g = torch.Generator().manual_seed(1)
    source = make_batch(16, 96, 96, 3, seed=2, min_side=12, all_valid=True)
    # Pixel-aligned boxes, so the drawn masks are exactly the boxes.
    batch = box_masks_batch(source.replace(boxes=source.boxes.round()))
    op = A.RandomAffine(
        degrees=degrees,
        translate=0.1,
        scale=0.3,
        shear=shear,
        perspective=perspective,
        fill=0,
        box_filter=None,
        generator=g,
    )
    out = op(batch)
    got, present = tight_boxes(out.images)
    # Clipped boxes keep the corners' extent outside the image (as Ultralytics), so compare
    # the boxes that stay inside; every visible mask must keep its box.
    b = out.boxes
    inside = (b[..., 0] > 0) & (b[..., 1] > 0) & (b[..., 2] < 96) & (b[..., 3] < 96) & out.mask
    assert not (present & (pixel_count(out.images) >= 4) & ~out.mask).any()
    diff = (got - b).abs().amax(dim=-1)[inside & present]
    assert diff.numel() >= 30
    assert diff.max().item() <= tolerance, diff.max().item()


def test_pixel_centre_convention():
    """Source pixel (5, 7) = [5, 6) x [7, 8) scaled by 3 about the origin is [15, 18) x [21, 24)."""
    images = torch.zeros(1, 3, 12, 12, dtype=torch.uint8)
    images[0, :, 7, 5] = 255
    batch = make_batch(1, 12, 12, 1).replace(
        images=images, boxes=torch.tensor([[[5.0, 7.0, 6.0, 8.0]]]), mask=torch.tensor([[True]])
    )
    m = torch.diag(torch.tensor([3.0, 3.0, 1.0]))
    for interpolation in ("nearest", "bilinear"):
        out = A.Warp(m, size=36, fill=0, interpolation=interpolation)(batch)
        on = torch.nonzero(out.images[0, 0] > 127)
        assert on[:, 0].min() == 21 and on[:, 0].max() == 23
        assert on[:, 1].min() == 15 and on[:, 1].max() == 17
        assert out.boxes[0, 0].tolist() == [15.0, 21.0, 18.0, 24.0]


def test_identity_matrix_is_exact():
    batch = make_batch(3, 40, 56, 5, seed=3)
    out = A.Warp(torch.eye(3))(batch)
    assert torch.equal(out.images, batch.images)
    assert torch.allclose(out.boxes, batch.boxes, atol=1e-5)
    assert torch.equal(out.mask, batch.mask)
    assert torch.equal(out.classes, batch.classes)


@pytest.mark.parametrize("vertical", [False, True])
def test_double_flip_is_identity(vertical):
    batch = make_batch(4, 32, 48, 5, seed=4)
    flip = A.RandomFlip(p=1.0, vertical=vertical)
    twice = flip(flip(batch))
    assert torch.equal(twice.images, batch.images)
    assert torch.allclose(twice.boxes, batch.boxes, atol=1e-5)
    fused = A.Compose([flip, A.RandomFlip(p=1.0, vertical=vertical)])(batch)  # one warp
    assert torch.equal(fused.images, batch.images)
    assert torch.allclose(fused.boxes, batch.boxes, atol=1e-4)


def test_flip_uses_x_prime_equals_w_minus_x():
    batch = make_batch(1, 10, 100, 1, seed=5)
    batch = batch.replace(boxes=torch.tensor([[[0.0, 2.0, 10.0, 8.0]]]))
    out = A.RandomFlip(p=1.0)(batch)
    assert out.boxes[0, 0].tolist() == [90.0, 2.0, 100.0, 8.0]
    assert torch.equal(out.images[0, :, :, 99], batch.images[0, :, :, 0])
    warped = A.Warp(mx.horizontal_flip(torch.tensor([True]), 100.0)[0], interpolation="nearest")
    assert torch.equal(warped(batch).images, out.images)


def _shift(tx: float, ty: float) -> torch.Tensor:
    return torch.tensor([[1.0, 0.0, tx], [0.0, 1.0, ty], [0.0, 0.0, 1.0]])


def test_composition_equals_product():
    """Warp(A) then Warp(B) equals Warp(B @ A) when A's canvas keeps all content."""
    batch = make_batch(2, 48, 64, 5, seed=6)
    a = _shift(3, 5)  # onto a 58 x 70 canvas: nothing leaves it
    b = torch.tensor([[-1.0, 0.0, 64.0], [0.0, 1.0, -2.0], [0.0, 0.0, 1.0]])
    first = A.Warp(a, size=(58, 70), interpolation="nearest", fill=0)
    second = A.Warp(b, size=(48, 64), interpolation="nearest", fill=0)
    seq = second(first(batch))
    once = A.Warp(b @ a, size=(48, 64), interpolation="nearest", fill=0)(batch)
    fused = A.Compose([first, second])(batch)
    assert torch.equal(seq.images, once.images)
    assert torch.equal(fused.images, once.images)
    assert torch.allclose(seq.boxes, once.boxes, atol=1e-4)
    assert torch.allclose(fused.boxes, once.boxes, atol=1e-4)
    assert torch.equal(seq.mask, once.mask) and torch.equal(fused.mask, once.mask)
    assert not torch.equal(once.images, batch.images)

    smooth = make_batch(2, 64, 64, 5, seed=7, smooth=True)
    c = torch.tensor([[0.9, 0.2, 16.0], [-0.1, 1.1, 12.0], [0.0, 0.0, 1.0]])
    d = torch.tensor([[0.8, 0.1, -6.0], [0.05, 0.7, -2.0], [0.0, 0.0, 1.0]])
    wide = A.Warp(c, size=96)
    back = A.Warp(d, size=64)
    fused = A.Compose([wide, back])(smooth)
    once = A.Warp(d @ c, size=64)(smooth)
    assert (fused.images.int() - once.images.int()).abs().max().item() <= 1
    assert torch.allclose(fused.boxes, once.boxes, atol=1e-3)
    seq = back(wide(smooth))
    # Sequential corner boxes of a rotated box only grow: why consecutive ops are fused.
    both = seq.mask & once.mask
    assert (seq.boxes[..., :2][both] <= once.boxes[..., :2][both] + 1e-4).all()
    assert (seq.boxes[..., 2:][both] >= once.boxes[..., 2:][both] - 1e-4).all()
    diff = (seq.images.float() - once.images.float()).abs()
    assert diff.mean() < 1.5  # two bilinear resamples blur a little more than one


def _slice_params(params, i):
    return {k: (v[i : i + 1] if isinstance(v, torch.Tensor) else v) for k, v in params.items()}


def test_per_sample_independence():
    """A batch equals each sample run alone with its own parameters."""
    g = torch.Generator().manual_seed(8)
    batch = make_batch(4, 64, 64, 6, seed=9)
    pipeline = A.Compose(
        [
            A.RandomAffine(degrees=20, shear=5, translate=0.2, scale=0.4),
            A.RandomFlip(p=0.5),
            A.RandomHSV(),
            A.RandomFlip(p=0.5, vertical=True),
        ],
        generator=g,
    )
    out = pipeline(batch)
    params = pipeline.last_params
    for i in range(len(batch)):
        one = batch.replace(
            images=batch.images[i : i + 1],
            boxes=batch.boxes[i : i + 1],
            classes=batch.classes[i : i + 1],
            mask=batch.mask[i : i + 1],
        )
        alone = pipeline(one, params=[_slice_params(p, i) for p in params])
        assert (alone.images[0].int() - out.images[i].int()).abs().max().item() <= 1
        assert torch.allclose(alone.boxes[0], out.boxes[i], atol=1e-4)
        assert torch.equal(alone.mask[0], out.mask[i])


@pytest.mark.parametrize("seed", range(4))
def test_masks_never_revive_and_padding_stays_zero(seed):
    g = torch.Generator().manual_seed(seed)
    batch = make_batch(6, 48, 48, 8, seed=seed + 10)
    pipeline = A.Compose(
        [
            A.RandomAffine(degrees=90, translate=0.4, scale=0.8, shear=20),
            A.RandomFlip(),
            A.RandomIoUCrop(),
            A.SanitizeBoxes(),
        ],
        generator=g,
    )
    out = pipeline(batch)
    assert not (out.mask & ~batch.mask).any()
    assert (out.boxes[~out.mask] == 0).all()
    assert (out.classes[~out.mask] == -1).all()
    assert (out.classes[out.mask] == batch.classes[out.mask]).all()
    w = out.boxes[..., 2] - out.boxes[..., 0]
    h = out.boxes[..., 3] - out.boxes[..., 1]
    assert (w[out.mask] >= 1).all() and (h[out.mask] >= 1).all()
    assert (out.boxes[..., 0::2] <= 48).all() and (out.boxes >= 0).all()


def test_box_moved_outside_is_dropped():
    batch = make_batch(2, 32, 32, 3, seed=11)
    out = A.Warp(_shift(100, 0))(batch)
    assert not out.mask.any()
    assert (out.boxes == 0).all() and (out.classes == -1).all()
    assert (out.images == 114).all()


def test_letterbox_matches_ultralytics_geometry():
    """r = min(S/h, S/w), content round(w r) x round(h r), centred with floor(pad / 2)."""
    batch = make_batch(2, 40, 100, 2, seed=12)
    sizes = torch.tensor([[40, 100], [30, 50]], dtype=torch.int32)
    batch = batch.replace(sizes=sizes)
    out = A.Letterbox(64)(batch)
    assert out.images.shape == (2, 3, 64, 64)
    # sample 0: r = 0.64, content 64 x 26 (25.6 -> 26), top = floor(38 / 2) = 19
    assert (out.images[0, :, :18] == 114).all() and (out.images[0, :, 46:] == 114).all()
    assert not (out.images[0, :, 20:44] == 114).all()
    # sample 1 (valid region 30 x 50): r = 1.28, 64 x 38, top = 13; the zero padding is not read
    assert (out.images[1, :, :12] == 114).all() and (out.images[1, :, 52:] == 114).all()
    m = torch.tensor([[64 / 100, 0, 0], [0, 26 / 40, 19], [0, 0, 1]])
    expected = mx.transform_boxes(batch.boxes[:1], m[None])
    keep = out.mask[0]
    assert torch.allclose(out.boxes[0][keep], expected[0][keep].clamp(0, 64), atol=1e-4)
    # the real extent: top pad + content (19 + 26, 13 + 38); the bottom padding is outside
    assert out.sizes.tolist() == [[45, 64], [51, 64]]


def test_iou_crop_respects_constraints():
    g = torch.Generator().manual_seed(13)
    batch = make_batch(16, 64, 64, 4, seed=14)
    crop = A.RandomIoUCrop(generator=g)
    state = GeometryState.of(batch)
    params = crop.sample_geometry(state)
    out = crop(batch, params)
    c = params["crop"]
    w, h = c[:, 2] - c[:, 0], c[:, 3] - c[:, 1]
    cropped = params["cropped"]
    assert cropped.any()
    assert ((w[cropped] / h[cropped] >= 0.5) & (w[cropped] / h[cropped] <= 2.0)).all()
    assert (w[cropped] >= 0.3 * 64 - 1).all() and (c[:, 0] >= 0).all() and (c[:, 2] <= 64).all()
    assert torch.equal(
        c[~cropped], torch.tensor([0.0, 0.0, 64.0, 64.0]).expand((~cropped).sum(), 4)
    )
    assert not (out.mask & ~batch.mask).any()
    for i in torch.nonzero(cropped).flatten().tolist():
        boxes = batch.boxes[i][batch.mask[i]]
        cx, cy = (boxes[:, 0] + boxes[:, 2]) / 2, (boxes[:, 1] + boxes[:, 3]) / 2
        inside = (cx > c[i, 0]) & (cx < c[i, 2]) & (cy > c[i, 1]) & (cy < c[i, 3])
        assert out.mask[i].sum().item() == inside.sum().item()


def test_multiscale_resize_scales_boxes():
    g = torch.Generator().manual_seed(15)
    batch = make_batch(2, 64, 64, 3, seed=16)
    op = A.MultiScaleResize(imgsz=64, stride=32, generator=g)
    out = op(batch)
    new_h, new_w = op.last_params["size"]
    assert out.images.shape[-2:] == (new_h, new_w) and new_h % 32 == 0 and 32 <= new_h <= 96
    assert torch.allclose(out.boxes, batch.boxes * new_w / 64, atol=1e-4)


def test_bad_arguments_raise_usage_error():
    with pytest.raises(UsageError):
        A.RandomAffine(scale=1.5)
    with pytest.raises(UsageError):
        A.RandomFlip(p=2.0)
    with pytest.raises(UsageError):
        A.Letterbox(0)
    with pytest.raises(UsageError):
        A.RandomAffine(interpolation="cubic")
    with pytest.raises(UsageError):
        A.RandomHSV(h=-1)
    with pytest.raises(UsageError):
        A.RandomFlip()(make_batch().images)


def test_float32_warp_leaves_its_input_alone():
    """Regression: the torch warp used to subtract the fill from float32 inputs in place."""
    batch = make_batch(2, 32, 32, 3, seed=4)
    batch = batch.replace(images=batch.images.float() / 255)
    before = batch.images.clone()
    A.RandomAffine(size=32)(batch)
    assert torch.equal(batch.images, before)


def test_state_boxes_are_mapped_step_by_step_on_read():
    """`advance` defers the box mapping; a read gives each step's min/max mapping in turn."""
    from detfmt.augment._geometry import advance

    batch = make_batch(4, 64, 80, seed=5)
    steps = [
        A.RandomAffine(degrees=30, shear=5, generator=torch.Generator().manual_seed(0)),
        A.RandomFlip(p=0.5, generator=torch.Generator().manual_seed(1)),
    ]
    state = GeometryState.of(batch)
    expected = state.boxes
    for step in steps:
        plan = step.plan(state, step.sample_geometry(state))
        expected = mx.transform_boxes(expected, plan.matrix)
        state = advance(state, plan)
        assert len(state.moves) == 1  # nothing was read since the last step
        assert torch.equal(state.boxes, expected)
        assert state.moves == ()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("axis_aligned", [False, True])
def test_affine_box_mapping_equals_the_homogeneous_one_bit_for_bit(dtype, axis_aligned):
    """`transform_boxes(..., affine=True)` leaves out the divide by w = 1, and maps a scale and
    translation (flips included) by two corners instead of four: same bits."""
    g = torch.Generator().manual_seed(3)
    boxes = torch.rand((6, 9, 4), generator=g) * 700 - 50
    boxes = torch.cat([boxes[..., :2].minimum(boxes[..., 2:]),
                       boxes[..., :2].maximum(boxes[..., 2:])], dim=-1)
    boxes[0, :3] = 0.0  # padding slots
    degrees = torch.zeros(6) if axis_aligned else torch.rand(6, generator=g) * 90 - 45
    matrix = mx.rotation_scale(degrees, torch.rand(6, generator=g) + 0.5).to(dtype)
    if axis_aligned:
        matrix[1, 0, 0] *= -1  # a horizontal flip
        matrix[2, 1, 1] *= -1  # a vertical one
    matrix[:, :2, 2] = torch.rand((6, 2), generator=g).to(dtype) * 100
    general = mx.transform_boxes(boxes, matrix)
    assert torch.equal(mx.transform_boxes(boxes, matrix, affine=True), general)
    skewed = matrix.clone()
    skewed[:, 2, 0] = 1e-3  # not affine: the flag is a promise the caller must keep
    assert not torch.equal(mx.transform_boxes(boxes, skewed, affine=True),
                           mx.transform_boxes(boxes, skewed))
