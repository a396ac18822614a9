"""Colour modules and dtype conversion.

`RandomHSV` follows Ultralytics (>= 8.3.79) in OpenCV's 8-bit HSV space (H in [0, 180)):
hue LUT ``(x + r_h * 180) % 180``, saturation and value LUTs ``clip(x * (1 + r))``, with
r ~ U(-1, 1) * gains per sample. The RGB<->HSV conversions reproduce OpenCV's uint8 rounding
in float32 tensors, so results are within a level or two of ``cv2`` (detfmt images are RGB;
Ultralytics' BGR->HSV on BGR data is the same map).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from detfmt.augment import _backend
from detfmt.augment import _random as rnd
from detfmt.augment._base import Augmentation, Params, check_non_negative, image_hw
from detfmt.augment._kernels import kernel
from detfmt.errors import UsageError
from detfmt.torch.batch import Batch

_HSV_SHIFT = 12
_HSV_HALF = 1 << (_HSV_SHIFT - 1)


Planes = tuple[torch.Tensor, torch.Tensor, torch.Tensor]


def rgb_to_hsv_opencv(rgb: torch.Tensor) -> torch.Tensor:
    """(B, 3, H, W) RGB levels 0..255 -> OpenCV 8-bit HSV (H in [0, 180)), int32."""
    return torch.stack(rgb_planes_to_hsv(*rgb.unbind(1)), dim=1)


def hsv_to_rgb_opencv(hsv: torch.Tensor) -> torch.Tensor:
    """OpenCV 8-bit HSV (B, 3, H, W) -> RGB levels as float32 integers."""
    return torch.stack(hsv_planes_to_rgb(*hsv.to(torch.float32).unbind(1)), dim=1)


def rgb_planes_to_hsv(r: torch.Tensor, g: torch.Tensor, b: torch.Tensor) -> Planes:
    """RGB planes (levels 0..255) -> OpenCV 8-bit HSV planes (H in [0, 180)), int32.

    OpenCV's ``RGB2HSV_b`` fixed-point arithmetic: s = (diff * round((255 << 12) / v) + 2048)
    >> 12 and h = (h' * round((180 << 12) / (6 diff)) + 2048) >> 12, so results are exact.
    (The two reciprocals are exact in float32 for every level 1..255; checked exhaustively.)
    """
    r, g, b = (c.to(torch.int32) for c in (r, g, b))
    v = torch.maximum(torch.maximum(r, g), b)
    diff = v - torch.minimum(torch.minimum(r, g), b)
    sdiv = torch.round(float(255 << _HSV_SHIFT) / v.clamp(min=1)).to(torch.int32)
    s = (diff * sdiv + _HSV_HALF) >> _HSV_SHIFT  # v == 0 implies diff == 0
    hdiv = torch.round(float((180 << _HSV_SHIFT) // 6) / diff.clamp(min=1)).to(torch.int32)
    h = torch.where(v == r, g - b, torch.where(v == g, b - r + 2 * diff, r - g + 4 * diff))
    h = (h * hdiv + _HSV_HALF) >> _HSV_SHIFT  # in [-30, 150]; diff == 0 gives h == 0
    h = torch.where(h < 0, h + 180, h)  # (no integer division: it does not vectorise)
    return h, s, v


def hsv_planes_to_rgb(h: torch.Tensor, s: torch.Tensor, v: torch.Tensor) -> Planes:
    """OpenCV 8-bit HSV float32 planes -> RGB planes, float32 integers (``HSV2RGB_b``).

    Same float32 steps as OpenCV: s, v scaled by 1/255, sector from trunc(h * 6/180), the
    four-entry table, then ``trunc(x * 255)`` (OpenCV's vector path truncates).
    """
    s = s * (1.0 / 255.0)
    v = v * (1.0 / 255.0)
    h = h * (6.0 / 180.0)
    pre = torch.floor(h)  # trunc in OpenCV; equal for h >= 0, and floor vectorises
    f = h - pre
    sector = pre - torch.floor(pre * (1.0 / 6.0)) * 6.0
    tab0 = v
    tab1 = v * (1.0 - s)
    tab2 = v * (1.0 - s * f)
    tab3 = v * (1.0 - s * (1.0 - f))
    r = torch.where(
        sector < 1,
        tab0,
        torch.where(
            sector < 2, tab2, torch.where(sector < 4, tab1, torch.where(sector < 5, tab3, tab0))
        ),
    )
    g = torch.where(
        sector < 1, tab3, torch.where(sector < 3, tab0, torch.where(sector < 4, tab2, tab1))
    )
    b = torch.where(
        sector < 2, tab1, torch.where(sector < 3, tab3, torch.where(sector < 5, tab0, tab2))
    )
    return tuple(torch.floor(c * 255.0).clamp_(0.0, 255.0) for c in (r, g, b))  # type: ignore[return-value]


def _to_255(images: torch.Tensor) -> torch.Tensor:
    if images.dtype == torch.uint8:
        return images.to(torch.float32)
    return images.to(torch.float32) * 255.0


def _from_255(values: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    if like.dtype == torch.uint8:
        return values.round_().clamp_(0, 255).to(torch.uint8)
    return (values / 255.0).to(like.dtype)


@kernel
def apply_hsv_gains(images: torch.Tensor, gains: torch.Tensor) -> torch.Tensor:
    """Ultralytics' HSV LUTs with per-sample ``gains`` (B, 3) = r_h, r_s, r_v (no +1).

    The LUTs are evaluated arithmetically: hue ``(x + r_h * 180) % 180`` truncated equals
    ``(x + floor(r_h * 180)) mod 180`` for integer x (exact); saturation and value are
    ``floor(clip(x * (1 + r), 0, 255))`` in float32 (float64 in Ultralytics: a product that
    lands within 1e-6 of an integer may differ by one level).
    """
    # The LUTs are defined on uint8 levels; float images are quantised to them first.
    if images.dtype == torch.uint8:
        rgb = images.contiguous()  # planar, so every plane below is contiguous
    else:
        rgb = (images.to(torch.float32) * 255.0).round_()
    h, s, v = rgb_planes_to_hsv(*rgb.unbind(1))
    gains = gains.to(device=images.device, dtype=torch.float64)
    shift = torch.floor(gains[:, 0] * 180.0).to(torch.int32)[:, None, None]
    sat = (1.0 + gains[:, 1]).to(torch.float32)[:, None, None]
    val = (1.0 + gains[:, 2]).to(torch.float32)[:, None, None]
    h = h + shift  # in (-180, 360): wrap without integer division
    h = torch.where(h < 0, h + 180, torch.where(h >= 180, h - 180, h))
    s = torch.floor(torch.clamp(s * sat, 0.0, 255.0))
    v = torch.floor(torch.clamp(v * val, 0.0, 255.0))
    planes = hsv_planes_to_rgb(h.to(torch.float32), s, v)
    if images.dtype == torch.uint8:
        return torch.stack([p.to(torch.uint8) for p in planes], dim=1)  # integral, in range
    return (torch.stack(planes, dim=1) / 255.0).to(images.dtype)


class RandomHSV(Augmentation):
    """Ultralytics ``RandomHSV``: per-sample r ~ U(-1, 1) * (h, s, v); defaults 0.015, 0.7, 0.4."""

    def __init__(
        self,
        *,
        h: float = 0.015,
        s: float = 0.7,
        v: float = 0.4,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__(generator)
        self.gains = (
            check_non_negative("h", h),
            check_non_negative("s", s),
            check_non_negative("v", v),
        )

    def sample(self, batch: Batch) -> Params:
        device = batch.images.device
        u = rnd.uniform(self.generator, (len(batch), 3), -1.0, 1.0, device, torch.float64)
        return {"gains": u * torch.tensor(self.gains, dtype=torch.float64, device=device)}

    @property
    def recolours_in_warp(self) -> bool:
        """A per-sample HSV gain: the warp before it in a `Compose` recolours as it writes (not
        a subclass that changes what ``apply`` or ``hsv_gains`` does)."""
        kind = type(self)
        return kind.apply is RandomHSV.apply and kind.hsv_gains is RandomHSV.hsv_gains

    def hsv_gains(self, params: Params) -> torch.Tensor:
        return params["gains"]

    def apply(self, batch: Batch, params: Params) -> Batch:
        image_hw(batch.images)
        if batch.images.shape[1] == 1:
            return batch.replace(images=_on_grey(apply_hsv_gains, batch.images, params["gains"]))
        if _backend.use_opencv(batch.images):
            from detfmt.augment._opencv import hsv_opencv  # cv2 and numpy on demand

            return batch.replace(images=hsv_opencv(batch.images, params["gains"]))
        return batch.replace(images=apply_hsv_gains(batch.images, params["gains"]))


def _on_grey(colour_op: Callable[..., torch.Tensor], images: torch.Tensor,
             *args: Any) -> torch.Tensor:
    """A colour op on (B, 1, H, W) grey images: as the RGB image with three equal planes (hue
    and saturation leave a grey pixel grey, so the planes stay equal), then one plane back."""
    return colour_op(images.expand(-1, 3, -1, -1), *args)[:, :1].contiguous()


def _grayscale(rgb: torch.Tensor) -> torch.Tensor:
    r, g, b = rgb.unbind(1)
    return (0.299 * r + 0.587 * g + 0.114 * b)[:, None]


def _adjust_hue(rgb01: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
    """Shift hue by ``shift`` (B,) turns in float HSV (torchvision ``adjust_hue``)."""
    r, g, b = rgb01.unbind(1)
    v = torch.maximum(torch.maximum(r, g), b)
    low = torch.minimum(torch.minimum(r, g), b)
    diff = v - low
    s = torch.where(v > 0, diff / v.clamp_min(1e-12), torch.zeros_like(v))
    safe = torch.where(diff > 0, diff, torch.ones_like(diff))
    h = torch.where(
        v == r, (g - b) / safe, torch.where(v == g, 2.0 + (b - r) / safe, 4.0 + (r - g) / safe)
    )
    h = torch.where(diff > 0, h, torch.zeros_like(h)) / 6.0
    h = torch.remainder(h + shift[:, None, None], 1.0)
    h6 = h * 6.0
    channels = []
    for n in (5.0, 3.0, 1.0):
        k = torch.remainder(n + h6, 6.0)
        channels.append(v - v * s * torch.clamp(torch.minimum(k, 4.0 - k), 0.0, 1.0))
    return torch.stack(channels, dim=1)


class ColorJitter(Augmentation):
    """torchvision ``ColorJitter`` semantics per sample, in the fixed order b, c, s, h.

    Factors: brightness, contrast, saturation ~ U(max(0, 1 - x), 1 + x); hue shift ~ U(-x, x)
    turns (x <= 0.5). Contrast blends with each image's mean grey, saturation with its grey.
    """

    def __init__(
        self,
        *,
        brightness: float = 0.0,
        contrast: float = 0.0,
        saturation: float = 0.0,
        hue: float = 0.0,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__(generator)
        self.brightness = check_non_negative("brightness", brightness)
        self.contrast = check_non_negative("contrast", contrast)
        self.saturation = check_non_negative("saturation", saturation)
        self.hue = check_non_negative("hue", hue)
        if self.hue > 0.5:
            raise UsageError(f"hue must be in [0, 0.5], got {hue!r}")

    def sample(self, batch: Batch) -> Params:
        b, dev, g = (len(batch),), batch.images.device, self.generator

        def factor(x: float) -> torch.Tensor:
            return rnd.uniform(g, b, max(0.0, 1.0 - x), 1.0 + x, dev)

        return {
            "brightness": factor(self.brightness),
            "contrast": factor(self.contrast),
            "saturation": factor(self.saturation),
            "hue": rnd.uniform(g, b, -self.hue, self.hue, dev),
        }

    def apply(self, batch: Batch, params: Params) -> Batch:
        image_hw(batch.images)
        if batch.images.shape[1] == 1:
            return batch.replace(images=_on_grey(self._jitter, batch.images, params))
        return batch.replace(images=self._jitter(batch.images, params))

    def _jitter(self, images: torch.Tensor, params: Params) -> torch.Tensor:
        x = _to_255(images) / 255.0
        x = (x * params["brightness"][:, None, None, None]).clamp(0.0, 1.0)
        c = params["contrast"][:, None, None, None]
        mean = _grayscale(x).mean(dim=(1, 2, 3), keepdim=True)
        x = (c * x + (1.0 - c) * mean).clamp(0.0, 1.0)
        sat = params["saturation"][:, None, None, None]
        x = (sat * x + (1.0 - sat) * _grayscale(x)).clamp(0.0, 1.0)
        if self.hue > 0:
            x = _adjust_hue(x, params["hue"])
        return _from_255(x * 255.0, images)


class ToFloat(Augmentation):
    """uint8 -> ``dtype`` (float32 or float16) scaled by ``scale`` (1/255: values in [0, 1])."""

    def __init__(self, *, dtype: torch.dtype = torch.float32, scale: float = 1.0 / 255.0) -> None:
        super().__init__()
        if not dtype.is_floating_point:
            raise UsageError(f"dtype must be a floating dtype, got {dtype}")
        self.dtype, self.scale = dtype, float(scale)

    def apply(self, batch: Batch, params: Params) -> Batch:
        if batch.images.dtype != torch.uint8:
            return batch.replace(images=batch.images.to(self.dtype))
        images = (batch.images.to(torch.float32) * self.scale).to(self.dtype)
        return batch.replace(images=images)


class Normalize(Augmentation):
    """(x - mean) / std per channel, on [0, 1] floats (uint8 input is divided by 255 first)."""

    def __init__(
        self,
        *,
        mean: Sequence[float] = (0.485, 0.456, 0.406),
        std: Sequence[float] = (0.229, 0.224, 0.225),
        dtype: torch.dtype = torch.float32,
    ) -> None:
        super().__init__()
        if len(mean) != len(std) or len(mean) not in (1, 3) or any(float(s) <= 0 for s in std):
            raise UsageError("mean and std need 3 values each (or 1 for every channel), std > 0")
        channels = len(mean)
        self.register_buffer(
            "mean", torch.tensor(mean, dtype=torch.float32).view(1, channels, 1, 1)
        )
        self.register_buffer("std", torch.tensor(std, dtype=torch.float32).view(1, channels, 1, 1))
        self.dtype = dtype

    def apply(self, batch: Batch, params: Params) -> Batch:
        channels = batch.images.shape[1] if batch.images.ndim == 4 else None
        if self.mean.shape[1] != 1 and channels != self.mean.shape[1]:
            # Broadcasting would silently turn a grey batch into three channels.
            raise UsageError(
                f"Normalize has {self.mean.shape[1]} means, the images have shape "
                f"{tuple(batch.images.shape)}: give one mean and std per channel "
                "(mean=(m,), std=(s,) for grey images)"
            )
        x = batch.images.to(torch.float32)
        if batch.images.dtype == torch.uint8:
            x = x / 255.0
        mean = self.mean.to(x.device)
        std = self.std.to(x.device)
        return batch.replace(images=((x - mean) / std).to(self.dtype))
