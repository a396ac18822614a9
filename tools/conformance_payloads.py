"""Byte-exact payload builders for the conformance generator (no third-party encoders).

The goldens must not change when Pillow, libjpeg, zlib or libzstd change, so every payload the
generator writes is built here by hand from the format specifications, except two frozen blobs
(a JPEG and a zstd frame with compressed blocks), which are stored as constants.
"""

from __future__ import annotations

import base64
import itertools
import struct
import zlib

import numpy as np
import xxhash

__all__ = [
    "FROZEN_JPEG",
    "FROZEN_JPEG_DECODED",
    "FROZEN_JPEG_MORE",
    "FROZEN_ZSTD",
    "chroma_source",
    "jpeg_segments",
    "jpeg_source",
    "npy",
    "png",
    "progressive_gray",
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
               checksum: bool = False, reserved_bit: bool = False,
               dict_id: int | None = None) -> bytes:
    """A single zstd frame holding ``data`` in raw ("raw") or run-length ("rle") blocks.

    Args:
        blocks: (kind, length) per block; default one raw block. RLE blocks need a constant run.
        content_size: True declares len(data); an int declares that value; None/False omits it.
        window_log: None makes a single-segment frame; else a Window_Descriptor of 2**window_log.
        checksum: append the content checksum (low 32 bits of XXH64, seed 0).
        reserved_bit: set the descriptor's reserved bit (invalid).
        dict_id: write a one-byte Dictionary_ID field with this value (0: no dictionary).
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
    descriptor = ((fcs_flag << 6) | (int(single) << 5) | (int(reserved_bit) << 3)
                  | (int(checksum) << 2) | (1 if dict_id is not None else 0))
    out = bytearray(ZSTD_MAGIC + bytes([descriptor]))
    if not single:
        out.append((window_log - 10) << 3)
    if dict_id is not None:
        out.append(dict_id)
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


def _stored_zlib(data: bytes, *, bad_adler: bool = False) -> bytes:
    out = bytearray(b"\x78\x01")
    pieces = [data[i:i + 65535] for i in range(0, len(data), 65535)] or [b""]
    for number, piece in enumerate(pieces):
        final = int(number == len(pieces) - 1)
        out += bytes([final]) + struct.pack("<HH", len(piece), len(piece) ^ 0xFFFF) + piece
    return bytes(out + struct.pack(">I", zlib.adler32(data) ^ int(bad_adler)))


#: Adam7 passes: (first row, first column, row step, column step)
_ADAM7 = ((0, 0, 8, 8), (0, 4, 8, 8), (4, 0, 8, 4), (0, 2, 4, 4), (2, 0, 4, 2), (0, 1, 2, 2),
          (1, 0, 2, 1))


def png(image: np.ndarray, *, bit_depth: int = 8, color_type: int = 2, bad_crc: bool = False,
        interlace: bool = False, before_idat: tuple[tuple[bytes, bytes], ...] = (),
        idat_parts: int = 1, between_idat: bytes | None = None, bad_crc_chunk: bytes = b"",
        trailing: bytes = b"", bad_adler: bool = False, filter_type: int | None = None,
        extra_data: bytes = b"", cut_data: int = 0, compression: int = 0) -> bytes:
    """Encode an (H, W, 3) uint8 image as PNG (8-bit RGB unless an invalid case asks otherwise).

    The keyword arguments build the other cases of SPEC §9.4: an Adam7-interlaced image,
    ancillary chunks before IDAT, the zlib stream split over several IDAT chunks (or with a chunk
    between them), a wrong CRC (on IDAT, or on the chunk named by ``bad_crc_chunk``), bytes after
    IEND, a wrong Adler-32, one filter type for every row, data after (or missing from) the
    filtered image, and another IHDR compression method.
    """
    height, width = image.shape[:2]
    samples = image
    if color_type == 0:
        samples = image[:, :, :1]
    if color_type == 6:
        samples = np.concatenate([image, np.full((height, width, 1), 255, np.uint8)], axis=2)
    if bit_depth == 16:
        samples = (samples.astype(">u2") * 257).view(np.uint8).reshape(height, width, -1)
    bpp = samples.shape[2] * (2 if bit_depth == 16 else 1)  # as frozen in the png_16bit case
    if interlace:
        raw = b"".join(_filter_rows(samples[r0::dr, c0::dc].reshape(len(range(r0, height, dr)), -1),
                                    bpp)
                       for r0, c0, dr, dc in _ADAM7
                       if r0 < height and c0 < width)
    else:
        raw = _filter_rows(samples.reshape(height, -1), bpp)
    if filter_type is not None:
        line = 1 + samples.shape[1] * bpp
        raw = bytes(b if i % line else filter_type for i, b in enumerate(raw))
    raw = raw[:len(raw) - cut_data] + extra_data
    ihdr = struct.pack(">IIBBBBB", width, height, bit_depth, color_type, compression, 0,
                       int(interlace))
    body = _stored_zlib(raw, bad_adler=bad_adler)
    step = -(-len(body) // idat_parts)
    parts = [body[i:i + step] for i in range(0, len(body), step)]
    out = bytearray(b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", ihdr))
    for kind, data in before_idat:
        out += _chunk(kind, data, bad_crc=kind == bad_crc_chunk)
    for number, part in enumerate(parts):
        if number and between_idat is not None:
            out += _chunk(between_idat, b"between")
        out += _chunk(b"IDAT", part, bad_crc=bad_crc or bad_crc_chunk == b"IDAT")
    return bytes(out + _chunk(b"IEND", b"") + trailing)


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


def chroma_source(height: int, width: int) -> np.ndarray:
    """Sharp chroma edges: the image of the 4:2:0 and 4:2:2 JPEGs, where replicated chroma lands
    far (up to 96 per byte) from the interpolated chroma of SPEC §9.3."""
    y, x = np.mgrid[0:height, 0:width]
    red = np.where((x // 3) % 2 == 0, 230, 20)
    green = np.where((y // 3) % 2 == 0, 200, 40)
    blue = np.where(((x + y) // 4) % 2 == 0, 30, 220)
    return np.stack([red, green, blue], axis=-1).astype(np.uint8)


#: More frozen JPEGs (libjpeg-turbo 3 through simplejpeg 1.9 / Pillow 13, quality 95):
#: SUB_420 / SUB_422: baseline, chroma 4:2:0 / 4:2:2, of chroma_source(16, 24), with
#: SUB_*_DECODED: libjpeg-turbo's decode (islow IDCT, fancy upsampling), the reference pixels;
#: PROGRESSIVE and RESTART (DRI, a restart marker per MCU): 4:4:4 of jpeg_source(16, 24);
#: GRAY: one component, of jpeg_source(5, 7)[:, :, 1]; CMYK: four components (Adobe APP14).
FROZEN_JPEG_MORE: dict[str, bytes] = {
    'SUB_420': _b64(
        '/9j/4AAQSkZJRgABAQAAAQABAAD/2wBDAAIBAQEBAQIBAQECAgICAgQDAgICAgUEBAMEBgUGBgYFBgYGBwkIBgcJBw'
        'YGCAsICQoKCgoKBggLDAsKDAkKCgr/2wBDAQICAgICAgUDAwUKBwYHCgoKCgoKCgoKCgoKCgoKCgoKCgoKCgoKCgoK'
        'CgoKCgoKCgoKCgoKCgoKCgoKCgoKCgr/wAARCAAQABgDASIAAhEBAxEB/8QAHwAAAQUBAQEBAQEAAAAAAAAAAAECAw'
        'QFBgcICQoL/8QAtRAAAgEDAwIEAwUFBAQAAAF9AQIDAAQRBRIhMUEGE1FhByJxFDKBkaEII0KxwRVS0fAkM2JyggkK'
        'FhcYGRolJicoKSo0NTY3ODk6Q0RFRkdISUpTVFVWV1hZWmNkZWZnaGlqc3R1dnd4eXqDhIWGh4iJipKTlJWWl5iZmq'
        'KjpKWmp6ipqrKztLW2t7i5usLDxMXGx8jJytLT1NXW19jZ2uHi4+Tl5ufo6erx8vP09fb3+Pn6/8QAHwEAAwEBAQEB'
        'AQEBAQAAAAAAAAECAwQFBgcICQoL/8QAtREAAgECBAQDBAcFBAQAAQJ3AAECAxEEBSExBhJBUQdhcRMiMoEIFEKRob'
        'HBCSMzUvAVYnLRChYkNOEl8RcYGRomJygpKjU2Nzg5OkNERUZHSElKU1RVVldYWVpjZGVmZ2hpanN0dXZ3eHl6goOE'
        'hYaHiImKkpOUlZaXmJmaoqOkpaanqKmqsrO0tba3uLm6wsPExcbHyMnK0tPU1dbX2Nna4uPk5ebn6Onq8vP09fb3+P'
        'n6/9oADAMBAAIRAxEAPwDt/GPxK/4Ka6b+2f4U8I+Ef2d/CEl2+gSfbLz7bGNnyXuef7Q4x+mcDLGsDwT8Sv8Agprp'
        'o+OPhHwh+zv4Qku5Ptf229+2xjZj7dnn+0OMfpnAyxrP8Y/C/wDs39s7wp4R8I/8FZPMu5NAk+2Xv/CQY2YS9zz/AG'
        'lxj9M4GWNc/wCCPheNOHxx8I+Ef+Csm+7f7X9svP8AhIcbf+P7PP8AaXGP0zgZY159KhlVDAx/d4en7OlRofuMNipe'
        'x5q7/wBgwGv7zFVP+YrFa8l3qeljMPkj4qr/ALvCu+YZi9cJjdf+EqPvS10ivsxNDxj8Sv8Agprpv7GHhTwj4R/Z38'
        'ISXT+IJPtl79tjG357zPP9ocY/TOBljwVyHjH4XHTf2L/CnhHwj/wVk8y7k1+T7Zef8JBjZh73PP8AaXGP0zgZY0V9'
        'rkeTZVjqVej/AGbLEexq1KfJgqeKp4bDWk37CMuZe2qxvetV1vUk1fQ/mHxSpZJHHZW+XBq+X4J3lg8a3L9xHXfRdl'
        '2P/9k='
    ),
    'SUB_420_DECODED': _b64(
        '5Mwh0tAustxUSKVML8OzO7rBxt7O3t2crd1WTq8QJr8zMLBTyN/N19TbtOTUWLx8JLwzOLYUwNROz8t0teXXT7i+J8'
        'awFNGr8cI428VLuNB6ZLGDNrq+SLS+1Ni/2cJ/t9JfVqQsLrJcULqM09TY5c7Ywd3GUKFeLrM+Qasxyct369SqwN3j'
        'W624NcChELeD/61k8bGF18zacJ3GSq3XYKi24LmO9rNsz8F4a5JmUq69ZKTS68Tx/7/Py7+VapRMRaFYV5pu6cTV/8'
        'Hw1cn5eaOzQKByMq1dvjdGulB2iVqrIiyDAkF0BScxm0wrrkIchU9NMTBYBjmSGDKPpVWQpj1MhlQzISMAADAsGzdc'
        'n1Spr0qmk2CZHRwqADQQADwA3jGvyTm1pU3HPB52DCRAIBsYsjs9wy9TqEqrQBmaIC2vMCSIrzhevi81nUJHNRAxHi'
        'uHLiOdtkK9zUCemT9iOxQZFSAkBSgs0Ty+v0W0nFafIRIvCC8aGygMnDtGyEiBnFO/NiOWFTmHEho+pEQ0uD4niUJQ'
        'PClgEzaaIyuWsFCaqjFSlVBBMR8JAyAuCUBe/r7Y8MfDwceHYJk6Pq5MRZxY6dbQ8cXgy9LvaKSiOKtoTqZC1sdg3r'
        'Nu2N7aaKS+PrPHVK+m0b9/675jxs1wWpZWTLu0MrvO+9Cl2MWBuNNiWKMsMLJcUbyQ09bb58/cxeHLUqFgMbZBRLEy'
        'ycxx7dWlxd7jXq26N8KlPa1ly85d4chSudSDZbaNN72+JMTa/7Bl9LZr0cZ3aI9gVLHAYqbT6cXz/8PTzsCTbZNISq'
        'ZbVptu7sna/b7r2s37eKKwQKJzVp9Q5MB08bKG3tPjdaDNTKvXOrXewUEErUYbhlFJMDBSBDyRFzaRoVeMqkJNiFIu'
        'JiMAADMtHztgnlKqs0yokF2VHiAsADMOECwDlktFuFJ3j16wKy+IBT5zADZX1S0twDFPqEumQhqVHCuqMSeHrDlYwz'
        'Mzn0BGORAyIC2JMCWdtkK9yj2bmT9iOhMYFSAmJhY7u0Olyzu3p07GRSF5DSJBACwrxTBOxEh+mU61NB6NETWBEh09'
        'pEQutjogkEZXPCdiEDGYIiqVrU2XrTRVkko7LhkECCU3Ky1qrEa0vj+wnledJxcxAy0ZADUJ/7/Z8sTe09fybqajO6'
        '1vS6RG28lj6r530dXWaqLDSbjUWLGt1ceI5r5fyM9wYJtZSLWwWarH59Dt9snGxs+MX6A8OrBQJrZX+Mfn5s7cx9/J'
        'TppZMLZFQ7E4w8Zt7NSmxNzmX6y+O8CrN6Rjy9Jg38tSsMx3ZLKIOr7CS7bA2tnF175+vNllWasvJ61YK8yJ/7bl+r'
        '3NzMGUaZNHRKVYTJRm9NDe/bvp1sj5dpyvQqF1Vp1R4cBz6qx949Xmc5zKSazWXKax3ruR9LZt0sZ8Y41fXLXFPLDf'
        'uFCFlEZWd1kjFi8AADsBEUQ7lFufpVCtgWGkECU2ADoFAzcAi1QbrVtQgl+jHDGMAEaCADA7iVQeoU8De1wmKTw2AE'
        'GEAEOq'
    ),
    'SUB_422': _b64(
        '/9j/4AAQSkZJRgABAQAAAQABAAD/2wBDAAIBAQEBAQIBAQECAgICAgQDAgICAgUEBAMEBgUGBgYFBgYGBwkIBgcJBw'
        'YGCAsICQoKCgoKBggLDAsKDAkKCgr/2wBDAQICAgICAgUDAwUKBwYHCgoKCgoKCgoKCgoKCgoKCgoKCgoKCgoKCgoK'
        'CgoKCgoKCgoKCgoKCgoKCgoKCgoKCgr/wAARCAAQABgDASEAAhEBAxEB/8QAHwAAAQUBAQEBAQEAAAAAAAAAAAECAw'
        'QFBgcICQoL/8QAtRAAAgEDAwIEAwUFBAQAAAF9AQIDAAQRBRIhMUEGE1FhByJxFDKBkaEII0KxwRVS0fAkM2JyggkK'
        'FhcYGRolJicoKSo0NTY3ODk6Q0RFRkdISUpTVFVWV1hZWmNkZWZnaGlqc3R1dnd4eXqDhIWGh4iJipKTlJWWl5iZmq'
        'KjpKWmp6ipqrKztLW2t7i5usLDxMXGx8jJytLT1NXW19jZ2uHi4+Tl5ufo6erx8vP09fb3+Pn6/8QAHwEAAwEBAQEB'
        'AQEBAQAAAAAAAAECAwQFBgcICQoL/8QAtREAAgECBAQDBAcFBAQAAQJ3AAECAxEEBSExBhJBUQdhcRMiMoEIFEKRob'
        'HBCSMzUvAVYnLRChYkNOEl8RcYGRomJygpKjU2Nzg5OkNERUZHSElKU1RVVldYWVpjZGVmZ2hpanN0dXZ3eHl6goOE'
        'hYaHiImKkpOUlZaXmJmaoqOkpaanqKmqsrO0tba3uLm6wsPExcbHyMnK0tPU1dbX2Nna4uPk5ebn6Onq8vP09fb3+P'
        'n6/9oADAMBAAIRAxEAPwDt/GPxK/4Ka6b+2f4U8I+Ef2d/CEl2+gSfbLz7bGNnyXuef7Q4x+mcDLGsDwT8Sv8Agprp'
        'o+OPhHwh+zv4Qku5Ptf229+2xjZj7dnn+0OMfpnAyxrwqWVeFmX4GP8AYmPqy+q0qOW5fo1zYmpXf1vF6UXy2u/fV6'
        'b62Hjck8Fp8V1/aZnX97MMxnP3ZbLKo8sf93/Dc5/xj8Sv+Cmum/sYeFPCPhH9nfwhJdP4gk+2Xv22MbfnvM8/2hxj'
        '9M4GWPBX2mR+HeVcS0q+C4Lz+rhcvy+rUw0X7StS9tUhJyrVrUsPJS5qkmua/K7e79o/mHxSyzwLo47K5YnMK8pzy/'
        'BP4G7L2EbLXD9jQ8Y/C/8As39s7wp4R8I/8FZPMu5NAk+2Xv8AwkGNmEvc8/2lxj9M4GWNc/4I+F404fHHwj4R/wCC'
        'sm+7f7X9svP+Ehxt/wCP7PP9pcY/TOBljXi0s3/s/Ax/sThnm+q0qOW5f+7tzYmpXf1vF6UHy2u/fV6b62P7Axue8/'
        'Fdf2nB3xZhmM5/uuiyqPLH/dvw3MDxj8Ljpv7F/hTwj4R/4KyeZdya/J9svP8AhIMbMPe55/tLjH6ZwMsaK+1yPJ+P'
        'uJaVfBcF5R9Vy/L6tTDRd6tL21SEnKtWtSw0lLmqSa5r8rt7v2j+YPFLiXC0cdlcsTwZzTnl+Cf8FOy9hGy1w/Y//9'
        'k='
    ),
    'SUB_422_DECODED': _b64(
        '68kf188mteE2SKoxKsesN7nPwNvw3Ni/sNlhUq8IK8EXNbM4yOHE1tLpsOD3VbeeIbw9ObcLxtcv18xYueXKULXJIs'
        'HWDcre6cok0s0+qth1VbmDI8S8N7+1xuOpzsxnrttNS6wfILtWP8OKwN7S1tjNs+iyQ6xHIL8nMbYfu9Nz3tqrs+Pl'
        'TrWyK8mOBsFq58wdzs1PsuLIS6/GJMDWPb6iv9VW19Elrt82SK03KMerOLvPwNvu2ta7qtpkTa8KI78TNLY4xNy82t'
        'Xpr930VbmdHL43D80R1yJv2DmgrT7YTg6rLSWULw1KwTU+0Cw1ojl0ThiHIyK8ORq2yD6ryyVlrDxMRwoaHRdVPR2K'
        'vjvX0DLNtUuwQAc+Ix0pEiMZ5STf0yvjsz3zTg+UIBlCMhQMwDgszipNsEDISA3BKSPPOxuWujVSzCweq0AwQwotJy'
        'KjNxbJvzbk2Ta3pjlgSg8HIx0REyUX6Sng2DPPuEWtPgE6JB4oNhYjtidl4Dajs0HeTxKuLymVKwtKvjNI0yxAojBs'
        'VRZ/KiS4Oxqxyz+qxiBesEBMSw4dGA9SHS2M4sri1ta+qtpkS60IJ8MaK684zOXP0tLsrOD2TLSbI71DOrkQw9owx8'
        'VMuu/VS7HKI73ZPLuoudJd09Usq+Y2QastMMqwFsXg99aP0sxsrN5HSLAVH71MRMWFyd3U4NXTvui2SqlLJMAxOLkr'
        'u9Nx4dunuuTgVbSuL8qRNLVQw9ZG2M9Crtx5Wr2GLMS3GczT6swg1tMms+E2RqouK8quNr3Rv9vw3Nu/rdthT68FK8'
        'MYNbY4x+HE09TosOP4UrmcIbw8O7oLydsx1cpUvOnMT7TGIsHUDsve6SYk1CtArDV1VBSCJiK9Oh23xj+ozylnrzhO'
        'TAgfIhhXQiGMwDnR1jPMtUWzRAhGHxwnMxQjuzBz3TWstEHmUBS0KSaNBR9q5CkYzCtMsEHESQ7CIyDTPB2fvDNR1C'
        '4grT0yRAoyJySnNhnLvDfo1jK1qDhgSg4GIx0RMRI0wzq80y7isT/3URWZGx02CykN2SBu2DefrzzXTQupLSOTLwtJ'
        'wDI+zyk1ozdzTxeGJCC7Ohi1yDypyyJjrTpLRgkZGxVVOh6MujjWzTLOsEqwPglBHxspDSIZ6cvl1tDqt+T5U7WcJc'
        'BKNrkTxN4z0tBVtObNS7HHLcfTP8GbwNta0dQlseY2Sa8yLMWnO7jMyd/t3di6sOJpT7IKK8MYGMgb683l29bTuumz'
        'Q6VAJsAsObkouMxr4dmotOXhUbayLsuYLK5Ow9lQ19FHpNRxVrqEK8e6PMC1zOWuy8llseNOTbMhGrRWHtGP5Mve1d'
        'S2q9xfTK8EJ8ETLK4yzefK0dLmq+DwTbaXIr09ObkKxdsuysZJue7QS7HHJr7VO7mhvtZc1NQmreczQKkoNsyvGMTc'
        '8jGKzCZmqDpDRQwSFxhIPiCCxDnS2S/Ot0OwRQdIHxouMhIntS9s2DWgsTzaUBCsKieQLBBLvTJF0ipBpzZ2UxiEJy'
        'G1ESbP'
    ),
    'PROGRESSIVE': _b64(
        '/9j/4AAQSkZJRgABAQAAAQABAAD/2wBDAAIBAQEBAQIBAQECAgICAgQDAgICAgUEBAMEBgUGBgYFBgYGBwkIBgcJBw'
        'YGCAsICQoKCgoKBggLDAsKDAkKCgr/2wBDAQICAgICAgUDAwUKBwYHCgoKCgoKCgoKCgoKCgoKCgoKCgoKCgoKCgoK'
        'CgoKCgoKCgoKCgoKCgoKCgoKCgoKCgr/wgARCAAQABgDAREAAhEBAxEB/8QAFgABAQEAAAAAAAAAAAAAAAAABgUH/8'
        'QAGAEBAQADAAAAAAAAAAAAAAAAAwYFBwj/2gAMAwEAAhADEAAAAcn2DiFRXqob6OXLKor1UN9//8QAFhAAAwAAAAAA'
        'AAAAAAAAAAAAAAQF/9oACAEBAAEFAlJwnOE5wpOE5wnOP//EABcRAAMBAAAAAAAAAAAAAAAAAAAEBTH/2gAIAQMBAT'
        '8BnOE5wnOE5zCc5hOcP//EABcRAAMBAAAAAAAAAAAAAAAAAAABAwL/2gAIAQIBAT8BdB0HQdB0NUP/xAAVEAEBAAAA'
        'AAAAAAAAAAAAAAAAMf/aAAgBAQAGPwKIiIj/xAAVEAEBAAAAAAAAAAAAAAAAAAAAMf/aAAgBAQABPyGTBgyYMH//2g'
        'AMAwEAAgADAAAAEEQyv//EABcRAAMBAAAAAAAAAAAAAAAAAAAhMVH/2gAIAQMBAT8QkybJs2Gwkz//xAAUEQEAAAAA'
        'AAAAAAAAAAAAAAAg/9oACAECAQE/EF/7/8QAFRABAQAAAAAAAAAAAAAAAAAAAPH/2gAIAQEAAT8QnoaGnoaG/9k='
    ),
    'RESTART': _b64(
        '/9j/4AAQSkZJRgABAQAAAQABAAD/2wBDAAIBAQEBAQIBAQECAgICAgQDAgICAgUEBAMEBgUGBgYFBgYGBwkIBgcJBw'
        'YGCAsICQoKCgoKBggLDAsKDAkKCgr/2wBDAQICAgICAgUDAwUKBwYHCgoKCgoKCgoKCgoKCgoKCgoKCgoKCgoKCgoK'
        'CgoKCgoKCgoKCgoKCgoKCgoKCgoKCgr/wAARCAAQABgDAREAAhEBAxEB/8QAHwAAAQUBAQEBAQEAAAAAAAAAAAECAw'
        'QFBgcICQoL/8QAtRAAAgEDAwIEAwUFBAQAAAF9AQIDAAQRBRIhMUEGE1FhByJxFDKBkaEII0KxwRVS0fAkM2JyggkK'
        'FhcYGRolJicoKSo0NTY3ODk6Q0RFRkdISUpTVFVWV1hZWmNkZWZnaGlqc3R1dnd4eXqDhIWGh4iJipKTlJWWl5iZmq'
        'KjpKWmp6ipqrKztLW2t7i5usLDxMXGx8jJytLT1NXW19jZ2uHi4+Tl5ufo6erx8vP09fb3+Pn6/8QAHwEAAwEBAQEB'
        'AQEBAQAAAAAAAAECAwQFBgcICQoL/8QAtREAAgECBAQDBAcFBAQAAQJ3AAECAxEEBSExBhJBUQdhcRMiMoEIFEKRob'
        'HBCSMzUvAVYnLRChYkNOEl8RcYGRomJygpKjU2Nzg5OkNERUZHSElKU1RVVldYWVpjZGVmZ2hpanN0dXZ3eHl6goOE'
        'hYaHiImKkpOUlZaXmJmaoqOkpaanqKmqsrO0tba3uLm6wsPExcbHyMnK0tPU1dbX2Nna4uPk5ebn6Onq8vP09fb3+P'
        'n6/90ABAAB/9oADAMBAAIRAxEAPwD5P8IfDr7n7j9K/oOeJPkeHM421P/Q8j8H/Dv7n7j9K/eJ4k/TeHM521P/0a/g'
        '/wCHf3P3H6V+2TxJ/ZHDmc7an//S4fwh8OvufuP0r9jniT+fOHM4+HU//9Pc8H/Dv7n7j9K/WJ4k5uHM4+HU/9T3Dw'
        'f8O/ufuP0r9NqYk/cuHM421P/Z'
    ),
    'GRAY': _b64(
        '/9j/4AAQSkZJRgABAQAAAQABAAD/2wBDAAIBAQEBAQIBAQECAgICAgQDAgICAgUEBAMEBgUGBgYFBgYGBwkIBgcJBw'
        'YGCAsICQoKCgoKBggLDAsKDAkKCgr/wAALCAAFAAcBAREA/8QAHwAAAQUBAQEBAQEAAAAAAAAAAAECAwQFBgcICQoL'
        '/8QAtRAAAgEDAwIEAwUFBAQAAAF9AQIDAAQRBRIhMUEGE1FhByJxFDKBkaEII0KxwRVS0fAkM2JyggkKFhcYGRolJi'
        'coKSo0NTY3ODk6Q0RFRkdISUpTVFVWV1hZWmNkZWZnaGlqc3R1dnd4eXqDhIWGh4iJipKTlJWWl5iZmqKjpKWmp6ip'
        'qrKztLW2t7i5usLDxMXGx8jJytLT1NXW19jZ2uHi4+Tl5ufo6erx8vP09fb3+Pn6/9oACAEBAAA/APjH/hXuif3f/H'
        'a//9k='
    ),
    'CMYK': _b64(
        '/9j/7gAOQWRvYmUAZAAAAAAA/9sAQwACAQEBAQECAQEBAgICAgIEAwICAgIFBAQDBAYFBgYGBQYGBgcJCAYHCQcGBg'
        'gLCAkKCgoKCgYICwwLCgwJCgoK/8AAFAgABQAHBEMRAE0RAFkRAEsRAP/EAB8AAAEFAQEBAQEBAAAAAAAAAAABAgME'
        'BQYHCAkKC//EALUQAAIBAwMCBAMFBQQEAAABfQECAwAEEQUSITFBBhNRYQcicRQygZGhCCNCscEVUtHwJDNicoIJCh'
        'YXGBkaJSYnKCkqNDU2Nzg5OkNERUZHSElKU1RVVldYWVpjZGVmZ2hpanN0dXZ3eHl6g4SFhoeIiYqSk5SVlpeYmZqi'
        'o6Slpqeoqaqys7S1tre4ubrCw8TFxsfIycrS09TV1tfY2drh4uPk5ebn6Onq8fLz9PX29/j5+v/aAA4EQwBNAFkASw'
        'AAPwD4L/Z4/wCPRP8Arn/SvjH/AIV7on93/wAdrsfDuk22wcdvSv38r//Z'
    ),
}


def jpeg_segments(data: bytes) -> list[tuple[int, bytes]]:
    """The marker segments of a JPEG up to and including the first SOS: (marker, segment bytes
    with the marker), then (0, the rest). For building invalid cases by editing segments."""
    out, position = [(0xD8, data[:2])], 2
    while True:
        marker = data[position + 1]
        length = struct.unpack(">H", data[position + 2:position + 4])[0]
        out.append((marker, data[position:position + 2 + length]))
        position += 2 + length
        if marker == 0xDA:
            out.append((0, data[position:]))
            return out


def _jpeg_segment(marker: int, body: bytes) -> bytes:
    return bytes([0xFF, marker]) + (len(body) + 2).to_bytes(2, "big") + body


def progressive_gray(scans: int) -> bytes:
    """An 8x8 uniform gray (128, 128, 128) progressive JPEG (SOF2, 4:4:4) with exactly ``scans``
    scans (254 to 316) in a consistent progression, for SPEC §9.3's scan bound (R-50).

    All coefficients are zero, so each scan is one Huffman code per block (DC difference 0, or
    an AC end-of-band, each the one-bit code 0) padded with 1-bits. The scans: DC first
    (interleaved); for components 1 and 2, every AC coefficient alone with Al = 1 and then its
    refinement (126 scans each); for component 3, the AC band 1..63 cut into ``scans - 253``
    bands with Al = 0.
    """
    bands = scans - 253
    if not 1 <= bands <= 63:
        raise ValueError("scans must be 254 to 316")
    frame = bytes([8, 0, 8, 0, 8, 3]) + b"".join(bytes([c, 0x11, 0]) for c in (1, 2, 3))
    huffman = (bytes([0x00, 1]) + bytes(15) + b"\x00"  # DC table 0: symbol 0, code "0"
               + bytes([0x10, 1]) + bytes(15) + b"\x00")  # AC table 0: EOB, code "0"

    def scan(components: tuple[int, ...], ss: int, se: int, ah: int, al: int) -> bytes:
        header = bytes([len(components)]) + b"".join(bytes([c, 0x00]) for c in components)
        bits = "0" * len(components)  # one code (or DC refinement bit) per block, all 0
        data = int(bits.ljust(8, "1"), 2).to_bytes(1, "big")
        return _jpeg_segment(0xDA, header + bytes([ss, se, ah << 4 | al])) + data

    parts = [scan((1, 2, 3), 0, 0, 0, 0)]
    for component in (1, 2):
        for k in range(1, 64):
            parts.append(scan((component,), k, k, 0, 1))
        for k in range(1, 64):
            parts.append(scan((component,), k, k, 1, 0))
    edges = [1 + 63 * b // bands for b in range(bands + 1)]
    for start, stop in itertools.pairwise(edges):
        parts.append(scan((3,), start, stop - 1, 0, 0))
    return (b"\xff\xd8" + _jpeg_segment(0xE0, b"JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00")
            + _jpeg_segment(0xDB, b"\x00" + bytes([1] * 64))
            + _jpeg_segment(0xC2, frame) + _jpeg_segment(0xC4, huffman)
            + b"".join(parts) + b"\xff\xd9")


#: libjpeg-turbo 3's decode (simplejpeg 1.9: accurate IDCT; 4:4:4, so no upsampling) of the
#: frozen 4:4:4 JPEGs the valid cases hold, by SHA-256 of the payload: their reference pixels
#: (SPEC.md §17, one reference for every JPEG case since 1.2.1; the source image was used before).
FROZEN_JPEG_DECODED: dict[str, bytes] = {
    "16fee68c8da7c1e9506a4a02f5f90260293c90baf91224539ceae240dc54cec9": _b64(
        'KTyALj2CNj2DPjyFSDyITz2JVT2LKUGBL0KEOEKHP0KHSUGKT0GMVkGMKkiEL0mGN0mJP0iJSUiMUEmPVUiOKU6F'
        'L0+IN0+LP0+LSU6OUE2QVU6RKVKIL1SJN1SMQFOOSVOQUVKSVVOU'
    ),
    "88d8ba52ed5c295637708f1ea09afc48568819ee40baf5cbaca5820e7f14ac80": _b64(
        'KTyALj2CODyDQDyGRzyIUDuIWTyMXj2OaTyPcDyReDyUgTyViDyXkTyamjycoDyeqjyfrzyhtzykwD2lyDyn0Dyq'
        '2jyr3z2tKUGBL0KEOEKHP0KJR0GJT0GMWEGPXkKPakCSb0KVeEKWgkKZiEKakEGcmkGfoEKiqUGisEKluUKmwUKp'
        'yUKp0EGr2UGu4EKxKEiFL0mGN0mJP0iLR0iLT0iOWEiRXkiRaEiUb0iXeEmZf0ibiEiekEiemEihn0mkqEeksEin'
        'uEmowEiqyUit0Eiu2Uix4Em0KU6FL06HOE6KQE6NSE2NUE2QWU6SX06UaU2Xbk6Zd06agU6dh06dj06gmU6jnk6l'
        'qE6mrk6ot06qwE6tx06t0E6w2U6z3061KVSHL1SJN1SMQFWOSFSQUFSTWVSUX1SWaVSXb1SZeFScgFSfiFSfkVSi'
        'mVSkn1SmqVSnsFSpuFSswVSvyVSv0VSy2lSz4FS1KlqKMFqMOVqPQVqQSVqSUFmSWVmVYFqYaFqYb1qbeFuef1qf'
        'iFqij1mkmFqln1uoqFmor1qruFquwFquyFqx0Fmz2Vq14Fu4KmCMMGCOOGCRQWGSSWCUUF+WWWCXX2GaaGCbb2Ge'
        'd2Ghf2Cjh2Cjj2CmmGCnn2GqqGCqr2GtuGGwv2Cyx2Cz0GC22GC34GG6KmWPL2WROGeTQWWVR2aVUGaYWmWbX2ad'
        'aWafb2WheGaigGaliGWnkGaomWarn2atqWWurmawuGaywWa1yGW30Wa42ma73ma9KGyPLmyROGyTQWyWR2yYTWyY'
        'WG2cYGyeZ22fb2yheWykgG2lhm2nj22qmW2sn2yuqWyxrmyzuGy0wGy3x2230Wy62Wy73m29KHGRMHKUOnKXQXGZ'
        'R3GZT3KcWXGfYHGfZ3GicHKleXKmgXKph3Kqj3KsmXGvoHKyqXGyr3K1uHK4wHO5yHK7z3G72HK+33LBJ3iVL3mW'
        'OXiZQXebR3ebTnieWHihYHehZ3ikcHineHmpgHirh3muj3iumXixoHi0qHi0r3m3t3m6v3i6yHi9z3i92HjA33nD'
        'KH6VLn6XOH2aQX6dR36dUH6gWH6iYH6kZ36nb36peX2qgH6thn6tj3+wmX6zoH21qX62r324uH67wH68yH2+0H7A'
        '2X7D337DKIWXL4SZOYOcQoSeSISgT4SjWYSkYYOmaIWncISpeISsgYSvh4SvkISymoSzoIS1qYS4r4S6t4S8wIW/'
        'yIS/0ITC2YXD34XFKYqaL4qcOYqfQoqgSIqiUIqiWIqlYYqoZ4qocIqreoqugIquh4uxj4qzmYq1oYq4qYm6sIq9'
        'uYq+wInAyYrB0InD2YnE4IrHKZGcL5GeOZChQpGiSJGkT5CmWJCnYZCqZ5Gqb5GteZCwgJCyhpCzjpC2mJC3oJG6'
        'qY+8sJC/uJHAwJDCyI/C0I/F2ZDH35LKKZWfL5WhOpajQpWlSJWlT5aoWZarYZWtaJaucJWwepWygZa1h5a3kJa4'
        'mpa7oJW9qpXAr5bAt5bDwZbEx5XG0JbI2pXL35bN'
    ),
    "8a0a7675918cd9a276ad3d68b7e76b33d4cbe28324a5baa5405aa0e6c8de4c1b": _b64(
        'KTyALj2CODyDQDyGRzyIUDuIWTyMXj2OaTyPcDyReDyUgTyViDyXkTyamjycoDyeqjyfrzyhtzykwD2lyDyn0Dyq'
        '2jyr3z2tKUGBL0KEOEKHP0KJR0GJT0GMWEGPXkKPakCSb0KVeEKWgkKZiEKakEGcmkGfoEKiqUGisEKluUKmwUKp'
        'yUKp0EGr2UGu4EKxKEiFL0mGN0mJP0iLR0iLT0iOWEiRXkiRaEiUb0iXeEmZf0ibiEiekEiemEihn0mkqEeksEin'
        'uEmowEiqyUit0Eiu2Uix4Em0KU6FL06HOE6KQE6NSE2NUE2QWU6SX06UaU2Xbk6Zd06agU6dh06dj06gmU6jnk6l'
        'qE6mrk6ot06qwE6tx06t0E6w2U6z3061KVSHL1SJN1SMQFWOSFSQUFSTWVSUX1SWaVSXb1SZeFScgFSfiFSfkVSi'
        'mVSkn1SmqVSnsFSpuFSswVSvyVSv0VSy2lSz4FS1KlqKMFqMOVqPQVqQSVqSUFmSWVmVYFqYaFqYb1qbeFuef1qf'
        'iFqij1mkmFqln1uoqFmor1qruFquwFquyFqx0Fmz2Vq14Fu4KmCMMGCOOGCRQWGSSWCUUF+WWWCXX2GaaGCbb2Ge'
        'd2Ghf2Cjh2Cjj2CmmGCnn2GqqGCqr2GtuGGwv2Cyx2Cz0GC22GC34GG6KmWPL2WROGeTQWWVR2aVUGaYWmWbX2ad'
        'aWafb2WheGaigGaliGWnkGaomWarn2atqWWurmawuGaywWa1yGW30Wa42ma73ma9KGyPLmyROGyTQWyWR2yYTWyY'
        'WG2cYGyeZ22fb2yheWykgG2lhm2nj22qmW2sn2yuqWyxrmyzuGy0wGy3x2230Wy62Wy73m29KHGRMHKUOnKXQXGZ'
        'R3GZT3KcWXGfYHGfZ3GicHKleXKmgXKph3Kqj3KsmXGvoHKyqXGyr3K1uHK4wHO5yHK7z3G72HK+33LBJ3iVL3mW'
        'OXiZQXebR3ebTnieWHihYHehZ3ikcHineHmpgHirh3muj3iumXixoHi0qHi0r3m3t3m6v3i6yHi9z3i92HjA33nD'
        'KH6VLn6XOH2aQX6dR36dUH6gWH6iYH6kZ36nb36peX2qgH6thn6tj3+wmX6zoH21qX62r324uH67wH68yH2+0H7A'
        '2X7D337DKIWXL4SZOYOcQoSeSISgT4SjWYSkYYOmaIWncISpeISsgYSvh4SvkISymoSzoIS1qYS4r4S6t4S8wIW/'
        'yIS/0ITC2YXD34XFKYqaL4qcOYqfQoqgSIqiUIqiWIqlYYqoZ4qocIqreoqugIquh4uxj4qzmYq1oYq4qYm6sIq9'
        'uYq+wInAyYrB0InD2YnE4IrHKZGcL5GeOZChQpGiSJGkT5CmWJCnYZCqZ5Gqb5GteZCwgJCyhpCzjpC2mJC3oJG6'
        'qY+8sJC/uJHAwJDCyI/C0I/F2ZDH35LKKZWfL5WhOpajQpWlSJWlT5aoWZarYZWtaJaucJWwepWygZa1h5a3kJa4'
        'mpa7oJW9qpXAr5bAt5bDwZbEx5XG0JbI2pXL35bN'
    ),
    "96c52e0b312f59e03630d6445927b8f0c5ba755e3c46511bc263a3b0141b5286": _b64(
        'KTyALj2CNj2DPjyFSDyITz2JVT2LKUGBL0KEOEKHP0KHSUGKT0GMVkGMKkiEL0mGN0mJP0iJSUiMUEmPVUiOKU6F'
        'L0+IN0+LP0+LSU6OUE2QVU6RKVKIL1SJN1SMQFOOSVOQUVKSVVOU'
    ),
    "9e0887468c8ddbe28ae98d6bc00d0129e694373612fc7b0daacebd1c7eb66931": _b64(
        'KTyALj2CNj2DPjyFSDyITz2JVT2LKUGBL0KEOEKHP0KHSUGKT0GMVkGMKkiEL0mGN0mJP0iJSUiMUEmPVUiOKU6F'
        'L0+IN0+LP0+LSU6OUE2QVU6RKVKIL1SJN1SMQFOOSVOQUVKSVVOU'
    ),
    "e3a1f5c418a5bab12c7eef182f326507c2cf7c889556a4221917a780c6aab8e8": _b64(
        'KTyALj2CODyDQDyGRzyIUDuIWTyMXj2OaTyPcDyReDyUgTyViDyXkTyamjycoDyeqjyfrzyhtzykwD2lyDyn0Dyq'
        '2jyr3z2tKUGBL0KEOEKHP0KJR0GJT0GMWEGPXkKPakCSb0KVeEKWgkKZiEKakEGcmkGfoEKiqUGisEKluUKmwUKp'
        'yUKp0EGr2UGu4EKxKEiFL0mGN0mJP0iLR0iLT0iOWEiRXkiRaEiUb0iXeEmZf0ibiEiekEiemEihn0mkqEeksEin'
        'uEmowEiqyUit0Eiu2Uix4Em0KU6FL06HOE6KQE6NSE2NUE2QWU6SX06UaU2Xbk6Zd06agU6dh06dj06gmU6jnk6l'
        'qE6mrk6ot06qwE6tx06t0E6w2U6z3061KVSHL1SJN1SMQFWOSFSQUFSTWVSUX1SWaVSXb1SZeFScgFSfiFSfkVSi'
        'mVSkn1SmqVSnsFSpuFSswVSvyVSv0VSy2lSz4FS1KlqKMFqMOVqPQVqQSVqSUFmSWVmVYFqYaFqYb1qbeFuef1qf'
        'iFqij1mkmFqln1uoqFmor1qruFquwFquyFqx0Fmz2Vq14Fu4KmCMMGCOOGCRQWGSSWCUUF+WWWCXX2GaaGCbb2Ge'
        'd2Ghf2Cjh2Cjj2CmmGCnn2GqqGCqr2GtuGGwv2Cyx2Cz0GC22GC34GG6KmWPL2WROGeTQWWVR2aVUGaYWmWbX2ad'
        'aWafb2WheGaigGaliGWnkGaomWarn2atqWWurmawuGaywWa1yGW30Wa42ma73ma9KGyPLmyROGyTQWyWR2yYTWyY'
        'WG2cYGyeZ22fb2yheWykgG2lhm2nj22qmW2sn2yuqWyxrmyzuGy0wGy3x2230Wy62Wy73m29KHGRMHKUOnKXQXGZ'
        'R3GZT3KcWXGfYHGfZ3GicHKleXKmgXKph3Kqj3KsmXGvoHKyqXGyr3K1uHK4wHO5yHK7z3G72HK+33LBJ3iVL3mW'
        'OXiZQXebR3ebTnieWHihYHehZ3ikcHineHmpgHirh3muj3iumXixoHi0qHi0r3m3t3m6v3i6yHi9z3i92HjA33nD'
        'KH6VLn6XOH2aQX6dR36dUH6gWH6iYH6kZ36nb36peX2qgH6thn6tj3+wmX6zoH21qX62r324uH67wH68yH2+0H7A'
        '2X7D337DKIWXL4SZOYOcQoSeSISgT4SjWYSkYYOmaIWncISpeISsgYSvh4SvkISymoSzoIS1qYS4r4S6t4S8wIW/'
        'yIS/0ITC2YXD34XFKYqaL4qcOYqfQoqgSIqiUIqiWIqlYYqoZ4qocIqreoqugIquh4uxj4qzmYq1oYq4qYm6sIq9'
        'uYq+wInAyYrB0InD2YnE4IrHKZGcL5GeOZChQpGiSJGkT5CmWJCnYZCqZ5Gqb5GteZCwgJCyhpCzjpC2mJC3oJG6'
        'qY+8sJC/uJHAwJDCyI/C0I/F2ZDH35LKKZWfL5WhOpajQpWlSJWlT5aoWZarYZWtaJaucJWwepWygZa1h5a3kJa4'
        'mpa7oJW9qpXAr5bAt5bDwZbEx5XG0JbI2pXL35bN'
    ),
}
