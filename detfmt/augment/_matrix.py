"""Per-sample 3x3 matrices in continuous pixel coordinates, and boxes pushed through them.

Convention (the only one in detfmt.augment): a point (x, y) is continuous, pixel i spans
[i, i + 1), so the centre of pixel (u, v) is (u + 0.5, v + 0.5) and an image of width W spans
[0, W]. A matrix maps source points to output points: ``p_out ~ M @ (x, y, 1)``. Boxes are xyxy
with x2 exclusive. The image warp samples output pixel centres through ``inv(M)``, so boxes and
pixels move together exactly.
"""

from __future__ import annotations

import math

import torch


def eye(batch: int, device: torch.device, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """(B, 3, 3) identities."""
    return torch.eye(3, device=device, dtype=dtype).expand(batch, 3, 3).clone()


def affine(
    a: torch.Tensor | float,
    b: torch.Tensor | float,
    c: torch.Tensor | float,
    d: torch.Tensor | float,
    e: torch.Tensor | float,
    f: torch.Tensor | float,
    *,
    like: torch.Tensor,
) -> torch.Tensor:
    """(B, 3, 3) ``[[a, b, c], [d, e, f], [0, 0, 1]]`` from (B,) tensors or numbers, with the
    dtype and device of ``like`` (B,).

    One construction: the matrices are built per batch from a few hundred numbers, where the
    count of tensor ops (an identity, then one indexed write per entry) is the cost.
    """
    filled: dict[float, torch.Tensor] = {}

    def column(value: torch.Tensor | float) -> torch.Tensor:
        if isinstance(value, torch.Tensor):  # written as an indexed write would cast it
            same = value.dtype == like.dtype and value.device == like.device
            return value if same else value.to(device=like.device, dtype=like.dtype)
        number = float(value)
        if number not in filled:
            filled[number] = torch.full_like(like, number)
        return filled[number]

    entries = [column(v) for v in (a, b, c, d, e, f, 0.0, 0.0, 1.0)]
    return torch.stack(entries, dim=-1).view(like.shape[0], 3, 3)


def translation(tx: torch.Tensor, ty: torch.Tensor) -> torch.Tensor:
    """(B, 3, 3) translation by (tx, ty)."""
    return affine(1.0, 0.0, tx, 0.0, 1.0, ty, like=tx)


def scaling(sx: torch.Tensor, sy: torch.Tensor) -> torch.Tensor:
    """(B, 3, 3) scaling about the origin."""
    return affine(sx, 0.0, 0.0, 0.0, sy, 0.0, like=sx)


def rotation_scale(degrees: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """``cv2.getRotationMatrix2D(center=(0, 0), angle, scale)`` as (B, 3, 3).

    Positive angles rotate counter-clockwise on screen (y points down), as in OpenCV.
    """
    rad = degrees * (math.pi / 180.0)
    alpha = scale * torch.cos(rad)
    beta = scale * torch.sin(rad)
    return affine(alpha, beta, 0.0, -beta, alpha, 0.0, like=degrees)


def shearing(x_degrees: torch.Tensor, y_degrees: torch.Tensor) -> torch.Tensor:
    """(B, 3, 3) shear: M[0, 1] = tan(x), M[1, 0] = tan(y) (Ultralytics' S)."""
    shear_x = torch.tan(x_degrees * (math.pi / 180.0))
    shear_y = torch.tan(y_degrees * (math.pi / 180.0))
    return affine(1.0, shear_x, 0.0, shear_y, 1.0, 0.0, like=x_degrees)


def perspective(px: torch.Tensor, py: torch.Tensor) -> torch.Tensor:
    """(B, 3, 3) with bottom row (px, py, 1) (Ultralytics' P)."""
    m = eye(px.shape[0], px.device, px.dtype)
    m[:, 2, 0] = px
    m[:, 2, 1] = py
    return m


def horizontal_flip(flip: torch.Tensor, width: torch.Tensor | float) -> torch.Tensor:
    """x' = W - x where ``flip`` is True, identity elsewhere (pixel i -> pixel W - 1 - i)."""
    sign, shift = _flip_entries(flip, width)
    return affine(sign, 0.0, shift, 0.0, 1.0, 0.0, like=sign)


def vertical_flip(flip: torch.Tensor, height: torch.Tensor | float) -> torch.Tensor:
    """y' = H - y where ``flip`` is True, identity elsewhere."""
    sign, shift = _flip_entries(flip, height)
    return affine(1.0, 0.0, 0.0, 0.0, sign, shift, like=sign)


def _flip_entries(
    flip: torch.Tensor, extent: torch.Tensor | float
) -> tuple[torch.Tensor, torch.Tensor]:
    """(B,) float32 scale (-1 or 1) and shift (the extent or 0) of a flip."""
    sign = torch.where(flip, -1.0, 1.0).to(torch.float32)
    if isinstance(extent, torch.Tensor):
        extent = extent.to(device=flip.device, dtype=torch.float32)
    else:
        extent = float(extent)
    return sign, torch.where(flip, extent, 0.0).to(torch.float32)


def all_zero_on_host(*values: torch.Tensor) -> bool:
    """Whether every value is 0, read on the host (eager CPU tensors only: False elsewhere, where
    the check would be a device sync). Lets a caller leave out factors that are identities."""
    if torch.compiler.is_compiling():
        return False
    if any(value.device.type != "cpu" or value.requires_grad for value in values):
        return False
    # One concatenation and one host read rather than one read per value.
    return not torch.cat([value.flatten() for value in values]).numpy().any()


def box_corners(boxes: torch.Tensor) -> torch.Tensor:
    """(..., 4) xyxy -> (..., 4, 2) corners x1y1, x2y2, x1y2, x2y1 (Ultralytics' order)."""
    # unbind + stack, not boxes[..., [0, 1, 2, 3, 0, 3, 2, 1]]: on CPU that advanced index
    # goes through a parallel kernel that took ~1.7 ms instead of ~30 us with 2 torch threads
    # on a busy machine (waiting for the second thread); these are a few hundred numbers.
    x1, y1, x2, y2 = boxes.unbind(-1)
    return torch.stack([x1, y1, x2, y2, x1, y2, x2, y1], dim=-1).unflatten(-1, (4, 2))


def transform_points(
    points: torch.Tensor, matrix: torch.Tensor, affine: bool = False
) -> torch.Tensor:
    """Map (B, N, 2) points through (B, 3, 3), with the perspective divide (``affine``: the
    caller knows every last row is 0 0 1, so w is exactly 1 and the divide is left out)."""
    # Elementwise, not [x, y, 1] @ M.T: the same numbers where the matmul rounds each product
    # (1 * c is exact), without the concatenation and a batched matmul of K = 3, which cost
    # more than the arithmetic on the few hundred points of a batch on CPU.
    x, y = points[..., 0:1], points[..., 1:2]
    if affine:
        rows = matrix[:, None, :2]
        return x * rows[..., 0] + y * rows[..., 1] + rows[..., 2]
    homogeneous = x * matrix[:, None, :, 0] + y * matrix[:, None, :, 1] + matrix[:, None, :, 2]
    w = homogeneous[..., 2:3]
    # Points on or behind the horizon (w <= 0) have no image; keep them finite and far away.
    w = torch.where(w.abs() < 1e-8, torch.full_like(w, 1e-8), w)
    return homogeneous[..., :2] / w


def transform_boxes(
    boxes: torch.Tensor, matrix: torch.Tensor, affine: bool = False
) -> torch.Tensor:
    """(B, M, 4) xyxy through (B, 3, 3): the min/max of the 4 mapped corners (unclipped);
    ``affine`` as in `transform_points`."""
    if affine and _axis_aligned_on_host(matrix):
        return _scale_and_shift_boxes(boxes, matrix)
    batch, slots = boxes.shape[:2]
    corners = box_corners(boxes.to(matrix.dtype)).reshape(batch, slots * 4, 2)
    mapped = transform_points(corners, matrix, affine).reshape(batch, slots, 4, 2)
    low = mapped.amin(dim=2)
    high = mapped.amax(dim=2)
    return torch.cat([low, high], dim=-1)


def _axis_aligned_on_host(matrix: torch.Tensor) -> bool:
    """Whether every (affine) matrix is a scale and translation, read on the host (eager CPU
    tensors only: elsewhere the check would be a device sync)."""
    if matrix.device.type != "cpu" or matrix.requires_grad or torch.compiler.is_compiling():
        return False
    m = matrix.numpy()
    return bool((m[:, 0, 1] == 0).all() and (m[:, 1, 0] == 0).all())


def _scale_and_shift_boxes(boxes: torch.Tensor, matrix: torch.Tensor) -> torch.Tensor:
    """`transform_boxes` of affine, axis-aligned matrices: each corner coordinate is
    ``x * s + t`` (the general path's ``x * s + y * 0 + t``, the same number), so two corners
    give the min/max of four."""
    b = boxes.to(matrix.dtype)
    scale = torch.diagonal(matrix[:, :2, :2], dim1=1, dim2=2)[:, None, :]  # (B, 1, 2)
    shift = matrix[:, None, :2, 2]
    first = b[..., :2] * scale + shift
    second = b[..., 2:] * scale + shift
    return torch.cat([torch.minimum(first, second), torch.maximum(first, second)], dim=-1)


def clip_boxes(boxes: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """Clip xyxy to [0, W] x [0, H] (the image's continuous extent)."""
    if height == width:  # a square output: one clamp of every coordinate, the same numbers
        return boxes.clamp(0.0, float(width))
    x = boxes[..., 0::2].clamp(0.0, float(width))
    y = boxes[..., 1::2].clamp(0.0, float(height))
    return torch.stack([x[..., 0], y[..., 0], x[..., 1], y[..., 1]], dim=-1)
