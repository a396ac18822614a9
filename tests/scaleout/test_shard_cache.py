"""Node-local shard cache (S-21): complete verified files, one downloader, bounded LRU."""

from __future__ import annotations

import multiprocessing as mp
import os

import pytest
import xxhash

from detfmt.errors import ShardChecksumError
from detfmt.format.manifest import ShardInfo
from tests.forking import run_forked

fsspec = pytest.importorskip("fsspec")

from detfmt.reading.cache import ShardCache  # noqa: E402
from detfmt.storage import open_storage  # noqa: E402


def make_remote(tmp_path, n=6, size=1000):
    remote = tmp_path / "remote"
    (remote / "shards").mkdir(parents=True)
    shards = []
    for k in range(n):
        data = bytes([k]) * (size + k)
        rel = f"shards/part-{k:03d}.detfmt"
        (remote / rel).write_bytes(data)
        shards.append(
            ShardInfo(
                path=rel,
                key=f"{k:03d}",
                num_samples=1,
                first_index=k,
                bytes=len(data),
                xxh3_64=xxhash.xxh3_64_hexdigest(data),
                max_boxes=0,
            )
        )
    return str(remote), shards


def listing(directory):
    """The cache directory's entries, without the verification stamps."""
    return sorted(n for n in os.listdir(directory) if not n.endswith(".verified"))


def new_cache(tmp_path, remote, **kw):
    return ShardCache(open_storage(remote), tmp_path / "cache", **kw)


def test_fetch_once_then_hit(tmp_path):
    remote, shards = make_remote(tmp_path)
    cache = new_cache(tmp_path, remote)
    p = cache.fetch(shards[2])
    with open(p, "rb") as f:
        assert f.read() == bytes([2]) * 1002
    assert cache.fetch(shards[2]) == p
    assert cache.stats["downloads"] == 1 and cache.stats["hits"] == 1
    assert listing(cache.dir) == [os.path.basename(p)]  # no tmp or lock left
    cache.close()


def test_checksum_mismatch_leaves_nothing(tmp_path):
    remote, shards = make_remote(tmp_path)
    bad = ShardInfo(
        **{**{f: getattr(shards[0], f) for f in shards[0].__struct_fields__}, "xxh3_64": "0" * 16}
    )
    cache = new_cache(tmp_path, remote, retries=1)
    with pytest.raises(ShardChecksumError) as e:
        cache.fetch(bad)
    assert e.value.rule == "SHARD_CHECKSUM"
    assert listing(cache.dir) == []
    cache.close()


def test_lru_eviction_respects_limit_and_protection(tmp_path):
    remote, shards = make_remote(tmp_path, n=6)
    cache = new_cache(tmp_path, remote, cache_limit=3100)  # room for three shards
    for s in shards[:3]:
        cache.fetch(s)
        k = shards.index(s)
        os.utime(cache.local_path(s), (1 + k, 1 + k))  # deterministic recency (access time)
    cache.protect([shards[0]])
    cache.fetch(shards[3])  # evicts shards[1], the oldest unprotected one
    present = set(listing(cache.dir))
    assert os.path.basename(cache.local_path(shards[0])) in present
    assert os.path.basename(cache.local_path(shards[1])) not in present
    assert cache.cached_bytes() <= 3100
    assert cache.stats["evictions"] == 1
    cache.close()


def test_cache_smaller_than_window_does_not_deadlock(tmp_path):
    remote, shards = make_remote(tmp_path, n=6)
    cache = new_cache(tmp_path, remote, cache_limit=1500)  # less than two shards
    cache.protect(shards[:4])  # a shuffle window of four shards, all needed now
    cache.prefetch(shards[:4])
    paths = [cache.fetch(s) for s in shards[:4]]
    assert all(os.path.exists(p) for p in paths)  # overshoot instead of waiting forever
    cache.protect([])
    cache.fetch(shards[5])
    assert cache.cached_bytes() <= 1500 + shards[5].bytes
    cache.close()


def _fetch_in_a_fresh_process(tmp_path, remote, shard, out):
    import detfmt.reading.cache as cache_module

    cache_module._verified.clear()  # forget what the parent verified: only the stamp is left
    cache = new_cache(tmp_path, remote)
    cache.fetch(shard)
    out.put(dict(cache.stats))
    cache.close()


def test_a_verified_file_is_not_hashed_again_by_the_node_s_other_processes(tmp_path):
    remote, shards = make_remote(tmp_path)
    cache = new_cache(tmp_path, remote)
    path = cache.fetch(shards[2])
    ctx = mp.get_context("fork")
    out = ctx.Queue()
    for damaged in (False, True):
        if damaged:  # a new version of the file: the stamp no longer matches, it is hashed
            with open(path, "r+b") as f:
                f.write(b"\xff")
        proc = ctx.Process(target=_fetch_in_a_fresh_process, args=(tmp_path, remote, shards[2],
                                                                   out))
        proc.start()
        stats = out.get(timeout=60)
        proc.join(60)
        if damaged:
            assert stats["downloads"] == 1 and stats["verified"] == 0, stats
        else:
            assert stats["hits"] == 1 and stats["verified"] == 0, stats
    with open(path, "rb") as f:
        assert f.read() == bytes([2]) * 1002
    cache.close()


def _hold_lock_forever(cache_dir, name, ready):
    """A downloader that takes a shard's lock, leaves a partial file and hangs until killed."""
    from detfmt.storage import LocalStorage

    with LocalStorage(str(cache_dir)).lock(name):
        with open(os.path.join(cache_dir, name + ".part"), "wb") as f:
            f.write(b"partial")
        ready.set()
        while True:
            pass


def test_dead_downloader_leaves_no_wedge(tmp_path):
    """A downloader SIGKILLed while holding a shard's lock: the kernel drops its flock, the
    next fetch takes over at once, removes the partial file and downloads."""
    import signal

    remote, shards = make_remote(tmp_path)
    cache = new_cache(tmp_path, remote, lock_timeout=20)
    name = os.path.basename(cache.local_path(shards[1]))
    ctx = mp.get_context("fork")
    ready = ctx.Event()
    proc = ctx.Process(target=_hold_lock_forever, args=(cache.dir, name, ready))
    proc.start()
    assert ready.wait(20)
    os.kill(proc.pid, signal.SIGKILL)
    proc.join()
    with open(cache.fetch(shards[1]), "rb") as f:
        assert f.read() == bytes([1]) * 1001
    assert listing(cache.dir) == [name]  # no partial file, no lock left
    cache.close()


def test_a_leftover_lock_file_is_not_a_lock(tmp_path):
    """Earlier versions locked by creating a file: one left behind (empty, or naming a dead
    PID, e.g. after a full disk) must not block anything."""
    remote, shards = make_remote(tmp_path)
    cache = new_cache(tmp_path, remote, lock_timeout=2)
    for content in (b"", b"1"):
        with open(os.path.join(cache.dir, "." + os.path.basename(cache.local_path(shards[1]))
                               + ".lock"), "wb") as f:
            f.write(content)
        assert os.path.exists(cache.fetch(shards[1]))
    cache.close()


def _fetch_in_child(args):
    tmp_path, remote, shards = args
    cache = new_cache(tmp_path, remote)
    paths = [cache.fetch(s) for s in shards]
    cache.close()
    return cache.stats["downloads"], [os.path.getsize(p) == 0 for p in paths]


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_one_downloader_per_shard_per_node(tmp_path):
    remote, shards = make_remote(tmp_path, n=4, size=2_000_000)
    results = run_forked(_fetch_in_child, [(tmp_path, remote, shards)] * 4, timeout=90)
    assert sum(r[0] for r in results) == 4  # each shard downloaded exactly once on the node
    assert not any(any(r[1]) for r in results)


@pytest.mark.slow
def test_fetch_from_moto_s3(tmp_path, monkeypatch):
    s3fs = pytest.importorskip("s3fs")
    pytest.importorskip("moto")
    from scaleout_servers import moto_s3

    remote, shards = make_remote(tmp_path, n=3)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with moto_s3() as endpoint:
        fs = s3fs.S3FileSystem(key="k", secret="s", client_kwargs={"endpoint_url": endpoint})
        fs.call_s3("create_bucket", Bucket="bkt")
        fs.put(remote + "/shards", "bkt/ds/", recursive=True)
        opts = {"key": "k", "secret": "s", "client_kwargs": {"endpoint_url": endpoint}}
        cache = ShardCache(open_storage("s3://bkt/ds", opts), tmp_path / "cache")
        for s in shards:
            with open(cache.fetch(s), "rb") as f:
                assert xxhash.xxh3_64_hexdigest(f.read()) == s.xxh3_64
        assert cache.stats["downloads"] == 3
        cache.close()


def test_fetch_over_http_range_server(tmp_path):
    pytest.importorskip("aiohttp")
    from scaleout_servers import http_range_server

    remote, shards = make_remote(tmp_path, n=2, size=50_000)
    with http_range_server(remote) as url:
        fs = fsspec.filesystem("http")
        assert fs.cat_file(f"{url}/{shards[1].path}", start=10, end=20) == bytes([1]) * 10
        cache = ShardCache(open_storage(url), tmp_path / "cache")
        with open(cache.fetch(shards[1]), "rb") as f:
            assert xxhash.xxh3_64_hexdigest(f.read()) == shards[1].xxh3_64
        cache.close()


@pytest.mark.timeout(120)
def test_a_child_forked_while_the_parent_holds_the_verified_lock_still_fetches(tmp_path):
    """A fork while a parent thread is inside the verified-files lock (a prefetch checking a
    file): the child's own fetches must not wait on a lock no thread of it will release."""
    from detfmt.reading import cache as cache_module

    remote, shards = make_remote(tmp_path, n=2)
    with cache_module._verified_lock:  # held across the fork, as by a parent's prefetch
        results = run_forked(_fetch_in_child, [(tmp_path, remote, shards)], timeout=60)
    assert results[0][0] == len(shards) and not any(results[0][1])  # downloaded, not empty


class _GatedStorage:
    """A local remote whose downloads wait until ``gate`` (a process-shared event) is set."""

    def __init__(self, root, gate):
        from detfmt.storage import LocalStorage

        self._storage = LocalStorage(root)
        self.gate = gate

    def __getattr__(self, name):
        return getattr(self._storage, name)

    def open_read(self, rel):
        self.gate.wait(60)
        return self._storage.open_read(rel)


def _fetch_in_forked_child(cache, shards, out):
    try:
        cache.prefetch([shards[2]])  # on the child's own threads, not the parent's dead ones
        paths = [cache.fetch(s) for s in shards]
        contents = []
        for path in paths:
            with open(path, "rb") as f:
                contents.append(f.read())
        out.put(contents)
    except BaseException as error:  # the parent reports it
        out.put(repr(error))


@pytest.mark.timeout(120)
def test_a_child_forked_during_prefetches_fetches_by_itself(tmp_path):
    """A DataLoader-style worker forked while the parent's prefetch threads download: the
    child must not wait for those downloads (no thread of it runs them) nor queue its own
    prefetches on the parent's pool (it has none of its threads)."""
    import queue

    remote, shards = make_remote(tmp_path, n=3)
    ctx = mp.get_context("fork")
    gate = ctx.Event()
    cache = ShardCache(_GatedStorage(remote, gate), tmp_path / "cache")
    cache.prefetch(shards[:2])  # both parent threads now wait at the gate, holding the flocks
    out = ctx.Queue()
    child = ctx.Process(target=_fetch_in_forked_child, args=(cache, shards, out))
    child.start()
    try:
        gate.set()  # the parent's downloads finish; the child's fetches wait for them by flock
        try:
            got = out.get(timeout=30)
        except queue.Empty:
            pytest.fail("the forked child is still waiting for its fetches after 30 s")
    finally:
        child.kill()
        child.join(10)
        cache.close()
    assert got == [bytes([k]) * (1000 + k) for k in range(3)], got


def test_a_fetch_waits_for_a_stuck_prefetch_at_most_lock_timeout(tmp_path):
    """A prefetch whose download never ends (a stalled transport): a fetch of the same shard
    fails after ``lock_timeout`` with CACHE_TIMEOUT naming the shard, instead of waiting."""
    import threading
    import time

    from detfmt.errors import WriteError

    remote, shards = make_remote(tmp_path, n=1)
    gate = threading.Event()
    cache = ShardCache(_GatedStorage(remote, gate), tmp_path / "cache", lock_timeout=0.5)
    cache.prefetch(shards)
    outcome = []

    def fetch():
        start = time.monotonic()
        try:
            cache.fetch(shards[0])
            outcome.append("fetched")
        except WriteError as error:
            outcome.append((error, time.monotonic() - start))

    waiter = threading.Thread(target=fetch, daemon=True)
    waiter.start()
    waiter.join(20)
    gate.set()  # let the stuck download end, so that close() returns
    cache.close()
    assert not waiter.is_alive(), "fetch still waiting for the prefetch after 20 s"
    error, waited = outcome[0]
    assert error.rule == "CACHE_TIMEOUT" and shards[0].path in str(error) and waited < 10
