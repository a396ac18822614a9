"""The structural procedures of SPEC.md §9.3 (JPEG) and §9.4 (PNG), checked before decoding.

Decoders are lenient in different ways (libpng skips ancillary CRCs, Pillow ignores bytes after
IEND and after EOI, libjpeg guesses the colour space from markers), so the reader checks the
structure itself and every conforming reader accepts and rejects the same payloads. A failure
is a `DecodeError` with rule IMAGE_DECODE naming the sample.
"""

from __future__ import annotations

import re
import struct
import zlib

import numpy as np

from detfmt.errors import DecodeError
from detfmt.format.spec import MAX_JPEG_SCANS

__all__ = ["check_jpeg", "check_png"]

_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_ADAM7 = ((0, 0, 8, 8), (0, 4, 8, 8), (4, 0, 8, 4), (0, 2, 4, 4), (2, 0, 4, 2), (0, 1, 2, 2),
          (1, 0, 2, 1))
_CHUNK_TYPE = re.compile(rb"[A-Za-z]{4}\Z")


def _fail(message: str, path: str, index: int) -> DecodeError:
    return DecodeError(message, rule="IMAGE_DECODE", path=path, index=index)


def check_png(payload: memoryview | bytes, height: int, width: int, *, path: str,
              index: int) -> None:
    """SPEC §9.4 steps P1 to P4: the chunk sequence with every CRC, IHDR, one zlib stream that
    inflates to exactly the filtered image (Adler-32 included, nothing after it), and filter
    types 0 to 4. Inflating here costs one more pass over the pixels than Pillow's own."""
    data = bytes(payload)
    if not data.startswith(_PNG_SIGNATURE):  # P1
        raise _fail("not a PNG (signature)", path, index)
    position, kinds, idat, ihdr = 8, [], [], b""
    while True:  # P2
        if position + 12 > len(data):
            raise _fail("PNG ends before IEND", path, index)
        length, kind = struct.unpack(">I4s", data[position:position + 8])
        if length >= 1 << 31 or position + 12 + length > len(data) or not _CHUNK_TYPE.match(kind):
            raise _fail(f"malformed PNG chunk at byte {position}", path, index)
        body = data[position + 8:position + 8 + length]
        crc = int.from_bytes(data[position + 8 + length:position + 12 + length], "big")
        if zlib.crc32(kind + body) != crc:
            raise _fail(f"PNG chunk {kind.decode()} has a wrong CRC", path, index)
        if kind == b"IHDR" and not kinds:
            ihdr = body
        elif kind == b"IDAT":
            if idat and kinds[-1] != b"IDAT":
                raise _fail("PNG IDAT chunks are not consecutive", path, index)
            idat.append(body)
        elif kind == b"PLTE":
            if idat or b"PLTE" in kinds or length % 3 or not 3 <= length <= 768:
                raise _fail("misplaced or malformed PNG PLTE chunk", path, index)
        elif kind == b"IEND":
            if length:
                raise _fail("PNG IEND chunk is not empty", path, index)
            position += 12
            break
        elif not kind[0] & 0x20:  # an unknown critical chunk, or IHDR out of place
            raise _fail(f"PNG critical chunk {kind.decode()} is not allowed here", path, index)
        kinds.append(kind)
        position += 12 + length
    if position != len(data):
        raise _fail(f"{len(data) - position} bytes follow the PNG IEND chunk", path, index)
    if len(ihdr) != 13 or not idat:
        raise _fail("PNG lacks IHDR (first) or IDAT", path, index)
    w, h, depth, color, compression, filtering, interlace = struct.unpack(">IIBBBBB", ihdr)
    if (depth, color, compression, filtering) != (8, 2, 0, 0) or interlace > 1:
        raise _fail(f"PNG must be 8-bit RGB, methods 0, interlace 0 or 1 (IHDR bit depth "
                    f"{depth}, color type {color}, compression {compression}, filter "
                    f"{filtering}, interlace {interlace})", path, index)
    if (h, w) != (height, width):
        raise _fail(f"PNG is {h}x{w}, index says {height}x{width}", path, index)
    passes = ([(len(range(r0, height, dr)), len(range(c0, width, dc)))
               for r0, c0, dr, dc in _ADAM7 if r0 < height and c0 < width]
              if interlace else [(height, width)])
    expected = sum(rows * (1 + 3 * cols) for rows, cols in passes)
    stream = zlib.decompressobj()
    try:  # P3
        raw = stream.decompress(b"".join(idat), expected + 1)
    except zlib.error as error:
        raise _fail(f"PNG zlib stream is corrupt: {error}", path, index) from error
    if len(raw) != expected or not stream.eof or stream.unused_data or stream.unconsumed_tail:
        raise _fail(f"PNG image data is not one zlib stream of exactly {expected} bytes",
                    path, index)
    start = 0
    filters = np.frombuffer(raw, np.uint8)
    for rows, cols in passes:  # P4
        line = 1 + 3 * cols
        if rows and filters[start:start + rows * line:line].max() > 4:
            raise _fail("PNG scanline filter type above 4", path, index)
        start += rows * line


_SOF_ALLOWED = frozenset((0xC0, 0xC1, 0xC2))  # baseline, extended sequential, progressive
_SEGMENTS = frozenset((0xC4, 0xDB, 0xDD, 0xFE, *range(0xE0, 0xF0), *_SOF_ALLOWED, 0xDA))
_NEXT_MARKER = re.compile(rb"\xff[^\x00\xd0-\xd7]")  # past stuffed bytes and restart markers
_SAMPLING = frozenset((0x11, 0x21, 0x22))  # luma 1x1, 2x1, 2x2: 4:4:4, 4:2:2, 4:2:0


def check_jpeg(payload: memoryview | bytes, height: int, width: int, *, path: str,
               index: int) -> None:
    """SPEC §9.3 steps J1 to J3: the marker walk (allowed markers, lengths, one frame of type
    SOF0/SOF1/SOF2 before the first scan, at most ``MAX_JPEG_SCANS`` scans (R-50: each scan is a
    pass over the whole image, so thousands cost minutes of CPU), nothing between segments, EOI
    last), the frame
    (precision 8, three components, sampling 4:4:4, 4:2:2 or 4:2:0, its size) and the colour
    space (YCbCr: no Adobe transform other than 1, no R, G, B component ids without JFIF)."""
    data = bytes(payload)
    if not data.startswith(b"\xff\xd8"):  # J1
        raise _fail("not a JPEG (SOI)", path, index)
    position, frame, scans, jfif, adobe = 2, b"", 0, False, None
    while True:  # J2
        if position >= len(data) or data[position] != 0xFF:
            raise _fail(f"JPEG: no marker at byte {position}", path, index)
        while position < len(data) and data[position] == 0xFF:
            position += 1
        if position >= len(data):
            raise _fail("JPEG ends inside a marker", path, index)
        marker = data[position]
        position += 1
        if marker == 0xD9:
            if not frame or not scans or position != len(data):
                raise _fail("JPEG EOI before a frame and scan, or bytes after EOI", path, index)
            break
        if marker not in _SEGMENTS:
            raise _fail(f"JPEG marker FF{marker:02X} is not allowed", path, index)
        if position + 2 > len(data):
            raise _fail("JPEG ends inside a segment length", path, index)
        length = int.from_bytes(data[position:position + 2], "big")
        if length < 2 or position + length > len(data):
            raise _fail(f"JPEG segment FF{marker:02X} overruns the payload", path, index)
        body = data[position + 2:position + length]
        position += length
        if marker in _SOF_ALLOWED:
            if frame or scans or len(body) != 15 or body[5] != 3:
                raise _fail("JPEG must have one frame of three components before its scans",
                            path, index)
            frame = body
        elif marker == 0xE0 and body.startswith(b"JFIF\x00"):
            jfif = True
        elif marker == 0xEE and body.startswith(b"Adobe") and len(body) >= 12:
            adobe = body[11]
        elif marker == 0xDA:
            if not frame:
                raise _fail("JPEG scan before its frame", path, index)
            scans += 1
            if scans > MAX_JPEG_SCANS:
                raise _fail(f"JPEG has more than {MAX_JPEG_SCANS} scans (each one is a pass "
                            "over the whole image)", path, index)
            found = _NEXT_MARKER.search(data, position)
            if found is None:
                raise _fail("JPEG ends inside entropy-coded data", path, index)
            position = found.start()
    precision, frame_height, frame_width = frame[0], *struct.unpack(">HH", frame[1:5])
    sampling = (frame[7], frame[10], frame[13])
    if precision != 8 or sampling[0] not in _SAMPLING or sampling[1:] != (0x11, 0x11):
        raise _fail(f"JPEG precision {precision}, sampling {[f'{s:02x}' for s in sampling]}: "
                    "must be 8-bit 4:4:4, 4:2:2 or 4:2:0", path, index)
    if (frame_height, frame_width) != (height, width):
        raise _fail(f"JPEG is {frame_height}x{frame_width}, index says {height}x{width}",
                    path, index)
    identifiers = bytes((frame[6], frame[9], frame[12]))
    if adobe not in (None, 1) or (not jfif and adobe is None and identifiers == b"RGB"):  # J3
        raise _fail("JPEG components are not YCbCr (Adobe transform or R, G, B ids)", path,
                    index)
