"""Decoding source images into RGB uint8 arrays, and the aspect-keeping resize.

One place decides how files become pixels, so the writer and every converter agree:
- EXIF orientation is applied (``ImageOps.exif_transpose``) by default, because COCO, YOLO and VOC
  tools annotate the image as displayed; ``exif_transpose=False`` keeps the stored pixel order.
- Grayscale, palette, CMYK, RGBA/LA and 16-bit images become RGB uint8: alpha is dropped
  (composited on black would invent pixels), 16-bit values are scaled by 1/257 (not clipped).

Decoding an untrusted file costs bounded work: the pixel count is checked from the header before
any pixel is decoded (``MAX_SOURCE_PIXELS``, and the caller's own limits through ``check``;
`pixel_limit` lifts Pillow's lower global bomb limit to it while detfmt opens an image), and a
progressive JPEG may have at most ``MAX_JPEG_SCANS`` scans, because each scan is a pass over the
whole coefficient buffer (a small file with thousands of empty scans costs minutes of CPU).
docs/reliability.md gives the measured memory peaks per decoded byte.
"""

from __future__ import annotations

import dataclasses
import io
import os
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

import numpy as np
from PIL import Image, ImageOps

from detfmt.errors import InvalidSampleError
from detfmt.format import spec
from detfmt.format.codecs import pixel_limit

__all__ = [
    "MAX_JPEG_SCANS",
    "ImageInfo",
    "check_decodes",
    "count_jpeg_scans",
    "load_rgb",
    "pil_to_rgb",
    "probe_image",
    "resize_rgb",
    "scaled_size",
    "to_rgb_array",
]

MAX_SOURCE_PIXELS = spec.MAX_SOURCE_PIXELS
MAX_JPEG_SCANS = spec.MAX_JPEG_SCANS
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
        with pixel_limit(), Image.open(name) as image:
            width, height = image.size
            return ImageInfo(int(width), int(height), _orientation(image), image.format)
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
        with warnings.catch_warnings(), pixel_limit(), Image.open(name) as image:
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            _check_before_decode(image, image.fp, name, index)
            if image.format == "JPEG":
                image.draft(image.mode, (max(1, image.width // 8), max(1, image.height // 8)))
            image.load()
    except InvalidSampleError:
        raise
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError,
            Image.DecompressionBombWarning) as error:
        raise _image_error(f"cannot decode image: {error}", name, index) from error
    return info


def count_jpeg_scans(data: bytes) -> int:
    """Number of scans (SOS markers) of a JPEG, without decoding it.

    The marker segments before the first scan are walked by their lengths (so an EXIF thumbnail,
    itself a JPEG inside APP1, is not counted); after it, every ``FF DA`` is a scan, since
    entropy-coded data escapes FF bytes. Bytes inside later tables could only add to the count.
    """
    position = 2
    size = len(data)
    while position + 4 <= size:
        if data[position] != 0xFF:
            return 0  # not a marker: let the decoder report the corruption
        marker = data[position + 1]
        if marker == 0xFF:  # fill byte
            position += 1
            continue
        if marker == 0xDA:
            return 1 + data.count(b"\xff\xda", position + 2)
        if 0xD0 <= marker <= 0xD9 or marker == 0x01:  # markers without a length
            position += 2
            continue
        position += 2 + int.from_bytes(data[position + 2 : position + 4], "big")
    return 0


def _check_before_decode(image: Image.Image, handle: BinaryIO | None, name: str,
                         index: int | None) -> None:
    """Refuse, from the header alone, what would cost more than its decoded size to decode."""
    if image.width * image.height > MAX_SOURCE_PIXELS:
        raise _image_error(f"image of {image.width}x{image.height} pixels exceeds "
                           f"{MAX_SOURCE_PIXELS}", name, index)
    if image.format == "JPEG" and image.info.get("progressive") and handle is not None:
        start = handle.tell()
        handle.seek(0)
        scans = count_jpeg_scans(handle.read())
        handle.seek(start)
        if scans > MAX_JPEG_SCANS:
            raise _image_error(f"progressive JPEG with {scans} scans (at most {MAX_JPEG_SCANS}: "
                               "each scan is a pass over the whole image)", name, index)


def load_rgb(
    source: str | os.PathLike[str] | bytes, *, exif_transpose: bool = True,
    index: int | None = None, check: Callable[[int, int], None] | None = None,
) -> np.ndarray:
    """Decode an image file or encoded bytes into an (H, W, 3) uint8 RGB array.

    ``check(height, width)`` (the displayed size, after the EXIF orientation when it applies)
    runs before any pixel is decoded, so a caller's size limits cost nothing on a huge image.

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
        with handle, warnings.catch_warnings(), pixel_limit():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            image = Image.open(handle)
            _check_before_decode(image, handle, name, index)
            if check is not None:
                height, width = image.height, image.width
                if exif_transpose and _orientation(image) in _SWAPS_AXES:
                    height, width = width, height
                check(height, width)
            image.load()
            if exif_transpose:
                image = ImageOps.exif_transpose(image)
            return pil_to_rgb(image)
    except InvalidSampleError as error:
        if error.path is None:  # raised by ``check``: name the file
            raise InvalidSampleError(error.message, rule=error.rule, path=name,
                                     index=index) from error
        raise
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError,
            Image.DecompressionBombWarning) as error:
        raise InvalidSampleError(
            f"cannot decode image: {error}", rule="IMAGE_INVALID", path=name, index=index
        ) from error


def _orientation(image: Image.Image) -> int:
    try:
        value = image.getexif().get(EXIF_ORIENTATION, 1)
    except Exception:  # a broken EXIF block is ignored, like Pillow's exif_transpose does
        return 1
    return value if isinstance(value, int) and 1 <= value <= 8 else 1


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
    return _rgb_bands(image)


#: rows per band of `_rgb_bands`: about 4 MiB of pixels at a time
_BAND_BYTES = 1 << 22


def _rgb_bands(image: Image.Image) -> np.ndarray:
    """An RGB Pillow image as an (H, W, 3) array, a band of rows at a time: ``np.asarray`` of
    the whole image goes through ``tobytes``, whose chunks and joined copy coexist (two image
    sizes beside Pillow's own 4-byte pixels), so decoding peaked at 3.3x the image instead of
    2.3x (docs/reliability.md's bound is 3x)."""
    width, height = image.size
    out = np.empty((height, width, 3), np.uint8)
    rows = max(1, _BAND_BYTES // max(1, width * 3))
    for top in range(0, height, rows):
        bottom = min(height, top + rows)
        out[top:bottom] = np.asarray(image.crop((0, top, width, bottom)), dtype=np.uint8)
    return out


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
