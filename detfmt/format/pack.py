"""Packed shard files (SPEC §19.4): one immutable file holding a whole 1.0 dataset.

Members sit at 64-byte-aligned offsets behind a small JSON table of contents, so a shard travels
as one object (one GET) and, once local, each member is memory-mapped in place. The table of
contents is decoded here too (`parse_toc`); mapping the members is
`detfmt.reading.sources.PackedSource`.

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

from detfmt import errors
from detfmt.errors import PackError
from detfmt.format import spec
from detfmt.format.jsonprofile import parse_json

__all__ = [
    "MAGIC",
    "PACK_VERSION",
    "Toc",
    "TocEntry",
    "align64",
    "canonical_order",
    "encode_head",
    "pack_directory",
    "parse_toc",
    "plan_layout",
    "toc_length",
    "toc_reserve",
]


class TocEntry(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One member in a packed shard's table of contents (S-10)."""

    name: str
    offset: int
    size: int


class Toc(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A packed shard's table of contents: its members in file order."""

    members: list[TocEntry]

    def get(self, name: str) -> TocEntry | None:
        for entry in self.members:
            if entry.name == name:
                return entry
        return None

    @property
    def end(self) -> int:
        """Where the last member ends: the file's size in the canonical layout."""
        last = self.members[-1] if self.members else None
        return last.offset + last.size if last else 0


def toc_length(prefix: bytes, where: str) -> int:
    """The table of contents' length from a shard's 16-byte prefix (S-9)."""
    if len(prefix) < spec.PACK_PREFIX or prefix[:8] != spec.PACK_MAGIC:
        raise errors.NotDetfmtError("not a packed detfmt shard (bad magic)", rule="PACK_MAGIC",
                                    path=where)
    version, length = struct.unpack("<II", prefix[8:16])
    if version != spec.PACK_VERSION:
        raise errors.UnsupportedVersionError(
            f"pack version {version} is not supported", found=str(version),
            supported=str(spec.PACK_VERSION), path=where)
    if length > spec.MAX_TOC_BYTES:
        raise errors.PackError(f"table of contents is {length} bytes, limit {spec.MAX_TOC_BYTES}",
                               path=where)
    return length


def parse_toc(data: bytes, file_size: int, where: str) -> list[TocEntry]:
    """Decode the table of contents (the JSON profile of SPEC §5.6; the value may be followed
    by ASCII spaces only, the padding of the canonical layout) and check the layout of S-10
    against the file size."""
    value = data.rstrip(b" ")
    raw = parse_json(value, path=where, limit=None, rule="PACK_LAYOUT", error=errors.PackError)
    if not value.endswith(b"}"):
        raise errors.PackError("only spaces may follow the table of contents' JSON", path=where)
    try:
        entries = msgspec.convert(raw, Toc).members
    except msgspec.ValidationError as error:
        raise errors.PackError(f"invalid table of contents: {error}", path=where) from error
    position = spec.align_up(spec.PACK_PREFIX + len(data))
    seen: set[str] = set()
    for entry in entries:
        name = entry.name
        if not name or "/" in name or "\\" in name or name in (".", "..") or name in seen:
            raise errors.PackError(f"bad or duplicate member name {name!r}", path=where)
        seen.add(name)
        if entry.offset != position or entry.size < 0:
            raise errors.PackError(f"member {name!r} at offset {entry.offset}, expected "
                                   f"{position}", path=where)
        position = spec.align_up(entry.offset + entry.size)
    if spec.HEADER_FILE not in seen:
        raise errors.PackError("packed shard has no header.json member", path=where)
    end = entries[-1].offset + entries[-1].size
    if end != file_size:
        raise errors.PackError(f"file is {file_size} bytes, members end at {end}", path=where)
    return entries

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
