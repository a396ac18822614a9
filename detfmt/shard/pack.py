"""Writing packed shard files (SPEC §19.4): one immutable file holding a whole 1.0 dataset.

Members sit at 64-byte-aligned offsets behind a small JSON table of contents, so a shard travels
as one object (one GET) and, once local, each member is memory-mapped in place. Reading them is
`detfmt.members.PackedSource`.

The canonical layout lets a writer stream the images straight into their final place: the table
of contents is padded with spaces to a length ``T`` reserved before any sample is written (the
smallest with ``16 + T`` a multiple of 4096 that holds every member's offset and size at 20
digits), ``images.bin`` comes first at ``16 + T`` (page aligned), and the other members, known
only at the end, follow sorted by name byte-wise.
"""

from __future__ import annotations

import os
import shutil
import struct
from collections.abc import Iterable, Mapping
from typing import BinaryIO

import msgspec

from detfmt import spec
from detfmt.errors import PackError
from detfmt.members import Toc, TocEntry

__all__ = [
    "MAGIC",
    "PACK_VERSION",
    "Toc",
    "TocEntry",
    "align64",
    "canonical_order",
    "encode_head",
    "pack_directory",
    "plan_layout",
    "toc_reserve",
]

MAGIC = spec.PACK_MAGIC
PACK_VERSION = spec.PACK_VERSION
PREFIX = spec.PACK_PREFIX
MAX_TOC = spec.MAX_TOC_BYTES
PAGE = 4096
BLOB = "images.bin"
_MAX_NUMBER = 10**20 - 1  # a u64 takes at most 20 digits
_ZEROS = bytes(64)


def align64(n: int) -> int:
    return spec.align_up(n, 64)


def canonical_order(names: Iterable[str]) -> list[str]:
    """images.bin first, then the other members sorted by name byte-wise (S-11)."""
    names = list(names)
    rest = sorted((n for n in names if n != BLOB), key=lambda n: n.encode("utf-8"))
    return ([BLOB] if BLOB in names else []) + rest


def toc_reserve(names: Iterable[str]) -> int:
    """``T`` for a shard of these members: the smallest length with ``16 + T`` a multiple of
    4096 that holds their table of contents whatever their sizes (each number at 20 digits)."""
    bound = len(msgspec.json.encode(Toc([TocEntry(n, _MAX_NUMBER, _MAX_NUMBER)
                                         for n in canonical_order(names)])))
    reserve = -(-(PREFIX + bound) // PAGE) * PAGE - PREFIX
    if reserve > MAX_TOC:
        raise PackError(f"table of contents of {bound} bytes exceeds the limit {MAX_TOC}")
    return reserve


def plan_layout(sizes: Mapping[str, int], reserve: int) -> Toc:
    """Offsets of every member in canonical order behind a table of contents of ``reserve``."""
    members, position = [], PREFIX + reserve
    for name in canonical_order(sizes):
        members.append(TocEntry(name, position, sizes[name]))
        position = align64(position + sizes[name])
    return Toc(members)


def encode_head(toc: Toc, reserve: int) -> bytes:
    """The 16-byte prefix and the table of contents, padded with spaces to ``reserve``."""
    blob = msgspec.json.encode(toc)
    if len(blob) > reserve:
        raise PackError(f"table of contents is {len(blob)} bytes, {reserve} were reserved")
    return MAGIC + struct.pack("<II", PACK_VERSION, reserve) + blob + b" " * (reserve - len(blob))


def pack_directory(src: str | os.PathLike[str], out: BinaryIO,
                   names: Iterable[str] | None = None) -> Toc:
    """Write the plain files of a 1.0 dataset directory to ``out`` as a packed shard, in the
    canonical layout (the streaming shard builder writes the same bytes directly).

    ``names``: only these members (header.json and the files its header lists), leaving out
    anything else a directory may hold (R-43 lets readers ignore it; a shard may not, S-10)."""
    src = os.fspath(src)
    if names is None:
        names = [e.name for e in os.scandir(src) if e.is_file(follow_symlinks=False)]
    names = list(names)
    reserve = toc_reserve(names)
    toc = plan_layout({n: os.path.getsize(os.path.join(src, n)) for n in names}, reserve)
    out.write(encode_head(toc, reserve))
    pos = PREFIX + reserve
    for m in toc.members:
        out.write(_ZEROS[: m.offset - pos])
        with open(os.path.join(src, m.name), "rb") as f:
            shutil.copyfileobj(f, out, 1 << 20)
        pos = m.offset + m.size
    return toc
