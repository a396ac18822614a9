"""One batched resample per call: every output pixel centre goes through the inverse matrix.

Output pixel (u, v) has centre (u + 0.5, v + 0.5); ``inv(M)`` takes it to a continuous source
point p, which ``grid_sample(align_corners=False)`` reads at normalised ``2 p / size - 1``. This
is the continuous convention of `_matrix`, so a box and the pixels inside it stay together.
Pixels that come from outside the source (or outside its valid region) get ``fill``: the warp
runs on ``image - fill`` with zero padding and adds ``fill`` back, which is exact for bilinear
because its weights sum to one.
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


def valid_region_mask(
    sizes: torch.Tensor, height: int, width: int, device: torch.device
) -> torch.Tensor:
    """(B, 1, H, W) bool, True inside each sample's (h, w) top-left valid region."""
    rows = torch.arange(height, device=device)[None, :, None] < sizes[:, 0, None, None]
    cols = torch.arange(width, device=device)[None, None, :] < sizes[:, 1, None, None]
    return (rows & cols)[:, None]


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
        sizes: optional (B, 2) (h, w) valid regions; source pixels outside them count as fill.
        affine_only: skip the perspective divide (a static promise that M's last row is 0 0 1).

    Returns:
        The warped images, same dtype as ``images`` (uint8 is rounded and saturated).
    """
    height, width = images.shape[-2:]
    grid = sampling_grid(matrix, (height, width), out_size, affine_only)
    # copy=True: for float32 input .to() would alias it, and the in-place ops below would
    # then overwrite the caller's images.
    work = images.to(torch.float32, copy=True)
    if fill != 0.0:
        work.sub_(fill)
    if sizes is not None:
        work.mul_(valid_region_mask(sizes, height, width, images.device))
    out = F.grid_sample(work, grid, mode=interpolation, padding_mode="zeros", align_corners=False)
    if images.dtype == torch.uint8:
        # + 0.5 then truncation rounds (half up); values are >= 0 after the clamp.
        return out.add_(fill + 0.5).clamp_(0.0, 255.0).to(torch.uint8)
    return out.add_(fill).to(images.dtype)
