"""Geometric modules: each is a per-sample 3x3 matrix (see `_matrix` for the convention)."""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F

from detfmt.augment import _matrix as mx
from detfmt.augment import _random as rnd
from detfmt.augment._base import (
    Augmentation,
    Params,
    as_size,
    check_non_negative,
    check_probability,
    image_hw,
)
from detfmt.augment._geometry import GeometricTransform, GeometryState, Plan, apply_geometric
from detfmt.augment.sanitize import (
    BoxRule,
    CenterInImage,
    UltralyticsCandidates,
    drop_boxes,
    keeps_moved_box,
)
from detfmt.errors import UsageError
from detfmt.torch.batch import Batch

_ULTRALYTICS_RULE = UltralyticsCandidates()
_CENTER_RULE = CenterInImage()


class Warp(GeometricTransform):
    """A fixed matrix (3, 3) or per-sample (B, 3, 3); for replays, tests and custom geometry."""

    def __init__(
        self,
        matrix: torch.Tensor,
        *,
        size: int | tuple[int, int] | None = None,
        fill: float = 114.0,
        interpolation: str = "bilinear",
        box_filter: BoxRule | None = None,
    ) -> None:
        super().__init__(fill=fill, interpolation=interpolation, box_filter=box_filter)
        matrix = torch.as_tensor(matrix, dtype=torch.float32)
        if matrix.shape[-2:] != (3, 3) or matrix.ndim not in (2, 3):
            raise UsageError(f"matrix must be (3, 3) or (B, 3, 3), got {tuple(matrix.shape)}")
        self.matrix = matrix
        self.size = as_size("size", size) if size is not None else None
        last_row = matrix[..., 2, :]
        self.affine_only = bool(
            torch.all(last_row[..., :2] == 0) and torch.all(last_row[..., 2] == 1)
        )

    def plan(self, state: GeometryState, params: Params) -> Plan:
        matrix = self.matrix.to(state.device).expand(state.batch_size, 3, 3)
        area = torch.linalg.det(matrix[:, :2, :2]).abs()
        return Plan(matrix, self.size or state.image_size, area)


ROUNDINGS = ("round", "ceil")


class LetterboxFit(NamedTuple):
    """`Letterbox.fit`: float64 (B, 3, 3) matrices, content sizes and scales (B,)."""

    matrix: torch.Tensor
    height: torch.Tensor  # round(h r) (or ceil, see `Letterbox`), at least 1
    width: torch.Tensor  # round(w r) (or ceil), at least 1
    sx: torch.Tensor
    sy: torch.Tensor


class Letterbox(GeometricTransform):
    """Resize keeping the aspect ratio and pad to ``size`` with 114 (Ultralytics ``LetterBox``).

    The scale is ``r = min(H / h, W / w)`` of each sample's valid region (``batch.sizes``, else
    the full image); the content is ``round(w r) x round(h r)`` and centred like Ultralytics
    (left = floor(pad / 2)). ``scaleup=False`` only shrinks.

    ``rounding`` sizes the content: ``"round"`` (the default) rounds half to even, as
    Ultralytics' ``LetterBox`` and torchvision do; ``"ceil"`` is ``min(ceil(w r), W) x
    min(ceil(h r), H)``, as Ultralytics' dataset resizes every image it trains and validates on
    (``BaseDataset.load_image``), so a 640x428 image letterboxed to 96 is 96x65, not 96x64.
    The Ultralytics presets (`yolo_train`, `yolo_val`) use ``"ceil"``.
    """

    reads_valid_region = True

    def __init__(
        self,
        size: int | tuple[int, int],
        *,
        center: bool = True,
        scaleup: bool = True,
        fill: float = 114.0,
        interpolation: str = "bilinear",
        box_filter: BoxRule | None = None,
        rounding: str = "round",
    ) -> None:
        super().__init__(fill=fill, interpolation=interpolation, box_filter=box_filter)
        self.size = as_size("size", size)
        self.center = bool(center)
        self.scaleup = bool(scaleup)
        self.rounding = check_rounding(rounding)

    def plan(self, state: GeometryState, params: Params) -> Plan:
        h, w = state.content_hw()
        fit = self.fit(h, w)
        area = (fit.sx * fit.sy).to(torch.float32)
        return Plan(fit.matrix.to(torch.float32), self.size, area)

    def fit(self, h: torch.Tensor, w: torch.Tensor) -> LetterboxFit:
        """Where valid regions of (B,) float64 heights ``h`` and widths ``w`` go: the one
        formula for `plan` and for `Mosaic`'s resized tiles (which need the content size)."""
        out_h, out_w = self.size
        # tensor / tensor: a true division, as Python's (``out_h / h`` is ``out_h * (1 / h)``
        # in torch, which puts 480 x 640 at 96 on 72.00000000000001 rows: 73 with ``ceil``)
        r = torch.minimum(h.new_tensor(float(out_h)) / h, w.new_tensor(float(out_w)) / w)
        if not self.scaleup:
            r = r.clamp(max=1.0)
        # At least one pixel: a 2x300 image letterboxed to 48 would otherwise get a width of 0
        # (a singular matrix).
        if self.rounding == "ceil":  # Ultralytics' load_image: min(ceil(w0 * r), imgsz)
            new_w = torch.ceil(w * r).clamp(1, out_w)
            new_h = torch.ceil(h * r).clamp(1, out_h)
        else:
            new_w, new_h = torch.round(w * r).clamp_min(1), torch.round(h * r).clamp_min(1)
        left = torch.floor((out_w - new_w) / 2) if self.center else torch.zeros_like(new_w)
        top = torch.floor((out_h - new_h) / 2) if self.center else torch.zeros_like(new_h)
        sx, sy = new_w / w, new_h / h
        matrix = mx.translation(left, top) @ mx.scaling(sx, sy)
        return LetterboxFit(matrix, new_h, new_w, sx, sy)


ResizePad = Letterbox


def check_rounding(rounding: str) -> str:
    """``rounding`` if it is one of `ROUNDINGS`, else a `UsageError`."""
    if rounding not in ROUNDINGS:
        raise UsageError(f"rounding must be one of {ROUNDINGS}, got {rounding!r}")
    return rounding


class RandomAffine(GeometricTransform):
    """Ultralytics ``RandomPerspective``: ``M = T @ S @ R @ P @ C`` per sample.

    C moves the input centre to the origin; P has (px, py) ~ U(+-perspective) in its last row;
    R is ``cv2.getRotationMatrix2D(0, a, s)`` with a ~ U(+-degrees), s ~ U(1 +- scale); S shears
    by tan(U(+-shear) deg); T moves the origin to U(0.5 +- translate) * output size. Defaults
    are Ultralytics' (translate 0.1, scale 0.5). Boxes are filtered with ``box_candidates``
    against the original box scaled by s, as Ultralytics does.

    Args:
        size: output (height, width); None keeps the input size. After a 2x2 `Mosaic`, pass the
            single-image size (Ultralytics' border of -size/2).
    """

    def __init__(
        self,
        *,
        degrees: float = 0.0,
        translate: float = 0.1,
        scale: float = 0.5,
        shear: float = 0.0,
        perspective: float = 0.0,
        size: int | tuple[int, int] | None = None,
        fill: float = 114.0,
        interpolation: str = "bilinear",
        box_filter: BoxRule | None = _ULTRALYTICS_RULE,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__(
            fill=fill, interpolation=interpolation, box_filter=box_filter, generator=generator
        )
        self.degrees = check_non_negative("degrees", degrees)
        self.translate = check_non_negative("translate", translate)
        self.scale = check_non_negative("scale", scale)
        self.shear = check_non_negative("shear", shear)
        self.perspective = check_non_negative("perspective", perspective)
        if self.scale >= 1.0:
            raise UsageError(f"scale must be < 1 (zoom in [1 - scale, 1 + scale]), got {scale!r}")
        self.size = as_size("size", size) if size is not None else None
        self.affine_only = self.perspective == 0.0

    _PARAMS = (
        "degrees", "scale", "shear_x", "shear_y",
        "perspective_x", "perspective_y", "translate_x", "translate_y",
    )

    def sample_geometry(self, state: GeometryState) -> Params:
        bounds = [
            (-self.degrees, self.degrees),
            (1 - self.scale, 1 + self.scale),
            (-self.shear, self.shear),
            (-self.shear, self.shear),
            (-self.perspective, self.perspective),
            (-self.perspective, self.perspective),
            (0.5 - self.translate, 0.5 + self.translate),
            (0.5 - self.translate, 0.5 + self.translate),
        ]
        draws = rnd.uniform_rows(self.generator, bounds, state.batch_size, state.device)
        return dict(zip(self._PARAMS, draws, strict=True))

    def plan(self, state: GeometryState, params: Params) -> Plan:
        in_h, in_w = state.image_size
        out_h, out_w = self.size or state.image_size
        deg, scale = params["degrees"], params["scale"]
        shear_x, shear_y = params["shear_x"], params["shear_y"]
        px, py = params["perspective_x"], params["perspective_y"]
        c = mx.translation(torch.full_like(deg, -in_w / 2), torch.full_like(deg, -in_h / 2))
        tx, ty = params["translate_x"] * out_w, params["translate_y"] * out_h
        if mx.all_zero_on_host(deg, shear_x, shear_y, px, py):
            # No rotation, shear or perspective (Ultralytics' defaults): S and P are identities
            # and R a scaling, so every entry of T @ S @ R @ P is one term times 1 plus exact
            # zeros: the product is exactly this matrix, built without the three products.
            tsrp = mx.affine(scale, 0.0, tx, 0.0, scale, ty, like=scale)
        else:
            t = mx.translation(tx, ty)
            s = mx.shearing(shear_x, shear_y)
            r = mx.rotation_scale(deg, scale)
            p = mx.perspective(px, py)
            tsrp = torch.bmm(torch.bmm(torch.bmm(t, s), r), p)
        return Plan(torch.bmm(tsrp, c), (out_h, out_w), scale**2)


FLIP_ABOUT = ("valid", "canvas")


class RandomFlip(GeometricTransform):
    """Flip each sample with probability ``p``: x' = W - x (or y' = H - y with vertical=True).

    ``about="valid"`` (default) mirrors each sample's valid region (``batch.sizes``; the whole
    canvas when it is None), so the content stays inside the region a model is shown.
    ``about="canvas"`` mirrors the whole canvas, as Ultralytics does after its letterbox and
    affine (the valid region then grows to cover the mirrored content).
    """

    def __init__(
        self,
        *,
        p: float = 0.5,
        vertical: bool = False,
        about: str = "valid",
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__(interpolation="nearest", generator=generator)
        self.p = check_probability("p", p)
        self.vertical = bool(vertical)
        if about not in FLIP_ABOUT:
            raise UsageError(f"about must be one of {FLIP_ABOUT}, got {about!r}")
        self.about = about
        self.reads_valid_region = about == "valid"

    def sample_geometry(self, state: GeometryState) -> Params:
        return {"flip": rnd.bernoulli(self.generator, (state.batch_size,), self.p, state.device)}

    def plan(self, state: GeometryState, params: Params) -> Plan:
        h: torch.Tensor | float
        w: torch.Tensor | float
        if self.about == "canvas":  # the same for every sample: numbers, not tensors
            h, w = (float(v) for v in state.image_size)
        else:
            h, w = state.content_hw()
        if self.vertical:
            matrix = mx.vertical_flip(params["flip"], h)
        else:
            matrix = mx.horizontal_flip(params["flip"], w)
        return Plan(matrix, state.image_size, torch.ones(state.batch_size, device=state.device))

    def apply(self, batch: Batch, params: Params) -> Batch:
        if batch.sizes is not None and self.about == "valid":
            return apply_geometric(batch, [self], [params])
        height, width = image_hw(batch.images)
        flip = params["flip"]
        dim, extent = (-2, height) if self.vertical else (-1, width)
        images = torch.where(flip[:, None, None, None], batch.images.flip(dim), batch.images)
        boxes = batch.boxes
        i0, i1 = (1, 3) if self.vertical else (0, 2)
        flipped = boxes.clone()
        flipped[..., i0] = extent - boxes[..., i1]
        flipped[..., i1] = extent - boxes[..., i0]
        take = (flip[:, None] & batch.mask)[..., None]
        after = torch.where(take, flipped, boxes)
        clipped = mx.clip_boxes(after, height, width)
        out = drop_boxes(batch, keeps_moved_box(after, clipped, (height, width)), clipped)
        sizes = batch.sizes
        if sizes is not None:
            # A mirrored sample's content now ends at the canvas edge.
            full = torch.tensor((height, width), dtype=sizes.dtype, device=sizes.device)
            axis = 0 if self.vertical else 1
            grown = sizes.clone()
            grown[:, axis] = full[axis]
            sizes = torch.where(flip.to(sizes.device)[:, None], grown, sizes)
        return out.replace(images=images, sizes=sizes)


def _box_iou_with_crops(boxes: torch.Tensor, crops: torch.Tensor) -> torch.Tensor:
    """IoU (B, T, M) between boxes (B, M, 4) and crops (B, T, 4)."""
    b = boxes[:, None]
    c = crops[:, :, None]
    iw = (torch.minimum(b[..., 2], c[..., 2]) - torch.maximum(b[..., 0], c[..., 0])).clamp_min(0)
    ih = (torch.minimum(b[..., 3], c[..., 3]) - torch.maximum(b[..., 1], c[..., 1])).clamp_min(0)
    inter = iw * ih
    area_b = (b[..., 2] - b[..., 0]) * (b[..., 3] - b[..., 1])
    area_c = (c[..., 2] - c[..., 0]) * (c[..., 3] - c[..., 1])
    return inter / (area_b + area_c - inter).clamp_min(1e-12)


class RandomIoUCrop(GeometricTransform):
    """SSD-style crop (torchvision ``RandomIoUCrop``), batched with static shapes.

    Per sample: pick a minimum IoU from ``sampler_options`` (>= 1 means no crop); draw ``trials``
    crops (side fractions in [min_scale, max_scale], aspect in range, integer corners as
    torchvision); keep the first crop that contains at least one box centre and whose best IoU
    with those boxes reaches the minimum; if none does, the sample is not cropped (torchvision
    instead redraws the option until it succeeds). The crop is resized back to the canvas (as
    SSD's following Resize does) and boxes whose centre falls outside it are dropped.
    """

    reads_valid_region = True

    def __init__(
        self,
        *,
        min_scale: float = 0.3,
        max_scale: float = 1.0,
        min_aspect_ratio: float = 0.5,
        max_aspect_ratio: float = 2.0,
        sampler_options: tuple[float, ...] = (0.0, 0.1, 0.3, 0.5, 0.7, 0.9, 1.0),
        trials: int = 40,
        fill: float = 114.0,
        interpolation: str = "bilinear",
        box_filter: BoxRule | None = _CENTER_RULE,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__(
            fill=fill, interpolation=interpolation, box_filter=box_filter, generator=generator
        )
        if not 0.0 < min_scale <= max_scale <= 1.0:
            raise UsageError(f"need 0 < min_scale <= max_scale <= 1, got {min_scale}, {max_scale}")
        if not 0.0 < min_aspect_ratio <= max_aspect_ratio:
            raise UsageError("need 0 < min_aspect_ratio <= max_aspect_ratio")
        if trials < 1 or not sampler_options:
            raise UsageError("need trials >= 1 and at least one sampler option")
        self.min_scale, self.max_scale = float(min_scale), float(max_scale)
        self.min_aspect_ratio = float(min_aspect_ratio)
        self.max_aspect_ratio = float(max_aspect_ratio)
        self.sampler_options = tuple(float(o) for o in sampler_options)
        self.trials = int(trials)

    def sample_geometry(self, state: GeometryState) -> Params:
        g, dev, bsz, t = self.generator, state.device, state.batch_size, self.trials
        h, w = state.content_hw()
        h, w = h.to(torch.float32)[:, None], w.to(torch.float32)[:, None]
        options = torch.tensor(self.sampler_options, device=dev)
        min_iou = options[rnd.randint(g, 0, len(self.sampler_options), (bsz,), dev)]
        r = rnd.uniform(g, (bsz, t, 2), self.min_scale, self.max_scale, dev)
        new_w, new_h = torch.floor(w * r[..., 0]), torch.floor(h * r[..., 1])
        pos = rnd.uniform(g, (bsz, t, 2), 0.0, 1.0, dev)
        left, top = torch.floor((w - new_w) * pos[..., 0]), torch.floor((h - new_h) * pos[..., 1])
        crops = torch.stack([left, top, left + new_w, top + new_h], dim=-1)
        aspect = new_w / new_h.clamp_min(1.0)
        ok = (aspect >= self.min_aspect_ratio) & (aspect <= self.max_aspect_ratio)
        ok &= (new_w > 0) & (new_h > 0)
        boxes = state.boxes
        cx, cy = (boxes[..., 0] + boxes[..., 2]) / 2, (boxes[..., 1] + boxes[..., 3]) / 2
        inside = (
            (crops[..., 0:1] < cx[:, None])
            & (cx[:, None] < crops[..., 2:3])
            & (crops[..., 1:2] < cy[:, None])
            & (cy[:, None] < crops[..., 3:4])
            & state.mask[:, None]
        )
        if boxes.shape[1]:
            iou = torch.where(inside, _box_iou_with_crops(boxes, crops), -1.0).amax(dim=-1)
        else:  # no box slots (a batch of images without boxes): no crop contains a centre
            iou = torch.full(crops.shape[:2], -1.0, device=dev)
        ok &= inside.any(dim=-1) & (iou >= min_iou[:, None])
        first = torch.argmax(ok.to(torch.int8), dim=1)
        found = ok.any(dim=1) & (min_iou < 1.0)
        chosen = crops[torch.arange(bsz, device=dev), first]
        full = torch.cat([torch.zeros_like(w), torch.zeros_like(h), w, h], dim=1)
        return {"crop": torch.where(found[:, None], chosen, full), "cropped": found}

    def plan(self, state: GeometryState, params: Params) -> Plan:
        out_h, out_w = state.image_size
        crop = params["crop"]
        sx = out_w / (crop[:, 2] - crop[:, 0])
        sy = out_h / (crop[:, 3] - crop[:, 1])
        matrix = mx.scaling(sx, sy) @ mx.translation(-crop[:, 0], -crop[:, 1])
        return Plan(matrix, state.image_size, sx * sy)


class MultiScaleResize(Augmentation):
    """Ultralytics multi-scale: one size per batch, bilinear ``interpolate`` of the whole batch.

    The long side becomes ``randrange(0.5 * imgsz, 1.5 * imgsz + stride) // stride * stride``
    (``scale`` sets the 0.5 range); the short side is rounded up to a multiple of ``stride``.
    Boxes are scaled with the image. The output shape changes per batch by design (compile one
    graph per size). With ``batch.sizes``, each valid region is resized on its own, as the
    warps cut it: its edge is replicated (`replicate_region_edges_`), not blended with the
    padding, and the pixels whose centres map outside it are padding (`padding_outside_regions`).
    """

    def __init__(
        self,
        *,
        imgsz: int = 640,
        scale: float = 0.5,
        stride: int = 32,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__(generator)
        if imgsz < 1 or stride < 1 or not 0.0 <= scale < 1.0:
            raise UsageError("need imgsz >= 1, stride >= 1 and 0 <= scale < 1")
        self.imgsz, self.scale, self.stride = int(imgsz), float(scale), int(stride)

    def sample(self, batch: Batch) -> Params:
        low = int(self.imgsz * (1 - self.scale))
        high = int(self.imgsz * (1 + self.scale)) + self.stride
        g = self.generator
        size = torch.randint(low, high, (1,), generator=g, device=g.device)
        long_side = max(self.stride, int(size.item()) // self.stride * self.stride)
        height, width = image_hw(batch.images)
        factor = long_side / max(height, width)
        new_h = math.ceil(height * factor / self.stride) * self.stride
        new_w = math.ceil(width * factor / self.stride) * self.stride
        return {"size": (new_h, new_w)}

    def apply(self, batch: Batch, params: Params) -> Batch:
        new_h, new_w = params["size"]
        height, width = image_hw(batch.images)
        images = batch.images
        work = images.to(torch.float32, copy=True)
        if batch.sizes is not None:  # else the whole canvas is valid: interpolate clamps there
            replicate_region_edges_(work, batch.sizes)
        out = F.interpolate(work, size=(new_h, new_w), mode="bilinear", align_corners=False)
        if images.dtype == torch.uint8:
            out = out.round_().clamp_(0, 255).to(torch.uint8)
        else:
            out = out.to(images.dtype)
        if batch.sizes is not None:
            out = padding_outside_regions(out, images, batch.sizes)
        factor = torch.tensor([new_w / width, new_h / height] * 2, device=batch.boxes.device)
        boxes = (batch.boxes * factor).to(batch.boxes.dtype)
        clipped = mx.clip_boxes(boxes, new_h, new_w)
        out_batch = drop_boxes(batch, keeps_moved_box(boxes, clipped, (new_h, new_w)), clipped)
        sizes = batch.sizes
        if sizes is not None:
            # The content edge lands at h * factor: the pixel it cuts still holds content.
            scaled = sizes.to(torch.float64) * factor[[1, 0]].to(torch.float64)
            limit = torch.tensor((new_h, new_w), dtype=torch.float64, device=sizes.device)
            scaled = torch.minimum(torch.ceil(scaled - 1e-6), limit).clamp_min(1)
            sizes = scaled.to(sizes.dtype)
        return out_batch.replace(images=out, sizes=sizes)


def replicate_region_edges_(images: torch.Tensor, sizes: torch.Tensor) -> None:
    """Copy each sample's last valid row into row h and last valid column into column w, in
    place (B, C, H, W): all a bilinear resize reads past the region for the pixels whose
    centres lie inside it (source point p < h reads rows up to floor(p - 0.5) + 1 <= h).

    One row and one column per sample (a scatter): fixed-shape and cheap.
    """
    batch, channels, height, width = images.shape
    hw = sizes.to(device=images.device, dtype=torch.int64).clamp_min(1)
    h = hw[:, 0].clamp_max(height)[:, None, None, None]
    w = hw[:, 1].clamp_max(width)[:, None, None, None]
    row = (h - 1).expand(batch, channels, 1, width)
    images.scatter_(2, h.clamp_max(height - 1).expand_as(row), images.gather(2, row))
    col = (w - 1).expand(batch, channels, height, 1)
    images.scatter_(3, w.clamp_max(width - 1).expand_as(col), images.gather(3, col))


def padding_outside_regions(
    resized: torch.Tensor, images: torch.Tensor, sizes: torch.Tensor
) -> torch.Tensor:
    """``resized`` (B, C, out_h, out_w) with every pixel whose centre maps outside its sample's
    (h, w) region replaced by the pixel of ``images`` under that centre (uniform padding stays
    exactly itself).

    The pixels inside are the top-left rows [0, r) x columns [0, c) of each sample. On the CPU
    only the pixels outside are written, per sample (in place); elsewhere one fixed-shape
    ``torch.where`` (no host sync).
    """
    height, width = images.shape[-2:]
    out_h, out_w = resized.shape[-2:]
    device = images.device
    hw = sizes.to(device=device, dtype=torch.int64).clamp_min(1)
    # Centre v + 0.5 reads source point (v + 0.5) * H / out_h, as interpolate computes it.
    ys = (torch.arange(out_h, device=device, dtype=torch.float64) + 0.5) * (height / out_h)
    xs = (torch.arange(out_w, device=device, dtype=torch.float64) + 0.5) * (width / out_w)
    rows_in = ys[None] < hw[:, 0, None]  # (B, out_h)
    cols_in = xs[None] < hw[:, 1, None]  # (B, out_w)
    src_rows = ys.floor().long().clamp_max(height - 1)
    src_cols = xs.floor().long().clamp_max(width - 1)
    if device.type == "cpu" and not torch.compiler.is_compiling():
        dtype = resized.dtype
        inside_rows, inside_cols = rows_in.sum(1).tolist(), cols_in.sum(1).tolist()
        for b, (r, c) in enumerate(zip(inside_rows, inside_cols, strict=True)):
            if r < out_h:  # the rows below the region
                below = images[b].index_select(1, src_rows[r:]).index_select(2, src_cols)
                resized[b, :, r:] = below.to(dtype)
            if c < out_w:  # the columns right of it, above those rows
                right = images[b].index_select(2, src_cols[c:]).index_select(1, src_rows[:r])
                resized[b, :, :r, c:] = right.to(dtype)
        return resized
    padding = images.index_select(2, src_rows).index_select(3, src_cols).to(resized.dtype)
    inside = (rows_in[:, :, None] & cols_in[:, None, :])[:, None]
    return torch.where(inside, resized, padding)
