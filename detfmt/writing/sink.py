"""Where a dataset's member files go: a directory (format 1.0) or one packed shard file.

The builder streams ``images.bin`` into ``sink.blob`` as samples arrive; at the end it tells the
sink every member's size (`plan`) and writes each member once (`member`, `close_member`). A
directory sink makes one file per member and fsyncs each; a shard sink places the members of one
file at the offsets of the canonical layout (images first, page aligned, right after a table of
contents reserved up front), writes the table of contents last and fsyncs the file once.
"""

from __future__ import annotations

import contextlib
import mmap
import os
from collections.abc import Mapping, Sequence
from typing import Protocol

import xxhash

from detfmt import fileio
from detfmt.format import pack, spec
from detfmt.format.schema import FileInfo

__all__ = ["DirectorySink", "ShardSink", "Sink"]


class Sink(Protocol):
    """Where the members go. ``blob`` receives images.bin as samples arrive; the rest follow
    `plan` (every member's size, header.json included), each written once."""

    blob: fileio.OutputFile
    scratch_dir: str  # where nameless scratch files may be made (same file system)

    def plan(self, sizes: Mapping[str, int]) -> None: ...

    def member(self, name: str) -> fileio.OutputFile: ...

    def close_member(self, output: fileio.OutputFile) -> FileInfo: ...

    def finish(self) -> None: ...

    def abandon(self) -> None: ...


class DirectorySink:
    """Members as files of ``directory`` (the writer's temporary directory). Every file is
    fsynced at `finish`, all at once (one journal commit rather than one per file), then the
    directory."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.scratch_dir = directory
        self.blob = fileio.OutputFile(os.path.join(directory, spec.BLOB_FILE))
        self._open: list[fileio.OutputFile] = [self.blob]
        self._written: list[fileio.OutputFile] = []

    def plan(self, sizes: Mapping[str, int]) -> None:
        """Files need no layout."""

    def member(self, name: str) -> fileio.OutputFile:
        output = fileio.OutputFile(os.path.join(self.directory, name))
        self._open.append(output)
        return output

    def close_member(self, output: fileio.OutputFile) -> FileInfo:
        output.finish()
        self._written.append(output)
        return FileInfo(size=output.size, xxh3_64=output.digest())

    def finish(self) -> None:
        """fsync every file (an error is never retried as if it succeeded), close them, then
        fsync the directory."""
        try:
            fileio.fsync_all([output.fd for output in self._written])
        finally:
            for output in self._written:
                output.close()
        fileio.fsync_dir(self.directory)

    def abandon(self) -> None:
        """Close what is open; the caller removes the directory."""
        for output in self._open:
            output.abandon()


class ShardSink:
    """Members inside one new file at ``path``, in the canonical packed layout.

    On `abandon` the file is removed, so it exists complete (after `finish`) or not at all,
    except after a SIGKILL: callers give a temporary name and rename it into place.
    """

    def __init__(self, path: str, names: Sequence[str]) -> None:
        self.path = path
        self.scratch_dir = os.path.dirname(os.path.abspath(path))
        self.reserve = pack.toc_reserve(names)
        self.fd = fileio.open_fd(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                              | getattr(os, "O_CLOEXEC", 0))
        self.blob = fileio.OutputFile(f"{path}#{spec.BLOB_FILE}", fd=self.fd,
                                   start=pack.PREFIX + self.reserve)
        self.toc: pack.Toc | None = None
        self._ends: dict[str, int] = {}
        self.size = 0
        self.digest = ""

    def plan(self, sizes: Mapping[str, int]) -> None:
        self.toc = pack.plan_layout(sizes, self.reserve)
        members = self.toc.members
        for member, following in zip(members, [*members[1:], None], strict=True):
            self._ends[member.name] = following.offset if following else member.offset + member.size
        if members[0].name != spec.BLOB_FILE or members[0].offset != pack.PREFIX + self.reserve:
            raise AssertionError("images.bin must be the first member, where it was streamed")

    def member(self, name: str) -> fileio.OutputFile:
        assert self.toc is not None, "plan() first"
        entry = self.toc.get(name)
        if entry is None:
            raise AssertionError(f"member {name} was not planned")
        return fileio.OutputFile(f"{self.path}#{name}", fd=self.fd, start=entry.offset)

    def close_member(self, output: fileio.OutputFile) -> FileInfo:
        """Flush one member and zero the gap to the next (S-10)."""
        output.finish()
        name = output.path.rsplit("#", 1)[1]
        assert self.toc is not None
        entry = self.toc.get(name)
        if entry is None or output.size != entry.size:
            raise AssertionError(f"member {name} has {output.size} bytes, planned "
                                 f"{entry.size if entry else None}")
        gap = self._ends[name] - output.position
        if gap:
            fileio.write_all(self.fd, bytes(gap), output.position)
        return FileInfo(size=output.size, xxh3_64=output.digest())

    def finish(self) -> None:
        """Write the table of contents, fsync the file once, and hash it (the manifest's
        ``xxh3_64``)."""
        assert self.toc is not None
        fileio.write_all(self.fd, pack.encode_head(self.toc, self.reserve), 0)
        fileio.fsync(self.fd)
        self.size = self.toc.end
        self.digest = _file_digest(self.fd, self.size)
        fd, self.fd = self.fd, -1
        fileio.close(fd)

    def abandon(self) -> None:
        self.blob.abandon()  # stops its hashing thread; the shared fd is closed here
        if self.fd >= 0:
            fd, self.fd = self.fd, -1
            with contextlib.suppress(OSError):
                os.close(fd)
        with contextlib.suppress(OSError):
            fileio.unlink(self.path)


def _file_digest(fd: int, size: int) -> str:
    if size == 0:
        return xxhash.xxh3_64(b"").hexdigest()
    with mmap.mmap(fd, size, access=mmap.ACCESS_READ) as mapped:
        with contextlib.suppress(AttributeError, OSError):
            mapped.madvise(mmap.MADV_SEQUENTIAL)
        return xxhash.xxh3_64(mapped).hexdigest()
