"""Decoding source images into RGB uint8 arrays, and the aspect-keeping resize.

One place decides how files become pixels, so the writer and every converter agree:
- EXIF orientation is applied (``ImageOps.exif_transpose``) by default, because COCO, YOLO and VOC
  tools annotate the image as displayed; ``exif_transpose=False`` keeps the stored pixel order.
- Grayscale, palette, CMYK, RGBA/LA and 16-bit images become RGB uint8: alpha is dropped
  (composited on black would invent pixels), 16-bit values are scaled by 1/257 (not clipped).
"""

from __future__ import annotations

import dataclasses
import io
import os
import warnings
from pathlib import Path

import numpy as np
from PIL import Image, ImageOps

from detfmt.errors import InvalidSampleError

__all__ = [
    "ImageInfo",
    "check_decodes",
    "load_rgb",
    "pil_to_rgb",
    "probe_image",
    "resize_rgb",
    "scaled_size",
    "to_rgb_array",
]

MAX_SOURCE_PIXELS = 1 << 28  # 268 M pixels: refuse decompression bombs before decoding
EXIF_ORIENTATION = 0x0112
_SWAPS_AXES = frozenset({5, 6, 7, 8})  # EXIF orientations that exchange width and height


@dataclasses.dataclass(frozen=True)
class ImageInfo:
    """What the file header says, read without decoding pixels.

    ``width``/``height`` are the stored pixel grid; ``orientation`` is the EXIF tag (1 when absent
    or invalid); ``display_size`` is (width, height) after `load_rgb`'s EXIF transpose.
    """

    width: int
    height: int
    orientation: int = 1
    format: str | None = None

    @property
    def swaps_axes(self) -> bool:
        return self.orientation in _SWAPS_AXES

    @property
    def display_size(self) -> tuple[int, int]:
        return (self.height, self.width) if self.swaps_axes else (self.width, self.height)


def _image_error(message: str, name: str, index: int | None, rule: str = "IMAGE_INVALID"):
    return InvalidSampleError(message, rule=rule, path=name, index=index)


def probe_image(path: str | os.PathLike[str], *, index: int | None = None) -> ImageInfo:
    """Read an image's size, format and EXIF orientation from its header (no pixel decoding).

    Cheap enough to run for every image in the converter's main process (about 0.1 ms).

    Raises:
        InvalidSampleError: rule ``IMAGE_MISSING`` when the file does not exist, ``IMAGE_INVALID``
            when it is not a readable image.
    """
    name = os.fspath(path)
    try:
        with Image.open(name) as image:
            width, height = image.size
            orientation = 1
            try:
                value = image.getexif().get(EXIF_ORIENTATION, 1)
                if isinstance(value, int) and 1 <= value <= 8:
                    orientation = value
            except Exception:  # a broken EXIF block is ignored, like Pillow's exif_transpose does
                orientation = 1
            return ImageInfo(int(width), int(height), orientation, image.format)
    except FileNotFoundError as error:
        raise _image_error("image file not found", name, index, "IMAGE_MISSING") from error
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as error:
        raise _image_error(f"cannot read image header: {error}", name, index) from error


def check_decodes(path: str | os.PathLike[str], *, index: int | None = None) -> ImageInfo:
    """Probe an image and decode all of its data, so corrupt or truncated files fail here.

    JPEGs are decoded at 1/8 scale (libjpeg DCT scaling: every entropy-coded byte is still read,
    so truncation and corruption are still detected) to keep this pre-check cheap.
    """
    info = probe_image(path, index=index)
    name = os.fspath(path)
    try:
        with warnings.catch_warnings(), Image.open(name) as image:
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            if image.width * image.height > MAX_SOURCE_PIXELS:
                raise _image_error(
                    f"image of {image.width}x{image.height} pixels exceeds {MAX_SOURCE_PIXELS}",
                    name,
                    index,
                )
            if image.format == "JPEG":
                image.draft(image.mode, (max(1, image.width // 8), max(1, image.height // 8)))
            image.load()
    except InvalidSampleError:
        raise
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError,
            Image.DecompressionBombWarning) as error:
        raise _image_error(f"cannot decode image: {error}", name, index) from error
    return info


def load_rgb(
    source: str | os.PathLike[str] | bytes, *, exif_transpose: bool = True, index: int | None = None
) -> np.ndarray:
    """Decode an image file or encoded bytes into an (H, W, 3) uint8 RGB array.

    Raises:
        InvalidSampleError: rule ``IMAGE_INVALID``: missing, corrupt, truncated or too large.
    """
    name = "<bytes>" if isinstance(source, bytes) else os.fspath(source)
    try:
        handle = io.BytesIO(source) if isinstance(source, bytes) else Path(source).open("rb")  # noqa: SIM115
    except OSError as error:
        raise InvalidSampleError(
            f"cannot open image: {error.strerror}", rule="IMAGE_INVALID", path=name, index=index
        ) from error
    try:
        with handle, warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            image = Image.open(handle)
            if image.width * image.height > MAX_SOURCE_PIXELS:
                raise InvalidSampleError(
                    f"image of {image.width}x{image.height} pixels exceeds {MAX_SOURCE_PIXELS}",
                    rule="IMAGE_INVALID",
                    path=name,
                    index=index,
                )
            image.load()
            if exif_transpose:
                image = ImageOps.exif_transpose(image)
            return pil_to_rgb(image)
    except InvalidSampleError:
        raise
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError,
            Image.DecompressionBombWarning) as error:
        raise InvalidSampleError(
            f"cannot decode image: {error}", rule="IMAGE_INVALID", path=name, index=index
        ) from error


def pil_to_rgb(image: Image.Image) -> np.ndarray:
    """Convert any Pillow mode to an (H, W, 3) uint8 RGB array by the rules in the module doc."""
    mode = image.mode
    if mode in ("I;16", "I;16B", "I;16L", "I;16N", "I"):
        values = np.asarray(image, dtype=np.uint32 if mode == "I" else None).astype(np.float64)
        top = 65535.0 if mode.startswith("I;16") or values.max(initial=0) > 255 else 255.0
        gray = np.clip(np.rint(values * (255.0 / top)), 0, 255).astype(np.uint8)
        return np.repeat(gray[:, :, None], 3, axis=2)
    if mode == "F":
        gray = np.clip(np.rint(np.asarray(image, dtype=np.float64)), 0, 255).astype(np.uint8)
        return np.repeat(gray[:, :, None], 3, axis=2)
    if mode != "RGB":
        image = image.convert("RGB")
    return np.ascontiguousarray(np.asarray(image, dtype=np.uint8))


def to_rgb_array(array: np.ndarray, *, index: int | None = None) -> np.ndarray:
    """Validate a caller's pixel array: (H, W, 3) or (H, W)/(H, W, 1) grayscale, uint8.

    Grayscale is replicated to RGB (lossless). RGBA and non-uint8 arrays are refused, because the
    right conversion (alpha background, value range) is the caller's knowledge, not ours.
    """
    if not isinstance(array, np.ndarray):
        raise InvalidSampleError(
            f"image must be a numpy array, bytes or a path, not {type(array).__name__}",
            rule="IMAGE_INVALID",
            index=index,
        )
    if array.dtype != np.uint8:
        raise InvalidSampleError(
            f"image dtype must be uint8, got {array.dtype} (scale 16-bit or float images first)",
            rule="IMAGE_INVALID",
            index=index,
        )
    if array.ndim == 2:
        array = array[:, :, None]
    if array.ndim != 3 or array.shape[2] not in (1, 3):
        raise InvalidSampleError(
            f"image must be (H, W, 3) RGB or (H, W) grayscale, got shape {array.shape}"
            + (" (drop or composite the alpha channel first)" if array.ndim == 3 and
               array.shape[2] == 4 else ""),
            rule="IMAGE_INVALID",
            index=index,
        )
    if array.shape[0] < 1 or array.shape[1] < 1:
        raise InvalidSampleError(
            f"image has an empty dimension: shape {array.shape}", rule="IMAGE_INVALID", index=index
        )
    if array.shape[2] == 1:
        array = np.repeat(array, 3, axis=2)
    return np.ascontiguousarray(array)


def scaled_size(height: int, width: int, max_side: int | None) -> tuple[int, int]:
    """The stored size for an image: long side at most ``max_side``, aspect kept, never upscaled."""
    if max_side is None or max(height, width) <= max_side:
        return height, width
    scale = max_side / max(height, width)
    return max(1, round(height * scale)), max(1, round(width * scale))


def resize_rgb(image: np.ndarray, height: int, width: int) -> np.ndarray:
    """Resize an (H, W, 3) uint8 image with an antialiased filter (area-like when shrinking)."""
    if image.shape[0] == height and image.shape[1] == width:
        return image
    pil = Image.fromarray(image, mode="RGB") if image.ndim == 3 else Image.fromarray(image)
    shrinking = height < image.shape[0] and width < image.shape[1]
    resample = Image.Resampling.BOX if shrinking else Image.Resampling.BILINEAR
    # BOX with a reducing gap is Pillow's fast area average; BILINEAR for upscales/mixed cases.
    resized = pil.resize((width, height), resample=resample)
    return np.ascontiguousarray(np.asarray(resized, dtype=np.uint8))
