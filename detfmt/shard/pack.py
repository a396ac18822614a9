"""Writing packed shard files (SPEC §19.4): one immutable file holding a whole 1.0 dataset.

Members sit at 64-byte-aligned offsets behind a small JSON table of contents, so a shard travels
as one object (one GET) and, once local, each member is memory-mapped in place. Reading them is
`detfmt.members.PackedSource`.
"""

from __future__ import annotations

import os
import shutil
import struct
from collections.abc import Iterable
from typing import BinaryIO

import msgspec

from detfmt.errors import PackError

__all__ = [
    "MAGIC",
    "PACK_VERSION",
    "Member",
    "Toc",
    "align64",
    "pack_directory",
]

MAGIC = b"DETFMTPK"
PACK_VERSION = 1
PREFIX = 16
MAX_TOC = 1 << 20
_ZEROS = bytes(64)


class Member(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    name: str
    offset: int
    size: int


class Toc(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    members: list[Member]

    def get(self, name: str) -> Member | None:
        for m in self.members:
            if m.name == name:
                return m
        return None

    @property
    def end(self) -> int:
        return self.members[-1].offset + self.members[-1].size if self.members else 0


def align64(n: int) -> int:
    return (n + 63) & ~63


def _layout(named_sizes: list[tuple[str, int]]) -> tuple[bytes, Toc]:
    """Find the TOC whose own length places the members where it says (a tiny fixed point)."""
    toc_len = 0
    while True:
        pos = align64(PREFIX + toc_len)
        members = []
        for name, size in named_sizes:
            members.append(Member(name, pos, size))
            pos = align64(pos + size)
        toc = Toc(members)
        blob = msgspec.json.encode(toc)
        if len(blob) == toc_len:
            return blob, toc
        toc_len = len(blob)


def canonical_order(names: Iterable[str]) -> list[str]:
    """header.json first, then the other members sorted by name (S-11)."""
    names = list(names)
    rest = sorted(n for n in names if n != "header.json")
    return (["header.json"] if "header.json" in names else []) + rest


def pack_directory(src: str | os.PathLike[str], out: BinaryIO,
                   names: Iterable[str] | None = None) -> Toc:
    """Write the plain files of a 1.0 dataset directory to ``out`` as a packed shard.

    ``names``: only these members (header.json and the files its header lists), leaving out
    anything else a directory may hold (R-43 lets readers ignore it; a shard may not, S-10)."""
    src = os.fspath(src)
    if names is None:
        names = (e.name for e in os.scandir(src) if e.is_file(follow_symlinks=False))
    names = canonical_order(names)
    sizes = [(n, os.path.getsize(os.path.join(src, n))) for n in names]
    blob, toc = _layout(sizes)
    if len(blob) > MAX_TOC:
        raise PackError(f"table of contents is {len(blob)} bytes, limit {MAX_TOC}", path=src)
    out.write(MAGIC + struct.pack("<II", PACK_VERSION, len(blob)) + blob)
    pos = PREFIX + len(blob)
    for m in toc.members:
        out.write(_ZEROS[: m.offset - pos])
        with open(os.path.join(src, m.name), "rb") as f:
            shutil.copyfileobj(f, out, 1 << 20)
        pos = m.offset + m.size
    return toc
