"""Where a dataset root lives: a local directory or any fsspec URL, behind one interface.

Library code never asks "is this a URL": it opens the root's `Storage` once and calls it. Paths
inside a root are relative POSIX paths (``"manifest.json"``, ``"shards/part-0.detfmt"``), checked
by the caller's rules (SPEC.md S-6) before they get here. ``file://`` URLs are local roots.

Writers publish through two primitives whose guarantee depends on the backend:

- `Storage.put_file` with ``exclusive=True`` stores a complete local file under a name only if
  nothing is there yet (shards are immutable once published);
- `Storage.swap` replaces a member only if it still has the generation the caller read
  (compare-and-swap; the manifest commit).

Both are atomic on a local file system (a lock file plus ``renameat2(RENAME_NOREPLACE)`` / a
checked rename) and on S3 (conditional PUTs: ``If-None-Match: *`` and ``If-Match: <ETag>``).
Other fsspec back ends check first and then write, which is not atomic against a concurrent
writer (`Storage.atomic_publish` says which).

Only ``open_storage`` of a URL imports fsspec (the ``scale`` extra); local roots need nothing.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import secrets
import shutil
import socket
import stat
import sys
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, BinaryIO, Protocol

from detfmt import errors, fileio
from detfmt.errors import DatasetNotFoundError, LayoutError, UnsafePathError
from detfmt.format.manifest import (
    MANIFEST_NAME,
    MAX_MANIFEST_BYTES,
    Manifest,
    check_manifest,
    decode_manifest,
    encode_manifest,
)

__all__ = [
    "ANY_GENERATION",
    "Digest",
    "FsspecStorage",
    "LocalStorage",
    "S3Storage",
    "Storage",
    "StoredEntry",
    "copy_digest",
    "file_digest",
    "is_remote",
    "open_storage",
    "temp_name",
]

#: ``swap(..., expected=ANY_GENERATION)`` replaces whatever is there (no compare).
ANY_GENERATION = "*"
#: Temporaries the library creates inside a root start with this (see `temp_name`).
TEMP_PREFIX = ".tmp-"
_CHUNK = 8 << 20
_LOCK_POLL = 0.02


@dataclass(frozen=True)
class StoredEntry:
    """One entry of a listing: its path relative to the root, size, mtime (s) and kind.

    ``is_file`` means a regular file (never a link); ``is_dir`` a directory (never a link)."""

    rel: str
    size: int
    mtime: float
    is_file: bool
    is_dir: bool = False


@dataclass(frozen=True)
class Digest:
    """Size and XXH3-64 (seed 0, lowercase hex) of a whole file or stream."""

    size: int
    xxh3_64: str


class SupportsWrite(Protocol):
    """Where `copy_digest` copies to: anything with ``write(bytes)``."""

    def write(self, data: bytes, /) -> object: ...


def copy_digest(src: BinaryIO, dst: SupportsWrite | None = None, *,
                limit: int | None = None) -> Digest:
    """Hash ``src`` to its end (copying it to ``dst`` when given): the one whole-file digest loop.

    With ``limit``, at most ``limit + 1`` bytes are read, so a stream longer than the caller
    expects is detected (``size > limit``) without reading it all."""
    import xxhash  # loads when something is hashed (reading a dataset hashes nothing)

    digest = xxhash.xxh3_64()
    size = 0
    while True:
        want = _CHUNK if limit is None else min(_CHUNK, limit + 1 - size)
        if want <= 0:
            break
        chunk = src.read(want)
        if not chunk:
            break
        digest.update(chunk)
        size += len(chunk)
        if dst is not None:
            dst.write(chunk)
    return Digest(size, digest.hexdigest())


def _open_regular(path: str | os.PathLike[str]) -> int:
    """A read-only descriptor of a regular file, without following a final symlink; a FIFO or
    device is refused (``IsADirectoryError``) without blocking: O_NONBLOCK, then fstat."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    if not stat.S_ISREG(os.fstat(fd).st_mode):  # a FIFO or device would block or lie
        os.close(fd)
        raise IsADirectoryError(errno.EISDIR, "not a regular file", os.fspath(path))
    return fd


def file_digest(path: str | os.PathLike[str], *, limit: int | None = None) -> Digest:
    """`copy_digest` of a local regular file (opened without following a final symlink)."""
    with os.fdopen(_open_regular(path), "rb", buffering=0) as f:
        return copy_digest(f, limit=limit)


def temp_name(base: str) -> str:
    """A fresh temporary name for ``base`` (``.tmp-<base>-<12 hex>``): `gc` recognises it."""
    return f"{TEMP_PREFIX}{base}-{secrets.token_hex(6)}"


def _content_generation(data: bytes | None) -> str | None:
    import xxhash

    return None if data is None else f"xxh3:{xxhash.xxh3_64_hexdigest(data)}"


def _conflict(where: str, expected: str | None, found: str | None) -> errors.CommitConflictError:
    def say(g: str | None) -> str:
        return "no manifest" if g is None else f"generation {g}"

    return errors.CommitConflictError(
        f"another commit won: expected {say(expected)}, found {say(found)}; nothing was "
        "published by this commit (re-read the root and commit again)",
        path=where,
    )


class Storage(ABC):
    """A dataset root. ``url`` is the root as given (for messages)."""

    url: str

    @property
    @abstractmethod
    def is_local(self) -> bool:
        """True when members can be memory-mapped in place (`local_path` is not None)."""

    @property
    def atomic_publish(self) -> bool:
        """True when `swap` and exclusive `put_file` are atomic against concurrent writers."""
        return True

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

    def digest(self, rel: str, *, limit: int | None = None) -> Digest:
        """Size and XXH3-64 of the member, streamed (`copy_digest`)."""
        with self.open_read(rel) as f:
            return copy_digest(f, limit=limit)

    @abstractmethod
    def list_dir(self, rel: str) -> list[StoredEntry]:
        """The entries directly under directory ``rel`` ([] when it does not exist).

        A local ``rel`` that is (or goes through) a symbolic link raises `UnsafePathError`:
        listings never leave the root."""

    def makedirs(self, rel: str) -> None:  # noqa: B027 - object stores have no directories
        """Create directory ``rel`` (and its parents) where the backend has directories."""

    def staging_dir(self, rel: str) -> str:
        """A local directory in which to build the complete file for member ``rel`` before
        `put_file` (``move=True``): on the member's own file system for local roots."""
        import tempfile

        return tempfile.gettempdir()

    @abstractmethod
    def put_file(self, local: str, rel: str, *, exclusive: bool = False,
                 move: bool = False) -> bool:
        """Store the complete local file ``local`` as member ``rel``, whole or not at all.

        Never writes into an existing member in place. With ``exclusive``, nothing is stored
        when ``rel`` exists (returns False). ``move`` lets a local backend take the file
        itself (it must be in `staging_dir`); otherwise ``local`` is left as it was."""

    @abstractmethod
    def put_bytes(self, data: bytes, rel: str, *, durable: bool = True) -> None:
        """Store ``data`` as member ``rel`` (complete or not at all)."""

    def refresh(self, rel: str, data: bytes) -> None:
        """Mark member ``rel`` as just written (a lease heartbeat): its mtime becomes now."""
        self.put_bytes(data, rel, durable=False)

    @abstractmethod
    def read_generation(self, rel: str, limit: int) -> tuple[bytes | None, str | None]:
        """The member's bytes (at most ``limit + 1``) and an opaque generation token that
        `swap` compares; ``(None, None)`` when it does not exist."""

    @abstractmethod
    def swap(self, rel: str, data: bytes, expected: str | None) -> str:
        """Replace member ``rel`` by ``data`` only if its generation is still ``expected``
        (None: it must not exist; `ANY_GENERATION`: no check). Returns the new generation.

        Raises `CommitConflictError` when another writer changed it first."""

    @abstractmethod
    def delete(self, rel: str) -> None:
        """Remove member ``rel`` (a file or an object; never follows a link)."""

    def delete_tree(self, rel: str) -> None:
        """Remove directory ``rel`` and what it holds (never following links)."""
        self.delete(rel)

    @contextlib.contextmanager
    def lock(self, rel: str, timeout: float = 60.0) -> Iterator[None]:
        """Exclusive among processes of this backend for ``rel`` (a no-op where the backend
        has no locks: there, `swap` itself decides)."""
        yield


def _join(root: str, rel: str) -> str:
    return os.path.join(root, *rel.split("/")) if rel else root


_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0)


class LocalStorage(Storage):
    """A directory on a local or shared file system.

    Members are reached without following symbolic links below the root; publication uses
    temporary files in the member's own directory, fsync, rename, and fsync of the directory."""

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
        fd = _open_regular(self.where(rel))
        try:
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
        return os.fdopen(_open_regular(self.where(rel)), "rb")

    # -------------------------------------------------------------- directories, no links

    @contextlib.contextmanager
    def _dir_fd(self, rel: str) -> Iterator[int]:
        """An fd of directory ``rel``, reached from the root without following any link."""
        fd = os.open(self.root, _DIR_FLAGS)
        try:
            for part in [p for p in rel.split("/") if p]:
                try:
                    child = os.open(part, _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=fd)
                except OSError as error:
                    if error.errno in (errno.ELOOP, errno.ENOTDIR) and stat.S_ISLNK(
                            os.stat(part, dir_fd=fd, follow_symlinks=False).st_mode):
                        raise errors.UnsafePathError(
                            f"{part!r} is a symbolic link; it is never followed",
                            path=self.where(rel)) from error
                    raise
                os.close(fd)
                fd = child
            yield fd
        finally:
            os.close(fd)

    def list_dir(self, rel: str) -> list[StoredEntry]:
        try:
            with self._dir_fd(rel) as fd:
                entries = list(os.scandir(fd))
                out = []
                for entry in entries:
                    try:
                        info = os.stat(entry.name, dir_fd=fd, follow_symlinks=False)
                    except FileNotFoundError:
                        continue
                    name = f"{rel}/{entry.name}" if rel else entry.name
                    out.append(StoredEntry(name, info.st_size, info.st_mtime,
                                           stat.S_ISREG(info.st_mode), stat.S_ISDIR(info.st_mode)))
                return out
        except (FileNotFoundError, NotADirectoryError):
            return []

    def makedirs(self, rel: str) -> None:
        fileio.make_dirs(self.where(rel))  # mode 0o777 & ~umask, fsynced into its parent

    def staging_dir(self, rel: str) -> str:
        parent = rel.rpartition("/")[0]
        self.makedirs(parent)
        return self.where(parent)

    # -------------------------------------------------------------- publication

    def _fsync_file(self, path: str) -> None:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def put_file(self, local: str, rel: str, *, exclusive: bool = False,
                 move: bool = False) -> bool:
        name = rel.rpartition("/")[2]
        directory = self.staging_dir(rel)
        final = self.where(rel)
        own_copy = not (move and os.path.dirname(os.path.abspath(local))
                        == os.path.abspath(directory))
        tmp = os.path.join(directory, temp_name(name)) if own_copy else local
        try:
            if own_copy:
                with open(local, "rb") as src, _create(tmp) as dst:
                    shutil.copyfileobj(src, dst, _CHUNK)
            self._fsync_file(tmp)
            if exclusive:
                if not _rename_exclusive(tmp, final):
                    return False  # a moved file stays where it was: the caller decides
            else:
                os.replace(tmp, final)
        finally:
            if own_copy:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp)
        fileio.fsync_dir(directory)
        return True

    def put_bytes(self, data: bytes, rel: str, *, durable: bool = True) -> None:
        directory = self.staging_dir(rel)
        tmp = os.path.join(directory, temp_name(rel.rpartition("/")[2]))
        try:
            with _create(tmp) as f:
                f.write(data)
                f.flush()
                if durable:
                    os.fsync(f.fileno())
            os.replace(tmp, self.where(rel))
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        if durable:
            fileio.fsync_dir(directory)

    def refresh(self, rel: str, data: bytes) -> None:
        os.utime(self.where(rel), follow_symlinks=False)

    def read_generation(self, rel: str, limit: int) -> tuple[bytes | None, str | None]:
        try:
            data = self.read(rel, limit)
        except (FileNotFoundError, NotADirectoryError):
            return None, None
        except IsADirectoryError as error:  # a directory, FIFO, socket or device
            raise errors.UnsafePathError(f"{rel} is not a regular file",
                                         path=self.where(rel)) from error
        except OSError as error:
            raise errors.UnsafePathError(f"cannot read {rel} ({error.strerror})",
                                         path=self.where(rel)) from error
        return data, _content_generation(data)

    def swap(self, rel: str, data: bytes, expected: str | None) -> str:
        """Lock, compare the member's current content with ``expected``, then write a
        temporary (mode from the umask), fsync it, rename it over the member and fsync the
        directory. A failure after the rename says that the member *was* replaced."""
        name = rel.rpartition("/")[2]
        directory = self.staging_dir(rel)
        with self.lock(rel):
            if expected != ANY_GENERATION:
                found = self.read_generation(rel, 64 << 20)[1]
                if found != expected:
                    raise _conflict(self.where(rel), expected, found)
            tmp = os.path.join(directory, f".{name}.{secrets.token_hex(6)}.tmp")
            try:
                with _create(tmp) as f:
                    f.write(data)
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, self.where(rel))
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
            try:
                fileio.fsync_dir(directory)
            except OSError as error:  # after the switch: say so, never report it as not done
                raise errors.WriteError(
                    f"{name} was published (readers see the new one), but fsync of its "
                    f"directory failed ({error.strerror}): it may not survive a power loss",
                    path=self.where(rel), errno=error.errno) from error
        return _content_generation(data)  # type: ignore[return-value]

    def delete(self, rel: str) -> None:
        parent, _, name = rel.rpartition("/")
        with self._dir_fd(parent) as fd:
            os.unlink(name, dir_fd=fd)

    def delete_tree(self, rel: str) -> None:
        parent, _, name = rel.rpartition("/")
        with self._dir_fd(parent) as fd:
            info = os.stat(name, dir_fd=fd, follow_symlinks=False)
            if not stat.S_ISDIR(info.st_mode):
                os.unlink(name, dir_fd=fd)
            elif sys.version_info >= (3, 11):
                shutil.rmtree(name, dir_fd=fd)  # fd-based: never follows a link inside
            else:  # pragma: no cover - 3.10: rmtree's own fd walk refuses a symlinked top
                shutil.rmtree(self.where(rel))

    @contextlib.contextmanager
    def lock(self, rel: str, timeout: float = 60.0) -> Iterator[None]:
        """``flock`` on ``.<name>.lock`` beside the member, waiting up to ``timeout`` seconds.

        The kernel releases the lock when its holder dies, so a killed writer never leaves a
        stale lock; the file is unlinked by the holder (a waiter that locked the unlinked
        inode notices and retries). The holder's PID and host are named on a timeout."""
        parent, _, name = rel.rpartition("/")
        path = os.path.join(self.where(parent), f".{name}.lock")  # the directory must exist
        deadline = time.monotonic() + timeout
        while True:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 256, 0).decode("utf-8", "replace").strip()
                os.close(fd)
                if time.monotonic() > deadline:
                    raise errors.TargetLockedError(
                        f"{name} is locked by {holder or 'another process'} "
                        f"(waited {timeout:.0f} s)", path=self.where(rel)) from None
                time.sleep(_LOCK_POLL)
                continue
            except BaseException:
                os.close(fd)
                raise
            try:
                same = os.fstat(fd).st_ino == os.stat(path, follow_symlinks=False).st_ino
            except FileNotFoundError:
                same = False
            if not same:  # the previous holder unlinked it after we opened it
                os.close(fd)
                continue
            break
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}".encode(), 0)
            yield
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            os.close(fd)


def _create(path: str) -> BinaryIO:
    """A new file (never an existing one, never through a link) with the umask's mode."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    return os.fdopen(os.open(path, flags, 0o666), "wb")


def _rename_exclusive(tmp: str, final: str) -> bool:
    """Rename unless ``final`` exists (False then). renameat2(RENAME_NOREPLACE), else a hard
    link (also atomic and exclusive); only where neither exists, a checked rename."""
    try:
        fileio.rename_noreplace(tmp, final)
        return True
    except FileExistsError:
        return False
    except OSError as error:
        if error.errno == errno.EEXIST:
            return False
        if error.errno not in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP):
            raise
    try:
        os.link(tmp, final, follow_symlinks=False)
        os.unlink(tmp)
        return True
    except FileExistsError:
        return False
    except OSError as error:
        if error.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV):
            raise
    if os.path.lexists(final):  # pragma: no cover - file systems without links or renameat2
        return False
    os.rename(tmp, final)
    return True


class FsspecStorage(Storage):
    """Any fsspec file system (gs://, http://, memory://...).

    fsspec offers no portable conditional write: `swap` and exclusive `put_file` check first
    and then write, which a concurrent writer can slip between (``atomic_publish`` is False).
    S3 has its own class with conditional PUTs."""

    def __init__(self, url: str, storage_options: Mapping[str, Any] | None = None, *,
                 fs: Any = None, base: str | None = None) -> None:
        self.url = url.rstrip("/")
        if fs is None:
            import fsspec  # the scale extra: only remote roots need it

            fs, base = fsspec.core.url_to_fs(url, **dict(storage_options or {}))
        self.fs = fs
        self.base = (base or "").rstrip("/")

    @property
    def is_local(self) -> bool:
        return False

    @property
    def atomic_publish(self) -> bool:
        return False

    def _path(self, rel: str) -> str:
        return f"{self.base}/{rel}" if rel else self.base

    def where(self, rel: str) -> str:
        return f"{self.url}/{rel}" if rel else self.url

    def _current(self, rel: str) -> str:
        """The object's path, after dropping what the client cached about it (its details and
        its parents' listings): fsspec shares one client per set of options in the process, so
        a listing or open made earlier (``gc``, another reader) would otherwise describe an
        object another process has since replaced (s3fs then fails "ETag no longer exists")
        or added. One metadata request per read of a manifest or shard: small beside a GET."""
        path = self._path(rel)
        with contextlib.suppress(AttributeError):
            self.fs.invalidate_cache(path)
        return path

    def read(self, rel: str, limit: int) -> bytes:
        with self.fs.open(self._current(rel), "rb") as f:
            return f.read(limit + 1)

    def size(self, rel: str) -> int:
        return int(self.fs.info(self._current(rel))["size"])

    def open_read(self, rel: str) -> BinaryIO:
        return self.fs.open(self._current(rel), "rb", block_size=_CHUNK)

    def list_dir(self, rel: str) -> list[StoredEntry]:
        path = self._path(rel)
        with contextlib.suppress(AttributeError):
            self.fs.invalidate_cache(path)
        try:
            entries = self.fs.ls(path, detail=True)
        except FileNotFoundError:
            return []
        out = []
        for entry in entries:
            name = entry["name"].rstrip("/").rsplit("/", 1)[-1]
            if not name or entry["name"].rstrip("/") == path.rstrip("/"):
                continue
            is_dir = entry.get("type") == "directory"
            out.append(StoredEntry(f"{rel}/{name}" if rel else name, int(entry.get("size") or 0),
                                   self._mtime(entry), not is_dir, is_dir))
        return out

    def _mtime(self, entry: Mapping[str, Any]) -> float:
        for key in ("LastModified", "mtime", "updated", "last_modified"):
            value = entry.get(key)
            if value is None:
                continue
            if hasattr(value, "timestamp"):
                return float(value.timestamp())
            with contextlib.suppress(TypeError, ValueError):
                return float(value)
        try:
            return float(self.fs.modified(entry["name"]).timestamp())
        except (NotImplementedError, FileNotFoundError, OSError, AttributeError, TypeError):
            return float("nan")

    def put_file(self, local: str, rel: str, *, exclusive: bool = False,
                 move: bool = False) -> bool:
        if exclusive and self.exists(rel):
            return False
        self.fs.put_file(local, self._path(rel))
        return True

    def put_bytes(self, data: bytes, rel: str, *, durable: bool = True) -> None:
        self.fs.pipe_file(self._path(rel), data)

    def read_generation(self, rel: str, limit: int) -> tuple[bytes | None, str | None]:
        with contextlib.suppress(AttributeError):
            self.fs.invalidate_cache(self._path(rel))
        try:
            data = self.read(rel, limit)
        except (FileNotFoundError, NotADirectoryError):
            return None, None
        return data, _content_generation(data)

    def swap(self, rel: str, data: bytes, expected: str | None) -> str:
        if expected != ANY_GENERATION:
            found = self.read_generation(rel, 64 << 20)[1]
            if found != expected:
                raise _conflict(self.where(rel), expected, found)
        self.put_bytes(data, rel)
        return _content_generation(data)  # type: ignore[return-value]

    def delete(self, rel: str) -> None:
        self.fs.rm_file(self._path(rel))

    def delete_tree(self, rel: str) -> None:
        self.fs.rm(self._path(rel), recursive=True)


def _precondition_failed(error: BaseException) -> bool:
    """True for S3's answer to a failed If-Match / If-None-Match (412, or 409 when two
    conditional writes race)."""
    if isinstance(error, FileExistsError):
        return True
    cause = error.__cause__ or error.__context__
    response = getattr(cause, "response", None) or getattr(error, "response", None) or {}
    code = str(response.get("Error", {}).get("Code", ""))
    return code in ("PreconditionFailed", "412", "ConditionalRequestConflict", "409")


class S3Storage(FsspecStorage):
    """S3 (s3fs) with conditional PUTs: shards are created with ``If-None-Match: *`` and the
    manifest is replaced with ``If-Match: <ETag of the manifest read>`` (or created with
    ``If-None-Match: *``), so of two concurrent commits exactly one wins, by S3's own check."""

    @property
    def atomic_publish(self) -> bool:
        return True

    def put_file(self, local: str, rel: str, *, exclusive: bool = False,
                 move: bool = False) -> bool:
        try:
            self.fs.put_file(local, self._path(rel), mode="create" if exclusive else "overwrite")
        except OSError as error:
            if exclusive and _precondition_failed(error):
                return False
            raise
        return True

    def read_generation(self, rel: str, limit: int) -> tuple[bytes | None, str | None]:
        """Bytes and ETag of one version: s3fs reads the object with ``If-Match`` on the
        ETag it saw at open, so the two always belong together."""
        path = self._path(rel)
        self.fs.invalidate_cache(path)
        try:
            with self.fs.open(path, "rb") as f:
                data = f.read(limit + 1)
                etag = f.details.get("ETag")
        except FileNotFoundError:
            return None, None
        return data, etag

    def swap(self, rel: str, data: bytes, expected: str | None) -> str:
        path = self._path(rel)
        if expected == ANY_GENERATION:
            condition: dict[str, Any] = {}
        elif expected is None:
            condition = {"mode": "create"}
        else:
            condition = {"IfMatch": expected}
        try:
            out = self.fs.pipe_file(path, data, **condition)
        except (FileNotFoundError, OSError) as error:
            if expected != ANY_GENERATION and (
                    _precondition_failed(error) or isinstance(error, FileNotFoundError)):
                found = self.read_generation(rel, 64 << 20)[1]
                raise _conflict(self.where(rel), expected, found) from error
            raise
        self.fs.invalidate_cache(path)
        etag = (out or {}).get("ETag") if isinstance(out, dict) else None
        return etag or self.fs.info(path)["ETag"]


def is_remote(root: str | os.PathLike[str]) -> bool:
    """True for a URL other than ``file://`` (the only place the library looks at the scheme)."""
    text = os.fspath(root)
    return "://" in text and not text.startswith("file://")


def open_storage(root: str | os.PathLike[str],
                 storage_options: Mapping[str, Any] | None = None) -> Storage:
    """The `Storage` of a root given as a path or URL."""
    text = os.fspath(root)
    if not is_remote(text):
        return LocalStorage(text)
    import fsspec  # the scale extra: only remote roots need it

    fs, base = fsspec.core.url_to_fs(text, **dict(storage_options or {}))
    protocols = fs.protocol if isinstance(fs.protocol, (tuple, list)) else (fs.protocol,)
    if {"s3", "s3a"} & set(protocols) and hasattr(fs, "call_s3"):
        return S3Storage(text, fs=fs, base=base)
    return FsspecStorage(text, fs=fs, base=base)


# The manifest of a local sharded root on disk (SPEC §19.4): the root layout, walking to a
# shard without following links, reading and publishing manifest.json.


def shard_lstat(root: str, path: str) -> os.stat_result:
    """The ``lstat`` of a shard file, walking its path from the root without following a
    symbolic link in any component (SPEC §19.4 step 9): a missing component or one that is not
    a directory is FILE_MISSING; a link anywhere, or a final component that is not a regular
    file, is PATH_UNSAFE."""
    current = root
    parts = path.split("/")
    for k, part in enumerate(parts):
        current = os.path.join(current, part)
        try:
            info = os.lstat(current)
        except (FileNotFoundError, NotADirectoryError) as error:
            raise LayoutError("shard file listed by the manifest is missing", rule="FILE_MISSING",
                              path=current) from error
        except OSError as error:
            raise UnsafePathError(f"cannot stat shard ({error.strerror})", path=current) from error
        if stat.S_ISLNK(info.st_mode):
            raise UnsafePathError("a shard path must not pass through a symbolic link",
                                  path=current)
        if k < len(parts) - 1 and not stat.S_ISDIR(info.st_mode):
            raise LayoutError("shard file listed by the manifest is missing (a path component "
                              "is not a directory)", rule="FILE_MISSING", path=current)
    if not stat.S_ISREG(info.st_mode):
        raise UnsafePathError("a shard must be a regular file", path=current)
    return info


def read_manifest_bytes(root: str | os.PathLike[str]) -> bytes:
    """The bytes of ``<root>/manifest.json`` on local disk: a regular file, not a symbolic link
    (SPEC §19.4 step 2, as R-11), read up to one byte past its size limit."""
    path = os.path.join(os.fspath(root), MANIFEST_NAME)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError as error:
        raise DatasetNotFoundError("no manifest.json", path=path) from error
    except OSError as error:
        raise UnsafePathError(f"cannot open manifest.json ({error.strerror})", path=path) from error
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise UnsafePathError("manifest.json is not a regular file", path=path)
    with os.fdopen(fd, "rb") as f:
        return f.read(MAX_MANIFEST_BYTES + 1)


def read_manifest(root: str | os.PathLike[str]) -> Manifest:
    """Read ``<root>/manifest.json`` from local disk."""
    path = os.path.join(os.fspath(root), MANIFEST_NAME)
    return decode_manifest(read_manifest_bytes(root), path)


def publish_manifest(root: str | os.PathLike[str], m: Manifest) -> str:
    """Publish ``m`` at ``<root>/manifest.json`` unconditionally and atomically (S-15), whatever
    manifest is there; `detfmt.shard.write.commit` is the compare-and-swap writers use."""
    storage = LocalStorage(os.fspath(root))
    storage.swap(MANIFEST_NAME, encode_manifest(check_manifest(m)), ANY_GENERATION)
    return storage.where(MANIFEST_NAME)
