"""Member sources: where the named members of one 1.0 dataset live.

A 1.0 dataset is a set of named members (``header.json``, ``images.bin``, ``index.npy``, ...).
They are the files of a directory (SPEC §4) or slices of one packed shard file (SPEC §19.4). The
reader sees only this interface, so every rule of SPEC §4 to §13 applies to both the same way, and
a packed shard is not a special kind of dataset.

Both sources map members read-only and check, before mapping, that each one is a regular file
(never a symbolic link, FIFO or device: R-11). The identity captured at open (device, inode,
size, mtime) lets a reader detect a replaced dataset (R-42), and a pread file descriptor opened
later is checked against it, so positional reads can never see other bytes than the mapping.
"""

from __future__ import annotations

import mmap
import os
import stat
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np

from detfmt import errors
from detfmt.format import spec
from detfmt.format.pack import parse_toc, toc_length

__all__ = [
    "DirectorySource",
    "Member",
    "MemberSource",
    "PackedSource",
]

_OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)

Identity = tuple[int, int, int, int]


def _identity(info: os.stat_result) -> Identity:
    return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)


class Member:
    """One member's bytes: a read-only view of its mapping, and where it lives on disk.

    ``file`` and ``base`` locate the bytes for positional reads (``io="pread"``): the member is
    ``file[base : base + size]``; ``identity`` is that file's identity at open.
    """

    __slots__ = ("base", "file", "identity", "name", "path", "size", "view")

    def __init__(self, name: str, path: str, view: memoryview | None, size: int, file: str,
                 base: int, identity: Identity) -> None:
        self.name = name
        self.path = path
        self.view = view
        self.size = size
        self.file = file
        self.base = base
        self.identity = identity

    def prefix(self, limit: int) -> bytes:
        """The first ``limit`` bytes (fewer if the member is shorter)."""
        return bytes(self.view[: min(limit, self.size)]) if self.view is not None else b""

    def slice(self, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of the member (the caller checked the bounds)."""
        return bytes(self.view[start:end]) if self.view is not None else b""

    def array(self, dtype: np.dtype, count: int, offset: int) -> np.ndarray:
        """``count`` items of ``dtype`` at byte ``offset``: a zero-copy read-only view."""
        if count == 0 or self.view is None:
            return np.zeros(0, dtype)
        return np.frombuffer(self.view, dtype=dtype, count=count, offset=offset)

    def open_pread(self) -> int:
        """A new read-only descriptor of the member's file, verified to be the very file mapped at
        open (same device, inode and size; `DatasetChangedError` otherwise), so positional reads
        and the mapping never see two versions. The caller closes it."""
        try:
            fd = os.open(self.file, _OPEN_FLAGS)
        except OSError as error:
            raise errors.DatasetChangedError(f"cannot reopen for reading ({error.strerror})",
                                             path=self.path) from error
        if _identity(os.fstat(fd))[:3] != self.identity[:3]:  # mtime: a cache may touch it
            os.close(fd)
            raise errors.DatasetChangedError("the file was replaced since the dataset was opened",
                                             path=self.path)
        return fd


class MemberSource(ABC):
    """The members of one 1.0 dataset. ``location`` names it in messages."""

    location: str

    @abstractmethod
    def read_header(self, limit: int) -> bytes:
        """The bytes of header.json (R-1 HEADER_MISSING, R-2 HEADER_TOO_LARGE, R-11)."""

    @abstractmethod
    def member(self, name: str) -> Member:
        """Open (map) one member (FILE_MISSING when absent, PATH_UNSAFE when not a plain file)."""

    @abstractmethod
    def check_names(self, expected: Iterable[str]) -> None:
        """Refuse members the header does not name, where the container forbids them (S-10)."""

    @property
    @abstractmethod
    def generation(self) -> tuple:
        """The identity of everything opened, as captured at open."""

    @abstractmethod
    def check_unchanged(self) -> None:
        """Raise `DatasetChangedError` if anything was replaced or modified since open."""

    @abstractmethod
    def reopen_spec(self) -> tuple[Callable[..., MemberSource], tuple]:
        """(picklable opener, its arguments) giving a fresh source of the same location
        (pickling, worker processes)."""

    @abstractmethod
    def close(self) -> None:
        """Drop what this source holds open (views handed out keep their mappings alive)."""


class DirectorySource(MemberSource):
    """A dataset directory: each member is a file at its fixed name (SPEC §4)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.root = Path(path)
        self.location = str(self.root)
        try:
            self._dir_fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY
                                   | getattr(os, "O_CLOEXEC", 0))
        except FileNotFoundError as error:
            raise errors.DatasetNotFoundError("no such dataset directory", path=self.root
                                              ) from error
        except NotADirectoryError as error:
            raise errors.NotDetfmtError("a detfmt dataset is a directory", path=self.root
                                        ) from error
        except OSError as error:  # permission, a name too long, an I/O error
            raise errors.UnsafePathError(f"cannot open the dataset directory ({error.strerror})",
                                         path=self.root) from error
        self._identities: dict[str, Identity] = {}

    def _close_dir(self) -> None:
        if self._dir_fd >= 0:
            os.close(self._dir_fd)
            self._dir_fd = -1

    def _open_fd(self, name: str) -> int:
        if self._dir_fd < 0:
            raise errors.UsageError("the dataset was closed", path=self.root)
        return os.open(name, _OPEN_FLAGS, dir_fd=self._dir_fd)

    def read_header(self, limit: int) -> bytes:
        path = str(self.root / spec.HEADER_FILE)
        try:
            fd = self._open_fd(spec.HEADER_FILE)
        except FileNotFoundError as error:
            raise errors.DatasetNotFoundError(
                f"no {spec.HEADER_FILE}: not a detfmt dataset (or not finished writing)",
                path=path) from error
        except OSError as error:
            raise errors.UnsafePathError(f"cannot open header ({error.strerror})",
                                         path=path) from error
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise errors.UnsafePathError("header.json is not a regular file", path=path)
            if info.st_size > limit:
                raise errors.HeaderError(f"header is {info.st_size} bytes; the limit is {limit}",
                                         rule="HEADER_TOO_LARGE", path=path)
            data = os.read(fd, info.st_size + 1)
            if len(data) != info.st_size:
                raise errors.DatasetChangedError("header.json changed size while being read",
                                                 path=path)
            self._identities[spec.HEADER_FILE] = _identity(info)
            return data
        finally:
            os.close(fd)

    def member(self, name: str) -> Member:
        path = str(self.root / name)
        try:
            fd = self._open_fd(name)
        except FileNotFoundError as error:
            raise errors.LayoutError(f"missing member file {name}", rule="FILE_MISSING",
                                     path=path) from error
        except OSError as error:
            raise errors.UnsafePathError(
                f"cannot open {name} as a plain file ({error.strerror}); members must be regular "
                "files, not symlinks", path=path) from error
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise errors.UnsafePathError(f"{name} is not a regular file", path=path)
            identity = _identity(info)
            view = None
            if info.st_size:
                view = memoryview(mmap.mmap(fd, info.st_size, access=mmap.ACCESS_READ))
        finally:
            os.close(fd)
        self._identities[name] = identity
        return Member(name, path, view, info.st_size, path, 0, identity)

    @property
    def generation(self) -> tuple:
        return tuple(sorted(self._identities.items()))

    def check_unchanged(self) -> None:
        for name, identity in self._identities.items():
            path = self.root / name
            try:
                info = os.stat(path, follow_symlinks=False)
            except OSError as error:
                raise errors.DatasetChangedError(f"{name} disappeared", path=path) from error
            if _identity(info) != identity:
                raise errors.DatasetChangedError(f"{name} was replaced or modified since open",
                                                 path=path)

    def check_names(self, expected: Iterable[str]) -> None:
        """Nothing to check: readers never list a directory, other files are ignored (R-43)."""

    def replaced(self) -> bool:
        """Whether the path now names another directory than the one this source holds open:
        an overwrite exchanged it (and is removing the old files) while this source read."""
        if self._dir_fd < 0:
            return False
        try:
            held, current = os.fstat(self._dir_fd), os.stat(self.root)
        except OSError:
            return True
        return (held.st_dev, held.st_ino) != (current.st_dev, current.st_ino)

    def reopen_spec(self) -> tuple[Callable[..., MemberSource], tuple]:
        return DirectorySource, (str(self.root),)

    def close(self) -> None:
        self._close_dir()

    def __del__(self) -> None:
        if getattr(self, "_dir_fd", -1) >= 0:
            self._close_dir()


class PackedSource(MemberSource):
    """A packed shard file (SPEC §19.4): members are slices of one read-only mapping."""

    def __init__(self, path: str | os.PathLike[str], *, check_padding: bool = True) -> None:
        self.path = os.fspath(path)
        self.location = self.path
        where = self.path
        try:
            fd = os.open(where, _OPEN_FLAGS)
        except FileNotFoundError as error:
            raise errors.DatasetNotFoundError("no such shard file", path=where) from error
        except OSError as error:
            raise errors.UnsafePathError(f"cannot open shard ({error.strerror})",
                                         path=where) from error
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise errors.UnsafePathError("a shard must be a regular file", path=where)
            self.identity = _identity(info)
            length = toc_length(os.pread(fd, spec.PACK_PREFIX, 0), where)
            data = os.pread(fd, length, spec.PACK_PREFIX)
            if len(data) != length:
                raise errors.PackError("file ends inside the table of contents", path=where)
            self.entries = {e.name: e for e in parse_toc(data, info.st_size, where)}
            self._map = mmap.mmap(fd, info.st_size, access=mmap.ACCESS_READ)
        finally:
            os.close(fd)
        self._view = memoryview(self._map)
        if check_padding:
            position = spec.PACK_PREFIX + length
            for entry in self.entries.values():
                if any(self._view[position : entry.offset]):
                    raise errors.PackError(f"nonzero padding before member {entry.name!r}",
                                           path=where)
                position = entry.offset + entry.size

    def _slice(self, name: str) -> memoryview | None:
        entry = self.entries.get(name)
        return None if entry is None else self._view[entry.offset : entry.offset + entry.size]

    @property
    def file_view(self) -> memoryview:
        """The whole shard file, read-only (verification hashes it in one pass with its
        members)."""
        return self._view

    def read_header(self, limit: int) -> bytes:
        view = self._slice(spec.HEADER_FILE)
        where = f"{self.path}#{spec.HEADER_FILE}"
        if view is None:  # parse_toc requires it; kept for a clear error
            raise errors.DatasetNotFoundError("shard has no header.json", path=where)
        if len(view) > limit:
            raise errors.HeaderError(f"header is {len(view)} bytes; the limit is {limit}",
                                     rule="HEADER_TOO_LARGE", path=where)
        return bytes(view)

    def member(self, name: str) -> Member:
        entry = self.entries.get(name)
        where = f"{self.path}#{name}"
        if entry is None:
            raise errors.LayoutError(f"missing member {name}", rule="FILE_MISSING", path=where)
        view = self._view[entry.offset : entry.offset + entry.size] if entry.size else None
        return Member(name, where, view, entry.size, self.path, entry.offset, self.identity)

    def check_names(self, expected: Iterable[str]) -> None:
        extra = set(self.entries) - {spec.HEADER_FILE, *expected}
        if extra:
            raise errors.PackError(f"members not part of the dataset: {sorted(extra)}",
                                   path=self.path)

    @property
    def generation(self) -> tuple:
        return (self.path, self.identity)

    def check_unchanged(self) -> None:
        try:
            info = os.stat(self.path, follow_symlinks=False)
        except OSError as error:
            raise errors.DatasetChangedError("shard file disappeared", path=self.path) from error
        if _identity(info) != self.identity:
            raise errors.DatasetChangedError("shard file was replaced", path=self.path)

    def reopen_spec(self) -> tuple[Callable[..., MemberSource], tuple]:
        return _reopen_packed, (self.path,)

    def close(self) -> None:
        self._view = memoryview(b"")  # the mapping lives on in views handed out


def _reopen_packed(path: str) -> PackedSource:
    return PackedSource(path, check_padding=False)  # its bytes were checked where it was opened
