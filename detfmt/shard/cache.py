"""Node-local cache of whole shards fetched from remote storage (docs/spec-sharding.md §7).

Training reads whole shards (one GET each) because object stores are limited by requests, not
bytes. The cache holds complete, verified shards only (temp file, xxh3 check, rename: S-21); one
process per node downloads a given shard (an O_EXCL lockfile, not shared memory, so a killed
process leaves nothing that hangs the next run: stale locks are broken by pid); the byte bound is
LRU and never evicts the shards the known order needs next. When the protected shards alone exceed
the bound, the cache overshoots instead of waiting, so a small cache can never deadlock.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import xxhash

from detfmt.errors import ShardChecksumError, UsageError, WriteError
from detfmt.shard.manifest import ShardInfo

__all__ = ["ShardCache"]

_CHUNK = 8 << 20


class ShardCache:
    """Download shards of one published write into ``cache_dir/<write_id>/``.

    Args:
        fs: an fsspec filesystem; ``remote_root`` is the dataset root on it.
        cache_dir: node-local directory shared by all processes of the node.
        write_id: the manifest's write id, so a republished root never mixes shard generations.
        cache_limit: byte bound of the cache (None: unbounded).
        verify: check size and xxh3-64 of every download (S-21 requires it; keep True).
        lock_timeout: seconds to wait for another process's download before giving up.
    """

    def __init__(
        self,
        fs: Any,
        remote_root: str,
        cache_dir: str | os.PathLike[str],
        write_id: str,
        *,
        cache_limit: int | None = None,
        verify: bool = True,
        lock_timeout: float = 600.0,
        retries: int = 2,
        prefetch_workers: int = 2,
    ) -> None:
        if cache_limit is not None and cache_limit < 0:
            raise UsageError(f"cache_limit must be >= 0, got {cache_limit}")
        self.fs = fs
        self.remote_root = remote_root.rstrip("/")
        self.dir = os.path.join(os.fspath(cache_dir), write_id)
        os.makedirs(self.dir, exist_ok=True)
        self.cache_limit = cache_limit
        self.verify = verify
        self.lock_timeout = lock_timeout
        self.retries = retries
        self._protected: set[str] = set()
        self._mutex = threading.Lock()
        self._pool = ThreadPoolExecutor(prefetch_workers, thread_name_prefix="detfmt-prefetch")
        self._pending: dict[str, Future[str]] = {}
        self.stats = {"downloads": 0, "hits": 0, "bytes": 0, "evictions": 0, "waits": 0}

    # ------------------------------------------------------------------ naming

    def local_path(self, shard: ShardInfo) -> str:
        return os.path.join(self.dir, shard.path.replace("/", "__"))

    def remote_path(self, shard: ShardInfo) -> str:
        return f"{self.remote_root}/{shard.path}"

    # ------------------------------------------------------------------ pinning

    def protect(self, shards: Iterable[ShardInfo]) -> None:
        """Set the shards the known order needs next; eviction never removes them."""
        with self._mutex:
            self._protected = {self.local_path(s) for s in shards}

    # ------------------------------------------------------------------ fetching

    def fetch(self, shard: ShardInfo) -> str:
        """Return the local path of a complete, verified copy of ``shard`` (downloading it once)."""
        path = self.local_path(shard)
        fut = self._pending.get(path)
        if fut is not None and not fut.done():
            fut.result()  # a prefetch is downloading it: wait, then re-check (it may be evicted)
        return self._fetch(shard)

    def prefetch(self, shards: Iterable[ShardInfo]) -> None:
        """Start background downloads of ``shards`` (already cached or pending ones are skipped)."""
        for shard in shards:
            path = self.local_path(shard)
            with self._mutex:
                fut = self._pending.get(path)
                if fut is not None and not fut.done():
                    continue
                if _touch(path):
                    continue
                self._pending = {p: f for p, f in self._pending.items() if not f.done()}
                self._pending[path] = self._pool.submit(self._fetch, shard)

    def _fetch(self, shard: ShardInfo) -> str:
        path = self.local_path(shard)
        lock = path + ".lock"
        deadline = time.monotonic() + self.lock_timeout
        while True:
            if _touch(path):
                if _size(path) == shard.bytes:
                    self.stats["hits"] += 1
                    return path
                # only complete files are renamed in (S-21): a cached file of the wrong size
                # was damaged from outside (truncated, appended to); drop it and fetch again
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
                continue
            if _try_lock(lock):
                try:
                    if not os.path.exists(path):  # another process may have finished meanwhile
                        self._make_room(shard.bytes, keep=path)
                        self._download(shard, path)
                    return path
                finally:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(lock)
            _break_stale(lock)
            if time.monotonic() > deadline:
                raise WriteError(
                    f"timed out waiting for another process to download {shard.path}",
                    rule="CACHE_TIMEOUT",
                    path=path,
                )
            self.stats["waits"] += 1
            time.sleep(0.02)

    def _download(self, shard: ShardInfo, path: str) -> None:
        tmp = f"{path}.tmp.{os.getpid()}.{threading.get_ident()}"
        last: Exception | None = None
        for _attempt in range(self.retries + 1):
            try:
                self._download_once(shard, path, tmp)
                return
            except ShardChecksumError as error:
                last = error
            except Exception as error:  # OSError, or the transport's own (aiohttp, botocore...)
                last = error
            finally:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp)
        if isinstance(last, ShardChecksumError):
            raise last
        raise WriteError(f"cannot download {shard.path}: {last}", path=path) from last

    def _download_once(self, shard: ShardInfo, path: str, tmp: str) -> None:
        """One attempt: stream into ``tmp``, hash, check size and xxh3, rename into place."""
        digest = xxhash.xxh3_64()
        size = 0
        with (
            self.fs.open(self.remote_path(shard), "rb", block_size=_CHUNK) as src,
            open(tmp, "wb") as dst,
        ):
            while chunk := src.read(_CHUNK):
                digest.update(chunk)
                size += len(chunk)
                dst.write(chunk)
        if self.verify and (size != shard.bytes or digest.hexdigest() != shard.xxh3_64):
            raise ShardChecksumError(
                f"downloaded {size} bytes with xxh3 {digest.hexdigest()}, manifest says "
                f"{shard.bytes} bytes, {shard.xxh3_64}",
                path=self.remote_path(shard),
            )
        os.replace(tmp, path)
        self.stats["downloads"] += 1
        self.stats["bytes"] += size

    # ------------------------------------------------------------------ eviction

    def cached_bytes(self) -> int:
        return sum(size for _, size, _ in self._entries())

    def _entries(self) -> list[tuple[float, int, str]]:
        out = []
        with os.scandir(self.dir) as it:
            for e in it:
                if e.name.endswith((".lock",)) or ".tmp." in e.name:
                    continue
                with contextlib.suppress(FileNotFoundError):
                    st = e.stat(follow_symlinks=False)
                    out.append((st.st_mtime, st.st_size, e.path))
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
            if path in protected:
                continue
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)  # readers that mapped it keep their mapping (POSIX)
                self.stats["evictions"] += 1
            total -= size

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


def _touch(path: str) -> bool:
    """Mark a cached shard as just used (LRU is by mtime); False if it is not cached."""
    try:
        os.utime(path)
        return True
    except FileNotFoundError:
        return False


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return -1


def _try_lock(lock: str) -> bool:
    try:
        fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return False
    try:
        os.write(fd, str(os.getpid()).encode())
    finally:
        os.close(fd)
    return True


def _break_stale(lock: str) -> None:
    """Remove a lock whose owner process is gone (killed runs must not hang the next one)."""
    try:
        with open(lock, "rb") as f:
            pid = int(f.read() or b"0")
    except (FileNotFoundError, ValueError):
        return
    if pid <= 0:
        return
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(lock)
    except PermissionError:
        pass
