"""Read one packed shard (a whole 1.0 dataset in one file) zero-copy, with the 1.0 reader.

The core `Dataset` opens its member files through two hooks; here they return slices of a single
read-only mapping of the shard file, so every 1.0 check, ``ds[i]`` and ``ds.batch`` apply as is.
"""

from __future__ import annotations

import mmap
import os
import stat
from pathlib import Path

import numpy as np

from detfmt import errors, spec, validate
from detfmt.reader import Dataset
from detfmt.shard.errors import PackError
from detfmt.shard.pack import PREFIX, Toc, parse_toc, toc_length_prefix

__all__ = ["PackedDataset", "open_packed"]

_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


class _Bytes:
    """Slicing gives bytes (what the reader expects from a mapping) over a memoryview."""

    def __init__(self, view: memoryview) -> None:
        self.view = view

    def __getitem__(self, item: slice) -> bytes:
        return bytes(self.view[item])


class _PackedMember:
    """The `_Member` interface over one member's bytes inside the shard mapping."""

    def __init__(self, view: memoryview, name: str, path: str, identity: tuple) -> None:
        self.name = name
        self.path = f"{path}#{name}"
        self.size = len(view)
        self.identity = identity
        self._view = view
        self.map = _Bytes(view) if self.size else None

    def read_prefix(self, limit: int) -> bytes:
        return bytes(self._view[: min(limit, self.size)])

    def array(self, dtype: np.dtype, count: int, offset: int) -> np.ndarray:
        if count == 0 or not self.size:
            return np.zeros(0, dtype)
        return np.frombuffer(self._view, dtype=dtype, count=count, offset=offset)


class PackedDataset(Dataset):
    """A 1.0 dataset read from a packed shard file (docs/spec-sharding.md §4)."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        max_header_bytes: int = spec.MAX_HEADER_BYTES,
        check_padding: bool = True,
    ) -> None:
        self.path = Path(path)
        self._max_header_bytes = max_header_bytes
        where = str(self.path)
        try:
            fd = os.open(where, _FLAGS)
        except FileNotFoundError as error:
            raise errors.DatasetNotFoundError("no such shard file", path=where) from error
        except OSError as error:
            raise errors.UnsafePathError(
                f"cannot open shard ({error.strerror})", path=where
            ) from error
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise errors.UnsafePathError("a shard must be a regular file", path=where)
            self._file_identity = (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)
            head = os.pread(fd, PREFIX, 0)
            toc_len = toc_length_prefix(head, where)
            blob = os.pread(fd, toc_len, PREFIX)
            if len(blob) != toc_len:
                raise PackError("file ends inside the table of contents", path=where)
            self.toc: Toc = parse_toc(blob, info.st_size, where)
            self._mmap = mmap.mmap(fd, info.st_size, access=mmap.ACCESS_READ)
        finally:
            os.close(fd)
        self._view = memoryview(self._mmap)
        if check_padding:
            pos = PREFIX + toc_len
            for m in self.toc.members:
                if any(self._view[pos : m.offset]):
                    raise PackError(f"nonzero padding before member {m.name!r}", path=where)
                pos = m.offset + m.size
        self._open(-1, self.path)
        expected = {spec.HEADER_FILE, *validate.expected_files(self.header)}
        extra = {m.name for m in self.toc.members} - expected
        if extra:
            raise PackError(f"members not part of the dataset: {sorted(extra)}", path=where)

    def _slice(self, name: str) -> memoryview | None:
        m = self.toc.get(name)
        return None if m is None else self._view[m.offset : m.offset + m.size]

    def _read_header_bytes(self, directory_fd: int, root: Path) -> tuple[bytes, tuple]:
        view = self._slice(spec.HEADER_FILE)
        if view is None:  # parse_toc already requires it; kept for a clear error
            raise errors.DatasetNotFoundError("shard has no header.json", path=str(root))
        if len(view) > self._max_header_bytes:
            raise errors.HeaderError(
                f"header is {len(view)} bytes; the limit is {self._max_header_bytes}",
                rule="HEADER_TOO_LARGE",
                path=f"{root}#{spec.HEADER_FILE}",
            )
        return bytes(view), self._file_identity

    def _open_member(self, directory_fd: int, root: Path, name: str) -> _PackedMember:  # type: ignore[override]
        view = self._slice(name)
        if view is None:
            raise errors.LayoutError(
                f"missing member {name}", rule="FILE_MISSING", path=f"{root}#{name}"
            )
        return _PackedMember(view, name, str(root), self._file_identity)

    def check(self) -> None:
        """Raise `DatasetChangedError` if the shard file was replaced since opening."""
        try:
            info = os.stat(self.path, follow_symlinks=False)
        except OSError as error:
            raise errors.DatasetChangedError("shard file disappeared", path=self.path) from error
        if (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns) != self._file_identity:
            raise errors.DatasetChangedError("shard file was replaced", path=self.path)

    def __reduce__(self):
        return (_reopen_packed, (str(self.path), self._max_header_bytes, self._file_identity))

    def __repr__(self) -> str:
        return f"detfmt.shard.PackedDataset({str(self.path)!r}, samples={len(self)})"


def _reopen_packed(path: str, max_header_bytes: int, identity: tuple) -> PackedDataset:
    ds = PackedDataset(path, max_header_bytes=max_header_bytes, check_padding=False)
    if ds._file_identity != identity:
        raise errors.DatasetChangedError("the shard was replaced since it was pickled", path=path)
    return ds


def open_packed(path: str | os.PathLike[str]) -> PackedDataset:
    """Open a packed shard file as a 1.0 dataset (all 1.0 reader checks apply)."""
    return PackedDataset(path)
