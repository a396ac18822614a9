"""Packed shard files (SPEC §19.4): one immutable file holding a whole 1.0 dataset.

Members sit at 64-byte-aligned offsets behind a small JSON table of contents, so a shard travels
as one object (one GET) and, once local, each member is memory-mapped in place.

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

from detfmt.errors import NotDetfmtError, UnsupportedVersionError
from detfmt.shard.errors import PackError

__all__ = [
    "MAGIC",
    "PACK_VERSION",
    "Member",
    "Toc",
    "align64",
    "canonical_order",
    "encode_head",
    "pack_directory",
    "plan_layout",
    "read_toc",
    "toc_length_prefix",
    "toc_reserve",
]

MAGIC = b"DETFMTPK"
PACK_VERSION = 1
PREFIX = 16
MAX_TOC = 1 << 20
PAGE = 4096
BLOB = "images.bin"
_MAX_NUMBER = 10**20 - 1  # a u64 takes at most 20 digits
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


def canonical_order(names: Iterable[str]) -> list[str]:
    """images.bin first, then the other members sorted by name byte-wise (S-11)."""
    names = list(names)
    rest = sorted((n for n in names if n != BLOB), key=lambda n: n.encode("utf-8"))
    return ([BLOB] if BLOB in names else []) + rest


def toc_reserve(names: Iterable[str]) -> int:
    """``T`` for a shard of these members: the smallest length with ``16 + T`` a multiple of
    4096 that holds their table of contents whatever their sizes (each number at 20 digits)."""
    bound = len(msgspec.json.encode(Toc([Member(n, _MAX_NUMBER, _MAX_NUMBER)
                                         for n in canonical_order(names)])))
    reserve = -(-(PREFIX + bound) // PAGE) * PAGE - PREFIX
    if reserve > MAX_TOC:
        raise PackError(f"table of contents of {bound} bytes exceeds the limit {MAX_TOC}")
    return reserve


def plan_layout(sizes: Mapping[str, int], reserve: int) -> Toc:
    """Offsets of every member in canonical order behind a table of contents of ``reserve``."""
    members, position = [], PREFIX + reserve
    for name in canonical_order(sizes):
        members.append(Member(name, position, sizes[name]))
        position = align64(position + sizes[name])
    return Toc(members)


def encode_head(toc: Toc, reserve: int) -> bytes:
    """The 16-byte prefix and the table of contents, padded with spaces to ``reserve``."""
    blob = msgspec.json.encode(toc)
    if len(blob) > reserve:
        raise PackError(f"table of contents is {len(blob)} bytes, {reserve} were reserved")
    return MAGIC + struct.pack("<II", PACK_VERSION, reserve) + blob + b" " * (reserve - len(blob))


def pack_directory(src: str | os.PathLike[str], out: BinaryIO) -> Toc:
    """Write the plain files of a 1.0 dataset directory to ``out`` as a packed shard, in the
    canonical layout (the streaming shard builder writes the same bytes directly)."""
    src = os.fspath(src)
    names = [e.name for e in os.scandir(src) if e.is_file(follow_symlinks=False)]
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


def toc_length_prefix(head: bytes, where: str = "") -> int:
    """Parse the 16-byte prefix; returns the TOC length (S-9)."""
    if len(head) < PREFIX or head[:8] != MAGIC:
        raise NotDetfmtError("not a packed detfmt shard (bad magic)", rule="PACK_MAGIC", path=where)
    version, toc_len = struct.unpack("<II", head[8:16])
    if version != PACK_VERSION:
        raise UnsupportedVersionError(
            f"pack version {version} is not supported",
            found=str(version),
            supported=str(PACK_VERSION),
            path=where,
        )
    if toc_len > MAX_TOC:
        raise PackError(f"table of contents is {toc_len} bytes, limit {MAX_TOC}", path=where)
    return toc_len


def parse_toc(blob: bytes, file_size: int, where: str = "") -> Toc:
    """Decode the TOC and check the layout rules of S-10 against the file size."""
    try:
        toc = msgspec.json.decode(blob, type=Toc)
    except (msgspec.ValidationError, msgspec.DecodeError) as e:
        raise PackError(f"invalid table of contents: {e}", path=where) from e
    pos = align64(PREFIX + len(blob))
    seen: set[str] = set()
    for m in toc.members:
        if not m.name or "/" in m.name or "\\" in m.name or m.name in (".", "..") or m.name in seen:
            raise PackError(f"bad or duplicate member name {m.name!r}", path=where)
        seen.add(m.name)
        if m.offset != pos or m.size < 0:
            raise PackError(f"member {m.name!r} at offset {m.offset}, expected {pos}", path=where)
        pos = align64(m.offset + m.size)
    if "header.json" not in seen:
        raise PackError("packed shard has no header.json member", path=where)
    if toc.end != file_size:
        raise PackError(f"file is {file_size} bytes, members end at {toc.end}", path=where)
    return toc


def read_toc(path: str | os.PathLike[str], check_padding: bool = True) -> Toc:
    """Read and validate the TOC of a local packed shard (S-9, S-10)."""
    path = os.fspath(path)
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        toc_len = toc_length_prefix(f.read(PREFIX), path)
        blob = f.read(toc_len)
        if len(blob) != toc_len:
            raise PackError("file ends inside the table of contents", path=path)
        toc = parse_toc(blob, size, path)
        if check_padding:
            pos = PREFIX + toc_len
            for m in toc.members:
                f.seek(pos)
                if any(f.read(m.offset - pos)):
                    raise PackError(f"nonzero padding before member {m.name!r}", path=path)
                pos = m.offset + m.size
    return toc
