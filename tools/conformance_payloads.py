"""Byte-exact payload builders for the conformance generator (no third-party encoders).

The goldens must not change when Pillow, libjpeg, zlib or libzstd change, so every payload the
generator writes is built here by hand from the format specifications, except two frozen blobs
(a JPEG and a zstd frame with compressed blocks), which are stored as constants.
"""

from __future__ import annotations

import base64
import struct
import zlib

import numpy as np
import xxhash

__all__ = [
    "FROZEN_JPEG",
    "FROZEN_ZSTD",
    "jpeg_source",
    "npy",
    "png",
    "zstd_frame",
    "zstd_source",
]

# --- .npy (SPEC "Array files"): version 1.0, exactly numpy's canonical form -----------------


def _descr(dtype: np.dtype) -> str:
    if dtype.names is None:
        return repr(dtype.str)
    fields = ", ".join(f"({name!r}, {dtype.fields[name][0].str!r})" for name in dtype.names)
    return f"[{fields}]"


def npy(array: np.ndarray, *, descr: str | None = None, fortran: bool = False,
        shape: tuple[int, ...] | None = None, version: int = 1) -> bytes:
    """Serialize ``array`` as a version-1.0 .npy file (overrides only for invalid cases)."""
    fields = (descr if descr is not None else _descr(array.dtype), "True" if fortran else "False",
              tuple(array.shape if shape is None else shape))
    text = "{{'descr': {}, 'fortran_order': {}, 'shape': {!r}, }}".format(*fields)
    prefix = 10 if version == 1 else 12
    total = prefix + len(text) + 1
    padded = (text + " " * (-total % 64) + "\n").encode("latin-1")
    length = struct.pack("<H", len(padded)) if version == 1 else struct.pack("<I", len(padded))
    data = np.ascontiguousarray(array).tobytes()
    return b"\x93NUMPY" + bytes([version, 0]) + length + padded + data


# --- zstd frames (RFC 8878) with raw and RLE blocks ---------------------------------------

ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


def zstd_frame(data: bytes, *, blocks: list[tuple[str, int]] | None = None,
               content_size: int | bool | None = True, window_log: int | None = None,
               checksum: bool = False) -> bytes:
    """A single zstd frame holding ``data`` in raw ("raw") or run-length ("rle") blocks.

    Args:
        blocks: (kind, length) per block; default one raw block. RLE blocks need a constant run.
        content_size: True declares len(data); an int declares that value; None/False omits it.
        window_log: None makes a single-segment frame; else a Window_Descriptor of 2**window_log.
        checksum: append the content checksum (low 32 bits of XXH64, seed 0).
    """
    declared = len(data) if content_size is True else (content_size or None)
    single = window_log is None
    if declared is None:
        fcs_flag, fcs = 0, b""
        if single:
            raise ValueError("a single-segment frame always declares its content size")
    elif declared < 256 and single:
        fcs_flag, fcs = 0, struct.pack("<B", declared)
    elif 256 <= declared < 65536 + 256:
        fcs_flag, fcs = 1, struct.pack("<H", declared - 256)
    else:
        fcs_flag, fcs = 2, struct.pack("<I", declared)
    descriptor = (fcs_flag << 6) | (int(single) << 5) | (int(checksum) << 2)
    out = bytearray(ZSTD_MAGIC + bytes([descriptor]))
    if not single:
        out.append((window_log - 10) << 3)
    out += fcs
    blocks = blocks or [("raw", len(data))]
    position = 0
    for number, (kind, length) in enumerate(blocks):
        last = int(number == len(blocks) - 1)
        chunk = data[position:position + length]
        position += length
        if kind == "raw":
            out += (last | (0 << 1) | (length << 3)).to_bytes(3, "little") + chunk
        else:
            if chunk != chunk[:1] * length:
                raise ValueError("an RLE block needs a constant run")
            out += (last | (1 << 1) | (length << 3)).to_bytes(3, "little") + chunk[:1]
    if position != len(data):
        raise ValueError("blocks do not cover the data")
    if checksum:
        out += struct.pack("<I", xxhash.xxh64_intdigest(data) & 0xFFFFFFFF)
    return bytes(out)


# --- PNG (RFC 2083) with stored deflate blocks and all five filter types ---------------------


def _chunk(kind: bytes, body: bytes, *, bad_crc: bool = False) -> bytes:
    crc = zlib.crc32(kind + body) ^ (1 if bad_crc else 0)
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", crc)


def _paeth(a: int, b: int, c: int) -> int:
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    if pa <= pb and pa <= pc:
        return a
    return b if pb <= pc else c


def _filter_rows(rows: np.ndarray, bpp: int) -> bytes:
    """Filter each scanline with type (row % 5): None, Sub, Up, Average, Paeth."""
    out = bytearray()
    previous = bytes(rows.shape[1])
    for number in range(rows.shape[0]):
        line = rows[number].tobytes()
        kind = number % 5
        filtered = bytearray(len(line))
        for i, x in enumerate(line):
            a = line[i - bpp] if i >= bpp else 0
            b = previous[i]
            c = previous[i - bpp] if i >= bpp else 0
            predictor = (0, a, b, (a + b) // 2, _paeth(a, b, c))[kind]
            filtered[i] = (x - predictor) & 0xFF
        out += bytes([kind]) + filtered
        previous = line
    return bytes(out)


def _stored_zlib(data: bytes) -> bytes:
    out = bytearray(b"\x78\x01")
    pieces = [data[i:i + 65535] for i in range(0, len(data), 65535)] or [b""]
    for number, piece in enumerate(pieces):
        final = int(number == len(pieces) - 1)
        out += bytes([final]) + struct.pack("<HH", len(piece), len(piece) ^ 0xFFFF) + piece
    return bytes(out + struct.pack(">I", zlib.adler32(data)))


def png(image: np.ndarray, *, bit_depth: int = 8, color_type: int = 2,
        bad_crc: bool = False) -> bytes:
    """Encode an (H, W, 3) uint8 image as PNG (8-bit RGB unless an invalid case asks otherwise)."""
    height, width = image.shape[:2]
    samples = image
    if color_type == 0:
        samples = image[:, :, :1]
    if color_type == 6:
        samples = np.concatenate([image, np.full((height, width, 1), 255, np.uint8)], axis=2)
    if bit_depth == 16:
        samples = (samples.astype(">u2") * 257).view(np.uint8).reshape(height, width, -1)
    rows = samples.reshape(height, -1)
    bpp = samples.shape[2] * (bit_depth // 8) if bit_depth == 16 else samples.shape[2]
    ihdr = struct.pack(">IIBBBBB", width, height, bit_depth, color_type, 0, 0, 0)
    body = _stored_zlib(_filter_rows(rows, bpp))
    return (b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", ihdr) + _chunk(b"IDAT", body, bad_crc=bad_crc)
            + _chunk(b"IEND", b""))


# --- frozen blobs: produced once with third-party encoders, never regenerated ----------------


def jpeg_source(height: int, width: int) -> np.ndarray:
    """The smooth reference image the frozen JPEGs were encoded from."""
    y, x = np.mgrid[0:height, 0:width]
    image = np.stack([40 + 8 * x, 60 + 6 * y, 128 + 2 * (x + y)], axis=-1)
    return np.clip(image, 0, 255).astype(np.uint8)


def zstd_source() -> np.ndarray:
    """The (16, 24, 3) image inside FROZEN_ZSTD."""
    y, x = np.mgrid[0:16, 0:24]
    return np.stack([(x // 4) * 40, (y // 4) * 60, ((x + y) % 2) * 255], -1).astype(np.uint8)


def _b64(text: str) -> bytes:
    return base64.b64decode("".join(text.split()))


#: Pillow 13.0 / libjpeg-turbo, quality 95, 4:4:4, baseline, JFIF; of jpeg_source(h, w).
FROZEN_JPEG: dict[tuple[int, int], bytes] = {
    (16, 24): _b64(
        '/9j/4AAQSkZJRgABAQAAAQABAAD/2wBDAAIBAQEBAQIBAQECAgICAgQDAgICAgUEBAMEBgUGBgYFBgYGBwkIBgcJ'
        'BwYGCAsICQoKCgoKBggLDAsKDAkKCgr/2wBDAQICAgICAgUDAwUKBwYHCgoKCgoKCgoKCgoKCgoKCgoKCgoKCgoK'
        'CgoKCgoKCgoKCgoKCgoKCgoKCgoKCgoKCgr/wAARCAAQABgDAREAAhEBAxEB/8QAHwAAAQUBAQEBAQEAAAAAAAAA'
        'AAECAwQFBgcICQoL/8QAtRAAAgEDAwIEAwUFBAQAAAF9AQIDAAQRBRIhMUEGE1FhByJxFDKBkaEII0KxwRVS0fAk'
        'M2JyggkKFhcYGRolJicoKSo0NTY3ODk6Q0RFRkdISUpTVFVWV1hZWmNkZWZnaGlqc3R1dnd4eXqDhIWGh4iJipKT'
        'lJWWl5iZmqKjpKWmp6ipqrKztLW2t7i5usLDxMXGx8jJytLT1NXW19jZ2uHi4+Tl5ufo6erx8vP09fb3+Pn6/8QA'
        'HwEAAwEBAQEBAQEBAQAAAAAAAAECAwQFBgcICQoL/8QAtREAAgECBAQDBAcFBAQAAQJ3AAECAxEEBSExBhJBUQdh'
        'cRMiMoEIFEKRobHBCSMzUvAVYnLRChYkNOEl8RcYGRomJygpKjU2Nzg5OkNERUZHSElKU1RVVldYWVpjZGVmZ2hp'
        'anN0dXZ3eHl6goOEhYaHiImKkpOUlZaXmJmaoqOkpaanqKmqsrO0tba3uLm6wsPExcbHyMnK0tPU1dbX2Nna4uPk'
        '5ebn6Onq8vP09fb3+Pn6/9oADAMBAAIRAxEAPwD5P8IfDr7n7j9K/oOeJPkeHM421PVPB/w7+5+4/SuSeJP3vhzO'
        'dtT1Twf8O/ufuP0rjniT974cznbU4/wh8OvufuP0rmniT/LThzOPh1PVPB/w7+5+4/SuSeJP3rhzOPh1PVPB/wAO'
        '/ufuP0rkqYk/e+HM421P/9k='
    ),
    (5, 7): _b64(
        '/9j/4AAQSkZJRgABAQAAAQABAAD/2wBDAAIBAQEBAQIBAQECAgICAgQDAgICAgUEBAMEBgUGBgYFBgYGBwkIBgcJ'
        'BwYGCAsICQoKCgoKBggLDAsKDAkKCgr/2wBDAQICAgICAgUDAwUKBwYHCgoKCgoKCgoKCgoKCgoKCgoKCgoKCgoK'
        'CgoKCgoKCgoKCgoKCgoKCgoKCgoKCgoKCgr/wAARCAAFAAcDAREAAhEBAxEB/8QAHwAAAQUBAQEBAQEAAAAAAAAA'
        'AAECAwQFBgcICQoL/8QAtRAAAgEDAwIEAwUFBAQAAAF9AQIDAAQRBRIhMUEGE1FhByJxFDKBkaEII0KxwRVS0fAk'
        'M2JyggkKFhcYGRolJicoKSo0NTY3ODk6Q0RFRkdISUpTVFVWV1hZWmNkZWZnaGlqc3R1dnd4eXqDhIWGh4iJipKT'
        'lJWWl5iZmqKjpKWmp6ipqrKztLW2t7i5usLDxMXGx8jJytLT1NXW19jZ2uHi4+Tl5ufo6erx8vP09fb3+Pn6/8QA'
        'HwEAAwEBAQEBAQEBAQAAAAAAAAECAwQFBgcICQoL/8QAtREAAgECBAQDBAcFBAQAAQJ3AAECAxEEBSExBhJBUQdh'
        'cRMiMoEIFEKRobHBCSMzUvAVYnLRChYkNOEl8RcYGRomJygpKjU2Nzg5OkNERUZHSElKU1RVVldYWVpjZGVmZ2hp'
        'anN0dXZ3eHl6goOEhYaHiImKkpOUlZaXmJmaoqOkpaanqKmqsrO0tba3uLm6wsPExcbHyMnK0tPU1dbX2Nna4uPk'
        '5ebn6Onq8vP09fb3+Pn6/9oADAMBAAIRAxEAPwD5C8KeFtO8sfL29K/oadWR8vw/jq3Kf//Z'
    ),
}
#: python-zstandard 0.25 level 3, single segment, content size 1152; of zstd_source().
FROZEN_ZSTD = _b64(
        'KLUv/WCAA00FAFIIEA3g6QCLCFGGMsohysApIeW0HNKjPLhjOjTxQSmnZUpnObk5Tc0DUk7LIB3KgRumQQMP5bSU'
        '0/LSL5/76TXP/wE8IKDT0hYDjgmKhhlpzjA0ghRACEIIIYQJyQ/6MUnRMCPMGQZGkAISQgghSEiSPoEgMgiPCYqG'
        'GWnOMDSCFEAIQgghhAnJD5qTKOJFJkq8yI222FiUeCKLAvEQHRJCCCFISJIOjhE='
)
