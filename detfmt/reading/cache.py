"""Node-local cache of whole shards fetched from remote storage (SPEC.md §19.7, S-21).

Training reads whole shards (one GET each) because object stores are limited by requests, not
bytes. The cache is:

- *content addressed*: a shard is stored as ``<xxh3_64>-<bytes>.detfmt``, so generations and
  appended roots that share a shard share its cached copy, and a name never means two contents;
- *verified*: a download is bounded by the manifest's size, hashed while it streams, and renamed
  into place only when size and XXH3-64 match; a cached file is used only after its own hash
  matches the entry, once per file version (device, inode, size, mtime): a stamp beside the file
  tells the node's other processes of this user that this version was checked;
- *private*: the default directory is per user (``$DETFMT_CACHE_DIR``, else
  ``$XDG_CACHE_HOME/detfmt/shards`` or ``~/.cache/detfmt/shards``), created 0700; a directory
  that another user owns or may write is refused (`CacheError`), never trusted;
- *never wedged*: one process per node downloads a shard under an ``flock`` the kernel drops
  when its holder dies, so a killed downloader leaves no stale lock, and the next holder
  removes its partial file; a full or read-only cache is a typed error, and the next call
  after space returns simply downloads again. Every wait is bounded by ``lock_timeout``
  (``CACHE_TIMEOUT``), and a process forked from one using the cache (a ``DataLoader`` worker)
  gets its own background threads: it never waits for a download its parent's threads were
  doing, which no thread of the child would ever finish.

The byte bound is LRU (by access time) and never evicts the shards the known order needs next,
nor a shard another process of the node is opening: a reader *pins* a shard with a shared
``flock`` on the cached file from its fetch until it holds the file itself (a mapping and a
descriptor: ``fetch(..., pin=True)``, then `unpin`; `close` or the process's death release it
too), and an evictor unlinks a file only under an exclusive, non-blocking ``flock`` on it, so
eviction is coordinated across processes, not only within this one's protected set. A shard
evicted after that stays readable by those who hold it (POSIX keeps the inode, and its disk
space, until the last of them closes it). When pinned and protected shards alone exceed the
bound the cache overshoots instead of waiting (no deadlock).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import stat
import tempfile
import threading
import time
import weakref
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor, wait

from detfmt.errors import (
    CacheError,
    DetfmtError,
    ShardChecksumError,
    TargetLockedError,
    UsageError,
    WriteError,
)
from detfmt.format.manifest import ShardInfo
from detfmt.storage import Digest, LocalStorage, Storage, copy_digest, file_digest

__all__ = ["ShardCache", "default_cache_dir"]

_ENTRY = re.compile(r"[0-9a-f]{16}-[0-9]{1,20}\.detfmt\Z")
_NO_SPACE = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
_READ_ONLY = (errno.EROFS, errno.EACCES, errno.EPERM)

# (device, inode, size, mtime_ns) of cached files this process has hashed and found intact
_verified: dict[str, tuple[int, int, int, int]] = {}
_verified_lock = threading.Lock()
# every open cache of this process, so that a forked child can give each its own threads
_caches: weakref.WeakSet[ShardCache] = weakref.WeakSet()


def _restart_in_child() -> None:
    """A forked child has none of its parent's threads: locks a parent thread (a prefetch)
    held at the fork would never be released, and downloads those threads had started or
    queued would never finish. The child gets fresh locks and pools and forgets them."""
    global _verified_lock
    _verified_lock = threading.Lock()
    for cache in list(_caches):
        cache._restart_after_fork()


os.register_at_fork(after_in_child=_restart_in_child)


def default_cache_dir() -> str:
    """The per-user cache directory (see the module docstring)."""
    explicit = os.environ.get("DETFMT_CACHE_DIR")
    if explicit:
        return explicit
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    if os.path.isabs(base) and (os.access(base, os.W_OK) or not os.path.exists(base)):
        return os.path.join(base, "detfmt", "shards")
    return os.path.join(tempfile.gettempdir(), f"detfmt-cache-{os.getuid()}")


def _private_dir(path: str) -> str:
    """Create ``path`` (0700) or check it: a directory this user owns that no one else may
    write. Anything else is refused: its files could be swapped under a reader."""
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        info = os.stat(path)
    except OSError as error:
        raise CacheError(f"cannot create the shard cache directory: {error.strerror}",
                         path=path, errno=error.errno) from error
    if not stat.S_ISDIR(info.st_mode):
        raise CacheError("the shard cache path is not a directory", path=path)
    if info.st_uid != os.getuid():
        raise CacheError(
            f"the shard cache directory belongs to uid {info.st_uid}, not to this user "
            f"({os.getuid()}): pass a private cache_dir", path=path)
    if info.st_mode & 0o022:
        raise CacheError(
            f"the shard cache directory is writable by other users (mode "
            f"{stat.S_IMODE(info.st_mode):o}): its files could be replaced; use a private "
            "directory (chmod go-w)", path=path)
    return path


class ShardCache:
    """Whole-shard downloads of one remote root into a private node-local directory.

    Args:
        storage: the remote root (`detfmt.storage.open_storage`).
        cache_dir: the cache directory (default `default_cache_dir`); it must be private.
        cache_limit: byte bound of the cache (None: unbounded).
        lock_timeout: seconds to wait for another process's download of the same shard.
        retries: further attempts after a failed or corrupted download.
        prefetch_workers: background download threads.
    """

    def __init__(
        self,
        storage: Storage,
        cache_dir: str | os.PathLike[str] | None = None,
        *,
        cache_limit: int | None = None,
        lock_timeout: float = 600.0,
        retries: int = 2,
        prefetch_workers: int = 2,
    ) -> None:
        if cache_limit is not None and cache_limit < 0:
            raise UsageError(f"cache_limit must be >= 0, got {cache_limit}")
        self.storage = storage
        self.dir = _private_dir(os.fspath(cache_dir) if cache_dir is not None
                                else default_cache_dir())
        self._local = LocalStorage(self.dir)
        self.cache_limit = cache_limit
        self.lock_timeout = lock_timeout
        self.retries = retries
        self._protected: set[str] = set()
        self._workers = prefetch_workers
        self._mutex = threading.Lock()
        self._pool = ThreadPoolExecutor(prefetch_workers, thread_name_prefix="detfmt-prefetch")
        self._pending: dict[str, Future[str]] = {}
        self._pins: dict[str, list[int]] = {}  # path -> [fd holding LOCK_SH, users]
        self.stats = {"downloads": 0, "hits": 0, "bytes": 0, "evictions": 0, "verified": 0}
        _caches.add(self)

    def _restart_after_fork(self) -> None:
        """In a forked child (see `_restart_in_child`): a fresh mutex and prefetch pool, and
        no pending downloads (the parent's, if it still runs them, finish under the shard's
        ``flock``, which a fetch here waits for)."""
        self._mutex = threading.Lock()
        self._pool = ThreadPoolExecutor(self._workers, thread_name_prefix="detfmt-prefetch")
        self._pending = {}

    # ------------------------------------------------------------------ naming

    def local_path(self, shard: ShardInfo) -> str:
        """Where the verified copy of ``shard`` lives: named by its content."""
        return os.path.join(self.dir, f"{shard.xxh3_64}-{shard.bytes}.detfmt")

    # ------------------------------------------------------------------ pinning

    def protect(self, shards: Iterable[ShardInfo]) -> None:
        """Set the shards the known order needs next; eviction never removes them."""
        with self._mutex:
            self._protected = {self.local_path(s) for s in shards}

    # ------------------------------------------------------------------ fetching

    def fetch(self, shard: ShardInfo, *, pin: bool = False) -> str:
        """The local path of a complete copy of ``shard`` whose size and hash match it.

        ``pin``: also pin it (no process of the node evicts it) until `unpin` (one `unpin` per
        pinned fetch) or `close`."""
        path = self.local_path(shard)
        fut = self._pending.get(path)
        # a prefetch may be downloading it; if that failed, the fetch below raises the error
        if fut is not None and not wait([fut], timeout=self.lock_timeout).done:
            raise WriteError(
                f"timed out waiting for the background download of {shard.path} "
                f"(waited {self.lock_timeout:.0f} s)", rule="CACHE_TIMEOUT", path=path)
        for _attempt in range(_PIN_ATTEMPTS):
            got = self._fetch(shard)
            if not pin or self._pin(got):
                return got
            # another process evicted it between the fetch and the pin: fetch it again
        raise WriteError(f"{shard.path} was evicted from the cache {_PIN_ATTEMPTS} times "
                         "before it could be pinned (cache_limit too small for the node's "
                         "readers?)", rule="CACHE_TIMEOUT", path=path)

    def unpin(self, shard: ShardInfo) -> None:
        """Release one pin of ``shard`` taken by ``fetch(..., pin=True)``."""
        path = self.local_path(shard)
        with self._mutex:
            held = self._pins.get(path)
            if held is None:
                return
            held[1] -= 1
            if held[1] > 0:
                return
            del self._pins[path]
        os.close(held[0])  # drops the shared lock

    def _pin(self, path: str) -> bool:
        """A shared ``flock`` on the cached file, kept in ``_pins``; False when the file was
        evicted (or replaced) since the fetch."""
        with self._mutex:
            held = self._pins.get(path)
            if held is not None:
                held[1] += 1
                return True
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except FileNotFoundError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)  # an evictor holds LOCK_EX only around its unlink
            if _same_file(fd, path):
                with self._mutex:
                    held = self._pins.get(path)
                    if held is None:
                        self._pins[path] = [fd, 1]
                        return True
                    held[1] += 1  # another thread pinned it meanwhile
        except OSError:
            pass
        os.close(fd)
        return path in self._pins

    def prefetch(self, shards: Iterable[ShardInfo]) -> None:
        """Start background downloads of ``shards`` (already cached or pending ones are skipped)."""
        for shard in shards:
            path = self.local_path(shard)
            with self._mutex:
                fut = self._pending.get(path)
                if fut is not None and not fut.done():
                    continue
                if os.path.exists(path):
                    continue
                self._pending = {p: f for p, f in self._pending.items() if not f.done()}
                self._pending[path] = self._pool.submit(self._fetch, shard)

    def _fetch(self, shard: ShardInfo) -> str:
        path = self.local_path(shard)
        if self._intact(shard, path):
            self.stats["hits"] += 1
            return path
        name = os.path.basename(path)
        try:
            with self._local.lock(name, timeout=self.lock_timeout):
                if self._intact(shard, path):  # another process finished meanwhile
                    self.stats["hits"] += 1
                    return path
                self._discard(path)  # absent, or damaged from outside
                self._discard(_stamp_path(path))
                self._discard(path + ".part")  # a dead downloader's partial file
                self._make_room(shard.bytes, keep=path)
                self._download(shard, path)
                return path
        except TargetLockedError as error:
            raise WriteError(
                f"timed out waiting for another process to download {shard.path}: {error}",
                rule="CACHE_TIMEOUT", path=path) from error
        except DetfmtError:
            raise
        except OSError as error:  # the lock file itself: a read-only or full cache
            raise _cache_error(error, path) from error

    def _intact(self, shard: ShardInfo, path: str) -> bool:
        """True when ``path`` is a regular file of the shard's size whose XXH3-64 matches."""
        try:
            info = os.stat(path, follow_symlinks=False)
        except FileNotFoundError:
            return False
        if not stat.S_ISREG(info.st_mode) or info.st_size != shard.bytes:
            return False
        identity = (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)
        with _verified_lock:
            known = _verified.get(path) == identity
        if not known and _stamp(path) != _identity_text(identity):
            try:
                if file_digest(path) != _expected(shard):
                    return False
            except FileNotFoundError:
                return False
            self.stats["verified"] += 1
            _remember(path, identity)
        elif not known:
            with _verified_lock:
                _verified[path] = identity
        with contextlib.suppress(OSError):  # LRU by access time; a read-only cache still hits
            os.utime(path, ns=(time.time_ns(), info.st_mtime_ns), follow_symlinks=False)
        return True

    def _discard(self, path: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)

    def _download(self, shard: ShardInfo, path: str) -> None:
        last: Exception | None = None
        for _attempt in range(self.retries + 1):
            try:
                self._download_once(shard, path)
                return
            except (ShardChecksumError, CacheError) as error:
                if isinstance(error, CacheError):
                    raise  # the local side: retrying cannot help
                last = error
            except Exception as error:  # OSError, or the transport's own (aiohttp, botocore...)
                last = error
            finally:
                self._discard(path + ".part")
        if isinstance(last, ShardChecksumError):
            raise last
        raise WriteError(f"cannot download {shard.path}: {last}", path=path) from last

    def _download_once(self, shard: ShardInfo, path: str) -> None:
        """One attempt: stream at most ``bytes + 1`` bytes into ``<path>.part`` while hashing,
        check size and XXH3-64, rename into place."""
        part = path + ".part"
        try:
            fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        except OSError as error:
            raise _cache_error(error, part) from error
        try:
            with self.storage.open_read(shard.path) as src:
                got = copy_digest(src, _LocalSink(fd, part), limit=shard.bytes)
        finally:
            os.close(fd)
        if got != _expected(shard):
            what = "more than" if got.size > shard.bytes else f"{got.size} bytes,"
            raise ShardChecksumError(
                f"downloaded {what} {shard.bytes} bytes with xxh3 {got.xxh3_64}; the manifest "
                f"says {shard.bytes} bytes, {shard.xxh3_64}",
                path=self.storage.where(shard.path),
                rule="SHARD_CHECKSUM" if got.size == shard.bytes else "SHARD_SIZE",
            )
        try:
            os.replace(part, path)
        except OSError as error:
            raise _cache_error(error, path) from error
        info = os.stat(path)
        _remember(path, (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns))
        self.stats["downloads"] += 1
        self.stats["bytes"] += got.size

    # ------------------------------------------------------------------ eviction

    def cached_bytes(self) -> int:
        return sum(size for _, size, _ in self._entries())

    def _entries(self) -> list[tuple[float, int, str]]:
        """(access time, size, path) of the cached shards (only the cache's own names)."""
        out = []
        with os.scandir(self.dir) as it:
            for e in it:
                if not _ENTRY.match(e.name):
                    continue
                with contextlib.suppress(FileNotFoundError):
                    st = e.stat(follow_symlinks=False)
                    if stat.S_ISREG(st.st_mode):
                        out.append((st.st_atime, st.st_size, e.path))
        return out

    def _make_room(self, incoming: int, keep: str) -> None:
        """Evict least recently used, unprotected shards until ``incoming`` bytes fit."""
        if self.cache_limit is None:
            return
        with self._mutex:
            pending = {p for p, f in self._pending.items() if not f.done()}
            protected = self._protected | {keep} | pending
        entries = sorted(self._entries())
        total = sum(size for _, size, _ in entries)
        for _, size, path in entries:
            if total + incoming <= self.cache_limit:
                break
            if path in protected or not self._evict(path):
                continue
            total -= size

    def _evict(self, path: str) -> bool:
        """Unlink a cached shard unless a process of the node pinned it (see the module doc)."""
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except FileNotFoundError:
            return True
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if not _same_file(fd, path):
                return False  # replaced by a new download meanwhile
            os.unlink(path)  # under the lock: no reader can pin it in between
        except OSError:  # BlockingIOError: a reader pinned it
            return False
        finally:
            os.close(fd)
        self.stats["evictions"] += 1
        self._discard(_stamp_path(path))
        return True

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
        with self._mutex:
            pins, self._pins = self._pins, {}
        for fd, _ in pins.values():
            with contextlib.suppress(OSError):
                os.close(fd)


class _LocalSink:
    """The cache file being written: local write errors become `CacheError` (a full or
    read-only cache), kept apart from transport errors (which are retried)."""

    def __init__(self, fd: int, path: str) -> None:
        self.fd = fd
        self.path = path

    def write(self, data: bytes) -> int:
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(self.fd, view):]
        except OSError as error:
            raise _cache_error(error, self.path) from error
        return len(data)


#: fetches of one shard that another process may evict before it is pinned, then an error
_PIN_ATTEMPTS = 16


def _same_file(fd: int, path: str) -> bool:
    """Whether ``path`` still names the file open as ``fd``."""
    try:
        held, now = os.fstat(fd), os.stat(path, follow_symlinks=False)
    except OSError:
        return False
    return (held.st_dev, held.st_ino) == (now.st_dev, now.st_ino)


def _identity_text(identity: tuple[int, int, int, int]) -> str:
    return " ".join(map(str, identity))


def _stamp_path(path: str) -> str:
    head, name = os.path.split(path)
    return os.path.join(head, f".{name}.verified")


def _stamp(path: str) -> str | None:
    """The file version another process of this user verified (see `_remember`), if any."""
    try:
        with open(_stamp_path(path), encoding="ascii") as f:
            return f.read(200)
    except (OSError, ValueError):
        return None


def _remember(path: str, identity: tuple[int, int, int, int]) -> None:
    """Record that this version of the file (device, inode, size, mtime) matched its hash: in
    this process, and in a stamp beside it so the node's other processes need not hash it
    again (the directory is private: only this user's processes can write either). Best
    effort: a read-only or full cache just hashes again next time."""
    with _verified_lock:
        _verified[path] = identity
    tmp = f"{_stamp_path(path)}.{os.getpid()}.{threading.get_ident()}"
    try:
        with open(tmp, "w", encoding="ascii") as f:
            f.write(_identity_text(identity))
        os.replace(tmp, _stamp_path(path))
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def _expected(shard: ShardInfo) -> Digest:
    return Digest(shard.bytes, shard.xxh3_64)


def _cache_error(error: OSError, path: str) -> CacheError:
    if error.errno in _NO_SPACE:
        why = "the cache is full"
    elif error.errno in _READ_ONLY:
        why = "the cache is not writable"
    else:
        why = "the cache cannot be written"
    return CacheError(f"{why} ({error.strerror or error})", path=path, errno=error.errno)
