"""Warps cut each sample's valid region exactly: no fill blended into content, none outside.

Content is one flat colour per channel inside each sample's valid region (``sizes``), padding
(0, as the Loader pads) outside it. After a warp, an output pixel whose centre maps inside the
valid region must hold exactly the content colour (its edge replicated, never blended with the
fill or the padding), and every other pixel exactly the fill: in particular every pixel outside
the ``sizes`` the module reports. The reference is the matrix itself, in float64, per pixel, so
a rotated region is checked against its own outline, not its bounding box.
"""

from __future__ import annotations

import pytest
import torch

import detfmt.augment as A
from detfmt.augment._geometry import plan_steps
from detfmt.torch import Batch

from ._helpers import make_batch

CONTENT = (200, 30, 250)
FILL = 114
PAD = 0
# Pixel centres this close to the region's edge may fall either way in float32.
TIE = 1e-3


def content_batch(canvas: tuple[int, int], sizes: list[tuple[int, int]]) -> Batch:
    """Flat ``CONTENT`` in each (h, w) top-left region of a ``canvas``, ``PAD`` elsewhere."""
    height, width = canvas
    hw = torch.tensor(sizes, dtype=torch.int32)
    rows = torch.arange(height)[None, :, None] < hw[:, 0, None, None]
    cols = torch.arange(width)[None, None, :] < hw[:, 1, None, None]
    colour = torch.tensor(CONTENT, dtype=torch.uint8)[None, :, None, None]
    images = torch.where((rows & cols)[:, None], colour, torch.tensor(PAD, dtype=torch.uint8))
    batch = len(sizes)
    boxes = torch.stack(
        [torch.zeros(batch), torch.zeros(batch), hw[:, 1].float(), hw[:, 0].float()], dim=-1
    )[:, None]
    return Batch(
        images=images.contiguous(memory_format=torch.channels_last),
        boxes=boxes,
        classes=torch.zeros(batch, 1, dtype=torch.int64),
        mask=torch.ones(batch, 1, dtype=torch.bool),
        sizes=hw,
    )


def source_points(matrix: torch.Tensor, out_size: tuple[int, int]) -> torch.Tensor:
    """(B, H, W, 2) float64 source point of every output pixel centre (perspective divided)."""
    out_h, out_w = out_size
    v, u = torch.meshgrid(
        torch.arange(out_h, dtype=torch.float64) + 0.5,
        torch.arange(out_w, dtype=torch.float64) + 0.5,
        indexing="ij",
    )
    centres = torch.stack([u, v, torch.ones_like(u)], dim=-1)  # (H, W, 3)
    inverse = torch.linalg.inv(matrix.to(torch.float64))  # (B, 3, 3)
    mapped = torch.einsum("bij,hwj->bhwi", inverse, centres)
    return mapped[..., :2] / mapped[..., 2:]


def assert_cut_exactly(
    out: Batch, before: Batch, matrix: torch.Tensor, *, outside: int = FILL
) -> None:
    """Every pixel is the content colour where its centre maps into the valid region, else
    ``outside``; nothing but ``outside`` past ``out.sizes``. For a scale and translation the
    extent is tight too: its last row and column, or the ones before, hold content (a rotated
    region's far corner is a point: the pixel centres inside may stop well before it)."""
    images = out.images.to(torch.int16)
    out_size = tuple(images.shape[-2:])
    points = source_points(matrix, out_size)
    colour = torch.tensor(CONTENT, dtype=torch.int16)[:, None]
    for b in range(len(out)):
        h, w = before.sizes[b].tolist()
        x, y = points[b, ..., 0], points[b, ..., 1]
        inside = (x >= 0) & (x < w) & (y >= 0) & (y < h)
        near = torch.stack([x.abs(), (x - w).abs(), y.abs(), (y - h).abs()]).amin(dim=0) < TIE
        image = images[b]
        got_inside = image[:, inside & ~near]
        assert (got_inside == colour).all(), (
            f"sample {b} ({h}x{w}): content pixels {got_inside.unique().tolist()} "
            f"are not the content colour {CONTENT}"
        )
        got_outside = image[:, ~inside & ~near]
        assert (got_outside == outside).all(), (
            f"sample {b} ({h}x{w}): pixels outside the mapped region hold "
            f"{sorted(set(got_outside.unique().tolist()) - {outside})}"
        )
        eh, ew = out.sizes[b].tolist()
        beyond = torch.ones(out_size, dtype=torch.bool)
        beyond[:eh, :ew] = False
        assert (image[:, beyond] == outside).all(), f"sample {b}: content outside sizes {eh, ew}"
        rows, cols = torch.nonzero(inside, as_tuple=True)
        m = matrix[b]
        axis_aligned = bool(m[0, 1] == 0 and m[1, 0] == 0 and (m[2, :2] == 0).all())
        if len(rows) and axis_aligned:
            assert rows.max() >= eh - 2 and cols.max() >= ew - 2, f"sample {b}: sizes not tight"


def run_and_check(steps, batch: Batch, params=None, **kwargs) -> Batch:
    pipeline = A.Compose(steps, generator=torch.Generator().manual_seed(0))
    out = pipeline(batch, params=params)
    plan, _, _ = plan_steps(batch, pipeline.transforms, pipeline.last_params)
    assert tuple(out.images.shape[-2:]) == plan.out_size
    assert_cut_exactly(out, batch, plan.matrix, **kwargs)
    return out


SMALL = [(16, 16), (1, 1), (3, 7), (7, 3), (10, 5), (2, 16)]


@pytest.mark.parametrize("size", [64, 48, 50, (40, 72), (72, 30)])
@pytest.mark.parametrize("interpolation", ["bilinear", "nearest"])
def test_letterbox_of_small_images_cuts_the_content_exactly(backend, size, interpolation):
    """Letterbox(64) of 16x16 is a zoom of 4 (a blend would reach 2 px past ``sizes``), 1x1 to
    48 a zoom of 48; odd and non-square shapes put the content edge inside a pixel."""
    batch = content_batch((16, 16), SMALL)
    run_and_check([A.Letterbox(size, interpolation=interpolation)], batch)


def affine_params(batch: Batch, *, degrees: float, scale: float, perspective: float = 0.0):
    """RandomAffine's parameters with the zoom and rotation pinned (translation centred)."""
    n = len(batch)
    fixed = {"degrees": degrees, "scale": scale, "shear_x": 0.0, "shear_y": 5.0 if degrees else 0.0,
             "perspective_x": perspective, "perspective_y": -perspective,
             "translate_x": 0.5, "translate_y": 0.45}
    return {name: torch.full((n,), value) for name, value in fixed.items()}


@pytest.mark.parametrize(
    ("degrees", "scale", "perspective"),
    [(0.0, 3.0, 0.0), (0.0, 1.7, 0.0), (30.0, 2.5, 0.0), (-75.0, 4.0, 0.0), (20.0, 2.0, 4e-3)],
    ids=["zoom3", "zoom1.7", "rotate30-zoom2.5", "rotate-75-zoom4", "perspective"],
)
def test_random_affine_enlargement_cuts_the_content_exactly(backend, degrees, scale, perspective):
    batch = content_batch((20, 24), [(20, 24), (11, 9), (3, 17), (1, 2), (20, 5)])
    affine = A.RandomAffine(size=(60, 76), perspective=perspective)
    params = affine_params(batch, degrees=degrees, scale=scale, perspective=perspective)
    run_and_check([affine], batch, params=[params])


def test_letterbox_then_affine_cuts_the_content_exactly(backend):
    """The fused Letterbox -> RandomAffine warp (one resample through the product matrix)."""
    batch = content_batch((16, 20), [(16, 20), (5, 9), (1, 1), (12, 3)])
    steps = [A.Letterbox(40), A.RandomAffine(size=48)]
    for degrees, scale in ((0.0, 1.8), (25.0, 1.5)):
        params = [{}, affine_params(batch, degrees=degrees, scale=scale)]
        run_and_check(steps, batch, params=params)


def test_multiscale_resize_cuts_the_content_exactly(backend):
    """MultiScaleResize interpolates the whole padded canvas: the loader's padding must not
    blend into the content's edge, nor the content into the padding past ``sizes``."""
    batch = content_batch((12, 16), [(12, 16), (5, 7), (1, 1), (12, 3), (2, 16)])
    for size in ((48, 64), (40, 40), (8, 8)):
        module = A.MultiScaleResize(imgsz=64, stride=8)
        out = module(batch, {"size": size})
        scale = torch.tensor([[size[1] / 16, 0.0, 0.0], [0.0, size[0] / 12, 0.0], [0, 0, 1.0]])
        assert_cut_exactly(out, batch, scale.expand(len(batch), 3, 3), outside=PAD)


def test_backends_agree_on_small_enlargements():
    """With real (varying) content the two backends give the same cut and close values."""
    pytest.importorskip("cv2")

    batch = make_batch(5, 16, 20, 2, seed=3, smooth=True)
    batch = batch.replace(sizes=torch.tensor([[16, 20], [5, 9], [1, 1], [12, 3], [7, 20]]))
    cases = [
        ([A.Letterbox(64)], None),
        ([A.Letterbox(50), A.RandomAffine(size=56)],
         [{}, affine_params(batch, degrees=35.0, scale=2.0)]),
    ]
    for steps, params in cases:
        outs = {}
        for name in ("torch", "opencv"):
            previous = A.get_cpu_backend()
            A.set_cpu_backend(name)
            try:
                outs[name] = A.Compose(steps)(batch, params=params)
            finally:
                A.set_cpu_backend(previous)
        a, b = outs["torch"].images.int(), outs["opencv"].images.int()
        diff = (a - b).abs()
        assert diff.max().item() <= 8, f"{steps}: max diff {diff.max().item()}"
        assert (diff <= 2).float().mean().item() >= 0.99
        assert torch.equal(outs["torch"].sizes, outs["opencv"].sizes)


def test_region_cut_is_the_per_pixel_rule():
    """`_region_cut` (the OpenCV backend's fill: a rectangle for scale and translation, per-row
    spans otherwise, per pixel past a horizon) writes fill exactly where a pixel centre's source
    point lies outside [0, w) x [0, h)."""
    import numpy as np

    from detfmt.augment._region_cut import cut_to_region

    rng = np.random.default_rng(5)
    kinds = {"axis": 0, "affine": 0, "perspective": 0, "horizon": 0}
    for trial in range(400):
        kind = list(kinds)[trial % 4]
        forward = np.eye(3)
        forward[0, 0], forward[1, 1] = rng.uniform(0.1, 6, 2) * rng.choice([-1, 1], 2)
        forward[:2, 2] = rng.uniform(-40, 60, 2)
        if kind != "axis":
            forward[0, 1], forward[1, 0] = rng.uniform(-3, 3, 2)
        if kind == "perspective":
            forward[2, :2] = rng.uniform(-2e-3, 2e-3, 2)
        if kind == "horizon":
            forward[2, :2] = rng.uniform(-0.05, 0.05, 2)
        inverse = np.linalg.inv(forward)
        region = tuple(int(v) for v in rng.integers(1, 40, 2))
        out_h, out_w = (int(v) for v in rng.integers(1, 70, 2))
        got = np.zeros((out_h, out_w, 2), np.uint8)
        cut_to_region(got, inverse, region, 7)
        v, u = np.meshgrid(np.arange(out_h) + 0.5, np.arange(out_w) + 0.5, indexing="ij")
        mapped = np.einsum("ij,jhw->ihw", inverse, np.stack([u, v, np.ones_like(u)]))
        weight = np.where(np.abs(mapped[2]) < 1e-8, 1e-8, mapped[2])
        x, y = mapped[0] / weight, mapped[1] / weight
        inside = (x >= 0) & (x < region[1]) & (y >= 0) & (y < region[0])
        bounds = [np.abs(x), np.abs(x - region[1]), np.abs(y), np.abs(y - region[0])]
        sure = np.min(bounds, axis=0) > 1e-6
        want = np.where(inside, 0, 7)
        assert (got[..., 0][sure] == want[sure]).all(), (kind, forward.tolist(), region)
        assert (got[..., 0] == got[..., 1]).all()
        kinds[kind] += int(inside.any() and not inside.all())
    assert min(kinds.values()) >= 20, kinds  # each kind cut through the output often


def test_multiscale_padding_per_sample_equals_the_tensor_path(monkeypatch):
    """`padding_outside_regions` writes the CPU's per-sample slices and the device path's one
    ``torch.where`` alike, on non-uniform padding too."""
    from detfmt.augment import geometric

    batch = make_batch(5, 12, 16, 1, seed=9)
    sizes = torch.tensor([[12, 16], [5, 7], [1, 1], [12, 3], [2, 16]])
    resized = torch.randint(0, 256, (5, 3, 40, 56), dtype=torch.uint8)
    per_sample = geometric.padding_outside_regions(resized.clone(), batch.images, sizes)
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)  # the device path
    tensor_path = geometric.padding_outside_regions(resized.clone(), batch.images, sizes)
    assert torch.equal(per_sample, tensor_path)
    assert not torch.equal(per_sample, resized)
