"""Where a dataset root lives: a local directory or any fsspec URL, behind one interface.

Library code never asks "is this a URL": it opens the root's `Storage` once and calls it. Paths
inside a root are relative POSIX paths (``"manifest.json"``, ``"shards/part-0.detfmt"``), checked
by the caller's rules (SPEC.md S-6) before they get here. ``file://`` URLs are local roots.

Only ``open_storage`` of a URL imports fsspec (the ``scale`` extra); local roots need nothing.
"""

from __future__ import annotations

import os
import stat
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, BinaryIO

__all__ = ["FsspecStorage", "LocalStorage", "Storage", "StoredEntry", "file_digest", "fsync_dir",
           "is_remote", "open_storage"]


@dataclass(frozen=True)
class StoredEntry:
    """One entry of a listing: its path relative to the root, size, mtime (s) and kind."""

    rel: str
    size: int
    mtime: float
    is_file: bool


class Storage(ABC):
    """A dataset root. ``url`` is the root as given (for messages)."""

    url: str

    @property
    @abstractmethod
    def is_local(self) -> bool:
        """True when members can be memory-mapped in place (`local_path` is not None)."""

    @abstractmethod
    def where(self, rel: str) -> str:
        """The member's full path or URL, for messages."""

    def local_path(self, rel: str) -> str | None:
        """The member's path on this machine, or None for remote storage."""
        return None

    @abstractmethod
    def read(self, rel: str, limit: int) -> bytes:
        """The member's bytes, at most ``limit + 1`` of them (so a caller can tell an oversized
        member from one of exactly ``limit`` bytes). FileNotFoundError when it does not exist."""

    @abstractmethod
    def size(self, rel: str) -> int:
        """The member's size in bytes. FileNotFoundError when it does not exist."""

    def exists(self, rel: str) -> bool:
        try:
            self.size(rel)
        except (FileNotFoundError, NotADirectoryError):
            return False
        return True

    @abstractmethod
    def open_read(self, rel: str) -> BinaryIO:
        """A binary file object positioned at the member's start (streamed downloads)."""

    @abstractmethod
    def list_dir(self, rel: str) -> list[StoredEntry]:
        """The entries directly under directory ``rel`` ([] when it does not exist)."""

    @abstractmethod
    def put_file(self, local: str, rel: str) -> None:
        """Store the local file ``local`` as member ``rel`` (complete or not at all)."""

    @abstractmethod
    def put_bytes(self, data: bytes, rel: str) -> None:
        """Store ``data`` as member ``rel`` (complete or not at all)."""

    @abstractmethod
    def delete(self, rel: str) -> None:
        """Remove member ``rel`` (a file or an object; never follows a link)."""


def _join(root: str, rel: str) -> str:
    return os.path.join(root, *rel.split("/")) if rel else root


class LocalStorage(Storage):
    """A directory on a local or shared file system."""

    def __init__(self, root: str) -> None:
        self.url = root
        self.root = root[len("file://") :] if root.startswith("file://") else root

    @property
    def is_local(self) -> bool:
        return True

    def where(self, rel: str) -> str:
        return _join(self.root, rel)

    def local_path(self, rel: str) -> str:
        return _join(self.root, rel)

    def read(self, rel: str, limit: int) -> bytes:
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
        fd = os.open(self.where(rel), flags)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):  # a FIFO or device would block or lie
                raise IsADirectoryError(f"{self.where(rel)} is not a regular file")
            chunks, left = [], limit + 1
            while left > 0:
                chunk = os.read(fd, min(left, 1 << 20))
                if not chunk:
                    break
                chunks.append(chunk)
                left -= len(chunk)
            return b"".join(chunks)
        finally:
            os.close(fd)

    def size(self, rel: str) -> int:
        return os.stat(self.where(rel), follow_symlinks=False).st_size

    def exists(self, rel: str) -> bool:
        return os.path.lexists(self.where(rel))

    def open_read(self, rel: str) -> BinaryIO:
        return open(self.where(rel), "rb")

    def list_dir(self, rel: str) -> list[StoredEntry]:
        out = []
        try:
            entries = list(os.scandir(self.where(rel)))
        except (FileNotFoundError, NotADirectoryError):
            return []
        for entry in entries:
            try:
                info = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            name = f"{rel}/{entry.name}" if rel else entry.name
            out.append(StoredEntry(name, info.st_size, info.st_mtime, stat.S_ISREG(info.st_mode)))
        return out

    def put_file(self, local: str, rel: str) -> None:
        os.replace(local, self.where(rel))

    def put_bytes(self, data: bytes, rel: str) -> None:
        tmp = f"{self.where(rel)}.tmp.{os.getpid()}"
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.where(rel))

    def delete(self, rel: str) -> None:
        os.unlink(self.where(rel))


class FsspecStorage(Storage):
    """Any fsspec file system (s3://, gs://, http://, memory://...)."""

    def __init__(self, url: str, storage_options: Mapping[str, Any] | None = None) -> None:
        import fsspec  # the scale extra: only remote roots need it

        self.url = url.rstrip("/")
        self.fs, base = fsspec.core.url_to_fs(url, **dict(storage_options or {}))
        self.base = base.rstrip("/")

    @property
    def is_local(self) -> bool:
        return False

    def _path(self, rel: str) -> str:
        return f"{self.base}/{rel}" if rel else self.base

    def where(self, rel: str) -> str:
        return f"{self.url}/{rel}" if rel else self.url

    def read(self, rel: str, limit: int) -> bytes:
        with self.fs.open(self._path(rel), "rb") as f:
            return f.read(limit + 1)

    def size(self, rel: str) -> int:
        return int(self.fs.info(self._path(rel))["size"])

    def open_read(self, rel: str) -> BinaryIO:
        return self.fs.open(self._path(rel), "rb", block_size=8 << 20)

    def list_dir(self, rel: str) -> list[StoredEntry]:
        try:
            entries = self.fs.ls(self._path(rel), detail=True)
        except FileNotFoundError:
            return []
        out = []
        for entry in entries:
            name = entry["name"].rstrip("/").rsplit("/", 1)[-1]
            try:
                mtime = self.fs.modified(entry["name"]).timestamp()
            except (NotImplementedError, FileNotFoundError, OSError, AttributeError):
                mtime = float("nan")
            out.append(StoredEntry(f"{rel}/{name}" if rel else name, int(entry.get("size") or 0),
                                   mtime, entry.get("type") != "directory"))
        return out

    def put_file(self, local: str, rel: str) -> None:
        self.fs.put_file(local, self._path(rel))

    def put_bytes(self, data: bytes, rel: str) -> None:
        self.fs.pipe_file(self._path(rel), data)

    def delete(self, rel: str) -> None:
        self.fs.rm(self._path(rel))


def file_digest(source: bytes | memoryview | BinaryIO, chunk: int = 8 << 20) -> str:
    """xxh3-64 (hex, seed 0) of bytes or of a binary file read to its end (`detfmt._io`'s one
    digest loop; xxhash loads on first use)."""
    from detfmt import _io

    return _io.file_digest(source, chunk)


def fsync_dir(path: str) -> None:
    """Make a rename into ``path`` durable (`detfmt._io`'s one fsync of a directory)."""
    from detfmt import _io

    _io.fsync_dir(path)


def is_remote(root: str | os.PathLike[str]) -> bool:
    """True for a URL other than ``file://`` (the only place the library looks at the scheme)."""
    text = os.fspath(root)
    return "://" in text and not text.startswith("file://")


def open_storage(root: str | os.PathLike[str],
                 storage_options: Mapping[str, Any] | None = None) -> Storage:
    """The `Storage` of a root given as a path or URL."""
    text = os.fspath(root)
    if is_remote(text):
        return FsspecStorage(text, storage_options)
    return LocalStorage(text)
