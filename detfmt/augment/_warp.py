"""One batched resample per call: every output pixel centre goes through the inverse matrix.

Output pixel (u, v) has centre (u + 0.5, v + 0.5); ``inv(M)`` takes it to a continuous source
point p, which ``grid_sample(align_corners=False)`` reads at normalised ``2 p / size - 1``. This
is the continuous convention of `_matrix`, so a box and the pixels inside it stay together.

Each sample's valid region ``[0, w) x [0, h)`` (its ``sizes``, else the whole image) is cut
exactly: a pixel whose p lies inside reads valid pixels only (p clamped to the centres of the
region's edge pixels: the edge replicated, as Ultralytics' letterbox does), and a pixel whose p
lies outside is ``fill``. So no content is blended with fill, and none lands outside the extent
`_geometry.mapped_extent` reports (a blend would reach about half a source pixel, times the
zoom, past it).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from detfmt.augment._kernels import kernel


def _normaliser(height: int, width: int, device: torch.device) -> torch.Tensor:
    """3x3 taking continuous pixels to grid_sample's [-1, 1] (align_corners=False)."""
    return torch.tensor(
        [[2.0 / width, 0.0, -1.0], [0.0, 2.0 / height, -1.0], [0.0, 0.0, 1.0]],
        device=device,
        dtype=torch.float64,
    )


def sampling_grid(
    matrix: torch.Tensor,
    in_size: tuple[int, int],
    out_size: tuple[int, int],
    affine_only: bool,
) -> torch.Tensor:
    """(B, Hout, Wout, 2) grid for ``grid_sample`` from source->output matrices (B, 3, 3)."""
    device = matrix.device
    # Inverse in float64: a fp32 inverse of a 1280 px warp loses ~1e-3 px, needlessly.
    to_source = _normaliser(*in_size, device) @ torch.linalg.inv(matrix.to(torch.float64))
    a = to_source.to(torch.float32)
    out_h, out_w = out_size
    u = torch.arange(out_w, device=device, dtype=torch.float32) + 0.5
    v = torch.arange(out_h, device=device, dtype=torch.float32) + 0.5
    rows = 2 if affine_only else 3
    # Each coordinate is an outer sum (a0 u + a2) + (a1 v): one broadcast add writes the grid.
    along_u = (a[:, :rows, 0, None] * u + a[:, :rows, 2, None]).transpose(1, 2)  # (B, W, rows)
    along_v = (a[:, :rows, 1, None] * v).transpose(1, 2)  # (B, H, rows)
    coords = along_u[:, None, :, :] + along_v[:, :, None, :]
    if affine_only:
        return coords
    w = coords[..., 2:]
    w = torch.where(w.abs() < 1e-8, torch.full_like(w, 1e-8), w)
    return coords[..., :2] / w


def clamp_to_valid_region(
    grid: torch.Tensor, sizes: torch.Tensor | None, height: int, width: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The grid clamped to each sample's valid pixel centres, and (B, Hout, Wout) whether each
    point lies inside the valid region ``[0, w) x [0, h)`` (normalised coordinates throughout).

    Fixed-shape tensor steps (no host sync): it runs on the GPU and under torch.compile.
    """
    canvas = grid.new_tensor([width, height])
    if sizes is None:
        limit = canvas.expand(grid.shape[0], 2)
    else:
        limit = torch.minimum(sizes.to(device=grid.device, dtype=grid.dtype).flip(-1), canvas)
    upper = (limit * (2.0 / canvas) - 1.0)[:, None, None, :]  # the region's far edge
    inside = ((grid >= -1.0) & (grid < upper)).all(dim=-1)
    half = 1.0 / canvas  # half a pixel, normalised
    clamped = torch.maximum(torch.minimum(grid, upper - half), half - 1.0)
    return clamped, inside


@kernel
def warp_images(
    images: torch.Tensor,
    matrix: torch.Tensor,
    out_size: tuple[int, int],
    *,
    fill: float,
    interpolation: str = "bilinear",
    sizes: torch.Tensor | None = None,
    affine_only: bool = False,
) -> torch.Tensor:
    """Resample (B, C, H, W) images through per-sample (B, 3, 3) matrices, once.

    Args:
        images: uint8 or float (B, C, H, W).
        matrix: source->output matrices in continuous pixels.
        out_size: (height, width) of the output.
        fill: value for pixels with no source (in the images' own scale, e.g. 114 for uint8).
        interpolation: "bilinear" or "nearest".
        sizes: optional (B, 2) (h, w) valid regions (else the whole image): a point inside one
            reads its pixels only (edge replicated), a point outside it gives ``fill``.
        affine_only: skip the perspective divide (a static promise that M's last row is 0 0 1).

    Returns:
        The warped images, same dtype as ``images`` (uint8 is rounded and saturated).
    """
    height, width = images.shape[-2:]
    grid = sampling_grid(matrix, (height, width), out_size, affine_only)
    grid, inside = clamp_to_valid_region(grid, sizes, height, width)
    out = F.grid_sample(
        images.to(torch.float32), grid, mode=interpolation, padding_mode="border",
        align_corners=False,
    )
    out = torch.where(inside[:, None], out, fill)
    if images.dtype == torch.uint8:
        # + 0.5 then truncation rounds (half up); values are >= 0 after the clamp.
        return out.add_(0.5).clamp_(0.0, 255.0).to(torch.uint8)
    return out.to(images.dtype)
