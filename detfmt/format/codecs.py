"""Per-sample image codecs: raw, zstd, jpeg, png.

Decoding never trusts the payload: each codec's procedure of SPEC.md §9 runs before the decoder
(a zstd frame header, block walk and exact declared size, which is the hard output cap, so a
bomb cannot allocate more; the PNG chunks and zlib stream; the JPEG markers and frame), and an
image must decode to exactly the stored height and width. Every failure is a `DecodeError`.
"""

from __future__ import annotations

import contextlib
import io
import os
import threading
import warnings
from collections.abc import Iterator

import numpy as np
import zstandard
from PIL import Image

from detfmt.errors import DecodeError, UsageError
from detfmt.format import spec
from detfmt.format.png_jpeg import check_jpeg, check_png

try:  # libjpeg-turbo with the GIL released; Pillow is the fallback.
    import simplejpeg
except ImportError:  # pragma: no cover - depends on the platform's wheels
    simplejpeg = None

__all__ = ["check_jpeg", "check_png", "decode_into", "decode_pixel_limit", "encode",
           "pixel_limit", "zstd_frame_header"]

MAX_ZSTD_WINDOW = 1 << 27  # 128 MiB: the zstd reference decoder's default streaming limit
_local = threading.local()


_limit_lock = threading.Lock()
_limit_users = 0
_limit_saved: float | None = None


def _limit_after_fork() -> None:
    """A forked child has none of the threads that were inside `pixel_limit`: a fresh lock
    (one held at the fork would never be released) and the user's value back."""
    global _limit_lock, _limit_users
    _limit_lock = threading.Lock()
    if _limit_users and Image.MAX_IMAGE_PIXELS == spec.MAX_SOURCE_PIXELS:
        Image.MAX_IMAGE_PIXELS = _limit_saved
    _limit_users = 0


os.register_at_fork(after_in_child=_limit_after_fork)


@contextlib.contextmanager
def pixel_limit() -> Iterator[None]:
    """While detfmt opens an image, Pillow's decompression-bomb limit (a module global, 89.5 M
    pixels by default) is at least ``spec.MAX_SOURCE_PIXELS``, so detfmt's own documented limit is
    the one that applies (checked from the header before decoding). Nested and concurrent
    users share one lift; the last to leave restores the user's value, unless the user changed
    it meanwhile. A user's higher limit, or None (no limit), is kept."""
    global _limit_users, _limit_saved
    with _limit_lock:
        if _limit_users == 0:
            _limit_saved = Image.MAX_IMAGE_PIXELS
            if _limit_saved is not None and _limit_saved < spec.MAX_SOURCE_PIXELS:
                Image.MAX_IMAGE_PIXELS = spec.MAX_SOURCE_PIXELS
        _limit_users += 1
    try:
        yield
    finally:
        with _limit_lock:
            _limit_users -= 1
            if _limit_users == 0 and Image.MAX_IMAGE_PIXELS == spec.MAX_SOURCE_PIXELS:
                Image.MAX_IMAGE_PIXELS = _limit_saved


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
            return simplejpeg.encode_jpeg(  # W-5: baseline, 4:4:4 (decoders agree, SPEC §9.3)
                np.ascontiguousarray(image), quality=jpeg_quality, colorspace="RGB",
                colorsubsampling="444",
            )
        buffer = io.BytesIO()
        Image.fromarray(image, "RGB").save(buffer, format="JPEG", quality=jpeg_quality,
                                           subsampling=0)
        return buffer.getvalue()
    if codec == "png":
        buffer = io.BytesIO()
        Image.fromarray(image, "RGB").save(buffer, format="PNG", compress_level=png_level)
        return buffer.getvalue()
    raise UsageError(f"unknown codec {codec!r}; expected one of {sorted(spec.CODEC_IDS)}")


def decode_pixel_limit(codec: str) -> int | None:
    """The most pixels `decode_into` accepts in one payload of ``codec`` (None: only the
    format's side limits), so a writer never stores what this reader would refuse.

    None for every codec: Pillow decodes PNG payloads (and JPEG ones without simplejpeg) under
    `pixel_limit`, which lifts its bomb limit to at least 2^28 pixels, the format's largest
    image (16384 x 16384), whatever the user's process set.
    """
    return None


def decode_into(
    payload: memoryview | bytes, codec: int, out: np.ndarray, *, path: str, index: int,
    structure_checked: bool = False, scaled: tuple[int, int, int] | None = None,
) -> None:
    """Decode one payload into ``out``, an (H, W, 3) uint8 array (it may be a strided view).

    ``structure_checked``: these very bytes passed the SPEC §9 structure checks (`check_jpeg`,
    `check_png`) in this process already, so they are not walked again (5% of a JPEG decode;
    the gather engine remembers which samples passed). The size is still checked.
    ``scaled``: (scale, stored height, stored width): a JPEG decoded at 1/scale (2, 4, 8) in
    the DCT domain into ``out`` of ceil(stored / scale).

    Raises:
        DecodeError: ``ZSTD_SIZE``, ``ZSTD_WINDOW``, ``ZSTD_CORRUPT``, ``ZSTD_TRAILING``,
            ``IMAGE_DECODE`` or ``CODEC_UNKNOWN``, naming the sample.
    """
    height, width = out.shape[0], out.shape[1]
    expected = height * width * spec.CHANNELS
    if scaled is not None:
        if codec != spec.CODEC_JPEG:
            raise DecodeError("only a JPEG decodes at a scale", rule="CODEC_UNKNOWN", path=path,
                              index=index)
        _, stored_h, stored_w = scaled
        if not structure_checked:
            check_jpeg(payload, stored_h, stored_w, path=path, index=index)
        _decode_jpeg_into(payload, out, path=path, index=index, scaled=scaled)
        return
    if codec == spec.CODEC_RAW:
        np.copyto(out, np.frombuffer(payload, np.uint8, expected).reshape(height, width, 3))
    elif codec == spec.CODEC_ZSTD:
        if out.flags.c_contiguous:  # decompress straight into the caller's buffer
            decode_zstd_into(payload, memoryview(out).cast("B"), path=path, index=index)
        else:
            data = decode_zstd(payload, expected, path=path, index=index)
            np.copyto(out, np.frombuffer(data, np.uint8).reshape(height, width, 3))
    elif codec == spec.CODEC_JPEG:
        if not structure_checked:
            check_jpeg(payload, height, width, path=path, index=index)
        _decode_jpeg_into(payload, out, path=path, index=index)
    elif codec == spec.CODEC_PNG:
        if not structure_checked:
            check_png(payload, height, width, path=path, index=index)
        np.copyto(out, _decode_pil(payload, height, width, "PNG", path=path, index=index))
    else:
        raise DecodeError(f"unknown codec id {codec}", rule="CODEC_UNKNOWN", path=path, index=index)


class ZstdFrame:
    """The facts of one zstd frame header (RFC 8878 §3.1.1) that SPEC §9.2 checks."""

    def __init__(self, content_size: int | None, window: int, dictionary: int, size: int) -> None:
        self.content_size = content_size
        self.window = window
        self.dictionary = dictionary
        self.size = size  # header + blocks + checksum, in bytes


def zstd_frame_header(payload: memoryview | bytes, *, path: str, index: int,
                      expected: int | None = None) -> ZstdFrame:
    """Steps Z1 to Z6 of SPEC §9.2, in that order (with ``expected``, Z3 compares the declared
    content size with it)."""
    data = memoryview(payload).cast("B")

    def corrupt(message: str) -> DecodeError:
        return DecodeError(message, rule="ZSTD_CORRUPT", path=path, index=index)

    if len(data) < 5 or bytes(data[:4]) != b"\x28\xb5\x2f\xfd":  # Z1
        raise corrupt("not a zstd frame (magic number)")
    descriptor = data[4]
    if descriptor & 0x08:  # Z2
        raise corrupt("zstd frame header has its reserved bit set")
    fcs_flag, single = descriptor >> 6, (descriptor >> 5) & 1
    checksum, did_flag = (descriptor >> 2) & 1, descriptor & 3
    did_size = (0, 1, 2, 4)[did_flag]
    fcs_size = (1 if single else 0, 2, 4, 8)[fcs_flag]
    position = 5 + (0 if single else 1)
    if len(data) < position + did_size + fcs_size:
        raise corrupt("the payload ends inside the zstd frame header")
    window = 0
    if not single:
        base = 1 << (10 + (data[5] >> 3))
        window = base + (base >> 3) * (data[5] & 7)
    dictionary = int.from_bytes(data[position:position + did_size], "little")
    position += did_size
    declared = None
    if fcs_size:
        declared = int.from_bytes(data[position:position + fcs_size], "little")
        declared += 256 if fcs_size == 2 else 0
    position += fcs_size
    if declared is None or (expected is not None and declared != expected):  # Z3
        found = "no content size" if declared is None else f"{declared} bytes"
        raise DecodeError(f"zstd frame declares {found}, expected {expected}", rule="ZSTD_SIZE",
                          path=path, index=index)
    if single:
        window = declared
    if window > MAX_ZSTD_WINDOW:  # Z4
        raise DecodeError(f"zstd window of {window} bytes exceeds {MAX_ZSTD_WINDOW}",
                          rule="ZSTD_WINDOW", path=path, index=index)
    if dictionary:  # Z5
        raise corrupt(f"zstd frame requires dictionary {dictionary}")
    limit = min(window, 1 << 17)  # Block_Maximum_Size
    while True:  # Z6
        if position + 3 > len(data):
            raise corrupt("zstd frame is truncated (block header past the payload)")
        header = data[position] | data[position + 1] << 8 | data[position + 2] << 16
        last, kind, size = header & 1, (header >> 1) & 3, header >> 3
        if kind == 3:
            raise corrupt("zstd block of the reserved type")
        if size > limit:
            raise corrupt(f"zstd block of {size} bytes exceeds Block_Maximum_Size {limit}")
        position += 3 + (1 if kind == 1 else size)
        if position > len(data):
            raise corrupt("zstd frame is truncated (block past the payload)")
        if last:
            break
    position += 4 * checksum
    if position > len(data):
        raise corrupt("zstd frame is truncated (content checksum)")
    return ZstdFrame(declared, window, dictionary, position)


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
    """SPEC §9.2 steps Z1 to Z7, all before any output is produced."""
    frame = zstd_frame_header(payload, path=path, index=index, expected=expected)
    length = memoryview(payload).nbytes
    if frame.size < length:  # Z7
        raise DecodeError(f"{length - frame.size} bytes follow the zstd frame",
                          rule="ZSTD_TRAILING", path=path, index=index)


def decode_zstd(payload: memoryview | bytes, expected: int, *, path: str, index: int
                ) -> bytearray:
    """Decompress one zstd frame of exactly ``expected`` bytes into new memory (for callers
    whose destination is not contiguous)."""
    out = bytearray(expected)
    decode_zstd_into(payload, memoryview(out), path=path, index=index)
    return out


def _decode_jpeg_into(payload, out: np.ndarray, *, path: str, index: int,
                      scaled: tuple[int, int, int] | None = None) -> None:
    height, width = out.shape[0], out.shape[1]
    if scaled is not None:
        _decode_jpeg_scaled(payload, out, scaled, path=path, index=index)
        return
    if simplejpeg is None:
        np.copyto(out, _decode_pil(payload, height, width, "JPEG", path=path, index=index))
        return
    with _simplejpeg_errors(path, index):
        _check_jpeg_size(payload, height, width, path=path, index=index)
        target = _decode_target(out)
        simplejpeg.decode_jpeg(payload, colorspace="RGB", buffer=target, strict=True)
        if target is not out:
            np.copyto(out, target)


@contextlib.contextmanager
def _simplejpeg_errors(path: str, index: int) -> Iterator[None]:
    """simplejpeg's ValueError/RuntimeError as the format's IMAGE_DECODE."""
    try:
        yield
    except DecodeError:
        raise
    except (ValueError, RuntimeError) as error:
        raise DecodeError(f"cannot decode JPEG: {error}", rule="IMAGE_DECODE", path=path,
                          index=index) from error


def _check_jpeg_size(payload, height: int, width: int, *, path: str, index: int) -> None:
    got = simplejpeg.decode_jpeg_header(payload)
    if (got[0], got[1]) != (height, width):
        raise DecodeError(f"JPEG is {got[0]}x{got[1]}, index says {height}x{width}",
                          rule="IMAGE_DECODE", path=path, index=index)


def _decode_target(out: np.ndarray) -> np.ndarray:
    """``out`` itself where a decoder can write it (C-contiguous), else a temporary to copy."""
    return out if out.flags.c_contiguous else np.empty((*out.shape[:2], 3), np.uint8)


def _decode_jpeg_scaled(payload, out: np.ndarray, scaled: tuple[int, int, int], *, path: str,
                        index: int) -> None:
    """libjpeg's DCT-domain scaled decode (simplejpeg asks for it with a minimum factor and
    the exact output size: it picks the largest factor that keeps that size)."""
    scale, stored_h, stored_w = scaled
    height, width = out.shape[0], out.shape[1]
    if simplejpeg is None:
        raise DecodeError("a scaled JPEG decode needs simplejpeg (pip install simplejpeg)",
                          rule="IMAGE_DECODE", path=path, index=index)
    with _simplejpeg_errors(path, index):
        _check_jpeg_size(payload, stored_h, stored_w, path=path, index=index)
        target = _decode_target(out)
        image = simplejpeg.decode_jpeg(payload, colorspace="RGB", buffer=target, strict=True,
                                       min_height=height, min_width=width, min_factor=scale)
        if image.shape[:2] != (height, width):
            raise DecodeError(f"the JPEG decoded at 1/{scale} is {image.shape[0]}x"
                              f"{image.shape[1]}, expected {height}x{width}",
                              rule="IMAGE_DECODE", path=path, index=index)
        if target is not out:
            np.copyto(out, target)


def _decode_pil(payload, height: int, width: int, kind: str, *, path: str, index: int
                ) -> np.ndarray:
    try:
        with warnings.catch_warnings(), pixel_limit():
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
