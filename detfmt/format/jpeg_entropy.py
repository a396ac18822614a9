"""SPEC §9.3 step J4's entropy rules (1.2.1): the coded data of every scan, exactly.

Decoders recover from corrupt entropy-coded data in different ways (libjpeg zero-fills data that
runs out, skips stray bytes and resynchronises at restart markers, each with a warning), so two
readers would return different pixels for the same bytes. Verification therefore walks every
scan's Huffman codes itself, without dequantising or transforming anything: the codes must be
valid, every restart interval must end with fewer than 8 padding bits before its marker, restart
markers must be exactly where the restart interval puts them, and a progressive frame's scans
must follow the successive-approximation sequence. A failure is IMAGE_DECODE naming the sample.

Verification calls it (§12 step 9; access MAY, and detfmt's access path does not). Sequential
scans, what writers store (W-5), go through a numba kernel when numba is installed
(`jpeg_entropy_native`, ``detfmt[fast]``: about 0.02 s per megapixel, verify 4.4 times its time
without the walk on real photos); the rest, and everything without numba, walks in Python
(about 0.6 s per megapixel).
"""

from __future__ import annotations

import re

import numpy as np

from detfmt.errors import DecodeError
from detfmt.format import jpeg_entropy_native as native

__all__ = ["check_entropy"]

_RST = re.compile(rb"\xff[\xd0-\xd7]")
_MARKER = re.compile(rb"\xff[^\x00\xd0-\xd7]")


class _Fail(Exception):
    pass


def _table(body: bytes, at: int) -> tuple[int, dict[str, int], int]:
    """One Huffman table of a DHT segment: (class << 4 | id, code string -> symbol, next)."""
    if at + 17 > len(body):
        raise _Fail("DHT segment is truncated")
    key, counts = body[at], body[at + 1:at + 17]
    symbols = body[at + 17:at + 17 + sum(counts)]
    if len(symbols) != sum(counts):
        raise _Fail("DHT segment is truncated")
    codes: dict[str, int] = {}
    code, k = 0, 0
    for length in range(1, 17):
        for _ in range(counts[length - 1]):
            if code >= 1 << length:
                raise _Fail("DHT table has more codes than its lengths allow")
            codes[format(code, f"0{length}b")] = symbols[k]
            code, k = code + 1, k + 1
        code <<= 1
    return key, codes, at + 17 + len(symbols)


class _Bits:
    """The bits of one restart interval (stuffed zero bytes removed)."""

    def __init__(self, data: bytes) -> None:
        data = data.replace(b"\xff\x00", b"\xff")
        self.bits = "".join(map("{:08b}".format, data))
        self.at = 0

    def read(self, n: int) -> int:
        if self.at + n > len(self.bits):
            raise _Fail("entropy-coded data runs out")
        value = int(self.bits[self.at:self.at + n] or "0", 2)
        self.at += n
        return value

    def code(self, table: dict[str, int]) -> int:
        for length in range(1, 17):
            if self.at + length > len(self.bits):
                raise _Fail("entropy-coded data runs out")
            symbol = table.get(self.bits[self.at:self.at + length])
            if symbol is not None:
                self.at += length
                return symbol
        raise _Fail("invalid Huffman code")

    def finish(self) -> None:
        if len(self.bits) - self.at >= 8:
            raise _Fail(f"{(len(self.bits) - self.at) // 8} extraneous bytes after the coded "
                        "data of a restart interval")


def _blocks(size: int, factor: int, most: int) -> int:
    """8x8 blocks a component of sampling ``factor`` (of the frame's ``most``) has along one
    side of ``size`` samples: ceil(ceil(size * factor / most) / 8), T.81 A.1.1."""
    samples = -(-size * factor // most)
    return -(-samples // 8)


def check_entropy(payload: memoryview | bytes, *, path: str, index: int) -> None:
    """SPEC §9.3 J4 (entropy rules) of a payload that passed J1 to J3 (check_jpeg)."""
    try:
        _walk(bytes(payload))
    except _Fail as failure:
        raise DecodeError(f"JPEG: {failure}", rule="IMAGE_DECODE", path=path,
                          index=index) from None


def _walk(data: bytes) -> None:
    tables: dict[int, dict[str, int]] = {}
    interval, frame, progressive = 0, None, False
    history: dict[int, list[int]] = {}  # component id -> per coefficient: last Al, -1 unseen
    nonzero: dict[int, bytearray] = {}  # component id -> 64 flags per block (refinement)
    position = 2
    while True:
        while data[position] == 0xFF and data[position + 1] == 0xFF:
            position += 1
        marker = data[position + 1]
        if marker == 0xD9:
            return
        length = int.from_bytes(data[position + 2:position + 4], "big")
        body = data[position + 4:position + 2 + length]
        position += 2 + length
        if marker == 0xC4:
            at = 0
            while at < len(body):
                key, codes, at = _table(body, at)
                tables[key] = codes
        elif marker == 0xDD:
            if len(body) != 2:
                raise _Fail("DRI segment length is not 4")
            interval = int.from_bytes(body, "big")
        elif marker in (0xC0, 0xC1, 0xC2):
            progressive = marker == 0xC2
            height, width = int.from_bytes(body[1:3], "big"), int.from_bytes(body[3:5], "big")
            comps = {body[6 + 3 * c]: (body[7 + 3 * c] >> 4, body[7 + 3 * c] & 15)
                     for c in range(body[5])}
            hmax = max(h for h, _ in comps.values())
            vmax = max(v for _, v in comps.values())
            frame = (height, width, comps, hmax, vmax)
            for c, (h, v) in comps.items():
                blocks = _blocks(width, h, hmax) * _blocks(height, v, vmax)
                history[c] = [-1] * 64
                nonzero[c] = bytearray(64 * blocks) if progressive else bytearray()
        elif marker == 0xDA:
            assert frame is not None  # J2 checked the frame comes first
            end = _MARKER.search(data, position)
            assert end is not None  # J2 checked the data ends at a marker
            _scan(body, data[position:end.start()], frame, progressive, interval, tables,
                  history, nonzero)
            position = end.start()


def _scan(header: bytes, coded: bytes, frame: tuple, progressive: bool, interval: int,
          tables: dict[int, dict[str, int]], history: dict[int, list[int]],
          nonzero: dict[int, bytearray]) -> None:
    height, width, comps, hmax, vmax = frame
    count = header[0] if header else 0
    if len(header) != 4 + 2 * count or not 1 <= count <= 4:
        raise _Fail("SOS segment length does not match its component count")
    members = [(header[1 + 2 * k], header[2 + 2 * k] >> 4, header[2 + 2 * k] & 15)
               for k in range(count)]
    ss, se, ah, al = header[1 + 2 * count], header[2 + 2 * count], header[3 + 2 * count] >> 4, \
        header[3 + 2 * count] & 15
    if any(c not in comps for c, _, _ in members) or len({c for c, _, _ in members}) != count:
        raise _Fail("SOS names a component the frame lacks, or one twice")
    if not progressive:
        if (ss, se, ah, al) != (0, 63, 0, 0):
            raise _Fail("a sequential scan must have Ss 0, Se 63, Ah 0, Al 0")
    else:  # the progression (T.81 G.1.1.1, libjpeg's checks)
        if (ss == 0) != (se == 0) or se > 63 or ss > se or (ss and count != 1) or al > 13 \
                or (ah and al != ah - 1):
            raise _Fail("inconsistent progressive scan parameters")
        for c, _, _ in members:
            bits = history[c]
            if ss and bits[0] < 0:
                raise _Fail("an AC scan before its component's first DC scan")
            for k in range(ss, se + 1):
                if ah != max(bits[k], 0):
                    raise _Fail("a refinement scan out of sequence (Ah differs from the last Al)")
                bits[k] = al
    for _, dc, ac in members:
        needed = ([] if ah else [dc]) if progressive and ss == 0 else \
            [0x10 | ac] if progressive else [dc, 0x10 | ac]
        if any(key not in tables for key in needed):
            raise _Fail("a scan uses a Huffman table that no DHT segment defined")
    # the units (MCUs) of the scan: one block of one component when non-interleaved (the unit's
    # number is then the block's), else h x v blocks of each component in scan order (T.81 A.2)
    if count == 1:
        h, v = comps[members[0][0]]
        total = _blocks(width, h, hmax) * _blocks(height, v, vmax)
    else:
        total = -(-width // (8 * hmax)) * -(-height // (8 * vmax))
    pattern = [c for c, _, _ in members for _ in range(comps[c][0] * comps[c][1])]
    parts = _RST.split(coded)
    found = [m.group()[1] - 0xD0 for m in _RST.finditer(coded)]
    spans = -(-total // interval) if interval else 1
    if found != [k % 8 for k in range(spans - 1)]:
        raise _Fail(f"restart markers {found} where the restart interval puts "
                    f"{spans - 1} in sequence")
    size = interval or total
    if not progressive and _native_sequential(parts, total, size, pattern, members, tables):
        return
    selectors = {c: (tables.get(dc), tables.get(0x10 | ac)) for c, dc, ac in members}
    for part, start in zip(parts, range(0, total, size), strict=True):
        bits, eobrun = _Bits(part), 0
        for unit in range(start, min(start + size, total)):
            for c in pattern:
                dc_table, ac_table = selectors[c]
                if not progressive:
                    _sequential(bits, dc_table, ac_table)
                elif ss == 0:
                    if ah:
                        bits.read(1)
                    else:
                        bits.read(bits.code(dc_table))
                elif ah == 0:
                    eobrun = _ac_first(bits, ac_table, ss, se, eobrun, nonzero[c], unit * 64)
                else:
                    eobrun = _ac_refine(bits, ac_table, ss, se, eobrun, nonzero[c], unit * 64)
        bits.finish()


_VERDICTS = {native.RUNS_OUT: "entropy-coded data runs out",
             native.BAD_CODE: "invalid Huffman code",
             native.PAST_63: "an AC run past coefficient 63",
             native.EXTRANEOUS: "extraneous bytes after the coded data of a restart interval"}


def _native_sequential(parts: list[bytes], total: int, size: int, pattern: list[int],
                       members: list, tables: dict[int, dict[str, int]]) -> bool:
    """Walk a sequential scan with the numba kernel (same verdicts as `_sequential`); False
    when numba is not installed (the caller walks in Python)."""
    kernel = native.sequential_kernel()
    if kernel is None:
        return False
    keys = sorted({key for _, dc, ac in members for key in (dc, 0x10 | ac)})
    stack = np.stack([native.tables_array(tables[key]) for key in keys])
    slot = {key: n for n, key in enumerate(keys)}
    by_component = {c: (slot[dc], slot[0x10 | ac]) for c, dc, ac in members}
    dc_of = np.array([by_component[c][0] for c in pattern], np.int64)
    ac_of = np.array([by_component[c][1] for c in pattern], np.int64)
    for part, start in zip(parts, range(0, total, size), strict=True):
        data = np.frombuffer(part.replace(b"\xff\x00", b"\xff"), np.uint8)
        blocks = min(size, total - start) * len(pattern)
        verdict = kernel(data, blocks, dc_of, ac_of, stack)
        if verdict:
            raise _Fail(_VERDICTS[verdict])
    return True


def _sequential(bits: _Bits, dc_table: dict[str, int], ac_table: dict[str, int]) -> None:
    bits.read(bits.code(dc_table))
    k = 1
    while k <= 63:
        symbol = bits.code(ac_table)
        run, size = symbol >> 4, symbol & 15
        if size:
            k += run
            if k > 63:
                raise _Fail("an AC run past coefficient 63")
            bits.read(size)
        elif run != 15:
            return
        else:
            k += 15
            if k > 63:
                raise _Fail("an AC run past coefficient 63")
        k += 1


def _ac_first(bits: _Bits, table: dict[str, int], ss: int, se: int, eobrun: int,
              flags: bytearray, base: int) -> int:
    if eobrun:
        return eobrun - 1
    k = ss
    while k <= se:
        symbol = bits.code(table)
        run, size = symbol >> 4, symbol & 15
        if size:
            k += run
            if k > se:
                raise _Fail("an AC run past the end of the scan's band")
            bits.read(size)
            flags[base + k] = 1
        elif run == 15:
            k += 15
            if k > se:
                raise _Fail("an AC run past the end of the scan's band")
        else:
            eobrun = 1 << run
            if run:
                eobrun += bits.read(run)
            return eobrun - 1
        k += 1
    return 0


def _ac_refine(bits: _Bits, table: dict[str, int], ss: int, se: int, eobrun: int,
               flags: bytearray, base: int) -> int:
    k = ss
    if not eobrun:
        while k <= se:
            symbol = bits.code(table)
            run, size = symbol >> 4, symbol & 15
            if size:
                if size != 1:
                    raise _Fail("a refinement coefficient of size other than 1")
                bits.read(1)
            elif run != 15:
                eobrun = 1 << run
                if run:
                    eobrun += bits.read(run)
                break
            while k <= se:  # skip `run` zero coefficients, refining the non-zero ones passed
                if flags[base + k]:
                    bits.read(1)
                else:
                    if run == 0:
                        break
                    run -= 1
                k += 1
            if size:
                if k > se:
                    raise _Fail("a refinement run past the end of the scan's band")
                flags[base + k] = 1
            k += 1
    if eobrun:
        while k <= se:
            if flags[base + k]:
                bits.read(1)
            k += 1
        eobrun -= 1
    return eobrun
