"""Every filesystem call the writer makes, in one place.

Keeping them here makes the durability order auditable (fsync files, fsync the temporary
directory, rename, fsync the parent), lets tests fail the N-th call with ENOSPC, EIO or EROFS,
and lets a benchmark count every byte written (all writes go through `write_all`). Module
functions are looked up at call time, so monkeypatching ``detfmt.fileio.<name>`` reaches every
caller.

Files and directories are created with modes 0666 and 0777, so the user's umask decides who else
may read them (a shared file system with umask 002 gets group-writable datasets).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import os
import secrets
import shutil
import socket
import stat
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

__all__ = [
    "OutputFile",
    "anonymous_file",
    "fsync_all",
    "fsync_dir",
    "lock_holder",
    "lock_target",
    "make_dirs",
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


FILE_MODE = 0o666  # the umask takes away what the user does not share
DIR_MODE = 0o777
Buffer = memoryview | bytes | bytearray


def open_fd(path: str, flags: int, mode: int = FILE_MODE) -> int:
    return os.open(path, flags, mode)


def write_all(fd: int, data: Buffer | Sequence[Buffer], offset: int | None = None) -> None:
    """Write every byte of ``data`` (one buffer, or several in one ``writev``), at the file
    position or, given ``offset``, at that offset (``pwrite``, the position unchanged)."""
    views = [memoryview(data).cast("B")] if not isinstance(data, (list, tuple)) else [
        memoryview(part).cast("B") for part in data]
    views = [view for view in views if view.nbytes]
    while views:
        if offset is not None:
            written = os.pwritev(fd, views, offset)
            offset += written
        elif len(views) == 1:
            written = os.write(fd, views[0])
        else:
            written = os.writev(fd, views)
        while views and written >= views[0].nbytes:
            written -= views[0].nbytes
            views.pop(0)
        if views and written:
            views[0] = views[0][written:]


def fsync(fd: int) -> None:
    os.fsync(fd)


SYNC_FILE_RANGE_WRITE = 2


def start_writeback(fd: int, offset: int, nbytes: int) -> None:
    """Ask the kernel to start writing a range to disk now (Linux ``sync_file_range`` with
    ``SYNC_FILE_RANGE_WRITE``; elsewhere nothing). It waits for nothing and guarantees nothing:
    the later fsync still does; it only lets the disk work while the writer keeps writing, so
    that fsync has less left to wait for."""
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    function = getattr(_libc, "sync_file_range", None)
    if function is not None:
        function(fd, ctypes.c_int64(offset), ctypes.c_int64(nbytes), SYNC_FILE_RANGE_WRITE)


def close(fd: int) -> None:
    os.close(fd)


def mkdir(path: str) -> None:
    os.mkdir(path, DIR_MODE)


def make_dirs(path: str) -> None:
    """``os.makedirs(path, exist_ok=True)``, durably: each directory it creates is fsynced into
    its parent, so a power loss after a later publish cannot take the new parents (and with
    them the published dataset) away."""
    missing = []
    while path and not os.path.isdir(path):  # "": the working directory, which exists
        missing.append(path)
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    for directory in reversed(missing):
        try:
            mkdir(directory)
        except FileExistsError:
            if not os.path.isdir(directory):
                raise
        fsync_dir(os.path.dirname(directory) or ".")


def unlink(path: str) -> None:
    os.unlink(path)


def fsync_all(fds: Sequence[int]) -> None:
    """fsync several files at once, each in its own thread: the file system then commits them
    together (ext4 groups concurrent fsyncs into one journal commit: several times faster than
    one after the other). Every file is tried; the first error is raised after all returned."""
    if len(fds) <= 1:
        for fd in fds:
            fsync(fd)
        return

    def attempt(fd: int) -> OSError | None:
        try:
            fsync(fd)
        except OSError as error:
            return error
        return None

    with ThreadPoolExecutor(max_workers=min(16, len(fds)), thread_name_prefix="detfmt-fsync"
                            ) as pool:
        failures = [error for error in pool.map(attempt, fds) if error is not None]
    if failures:
        raise failures[0]


def fsync_dir(path: str) -> None:
    """Make a directory's entries durable (its files' names, a rename into it)."""
    fd = open_fd(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fsync(fd)
    finally:
        close(fd)


def anonymous_file(directory: str) -> int:
    """A read-write file without a name in ``directory`` (scratch space that no crash can leave
    behind): ``O_TMPFILE`` where the file system has it, else a file unlinked at once."""
    flags = os.O_RDWR | getattr(os, "O_CLOEXEC", 0)
    tmpfile = getattr(os, "O_TMPFILE", 0)
    if tmpfile:
        try:
            return open_fd(directory, flags | tmpfile, 0o600)
        except OSError as error:
            if error.errno not in (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL, errno.ENOENT):
                raise
    path = os.path.join(directory, f"{TEMP_PREFIX}scratch-{os.getpid()}-{secrets.token_hex(4)}")
    fd = open_fd(path, flags | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        unlink(path)
    except BaseException:
        close(fd)
        raise
    return fd


class OutputFile:
    """A file written sequentially, hashed (xxh3-64) as it is written.

    Small writes are coalesced so that a stream of tiny samples does not cost a system call each;
    a large one is written from the caller's buffer (with what is pending, in one ``writev``),
    never copied. Given ``fd`` and ``start``, it writes into an open file from that offset.
    """

    BUFFER = 1 << 20
    WRITEBACK = 32 << 20  # start the disk on every this many bytes written (see start_writeback)
    DIRECT = 1 << 16  # writes at least this large skip the buffer

    def __init__(self, path: str, *, fd: int | None = None, start: int = 0) -> None:
        self.path = path
        self.fd = fd if fd is not None else open_fd(
            path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW)
        self.owns_fd = fd is None
        self.position = start
        self.size = 0
        import xxhash  # loads with the first file written (reading never imports it)

        self._hash = xxhash.xxh3_64()
        self._pending = bytearray()
        self._unsynced = start  # file offset from which no writeback was started yet

    def write(self, data: Buffer, padding: int = 0) -> None:
        """Append ``data`` and then ``padding`` zero bytes (< 64)."""
        view = memoryview(data).cast("B")
        self._hash.update(view)
        if padding:
            self._hash.update(_ZEROS[:padding])
        size = view.nbytes + padding
        self.size += size
        if view.nbytes < self.DIRECT:
            self._pending += view
            if padding:
                self._pending += _ZEROS[:padding]
            if len(self._pending) >= self.BUFFER:
                self.flush()
            return
        parts = [self._pending, view, _ZEROS[:padding]] if self._pending else [view,
                                                                            _ZEROS[:padding]]
        write_all(self.fd, parts, self._offset())
        self._advance(len(self._pending) + size)
        self._pending = bytearray()

    def _offset(self) -> int | None:
        return None if self.owns_fd else self.position

    def flush(self) -> None:
        if self._pending:
            write_all(self.fd, self._pending, self._offset())
            self._advance(len(self._pending))
            self._pending = bytearray()

    def _advance(self, nbytes: int) -> None:
        self.position += nbytes
        if self.position - self._unsynced >= self.WRITEBACK:
            start_writeback(self.fd, self._unsynced, self.position - self._unsynced)
            self._unsynced = self.position

    def finish(self) -> None:
        """Write what is pending (the file stays open)."""
        self.flush()

    def digest(self) -> str:
        return self._hash.hexdigest()

    def close(self) -> None:
        fd, self.fd = self.fd, -1
        if fd >= 0:
            close(fd)

    def abandon(self) -> None:
        if self.fd >= 0 and self.owns_fd:
            fd, self.fd = self.fd, -1
            with contextlib.suppress(OSError):
                os.close(fd)


_ZEROS = bytes(64)


def make_temp_dir(target: Path) -> Path:
    """Create the private sibling directory a dataset is written into before it is published."""
    name = f"{TEMP_PREFIX}{target.name}-{os.getpid()}-{secrets.token_hex(4)}"
    path = target.parent / name
    mkdir(str(path))
    return path


def lock_path(target: Path) -> Path:
    return target.parent / f".{target.name}{LOCK_SUFFIX}"


#: lock fds this process holds, with their lock file: a forked worker closes them
#: (`close_inherited_locks`), or it would keep the target locked after its parent died
HELD_LOCKS: dict[int, Path] = {}

_LOCK_TRIES = 64  # a lock file unlinked under us by its last holder: open the new one


def lock_target(target: Path) -> int:
    """Take the writer lock of ``target`` without blocking; returns the lock fd.

    The lock is ``flock`` on a sibling file, so the kernel releases it when its holder dies;
    the file then records the holder (``pid@host``) for the error another writer gets.
    `unlock` removes the file (a finished command leaves only its output): a process that
    locked a file just unlinked by its holder sees it is no longer at the path and retries.

    Raises:
        BlockingIOError: another process holds it.
    """
    path = lock_path(target)
    for _ in range(_LOCK_TRIES):
        fd = open_fd(str(path), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW
                     | getattr(os, "O_CLOEXEC", 0))
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if not _still_at(fd, path):  # its holder removed it after we opened it
                os.close(fd)
                continue
            HELD_LOCKS[fd] = path
            holder = f"{os.getpid()}@{socket.gethostname()}\n".encode()
            os.ftruncate(fd, 0)
            write_all(fd, holder, 0)
        except BaseException:
            HELD_LOCKS.pop(fd, None)
            with contextlib.suppress(OSError):
                os.close(fd)
            raise
        return fd
    raise BlockingIOError(errno.EAGAIN, f"{path} kept being replaced while locking it")


def _still_at(fd: int, path: Path) -> bool:
    """True when the locked file ``fd`` is the file at ``path`` (not one unlinked since)."""
    try:
        here = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (here.st_ino, here.st_dev) == (mine.st_ino, mine.st_dev)


def lock_holder(target: Path) -> tuple[int, str] | None:
    """(pid, host) recorded by the writer that holds or last held ``target``'s lock."""
    try:
        fd = os.open(lock_path(target), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        text = os.read(fd, 512).decode("utf-8", "replace").strip()
    except OSError:
        return None
    finally:
        os.close(fd)
    pid, _, host = text.partition("@")
    return (int(pid), host) if pid.isdigit() and host else None


def unlock(fd: int) -> None:
    """Release a lock of `lock_target`, removing its file first (while still holding it)."""
    path = HELD_LOCKS.pop(fd, None)
    try:
        if path is not None and _still_at(fd, path):
            with contextlib.suppress(OSError):  # a lock file left behind is only untidy
                os.unlink(path)
        fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def close_inherited_locks() -> None:
    """In a forked child: close (never unlock) the parent's lock fds, so the lock dies with
    the parent and not with the last of its children."""
    for fd in list(HELD_LOCKS):
        with contextlib.suppress(OSError):
            os.close(fd)
    HELD_LOCKS.clear()


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


def remove_members(directory: Path, names: Sequence[str]) -> bool:
    """Remove the named regular files of ``directory``, then the directory if that left it
    empty; never anything else (a file that appeared since stays). Returns whether the directory
    is gone."""
    for name in names:
        path = os.path.join(directory, name)
        try:
            if stat.S_ISREG(os.lstat(path).st_mode):
                unlink(path)
        except FileNotFoundError:
            continue
    try:
        os.rmdir(directory)
    except FileNotFoundError:
        return True
    except OSError as error:
        if error.errno in (errno.ENOTEMPTY, errno.EEXIST):
            return False
        raise
    return True


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
