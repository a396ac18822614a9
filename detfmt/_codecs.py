"""Per-sample image codecs: raw, zstd, jpeg, png.

Decoding never trusts the payload: a zstd frame must declare exactly the expected size (that
size is the hard output cap, so a bomb cannot allocate more), nothing may follow it, and an image
must decode to exactly the stored height and width. Every failure is a `DecodeError`.
"""

from __future__ import annotations

import io
import threading
import warnings

import numpy as np
import zstandard
from PIL import Image

from detfmt import spec
from detfmt.errors import DecodeError, UsageError

try:  # libjpeg-turbo with the GIL released; Pillow is the fallback.
    import simplejpeg
except ImportError:  # pragma: no cover - depends on the platform's wheels
    simplejpeg = None

__all__ = ["decode_into", "decode_pixel_limit", "encode"]

MAX_ZSTD_WINDOW = 1 << 27  # 128 MiB: the zstd reference decoder's default streaming limit
_local = threading.local()


def _zstd_compressor(level: int) -> zstandard.ZstdCompressor:
    cache = getattr(_local, "compressors", None)
    if cache is None:
        cache = _local.compressors = {}
    if level not in cache:
        cache[level] = zstandard.ZstdCompressor(level=level, write_content_size=True)
    return cache[level]


def _zstd_decompressor() -> zstandard.ZstdDecompressor:
    dctx = getattr(_local, "dctx", None)
    if dctx is None:
        dctx = _local.dctx = zstandard.ZstdDecompressor(max_window_size=MAX_ZSTD_WINDOW)
    return dctx


def encode(
    image: np.ndarray, codec: str, *, jpeg_quality: int = 90, zstd_level: int = 3,
    png_level: int = 3,
) -> bytes | memoryview:
    """Encode an (H, W, 3) C-contiguous uint8 image as the payload of ``codec``."""
    if codec == "raw":
        return memoryview(np.ascontiguousarray(image)).cast("B")
    if codec == "zstd":
        return _zstd_compressor(zstd_level).compress(np.ascontiguousarray(image))
    if codec == "jpeg":
        if simplejpeg is not None:
            return simplejpeg.encode_jpeg(
                np.ascontiguousarray(image), quality=jpeg_quality, colorspace="RGB",
                colorsubsampling="420",
            )
        buffer = io.BytesIO()
        Image.fromarray(image, "RGB").save(buffer, format="JPEG", quality=jpeg_quality)
        return buffer.getvalue()
    if codec == "png":
        buffer = io.BytesIO()
        Image.fromarray(image, "RGB").save(buffer, format="PNG", compress_level=png_level)
        return buffer.getvalue()
    raise UsageError(f"unknown codec {codec!r}; expected one of {sorted(spec.CODEC_IDS)}")


def decode_pixel_limit(codec: str) -> int | None:
    """The most pixels `decode_into` accepts in one payload of ``codec`` (None: only the
    format's side limits), so a writer never stores what this reader would refuse.

    PNG payloads (and JPEG ones without simplejpeg) are decoded by Pillow with its
    decompression-bomb warning turned into an error: above ``Image.MAX_IMAGE_PIXELS`` they fail.
    """
    if codec == "png" or (codec == "jpeg" and simplejpeg is None):
        limit = Image.MAX_IMAGE_PIXELS
        return None if limit is None else int(limit)
    return None


def decode_into(
    payload: memoryview | bytes, codec: int, out: np.ndarray, *, path: str, index: int
) -> None:
    """Decode one payload into ``out``, an (H, W, 3) uint8 array (it may be a strided view).

    Raises:
        DecodeError: ``ZSTD_SIZE``, ``ZSTD_WINDOW``, ``ZSTD_CORRUPT``, ``ZSTD_TRAILING``,
            ``IMAGE_DECODE`` or ``CODEC_UNKNOWN``, naming the sample.
    """
    height, width = out.shape[0], out.shape[1]
    expected = height * width * spec.CHANNELS
    if codec == spec.CODEC_RAW:
        np.copyto(out, np.frombuffer(payload, np.uint8, expected).reshape(height, width, 3))
    elif codec == spec.CODEC_ZSTD:
        if out.flags.c_contiguous:  # decompress straight into the caller's buffer
            decode_zstd_into(payload, memoryview(out).cast("B"), path=path, index=index)
        else:
            data = decode_zstd(payload, expected, path=path, index=index)
            np.copyto(out, np.frombuffer(data, np.uint8).reshape(height, width, 3))
    elif codec == spec.CODEC_JPEG:
        _decode_jpeg_into(payload, out, path=path, index=index)
    elif codec == spec.CODEC_PNG:
        _check_png_ihdr(payload, path=path, index=index)
        np.copyto(out, _decode_pil(payload, height, width, "PNG", path=path, index=index))
    else:
        raise DecodeError(f"unknown codec id {codec}", rule="CODEC_UNKNOWN", path=path, index=index)


def zstd_frame_size(payload: memoryview | bytes, *, path: str, index: int) -> int:
    """The compressed size of the zstd frame at the start of ``payload`` (RFC 8878 §3.1.1).

    Walks the block headers only (3 bytes each), so trailing bytes and truncation are found
    without decompressing anything.
    """
    data = memoryview(payload).cast("B")
    if len(data) < 6:
        raise DecodeError("zstd payload too short for a frame", rule="ZSTD_CORRUPT", path=path,
                          index=index)
    try:
        position = zstandard.frame_header_size(data)
    except zstandard.ZstdError as error:
        raise DecodeError(f"corrupt zstd frame header: {error}", rule="ZSTD_CORRUPT", path=path,
                          index=index) from error
    checksum = 4 if data[4] & 0x04 else 0
    while True:
        if position + 3 > len(data):
            raise DecodeError("zstd frame is truncated (block header past the payload)",
                              rule="ZSTD_CORRUPT", path=path, index=index)
        header = data[position] | data[position + 1] << 8 | data[position + 2] << 16
        last, kind, size = header & 1, (header >> 1) & 3, header >> 3
        if kind == 3:
            raise DecodeError("zstd block of the reserved type", rule="ZSTD_CORRUPT", path=path,
                              index=index)
        position += 3 + (1 if kind == 1 else size)
        if last:
            return position + checksum


def decode_zstd_into(payload: memoryview | bytes, out: memoryview, *, path: str,
                     index: int) -> None:
    """Decompress one zstd frame into ``out`` (exactly its size): no intermediate copy, so a
    frame's memory cost is the image itself."""
    expected = out.nbytes
    _check_zstd_frame(payload, expected, path=path, index=index)
    reader = _zstd_decompressor().stream_reader(payload, read_across_frames=False)
    done = 0
    try:
        while done < expected:
            got = reader.readinto(out[done:])
            if got == 0:
                break
            done += got
        extra = reader.read(1) if done == expected else b""
    except zstandard.ZstdError as error:
        raise DecodeError(f"corrupt zstd data: {error}", rule="ZSTD_CORRUPT", path=path,
                          index=index) from error
    if done != expected or extra:
        raise DecodeError(f"zstd frame decodes to {done}{'+' if extra else ''} bytes, expected "
                          f"{expected}", rule="ZSTD_CORRUPT", path=path, index=index)


def _check_zstd_frame(payload: memoryview | bytes, expected: int, *, path: str,
                      index: int) -> None:
    """Declared size, window and frame extent, all before any output is produced."""
    try:
        params = zstandard.get_frame_parameters(payload)
    except zstandard.ZstdError as error:
        raise DecodeError(f"corrupt zstd frame header: {error}", rule="ZSTD_CORRUPT", path=path,
                          index=index) from error
    if params.content_size != expected:
        declared = "no content size" if params.content_size == zstandard.CONTENTSIZE_UNKNOWN \
            else f"{params.content_size} bytes"
        raise DecodeError(f"zstd frame declares {declared}, expected {expected}",
                          rule="ZSTD_SIZE", path=path, index=index)
    if params.window_size > MAX_ZSTD_WINDOW:
        raise DecodeError(f"zstd window of {params.window_size} bytes exceeds {MAX_ZSTD_WINDOW}",
                          rule="ZSTD_WINDOW", path=path, index=index)
    size = zstd_frame_size(payload, path=path, index=index)
    length = memoryview(payload).nbytes
    if size > length:
        raise DecodeError(f"zstd frame is truncated: it needs {size} bytes, the payload has "
                          f"{length}", rule="ZSTD_CORRUPT", path=path, index=index)
    if size < length:
        raise DecodeError(f"{length - size} bytes follow the zstd frame", rule="ZSTD_TRAILING",
                          path=path, index=index)


def decode_zstd(payload: memoryview | bytes, expected: int, *, path: str, index: int
                ) -> bytearray:
    """Decompress one zstd frame of exactly ``expected`` bytes into new memory (for callers
    whose destination is not contiguous)."""
    out = bytearray(expected)
    decode_zstd_into(payload, memoryview(out), path=path, index=index)
    return out


def _check_png_ihdr(payload, *, path: str, index: int) -> None:
    """SPEC: a PNG payload is 8-bit RGB. Pillow maps 16-bit RGB to mode "RGB" (dropping the low
    byte), so the mode check alone does not catch it: read bit depth and color type from IHDR."""
    head = bytes(payload[:29])
    if len(head) < 29 or head[12:16] != b"IHDR" or head[24] != 8 or head[25] != 2:
        depth, color = (head[24], head[25]) if len(head) >= 26 else (None, None)
        raise DecodeError(f"PNG must be 8-bit RGB (IHDR bit depth 8, color type 2), got bit depth "
                          f"{depth}, color type {color}", rule="IMAGE_DECODE", path=path,
                          index=index)


def _decode_jpeg_into(payload, out: np.ndarray, *, path: str, index: int) -> None:
    height, width = out.shape[0], out.shape[1]
    if simplejpeg is None:
        np.copyto(out, _decode_pil(payload, height, width, "JPEG", path=path, index=index))
        return
    try:
        got = simplejpeg.decode_jpeg_header(payload)
        if (got[0], got[1]) != (height, width):
            raise DecodeError(f"JPEG is {got[0]}x{got[1]}, index says {height}x{width}",
                              rule="IMAGE_DECODE", path=path, index=index)
        contiguous = out.flags.c_contiguous
        target = out if contiguous else np.empty((height, width, 3), np.uint8)
        simplejpeg.decode_jpeg(payload, colorspace="RGB", buffer=target, strict=True)
        if not contiguous:
            np.copyto(out, target)
    except DecodeError:
        raise
    except (ValueError, RuntimeError) as error:
        raise DecodeError(f"cannot decode JPEG: {error}", rule="IMAGE_DECODE", path=path,
                          index=index) from error


def _decode_pil(payload, height: int, width: int, kind: str, *, path: str, index: int
                ) -> np.ndarray:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            image = Image.open(io.BytesIO(payload), formats=[kind])
            if image.size != (width, height):
                raise DecodeError(
                    f"{kind} is {image.height}x{image.width}, index says {height}x{width}",
                    rule="IMAGE_DECODE", path=path, index=index,
                )
            if kind == "PNG" and image.mode != "RGB":
                raise DecodeError(f"PNG must be 8-bit RGB, got mode {image.mode}",
                                  rule="IMAGE_DECODE", path=path, index=index)
            image.load()
            if image.mode != "RGB":
                image = image.convert("RGB")
            return np.asarray(image, dtype=np.uint8)
    except DecodeError:
        raise
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError,
            Image.DecompressionBombWarning) as error:
        raise DecodeError(f"cannot decode {kind}: {error}", rule="IMAGE_DECODE", path=path,
                          index=index) from error
