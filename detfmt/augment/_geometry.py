"""Geometric modules as matrices, and the engine that fuses consecutive ones into one warp.

Each geometric module draws its parameters from a `GeometryState` (image size, valid regions,
the boxes as they would be after the earlier fused steps) and turns them into a `Plan`: a
(B, 3, 3) matrix, the output size and the area factor box filters compare against. The engine
multiplies the plans, resamples the image once and pushes the original boxes through the
product once, then clips and filters them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

from detfmt.augment import _backend
from detfmt.augment._base import Augmentation, Params, fill_for, image_hw
from detfmt.augment._matrix import clip_boxes, eye, transform_boxes, transform_points
from detfmt.augment._memory import empty_hwc
from detfmt.augment._warp import warp_images
from detfmt.augment.sanitize import BoxChange, BoxRule, keeps_moved, kept_box_fields
from detfmt.errors import UsageError
from detfmt.torch.batch import Batch

if TYPE_CHECKING:
    from detfmt.augment.tiles import TiledSource

INTERPOLATIONS = ("bilinear", "nearest")


@dataclasses.dataclass(frozen=True)
class GeometryState:
    """What a geometric step may look at when it draws parameters.

    Attributes:
        batch_size: B.
        image_size: (height, width) of the canvas at this step.
        sizes: (B, 2) valid (h, w) regions at the top-left, or None for the full canvas.
        unmapped_boxes: (B, M, 4) boxes before the ``moves`` (not clipped).
        mask: (B, M) bool.
        device: where the images live.
        moves: (B, 3, 3) matrices of earlier steps not yet applied to ``unmapped_boxes``.
    """

    batch_size: int
    image_size: tuple[int, int]
    sizes: torch.Tensor | None
    unmapped_boxes: torch.Tensor
    mask: torch.Tensor
    device: torch.device
    moves: tuple[torch.Tensor, ...] = ()

    @property
    def boxes(self) -> torch.Tensor:
        """(B, M, 4) boxes at this step (not clipped), for box-aware steps (IoU crop).

        Mapped on first read, through each earlier step in turn (as if mapped eagerly): most
        pipelines have no step that reads them.
        """
        if self.moves:
            boxes = self.unmapped_boxes
            for matrix in self.moves:
                boxes = transform_boxes(boxes, matrix)
            object.__setattr__(self, "unmapped_boxes", boxes)
            object.__setattr__(self, "moves", ())
        return self.unmapped_boxes

    @classmethod
    def of(cls, batch: Batch) -> GeometryState:
        return cls(
            batch_size=len(batch),
            image_size=image_hw(batch.images),
            sizes=batch.sizes,
            unmapped_boxes=batch.boxes.to(torch.float32),
            mask=batch.mask,
            device=batch.images.device,
        )

    def content_hw(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(B,) float64 heights and widths of the valid regions."""
        if self.sizes is None:
            full = torch.tensor(self.image_size, dtype=torch.float64, device=self.device)
            full = full.expand(self.batch_size, 2)
        else:
            full = self.sizes.to(device=self.device, dtype=torch.float64)
        return full[:, 0], full[:, 1]


@dataclasses.dataclass(frozen=True)
class Plan:
    """One geometric step: source->output matrix (B, 3, 3), output size, area factor (B,)."""

    matrix: torch.Tensor
    out_size: tuple[int, int]
    area_scale: torch.Tensor


class GeometricTransform(Augmentation):
    """A geometric module: parameters -> `Plan`; `Compose` fuses runs of these into one warp.

    Attributes:
        fill: border value on the uint8 scale (114 as Ultralytics).
        interpolation: "bilinear" or "nearest".
        box_filter: rule applied after clipping (None: only empty boxes are dropped).
        affine_only: static promise that the matrix has no perspective row.
    """

    affine_only: bool = True
    # Whether `plan`/`sample_geometry` read the valid region (`GeometryState.content_hw`); the
    # fused engine maps the region through earlier steps only when a later step reads it.
    reads_valid_region: bool = False

    def __init__(
        self,
        *,
        fill: float = 114.0,
        interpolation: str = "bilinear",
        box_filter: BoxRule | None = None,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__(generator)
        if interpolation not in INTERPOLATIONS:
            raise UsageError(
                f"interpolation must be one of {INTERPOLATIONS}, got {interpolation!r}"
            )
        self.fill = float(fill)
        self.interpolation = interpolation
        self.box_filter = box_filter

    def sample_geometry(self, state: GeometryState) -> Params:
        """Draw parameters for the canvas described by ``state``."""
        return {}

    def plan(self, state: GeometryState, params: Params) -> Plan:
        """The matrix, output size and area factor for ``params``."""
        raise NotImplementedError

    def sample(self, batch: Batch) -> Params:
        return self.sample_geometry(GeometryState.of(batch))

    def apply(self, batch: Batch, params: Params) -> Batch:
        return apply_geometric(batch, [self], [params])


# Mapped corners within this of a pixel edge count as on it (float error, not content).
_EXTENT_TOLERANCE = 1e-3


def mapped_extent(
    sizes: torch.Tensor | None,
    image_size: tuple[int, int],
    matrix: torch.Tensor,
    out_size: tuple[int, int],
    dtype: torch.dtype = torch.int32,
    affine: bool = False,
) -> torch.Tensor:
    """(B, 2) (h, w) of the top-left region of the output that holds every real pixel.

    The valid region ``[0, w] x [0, h]`` of each sample (``sizes``, else the whole canvas) goes
    through ``matrix`` (corners, with the perspective divide) to a quadrilateral; the output
    extent reaches to the rightmost and lowest point of its part inside the output, rounded up
    to whole pixels. Pixels outside it are border only. (The mapped corners alone would
    overstate it when a rotated or sheared region leaves the output through its top or bottom
    edge.) At least one pixel, so a crop to it is never empty. ``affine``: every matrix's last
    row is 0 0 1 (`transform_points`).
    """
    batch = matrix.shape[0]
    if sizes is None:
        hw = torch.tensor(image_size, dtype=torch.float64, device=matrix.device).expand(batch, 2)
    else:
        hw = sizes.to(device=matrix.device, dtype=torch.float64)
    if _scale_and_shift_on_host(matrix):
        return _rectangle_extent(hw, matrix.to(torch.float64), out_size).to(dtype)
    zeros = torch.zeros_like(hw[:, 0])
    corners = torch.stack(  # in order around the region: (0, 0), (w, 0), (w, h), (0, h)
        [zeros, zeros, hw[:, 1], zeros, hw[:, 1], hw[:, 0], zeros, hw[:, 0]], dim=-1
    ).view(batch, 4, 2)
    quad = transform_points(corners, matrix.to(torch.float64), affine)
    out_h, out_w = out_size
    far = _far_corner_inside(quad, float(out_h), float(out_w))
    width = torch.ceil(far[:, 0] - _EXTENT_TOLERANCE).clamp(1, out_w)
    height = torch.ceil(far[:, 1] - _EXTENT_TOLERANCE).clamp(1, out_h)
    return torch.stack([height, width], dim=-1).to(dtype)


def _scale_and_shift_on_host(matrix: torch.Tensor) -> bool:
    """Whether every matrix is a finite scale and translation (last row 0 0 1), read on the host
    (eager CPU tensors only: elsewhere the check would be a device sync)."""
    if matrix.device.type != "cpu" or matrix.requires_grad or torch.compiler.is_compiling():
        return False
    m = matrix.numpy()
    if m[:, 0, 1].any() or m[:, 1, 0].any() or m[:, 2, :2].any() or (m[:, 2, 2] != 1).any():
        return False
    return bool(abs(m).max() < float("inf"))  # False for a NaN too


def _rectangle_extent(
    hw: torch.Tensor, matrix: torch.Tensor, out_size: tuple[int, int]
) -> torch.Tensor:
    """`mapped_extent` (float64, before the cast) where every matrix is a finite scale and
    translation (`_scale_and_shift_on_host`): each region maps to an axis-aligned rectangle.

    The general path maps corner coordinates as ``x * s + y * 0 + t``: the values of
    ``x * s + t``, so two corners give the rectangle, and it then takes the rectangle branch of
    `_far_corner_inside` (or, when the rectangle is inside the output, its largest corner,
    which gives the same whole pixels after the rounding up and the clamp to the output).
    Here that is one expression in (h, w) order: the far side clamped to the output, rounded
    up, at least 1; 1 where the rectangle misses the output.
    """
    tol = _EXTENT_TOLERANCE
    scale = torch.diagonal(matrix[:, :2, :2], dim1=1, dim2=2).flip(-1)  # (sy, sx)
    shift = matrix[:, :2, 2].flip(-1)  # (ty, tx): the image of corner (0, 0)
    far_corner = hw * scale + shift
    near, far = torch.minimum(shift, far_corner), torch.maximum(shift, far_corner)
    limit = hw.new_tensor(out_size)
    overlaps = ((far >= -tol) & (near <= limit + tol)).all(dim=-1, keepdim=True)
    extent = torch.ceil(torch.minimum(far, limit) - tol).clamp_min(1)
    return torch.where(overlaps, extent, 1.0)


def _far_corner_inside(quad: torch.Tensor, height: float, width: float) -> torch.Tensor:
    """(B, 2) largest x and largest y of a convex quadrilateral (B, 4, 2) (vertices in order)
    clipped to ``[0, width] x [0, height]``; 0 where nothing of it is inside.

    The clipped polygon's vertices are among: the quadrilateral's own vertices inside the box,
    the points where its edges cross the box's four sides, and the box's corners inside it.
    """
    low = quad.new_tensor([0.0, 0.0])
    high = quad.new_tensor([width, height])
    if quad.device.type == "cpu" and not torch.compiler.is_compiling():  # host checks
        if bool(_in_box(quad, low, high).all()):
            return quad.amax(dim=1)  # the whole quadrilateral is inside
        if _axis_aligned(quad):
            return _far_corner_inside_rectangle(quad, low, high)
    return _far_corner_inside_quad(quad, height, width)


def _in_box(points: torch.Tensor, low: torch.Tensor, high: torch.Tensor) -> torch.Tensor:
    tol = _EXTENT_TOLERANCE
    return ((points >= low - tol) & (points <= high + tol)).all(dim=-1)


def _axis_aligned(quad: torch.Tensor) -> bool:
    """Whether every quadrilateral (vertices in order) is an axis-aligned rectangle (a scale
    and translation, as in the default Ultralytics augmentation)."""
    x, y = quad[..., 0], quad[..., 1]
    return bool(((y[:, 0] == y[:, 1]) & (x[:, 1] == x[:, 2]) & (y[:, 2] == y[:, 3])
                 & (x[:, 3] == x[:, 0])).all())


def _far_corner_inside_rectangle(
    quad: torch.Tensor, low: torch.Tensor, high: torch.Tensor
) -> torch.Tensor:
    """`_far_corner_inside` of axis-aligned rectangles: their far corner clamped to the box."""
    tol = _EXTENT_TOLERANCE
    near, far = quad.amin(dim=1), quad.amax(dim=1)
    overlaps = ((far >= low - tol) & (near <= high + tol)).all(dim=-1, keepdim=True)
    return torch.where(overlaps, far.clamp(min=low, max=high), 0.0)


def _far_corner_inside_quad(quad: torch.Tensor, height: float, width: float) -> torch.Tensor:
    """`_far_corner_inside` of any convex quadrilateral, in fixed-shape tensor steps."""
    tol = _EXTENT_TOLERANCE
    low = quad.new_tensor([0.0, 0.0])
    high = quad.new_tensor([width, height])
    batch = quad.shape[0]
    start = quad
    step = quad.roll(-1, dims=1) - start  # edges (B, 4, 2)
    # Where each edge crosses each side line x = 0, x = width, y = 0, y = height: (B, 4, 4).
    axes = [0, 0, 1, 1]
    along = step[..., axes]
    safe = torch.where(along == 0, torch.ones_like(along), along)
    t = (quad.new_tensor([0.0, width, 0.0, height]) - start[..., axes]) / safe
    crossing = start[:, :, None] + t[..., None] * step[:, :, None]
    crossed = (along != 0) & (t >= 0) & (t <= 1) & _in_box(crossing, low, high)
    box = quad.new_tensor([[0.0, 0.0], [width, 0.0], [width, height], [0.0, height]])
    # A box corner is inside the convex quadrilateral when it is on the same side of all four
    # edges (either orientation: a flip reverses the order of the vertices).
    rel = box[None, :, None, :] - start[:, None, :, :]  # (B, 4 corners, 4 edges, 2)
    cross = step[:, None, :, 0] * rel[..., 1] - step[:, None, :, 1] * rel[..., 0]
    scale = step.abs().amax(dim=(1, 2)).clamp_min(1.0)[:, None, None] * tol
    inside = (cross >= -scale).all(dim=-1) | (cross <= scale).all(dim=-1)
    points = torch.cat([quad, crossing.view(batch, 16, 2), box.expand(batch, 4, 2)], dim=1)
    keep = torch.cat([_in_box(quad, low, high), crossed.view(batch, 16), inside], dim=1)
    points = torch.where(keep[..., None], points.clamp(min=low, max=high), 0.0)
    return points.amax(dim=1)


def advance(state: GeometryState, plan: Plan, map_region: bool = True) -> GeometryState:
    """The state after a step: boxes to be moved (unclipped, on first read), canvas resized,
    valid region mapped (``map_region=False``: left as the full canvas, for when no later step
    reads it)."""
    sizes = None
    if map_region:
        sizes = mapped_extent(state.sizes, state.image_size, plan.matrix, plan.out_size)
    return dataclasses.replace(
        state, image_size=plan.out_size, sizes=sizes, moves=(*state.moves, plan.matrix)
    )


def plan_steps(
    batch: Batch,
    steps: Sequence[GeometricTransform],
    params: Sequence[Params | None] | None = None,
) -> tuple[Plan, list[Params], list[BoxRule]]:
    """Draw (or take) each step's parameters and multiply their matrices, last step leftmost."""
    state = GeometryState.of(batch)
    # The product starts at the first step's matrix and area factor, not at an identity and
    # ones: multiplying by those changes no number, it only costs ops.
    matrix: torch.Tensor | None = None
    area_scale: torch.Tensor | None = None
    used: list[Params] = []
    rules: list[BoxRule] = []
    for i, step in enumerate(steps):
        given = params[i] if params is not None else None
        step_params = given if given is not None else step.sample_geometry(state)
        plan = step.plan(state, step_params)
        step_matrix = plan.matrix.to(torch.float32)
        step_area = plan.area_scale.to(torch.float32)
        if matrix is None or area_scale is None:
            matrix, area_scale = step_matrix, step_area
        else:
            matrix = torch.bmm(step_matrix, matrix)
            area_scale = area_scale * step_area
        later = steps[i + 1 :]
        state = advance(state, plan, any(s.reads_valid_region for s in later))
        used.append(step_params)
        if step.box_filter is not None:
            rules.append(step.box_filter)
    if matrix is None or area_scale is None:  # no steps
        matrix = eye(len(batch), state.device)
        area_scale = torch.ones(len(batch), device=state.device)
    return Plan(matrix, state.image_size, area_scale), used, rules


def apply_geometric(
    batch: Batch,
    steps: Sequence[GeometricTransform],
    params: Sequence[Params | None] | None = None,
    source: TiledSource | None = None,
    recolor: tuple[Augmentation, Params | None] | None = None,
    memory_format: torch.memory_format | None = None,
) -> Batch:
    """Apply consecutive geometric steps with one resample; stores each step's params.

    The image is resampled once through the product matrix (bilinear if any step asks for
    it); boxes go through the same product (4 corners -> min/max), are clipped to the output,
    and are kept where they were valid, pass `keeps_moved_box` (the rule for boxes a module
    moves) and every step's box filter; per-box extras stay with their slots.
    ``source`` (OpenCV backend only): the images to read, as a `TiledSource` (a deferred
    `Mosaic` canvas); ``batch.images`` then only gives the shape. ``recolor``: a module that
    follows the warp and ``recolours_in_warp`` (`RandomHSV`), with its parameters or None to
    draw them (after the geometric steps', as when it runs on its own); on the OpenCV backend
    it recolours each sample as it is warped by its ``hsv_gains`` (no intermediate batch),
    elsewhere its ``apply`` runs on the warped batch.
    ``memory_format``: the layout of the images returned (None: the warp's own; the OpenCV
    backend writes either layout directly).
    """
    with _backend.small_ops(batch.images):
        out = _apply_geometric(batch, steps, params, source, recolor, memory_format)
    if memory_format is not None and not out.images.is_contiguous(memory_format=memory_format):
        out = out.replace(images=out.images.contiguous(memory_format=memory_format))
    return out


def _identity_on_cpu(images: torch.Tensor, matrix: torch.Tensor) -> bool:
    """Every sample's matrix is the identity (eager uint8 CPU batches only: a host check)."""
    if images.device.type != "cpu" or images.dtype != torch.uint8 or images.ndim != 4:
        return False
    if torch.compiler.is_compiling():
        return False
    return bool(torch.equal(matrix, eye(matrix.shape[0], matrix.device, matrix.dtype)))


def _copy_valid(
    images: torch.Tensor,
    matrix: torch.Tensor,
    out_size: tuple[int, int],
    *,
    fill: float,
    sizes: torch.Tensor | None = None,
    **_: Any,
) -> torch.Tensor:
    """The warp through identity matrices, as copies: each valid region, fill elsewhere.

    Bit-identical to resampling (every output pixel centre lands on its source pixel centre)
    at the cost of one copy instead of a resample.
    """
    batch, channels, height, width = images.shape
    out_h, out_w = out_size
    out = empty_hwc((batch, out_h, out_w, channels), images.dtype)
    out.fill_(int(fill))
    regions = sizes.tolist() if sizes is not None else [(height, width)] * batch
    source = images.permute(0, 2, 3, 1).numpy()
    target = out.numpy()
    for b, (h, w) in enumerate(regions):
        h, w = min(int(h), out_h, height), min(int(w), out_w, width)
        target[b, :h, :w] = source[b, :h, :w]
    return out.permute(0, 3, 1, 2)


def _apply_geometric(
    batch: Batch,
    steps: Sequence[GeometricTransform],
    params: Sequence[Params | None] | None,
    source: TiledSource | None,
    recolor: tuple[Augmentation, Params | None] | None,
    memory_format: torch.memory_format | None,
) -> Batch:
    total, used, rules = plan_steps(batch, steps, params)
    for step, step_params in zip(steps, used, strict=True):
        step.last_params = step_params
    hsv_params: Params | None = None
    if recolor is not None:
        module, hsv_params = recolor
        if hsv_params is None:
            hsv_params = module.sample(batch)
        module.last_params = hsv_params
    interpolation = "bilinear" if any(s.interpolation == "bilinear" for s in steps) else "nearest"
    affine_only = all(s.affine_only for s in steps)
    # The boxes and the valid region before the warp, which does not read them: these small
    # ops then run while their code and data are still in the caches the warp would evict.
    before = batch.boxes.to(torch.float32)
    after = transform_boxes(before, total.matrix, affine_only)
    clipped = clip_boxes(after, *total.out_size)
    change = BoxChange(before, after, clipped, total.area_scale, total.out_size)
    keep = keeps_moved(change)
    for rule in rules:
        keep = keep & rule(change)
    kept = kept_box_fields(batch, keep, clipped)
    dtype = batch.sizes.dtype if batch.sizes is not None else torch.int32
    sizes = mapped_extent(
        batch.sizes, image_hw(batch.images), total.matrix, total.out_size, dtype, affine_only
    )
    warp = warp_images
    options: dict[str, Any] = {}
    opencv = source is not None or _backend.use_opencv(batch.images)
    if source is None and _identity_on_cpu(batch.images, total.matrix):
        warp = _copy_valid  # e.g. a letterbox of images already at the target size
    elif opencv:
        from detfmt.augment._opencv import warp_images_opencv as warp  # cv2 and numpy on demand

        options["source"] = source
        options["planar"] = memory_format == torch.contiguous_format
        if hsv_params is not None and batch.images.shape[1] == 3:
            options["hsv"] = recolor[0].hsv_gains(hsv_params)
    images = warp(
        batch.images,
        total.matrix,
        total.out_size,
        fill=fill_for(batch.images, steps[0].fill),
        interpolation=interpolation,
        sizes=batch.sizes,
        affine_only=affine_only,
        **options,
    )
    device = batch.sizes.device if batch.sizes is not None else batch.images.device
    out = batch.replace(images=images, sizes=sizes.to(device), **kept)
    if recolor is not None and "hsv" not in options:
        out = recolor[0].apply(out, hsv_params)
    return out
