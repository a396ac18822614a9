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

import re
import struct
from dataclasses import dataclass

import numpy as np

from detfmt.errors import LayoutError
from detfmt.format import spec

MAGIC = b"\x93NUMPY"
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


# SPEC §6's grammar, exactly (no superset: every id a function of the bytes alone). Whitespace is
# spaces only; integers are decimal digits (leading zeros allowed); each key takes its own kind of
# value, so a wrong-typed value ('fortran_order': 'False' or 0, 'shape': '3', list pairs) is
# NPY_HEADER like any other header outside the grammar.
_STRING = r"'[^'\\]*'|" + r'"[^"\\]*"'
_PAIR = rf"\( *(?:{_STRING}) *, *(?:{_STRING}) *\)"
_VALUE = (rf"{_STRING}|\[ *{_PAIR}(?: *, *{_PAIR})* *(?:, *)?\]"  # descr
          r"|False|True"  # fortran_order
          r"|\( *\)|\( *[0-9]+ *, *\)|\( *[0-9]+(?: *, *[0-9]+)+ *(?:, *)?\)")  # shape
#: the first character of each key's kind of value (``_VALUE`` has matched the rest)
_KINDS = {"descr": "'\"[", "fortran_order": "FT", "shape": "("}
_ENTRY = rf"(?P<key{{n}}>{_STRING}) *: *(?P<value{{n}}>{_VALUE})"
_HEADER = re.compile(" *\\{ *" + " *, *".join(_ENTRY.format(n=n) for n in range(3))
                     + " *(?:, *)?\\} *\n?")


def _parse_dictionary(text: str, path: str) -> tuple[str | list, bool, tuple[int, ...]]:
    """(descr, fortran_order, shape) of an array header in SPEC §6's grammar, else NPY_HEADER."""
    match = _HEADER.fullmatch(text)
    if match is None:
        raise _fail("NPY_HEADER", "the .npy header is not in SPEC §6's grammar (a dict of "
                    "descr, fortran_order and shape)", path)
    fields = {match[f"key{n}"][1:-1]: match[f"value{n}"] for n in range(3)}
    if set(fields) != set(_KINDS) or not all(
        value[0] in _KINDS[key] for key, value in fields.items()
    ):
        raise _fail("NPY_HEADER", "the .npy header must have exactly descr (a string or a list of "
                    "pairs), fortran_order (False or True) and shape (a tuple of integers)", path)
    descr_text = fields["descr"]
    descr: str | list = (descr_text[1:-1] if descr_text[0] != "[" else [
        (a[1:-1], b[1:-1]) for a, b in re.findall(rf"\( *({_STRING}) *, *({_STRING}) *\)",
                                                  descr_text)])
    shape = tuple(int(dim) for dim in re.findall("[0-9]+", fields["shape"]))
    return descr, fields["fortran_order"] == "True", shape


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
    except UnicodeDecodeError as error:
        raise _fail("NPY_HEADER", f"undecodable .npy header: {error}", path) from error
    descr, fortran, shape = _parse_dictionary(text, path)
    if fortran:
        raise _fail("NPY_ORDER", "Fortran-ordered arrays are not allowed (C order only)", path)
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
