"""Every filesystem call the writer makes, in one place.

Keeping them here makes the durability order auditable (fsync files, fsync the temporary
directory, rename, fsync the parent) and lets tests fail the N-th call with ENOSPC, EIO or EROFS.
Module functions are looked up at call time, so monkeypatching ``detfmt._io.<name>`` reaches
every caller.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import os
import secrets
import shutil
import stat
from pathlib import Path

__all__ = [
    "OutputFile",
    "fsync_dir",
    "lock_target",
    "make_temp_dir",
    "publish_exchange",
    "publish_new",
    "remove_tree",
    "unlock",
]

TEMP_PREFIX = ".detfmt-tmp-"
LOCK_SUFFIX = ".detfmt-lock"

AT_FDCWD = -100
RENAME_NOREPLACE = 1
RENAME_EXCHANGE = 2


def open_fd(path: str, flags: int, mode: int = 0o644) -> int:
    return os.open(path, flags, mode)


def write_all(fd: int, data: memoryview | bytes) -> None:
    view = memoryview(data).cast("B")
    while view:
        written = os.write(fd, view)
        view = view[written:]


def fsync(fd: int) -> None:
    os.fsync(fd)


def close(fd: int) -> None:
    os.close(fd)


def mkdir(path: str) -> None:
    os.mkdir(path, 0o755)


def unlink(path: str) -> None:
    os.unlink(path)


def fsync_dir(path: str) -> None:
    """Make a directory's entries durable (its files' names, a rename into it)."""
    fd = open_fd(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fsync(fd)
    finally:
        close(fd)


class OutputFile:
    """A new file written sequentially, hashed (xxh3-64) as it is written.

    Small writes are coalesced into one buffer so that a stream of tiny samples does not cost
    two system calls each; large ones go straight to the file.
    """

    BUFFER = 1 << 20

    def __init__(self, path: str) -> None:
        self.path = path
        self.fd = open_fd(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW)
        self.size = 0
        import xxhash  # loads with the first file written (reading never imports it)

        self._hash = xxhash.xxh3_64()
        self._pending = bytearray()

    def write(self, data: memoryview | bytes) -> None:
        view = memoryview(data).cast("B")
        if not view.nbytes:
            return
        self._hash.update(view)
        self.size += view.nbytes
        if view.nbytes + len(self._pending) <= self.BUFFER:
            self._pending += view
            return
        self.flush()
        write_all(self.fd, view)

    def flush(self) -> None:
        if self._pending:
            write_all(self.fd, self._pending)
            self._pending = bytearray()

    def digest(self) -> str:
        return self._hash.hexdigest()

    def sync_and_close(self) -> None:
        """flush, fsync, close; an fsync error is never retried as if it succeeded."""
        try:
            self.flush()
            fsync(self.fd)
        finally:
            fd, self.fd = self.fd, -1
            close(fd)

    def abandon(self) -> None:
        if self.fd >= 0:
            fd, self.fd = self.fd, -1
            with contextlib.suppress(OSError):
                os.close(fd)


def make_temp_dir(target: Path) -> Path:
    """Create the private sibling directory a dataset is written into before it is published."""
    name = f"{TEMP_PREFIX}{target.name}-{os.getpid()}-{secrets.token_hex(4)}"
    path = target.parent / name
    mkdir(str(path))
    return path


def lock_path(target: Path) -> Path:
    return target.parent / f".{target.name}{LOCK_SUFFIX}"


def lock_target(target: Path) -> int:
    """Take the writer lock of ``target`` without blocking; returns the lock fd.

    Raises:
        BlockingIOError: another process holds it.
    """
    fd = open_fd(str(lock_path(target)), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BaseException:
        os.close(fd)
        raise
    return fd


def unlock(fd: int) -> None:
    try:
        fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


_libc = None


def _renameat2(source: str, target: str, flags: int) -> None:
    """Linux renameat2(2); raises OSError(ENOSYS) where the platform lacks it."""
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    function = getattr(_libc, "renameat2", None)
    if function is None:
        raise OSError(errno.ENOSYS, "renameat2 is not available")
    result = function(AT_FDCWD, os.fsencode(source), AT_FDCWD, os.fsencode(target), flags)
    if result != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), source, None, target)


def rename_noreplace(source: str, target: str) -> None:
    _renameat2(source, target, RENAME_NOREPLACE)


def rename_exchange(source: str, target: str) -> None:
    _renameat2(source, target, RENAME_EXCHANGE)


def rename(source: str, target: str) -> None:
    os.rename(source, target)


def publish_new(temp: Path, target: Path) -> None:
    """Move the finished temporary directory to a target that must not exist.

    Raises:
        FileExistsError: the target appeared (another writer won).
    """
    try:
        rename_noreplace(str(temp), str(target))
    except OSError as error:
        if error.errno in (errno.EEXIST, errno.ENOTEMPTY):
            raise FileExistsError(errno.EEXIST, "target exists", str(target)) from error
        if error.errno not in (errno.ENOSYS, errno.EINVAL):
            raise
        # No renameat2 (non-Linux, or a file system without it): the writer lock makes this safe
        # against other detfmt writers; os.rename still refuses a non-empty directory target.
        if os.path.lexists(target):
            raise FileExistsError(errno.EEXIST, "target exists", str(target)) from error
        rename(str(temp), str(target))
    fsync_dir(str(target.parent))


def publish_exchange(temp: Path, target: Path) -> bool:
    """Atomically swap the finished temporary directory with an existing target.

    After the swap, ``temp`` holds the old dataset (the caller removes it). Returns False when
    the platform has no atomic exchange; then the caller falls back to :func:`publish_replace`.
    """
    try:
        rename_exchange(str(temp), str(target))
    except OSError as error:
        if error.errno in (errno.ENOSYS, errno.EINVAL):
            return False
        raise
    fsync_dir(str(target.parent))
    return True


def publish_replace(temp: Path, target: Path, old: Path) -> None:
    """Non-atomic fallback: target -> old, temp -> target (a short window without the path)."""
    rename(str(target), str(old))
    try:
        rename(str(temp), str(target))
    except OSError:
        rename(str(old), str(target))  # put the old dataset back: `old` looks like a temporary
        raise
    fsync_dir(str(target.parent))


def remove_tree(path: Path) -> None:
    """Remove a directory tree written by detfmt (symlinks are removed, never followed)."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if stat.S_ISDIR(mode):
        shutil.rmtree(path)
    else:
        unlink(str(path))
