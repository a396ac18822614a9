"""Strict .npy headers: parse without trusting the file, emit numpy's canonical form.

``np.load`` would happily map a big-endian, Fortran-ordered or object array, or one whose shape
claims more bytes than the file holds. detfmt parses the header itself, checks it against an exact
dtype allowlist and the real file size, and only then maps the data.

Accepted: format versions 1.0, 2.0 and 3.0; a header that is a Python dict literal with exactly the
keys ``descr``, ``fortran_order`` and ``shape``; ``fortran_order`` False. Emitted: version 1.0 when
the header fits in 65535 bytes (always, for detfmt's arrays), padded with spaces and a final newline
so the data starts at a multiple of 64 bytes, exactly as numpy writes it.
"""

from __future__ import annotations

import ast
import struct
import threading
from dataclasses import dataclass

import numpy as np

from detfmt.errors import LayoutError
from detfmt.format import spec

MAGIC = b"\x93NUMPY"
# CPython 3.11's AST conversion keeps its recursion depth in shared state: two threads parsing
# at once (loader threads opening shards), with a thread switch inside (a GC callback, a
# finalizer), fail with "SystemError: AST constructor recursion depth mismatch".
_PARSE_LOCK = threading.Lock()
__all__ = ["NpyHeader", "encode_header", "parse_header"]


@dataclass(frozen=True)
class NpyHeader:
    """A validated .npy header: where the data starts, its dtype descr and shape."""

    descr: str | list
    shape: tuple[int, ...]
    data_offset: int

    @property
    def dtype(self) -> np.dtype:
        descr = self.descr
        return np.dtype(descr if isinstance(descr, str) else [tuple(f) for f in descr])

    @property
    def nbytes(self) -> int:
        count = 1
        for dim in self.shape:
            count *= dim
        return count * self.dtype.itemsize


def _fail(rule: str, message: str, path: str) -> LayoutError:
    return LayoutError(message, rule=rule, path=path)


def parse_header(prefix: bytes, file_size: int, path: str) -> NpyHeader:
    """Parse and check the header at the start of a .npy file.

    Args:
        prefix: at least the first ``spec.MAX_NPY_HEADER_BYTES`` bytes of the file (or all of it).
        file_size: the real size of the file (from fstat).
        path: used in error messages.

    Raises:
        LayoutError: ``NPY_HEADER`` (malformed), ``NPY_ORDER`` (Fortran order), ``NPY_SIZE``
            (data size differs from the file size). dtype checks are the caller's (``NPY_DTYPE``).
    """
    if len(prefix) < 10 or not prefix.startswith(MAGIC):
        raise _fail("NPY_HEADER", "not a .npy file (bad magic)", path)
    major, minor = prefix[6], prefix[7]
    if (major, minor) == (1, 0):
        (length,) = struct.unpack("<H", prefix[8:10])
        start = 10
    elif (major, minor) in ((2, 0), (3, 0)):
        if len(prefix) < 12:
            raise _fail("NPY_HEADER", "truncated .npy header", path)
        (length,) = struct.unpack("<I", prefix[8:12])
        start = 12
    else:
        raise _fail("NPY_HEADER", f"unsupported .npy format version {major}.{minor}", path)
    if length > spec.MAX_NPY_HEADER_BYTES or start + length > len(prefix):
        raise _fail("NPY_HEADER", f".npy header of {length} bytes is too large or truncated", path)
    encoding = "utf-8" if major == 3 else "latin-1"
    try:
        text = prefix[start : start + length].decode(encoding)
        # literal_eval only builds literals (no calls): safe on untrusted input of bounded size.
        with _PARSE_LOCK:
            fields = ast.literal_eval(text)
    except (UnicodeDecodeError, ValueError, SyntaxError, MemoryError, RecursionError) as error:
        raise _fail("NPY_HEADER", f"unparseable .npy header: {error}", path) from error
    if not isinstance(fields, dict) or set(fields) != {"descr", "fortran_order", "shape"}:
        raise _fail("NPY_HEADER", "the .npy header must have exactly descr, fortran_order, shape",
                    path)
    descr, fortran, shape = fields["descr"], fields["fortran_order"], fields["shape"]
    if fortran is not False:
        raise _fail("NPY_ORDER", "Fortran-ordered arrays are not allowed (C order only)", path)
    if not isinstance(shape, tuple) or not all(
        type(dim) is int and 0 <= dim < (1 << 62) for dim in shape
    ):
        raise _fail("NPY_HEADER", f"invalid .npy shape {shape!r}", path)
    if not isinstance(descr, (str, list)):
        raise _fail("NPY_HEADER", f"invalid .npy descr {descr!r}", path)
    header = NpyHeader(descr=descr, shape=shape, data_offset=start + length)
    return header


def check_layout(header: NpyHeader, file_size: int, path: str) -> None:
    """Require the data to fill the file exactly (no truncation, no trailing bytes)."""
    expected = header.data_offset + header.nbytes  # Python ints: no overflow
    if expected != file_size:
        raise _fail(
            "NPY_SIZE",
            f".npy header declares {header.nbytes} data bytes (file of {expected} bytes), "
            f"but the file has {file_size} bytes",
            path,
        )


def encode_header(dtype: np.dtype, shape: tuple[int, ...]) -> bytes:
    """The canonical version-1.0 .npy header for a C-ordered array (numpy's own byte form)."""
    descr = np.lib.format.dtype_to_descr(dtype)
    text = f"{{'descr': {descr!r}, 'fortran_order': False, 'shape': {tuple(shape)!r}, }}"
    # numpy pads with spaces so that magic(6)+version(2)+len(2)+text+'\n' is a multiple of 64.
    total = 10 + len(text) + 1
    padded = text + " " * (spec.align_up(total) - total) + "\n"
    encoded = padded.encode("latin-1")
    if len(encoded) > 65535:  # pragma: no cover - detfmt's arrays have short headers
        raise ValueError("npy header too long for version 1.0")
    return MAGIC + b"\x01\x00" + struct.pack("<H", len(encoded)) + encoded
