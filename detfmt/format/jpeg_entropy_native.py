"""J4's walk of a sequential (baseline, SOF1) scan as one numba call, when numba is installed.

The pure-Python walk (`jpeg_entropy`) costs about 0.6 s per megapixel, a hundred times the rest
of verification on a JPEG dataset; this kernel walks the same codes by the canonical decoding
procedure of T.81 F.2.2.3 (``maxcode``, ``valptr``, ``mincode``) with the same verdicts, and is
used for sequential scans, which is what writers store (W-5). Progressive scans stay in Python.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

__all__ = ["sequential_kernel", "tables_array"]

#: verdicts of the kernel, the same order as jpeg_entropy's failures
OK, RUNS_OUT, BAD_CODE, PAST_63, EXTRANEOUS = 0, 1, 2, 3, 4
_KERNEL: Any = None
_TRIED = False
_LOCK = threading.Lock()


def tables_array(codes: dict[str, int]) -> np.ndarray:
    """One Huffman table ({code string: symbol}) as rows maxcode, valptr, mincode (17 each,
    index = code length) and huffval (256), int64."""
    out = np.full((4, 256), -1, np.int64)
    by_length: dict[int, list[tuple[int, int]]] = {}
    for code, symbol in codes.items():
        by_length.setdefault(len(code), []).append((int(code, 2), symbol))
    k = 0
    for length in range(1, 17):
        entries = sorted(by_length.get(length, []))
        if entries:
            out[1, length] = k
            out[2, length] = entries[0][0]
            out[0, length] = entries[-1][0]
            for _, symbol in entries:
                out[3, k] = symbol
                k += 1
    return out


def _build() -> Any:
    import numba

    @numba.njit(cache=True, nogil=True)
    def huff(data, total, at, table):  # pragma: no cover - compiled
        code = 0
        for length in range(1, 17):
            if at >= total:
                return -1, at
            code = (code << 1) | ((data[at >> 3] >> (7 - (at & 7))) & 1)
            at += 1
            if table[0, length] >= 0 and code <= table[0, length] and code >= table[2, length]:
                return table[3, table[1, length] + code - table[2, length]], at
        return -2, at

    @numba.njit(cache=True, nogil=True)
    def walk(data, nblocks, dc_of, ac_of, tables):  # pragma: no cover - compiled
        total = data.shape[0] * 8
        at = 0
        period = dc_of.shape[0]
        for b in range(nblocks):
            dc = tables[dc_of[b % period]]
            ac = tables[ac_of[b % period]]
            symbol, at = huff(data, total, at, dc)
            if symbol == -1:
                return 1
            if symbol == -2:
                return 2
            at += symbol  # the DC difference's magnitude bits
            if at > total:
                return 1
            k = 1
            while k <= 63:
                symbol, at = huff(data, total, at, ac)
                if symbol == -1:
                    return 1
                if symbol == -2:
                    return 2
                run = symbol >> 4
                size = symbol & 15
                if size:
                    k += run
                    if k > 63:
                        return 3
                    at += size
                    if at > total:
                        return 1
                elif run != 15:
                    break
                else:
                    k += 15
                    if k > 63:
                        return 3
                k += 1
        if total - at >= 8:
            return 4
        return 0

    return walk


def sequential_kernel() -> Any:
    """``walk(data, nblocks, dc_of, ac_of, tables) -> verdict`` or None without numba:
    ``data`` the destuffed bytes of one interval (uint8), ``nblocks`` its blocks, block b using
    tables ``dc_of[b % len]`` and ``ac_of[b % len]`` of ``tables`` (T, 4, 256) int64."""
    global _KERNEL, _TRIED
    if not _TRIED:
        with _LOCK:
            if not _TRIED:
                try:
                    _KERNEL = _build()
                except ImportError:
                    _KERNEL = None
                _TRIED = True
    return _KERNEL
