"""The geometric bookkeeping's shortcuts give exactly the numbers of the general forms.

Each shortcut (fewer tensor ops for the same matrices, boxes, masks and sizes) is checked bit
for bit against the general form on adversarial inputs: zeros of both signs, NaN, infinities,
boxes on and just past the image edges, flips, regions inside, across and outside the output.
"""

from __future__ import annotations

import math

import pytest
import torch

from detfmt.augment import _geometry
from detfmt.augment import _matrix as mx
from detfmt.augment import _random as rnd
from detfmt.augment.geometric import Letterbox, RandomAffine
from detfmt.augment.sanitize import BoxChange, UltralyticsCandidates, keeps_moved, keeps_moved_box


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype.is_floating_point:
        ints = {torch.float32: torch.int32, torch.float64: torch.int64}[a.dtype]
        return torch.equal(a.contiguous().view(ints), b.contiguous().view(ints))
    return torch.equal(a, b)


def _nasty_coordinates(g: torch.Generator, shape: tuple[int, ...], edge: float) -> torch.Tensor:
    """Coordinates around [0, edge]: random, exactly on 0 / edge, -0.0, NaN, +-inf."""
    x = (torch.rand(shape, generator=g) * 1.4 - 0.2) * edge
    specials = torch.tensor([0.0, -0.0, edge, edge + 1e-3, -1e-3, math.nan, math.inf, -math.inf])
    pick = torch.randint(0, 3 * len(specials), shape, generator=g)
    return torch.where(pick < len(specials), specials[pick.clamp_max(len(specials) - 1)], x)


def _reference_keeps_moved_box(after, clipped, image_size):
    """The per-side form of the rule (as written before the pairwise one)."""
    height, width = image_size
    w, h = after[..., 2] - after[..., 0], after[..., 3] - after[..., 1]
    wc, hc = clipped[..., 2] - clipped[..., 0], clipped[..., 3] - clipped[..., 1]
    visible = (wc > 0) & (hc > 0)
    degenerate = ((w == 0) & (h >= 0)) | ((h == 0) & (w >= 0))
    touches = (
        (after[..., 0] <= width)
        & (after[..., 2] >= 0)
        & (after[..., 1] <= height)
        & (after[..., 3] >= 0)
    )
    return visible | (degenerate & touches)


def _boxes_with_zero_sides(g: torch.Generator, edge: float) -> torch.Tensor:
    boxes = _nasty_coordinates(g, (6, 40, 4), edge)
    # Many boxes with exactly one or two zero sides (lines and points), some inverted.
    line = torch.rand(6, 40, generator=g) < 0.3
    boxes[..., 2] = torch.where(line, boxes[..., 0], boxes[..., 2])
    point = torch.rand(6, 40, generator=g) < 0.15
    boxes[..., 3] = torch.where(point, boxes[..., 1], boxes[..., 3])
    return boxes


@pytest.mark.parametrize("image_size", [(64, 64), (48, 80)])
@pytest.mark.parametrize("seed", range(4))
def test_keep_rule_on_pairs_matches_the_per_side_rule(image_size, seed):
    g = torch.Generator().manual_seed(seed)
    after = _boxes_with_zero_sides(g, float(max(image_size)))
    clipped = mx.clip_boxes(after, *image_size)
    want = _reference_keeps_moved_box(after, clipped, image_size)
    assert torch.equal(keeps_moved_box(after, clipped, image_size), want)
    change = BoxChange(after, after, clipped, torch.ones(6), image_size)
    assert torch.equal(keeps_moved(change), want)
    assert want.any() and not want.all()  # the data reaches both outcomes


@pytest.mark.parametrize("seed", range(4))
def test_ultralytics_candidates_on_pairs_match_the_per_side_form(seed):
    g = torch.Generator().manual_seed(seed)
    before = _boxes_with_zero_sides(g, 64.0)
    clipped = mx.clip_boxes(_boxes_with_zero_sides(g, 64.0), 64, 64)
    # Boxes exactly on each threshold: a side of 2 px, an aspect ratio of 100, an area ratio
    # of 0.1 (w2 * h2 = 0.1 * w1 * h1 with area_scale 1).
    on_edges = [[1.0, 1.0, 3.0, 9.0], [0.0, 0.0, 300.0, 3.0], [0.0, 0.0, 3.0, 300.0]]
    clipped[0, :3] = torch.tensor(on_edges)
    before[0, :3] = clipped[0, :3]
    clipped[1, 0] = torch.tensor([0.0, 0.0, 4.0, 5.0])
    before[1, 0] = torch.tensor([0.0, 0.0, 10.0, 20.0])
    area_scale = torch.tensor([1.0, 1.0, 2.25, 0.0, -0.0, 1.5])
    rule = UltralyticsCandidates()
    w1, h1 = before[..., 2] - before[..., 0], before[..., 3] - before[..., 1]
    w2, h2 = clipped[..., 2] - clipped[..., 0], clipped[..., 3] - clipped[..., 1]
    area1 = w1 * h1 * area_scale[:, None]
    ar = torch.maximum(w2 / (h2 + rule.eps), h2 / (w2 + rule.eps))
    want = (
        (w2 > rule.wh_thr)
        & (h2 > rule.wh_thr)
        & (w2 * h2 / (area1 + rule.eps) > rule.area_thr)
        & (ar < rule.ar_thr)
    )
    got = rule(BoxChange(before, before, clipped, area_scale, (64, 64)))
    assert torch.equal(got, want)
    assert want.any() and not want.all()


@pytest.mark.parametrize("size", [(64, 64), (48, 80)])
def test_clip_boxes_is_the_per_axis_clamp_bit_for_bit(size):
    g = torch.Generator().manual_seed(3)
    boxes = _nasty_coordinates(g, (4, 30, 4), 90.0)
    height, width = size
    x = boxes[..., 0::2].clamp(0.0, float(width))
    y = boxes[..., 1::2].clamp(0.0, float(height))
    want = torch.stack([x[..., 0], y[..., 0], x[..., 1], y[..., 1]], dim=-1)
    assert _same_bits(mx.clip_boxes(boxes, height, width), want)


def _scale_shift_matrices(g: torch.Generator, batch: int, dtype=torch.float32) -> torch.Tensor:
    scale = (torch.rand(batch, 2, generator=g) * 3 + 0.05) * torch.where(
        torch.rand(batch, 2, generator=g) < 0.3, -1.0, 1.0
    )
    shift = (torch.rand(batch, 2, generator=g) - 0.5) * 300
    shift[::5] = 0.0
    m = mx.eye(batch, torch.device("cpu"), dtype)
    m[:, 0, 0], m[:, 1, 1] = scale[:, 0], scale[:, 1]
    m[:, 0, 2], m[:, 1, 2] = shift[:, 0], shift[:, 1]
    return m


@pytest.mark.parametrize("seed", range(3))
def test_scale_and_shift_boxes_match_the_four_corner_path(monkeypatch, seed):
    g = torch.Generator().manual_seed(seed)
    matrix = _scale_shift_matrices(g, 16)
    boxes = _boxes_with_zero_sides(g, 100.0).repeat(3, 1, 1)[:16]
    fast = mx.transform_boxes(boxes, matrix, affine=True)
    # Both corners as contiguous tensors (x * s + t), then their min and max: bit for bit, down
    # to the bits of a NaN (min/max of views of one (B, M, 2, 2) product take another kernel
    # path, which writes another NaN).
    scale = torch.diagonal(matrix[:, :2, :2], dim1=1, dim2=2)[:, None, :]
    shift = matrix[:, None, :2, 2]
    first, second = boxes[..., :2] * scale + shift, boxes[..., 2:] * scale + shift
    two_corners = torch.cat([torch.minimum(first, second), torch.maximum(first, second)], -1)
    assert _same_bits(fast, two_corners)
    # The general path's numbers for finite boxes (there y * 0 spreads a NaN or inf of y to x).
    finite = boxes.isfinite().all(-1, keepdim=True)
    monkeypatch.setattr(mx, "_axis_aligned_on_host", lambda m: False)
    general = mx.transform_boxes(boxes, matrix, affine=True)
    assert torch.equal(torch.where(finite, fast, 0.0), torch.where(finite, general, 0.0))
    assert finite.any() and not finite.all()


def _extent_cases(seed: int) -> tuple[torch.Tensor, torch.Tensor, tuple[int, int]]:
    """Regions and scale-and-translate matrices whose images lie inside the output, across its
    edges, just past them (within and beyond the tolerance) and outside it."""
    g = torch.Generator().manual_seed(seed)
    batch = 64
    out_size = (48, 80)
    sizes = torch.randint(1, 120, (batch, 2), generator=g, dtype=torch.int32)
    matrix = _scale_shift_matrices(g, batch, torch.float32)
    # Put some far corners exactly on / near the output edge.
    w = sizes[:, 1].to(torch.float32)
    matrix[::4, 0, 0] = 1.0
    matrix[::4, 0, 2] = out_size[1] - w[::4] + torch.tensor([0.0, 5e-4, 2e-3, -5e-4]).repeat(4)
    # Far corners just past a whole pixel inside the output (within and beyond the tolerance).
    matrix[3::4, 0, 0] = 1.0
    matrix[3::4, 0, 2] = 30.0 - w[3::4] + torch.tensor([5e-4, 2e-3, 0.0, 0.25]).repeat(4)
    matrix[1::7, 1, 2] = 200.0  # below the output
    matrix[2::7, 0, 2] = -500.0  # left of it
    return sizes, matrix, out_size


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("affine", [True, False])
def test_mapped_extent_of_rectangles_matches_the_quadrilateral_path(monkeypatch, seed, affine):
    sizes, matrix, out_size = _extent_cases(seed)
    taken = []
    rectangle = _geometry._rectangle_extent
    monkeypatch.setattr(
        _geometry, "_rectangle_extent", lambda *a: taken.append(1) or rectangle(*a)
    )
    fast = _geometry.mapped_extent(sizes, (130, 130), matrix, out_size, affine=affine)
    assert taken, "the rectangle path was not taken"
    monkeypatch.setattr(_geometry, "_scale_and_shift_on_host", lambda m: False)
    general = _geometry.mapped_extent(sizes, (130, 130), matrix, out_size, affine=affine)
    assert torch.equal(fast, general)
    # Both clamps and the empty case are reached.
    assert (general == 1).any() and (general[:, 1] == out_size[1]).any()


def test_the_rectangle_check_refuses_other_matrices():
    matrix = _extent_cases(0)[1]
    others = [matrix.clone() for _ in range(6)]
    others[0][:, 0, 1] = 0.1  # shear or rotation
    others[1][5, 1, 0] = -0.1
    others[2][:, 2, 0] = 1e-4  # perspective
    others[3][2, 2, 1] = 1e-4
    others[4][3, 2, 2] = 2.0
    others[5][3, 0, 2] = math.nan
    for m in others:
        assert not _geometry._scale_and_shift_on_host(m)
    assert _geometry._scale_and_shift_on_host(matrix)


def _affine_params(g: torch.Generator, batch: int, zero: float) -> dict[str, torch.Tensor]:
    def filled(value: float) -> torch.Tensor:
        return torch.full((batch,), value)

    return {
        "degrees": filled(zero),
        "scale": torch.rand(batch, generator=g) + 0.5,
        "shear_x": filled(zero),
        "shear_y": filled(-zero),
        "perspective_x": filled(zero),
        "perspective_y": filled(zero),
        "translate_x": torch.rand(batch, generator=g) * 0.2 + 0.4,
        "translate_y": torch.rand(batch, generator=g) * 0.2 + 0.4,
    }


@pytest.mark.parametrize("zero", [0.0, -0.0])
@pytest.mark.parametrize("size", [(640, 640), (500, 333)])
def test_random_affine_without_rotation_builds_the_product_exactly(monkeypatch, zero, size):
    g = torch.Generator().manual_seed(5)
    module = RandomAffine(size=size)
    state = _geometry.GeometryState(
        batch_size=32,
        image_size=(1280, 1001),
        sizes=None,
        unmapped_boxes=torch.zeros(32, 1, 4),
        mask=torch.zeros(32, 1, dtype=torch.bool),
        device=torch.device("cpu"),
    )
    params = _affine_params(g, 32, zero)
    assert mx.all_zero_on_host(params["degrees"], params["shear_y"])
    fast = module.plan(state, params)
    monkeypatch.setattr(mx, "all_zero_on_host", lambda *v: False)
    general = module.plan(state, params)
    assert torch.equal(fast.matrix, general.matrix)  # values (a zero's sign may differ)
    assert _same_bits(fast.area_scale, general.area_scale)
    assert fast.out_size == general.out_size


def test_all_zero_on_host_sees_any_nonzero_value():
    zeros = torch.zeros(8)
    one_off = zeros.clone()
    one_off[5] = 1e-30
    assert mx.all_zero_on_host(zeros, -zeros)
    assert not mx.all_zero_on_host(zeros, one_off)
    assert not mx.all_zero_on_host(torch.full((8,), math.nan))


@pytest.mark.parametrize("size", [1, 5, 8, 64])
def test_uniform_rows_are_the_row_by_row_draws_bit_for_bit(size):
    bounds = [(-0.0, 0.0), (0.5, 1.5), (0.4, 0.6), (-10.0, 10.0), (-3e-4, 3e-4), (0.0, 0.0)]
    device = torch.device("cpu")
    g = torch.Generator().manual_seed(size)
    want = [rnd.uniform(g, (size,), low, high, device) for low, high in bounds]
    after_want = torch.rand(3, generator=g)
    g = torch.Generator().manual_seed(size)
    got = rnd.uniform_rows(g, bounds, size, device)
    assert len(got) == len(want)
    for a, b in zip(got, want, strict=True):
        assert _same_bits(a, b)
    assert torch.equal(torch.rand(3, generator=g), after_want)  # the stream moved as far


@pytest.mark.parametrize("extent", [64.0, torch.tensor([64.0, 31.0, 7.0, 1280.0])])
def test_flip_and_translation_matrices_match_identity_with_written_entries(extent):
    flip = torch.tensor([True, False, True, False])
    for vertical in (False, True):
        want = mx.eye(4, torch.device("cpu"))
        row = 1 if vertical else 0
        want[:, row, row] = torch.where(flip, -1.0, 1.0)
        shift = torch.as_tensor(extent, dtype=torch.float32)
        want[:, row, 2] = torch.where(flip, shift, 0.0)
        got = mx.vertical_flip(flip, extent) if vertical else mx.horizontal_flip(flip, extent)
        assert _same_bits(got, want)
    tx, ty = torch.tensor([1.5, -0.0, 3.0, -7.25]), torch.tensor([0.0, 2.0, -1.0, 9.5])
    want = mx.eye(4, torch.device("cpu"))
    want[:, 0, 2], want[:, 1, 2] = tx, ty
    assert _same_bits(mx.translation(tx, ty), want)


@pytest.mark.parametrize("center", [True, False])
@pytest.mark.parametrize("scaleup", [True, False])
def test_letterbox_matrix_is_the_translation_times_scaling(center, scaleup):
    g = torch.Generator().manual_seed(9)
    sizes = torch.randint(1, 2000, (64, 2), generator=g, dtype=torch.int32)
    sizes[:4] = torch.tensor([[1, 1], [2, 300], [640, 640], [1999, 3]], dtype=torch.int32)
    state = _geometry.GeometryState(
        batch_size=64,
        image_size=(2000, 2000),
        sizes=sizes,
        unmapped_boxes=torch.zeros(64, 1, 4),
        mask=torch.zeros(64, 1, dtype=torch.bool),
        device=torch.device("cpu"),
    )
    module = Letterbox((480, 640), center=center, scaleup=scaleup)
    plan = module.plan(state, {})
    # The product it stands for, from the same parameters.
    h, w = state.content_hw()
    r = torch.minimum(480 / h, 640 / w)
    r = r if scaleup else r.clamp(max=1.0)
    new_w, new_h = torch.round(w * r).clamp_min(1), torch.round(h * r).clamp_min(1)
    zero = torch.zeros_like(new_w)
    left = torch.floor((640 - new_w) / 2) if center else zero
    top = torch.floor((480 - new_h) / 2) if center else zero
    want = torch.bmm(mx.translation(left, top), mx.scaling(new_w / w, new_h / h))
    assert torch.equal(plan.matrix, want.to(torch.float32))

