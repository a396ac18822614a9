"""Remote sharded roots on loopback servers: moto's S3 and an HTTP range server.

Training reads go through the node-local shard cache (whole-shard GETs, verified, bounded,
prefetched along the known order); single-sample inspection uses range reads.
"""

from __future__ import annotations

import numpy as np
import pytest
from shardkit import make_samples, write_partitioned

import detfmt
from detfmt.errors import ShardChecksumError

fsspec = pytest.importorskip("fsspec")
pytest.importorskip("aiohttp")

from detfmt.shard.remote import upload  # noqa: E402

SIZES = [12, 9, 14, 0, 11, 10]
WINDOW = 2


@pytest.fixture(scope="module")
def local_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("remote") / "ds"
    write_partitioned(root, [make_samples(80 + k, n) for k, n in enumerate(SIZES)], codec="zstd")
    return root


@pytest.fixture(scope="module")
def s3(local_root):
    pytest.importorskip("s3fs")
    pytest.importorskip("moto")
    from scaleout_servers import moto_s3

    mp = pytest.MonkeyPatch()
    mp.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with moto_s3() as endpoint:
        opts = {"key": "k", "secret": "s", "client_kwargs": {"endpoint_url": endpoint}}
        fs = fsspec.filesystem("s3", **opts)
        fs.call_s3("create_bucket", Bucket="bkt")
        upload(local_root, "s3://bkt/ds", storage_options=opts)
        yield "s3://bkt/ds", opts, fs
    mp.undo()


def read_plan(ds, **kw):
    plan = ds.plan(seed=5, epoch=1, batch_size=4, shard_window=WINDOW, **kw)
    return [(b.indices.tolist(), b.images.copy(), b.boxes.copy()) for b in ds.iter_batches(plan)]


def assert_same_batches(got, want):
    assert len(got) == len(want) > 0
    for (i1, im1, b1), (i2, im2, b2) in zip(got, want, strict=True):
        assert i1 == i2
        np.testing.assert_array_equal(im1, im2)
        np.testing.assert_array_equal(b1, b2)


@pytest.mark.slow
def test_s3_epoch_with_cache_smaller_than_two_windows(tmp_path, local_root, s3):
    url, opts, _ = s3
    local = detfmt.open(local_root)
    biggest = max(s.bytes for s in local.shards)
    limit = int(1.5 * biggest)  # less than 2 x window shards: must overshoot, never deadlock
    ds = detfmt.open(url, storage_options=opts, cache_dir=tmp_path / "cache", cache_limit=limit)
    assert isinstance(ds, detfmt.ShardedDataset) and len(ds) == len(local)
    assert_same_batches(read_plan(ds), read_plan(local))
    stats = ds._cache.stats
    assert stats["downloads"] >= 5 and stats["evictions"] > 0
    assert ds._cache.cached_bytes() <= limit + (WINDOW + 2) * biggest
    np.testing.assert_array_equal(ds[17].image, local[17].image)
    ds.close()


@pytest.mark.slow
def test_s3_second_reader_uses_the_node_cache(tmp_path, local_root, s3):
    url, opts, _ = s3
    a = detfmt.open(url, storage_options=opts, cache_dir=tmp_path / "c")
    read_plan(a)
    b = detfmt.open(url, storage_options=opts, cache_dir=tmp_path / "c")
    read_plan(b)
    assert a._cache.stats["downloads"] == 5 and b._cache.stats["downloads"] == 0


@pytest.mark.slow
def test_s3_corrupt_shard_is_refused(tmp_path, local_root, s3):
    url, opts, fs = s3
    local = detfmt.open(local_root)
    bad = local.shards[1]
    data = bytearray((local_root / bad.path).read_bytes())
    data[-1] ^= 0xFF  # same size, different bytes
    fs.pipe_file(f"bkt/ds/{bad.path}", bytes(data))
    try:
        ds = detfmt.open(url, storage_options=opts, cache_dir=tmp_path / "c")
        with pytest.raises(ShardChecksumError):
            ds[local.shards[1].first_index]
        assert not list((tmp_path / "c").rglob("*.detfmt"))  # nothing unverified is cached
    finally:
        fs.put_file(str(local_root / bad.path), f"bkt/ds/{bad.path}")


def test_http_range_server(tmp_path, local_root):
    from scaleout_servers import http_range_server

    local = detfmt.open(local_root)
    with http_range_server(str(local_root)) as url:
        ds = detfmt.open(url, cache_dir=tmp_path / "cache", cache_limit=1)
        assert_same_batches(read_plan(ds), read_plan(local))
        np.testing.assert_array_equal(ds[20].image, local[20].image)
        ds.close()


def _read_all(args):
    url, cache_dir, limit = args
    ds = detfmt.open(url, cache_dir=cache_dir, cache_limit=limit)
    got = [
        (b.indices.tolist(), int(b.images.astype(np.int64).sum()))
        for b in ds.iter_batches(ds.plan(seed=5, epoch=1, batch_size=4, shard_window=WINDOW))
    ]
    ds.close()
    return got


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_two_processes_share_a_tiny_node_cache(tmp_path, local_root):
    """Two readers on one node, a cache of one shard: they evict each other's files, re-fetch,
    and both finish with the right data (no deadlock, no missing-file error)."""
    import multiprocessing as mp

    from scaleout_servers import http_range_server

    local = detfmt.open(local_root)
    want = [
        (b.indices.tolist(), int(b.images.astype(np.int64).sum()))
        for b in local.iter_batches(local.plan(seed=5, epoch=1, batch_size=4, shard_window=WINDOW))
    ]
    with http_range_server(str(local_root)) as url:
        args = (url, str(tmp_path / "cache"), 1)
        with mp.get_context("fork").Pool(2) as pool:
            results = pool.map(_read_all, [args, args])
    assert results == [want, want]


@pytest.mark.slow
def test_write_and_commit_straight_to_s3(tmp_path, local_root, s3):
    """write_partition/commit/gc with an s3:// root: shards are single PUTs, the manifest last."""
    from detfmt.shard.write import commit, gc, write_partition, write_shard

    _, opts, fs = s3
    url = "s3://bkt/direct"
    parts = [make_samples(80 + k, n) for k, n in enumerate(SIZES)]
    metas = [
        m
        for i, p in enumerate(parts)
        for m in write_partition(
            p, url, i, classes=["cat", "dog", "bird"], codec="zstd", storage_options=opts
        )
    ]
    assert not fs.exists("bkt/direct/manifest.json")  # nothing published before the commit
    orphan = write_shard(parts[0], url, "zz", classes=["cat", "dog", "bird"], storage_options=opts)
    commit(url, metas, write_id="0" * 32, storage_options=opts)
    # the same partitioning written locally: byte-identical manifest (so identical shards)
    local = tmp_path / "local"
    commit(
        local,
        [
            m
            for i, p in enumerate(parts)
            for m in write_partition(p, local, i, classes=["cat", "dog", "bird"], codec="zstd")
        ],
        write_id="0" * 32,
    )
    assert fs.cat_file("bkt/direct/manifest.json") == (local / "manifest.json").read_bytes()
    ds = detfmt.open(url, storage_options=opts, cache_dir=tmp_path / "c")
    np.testing.assert_array_equal(ds[30].image, detfmt.open(local_root)[30].image)
    assert gc(url, grace_seconds=0, storage_options=opts) == [f"{url}/{orphan.path}"]
    assert not fs.exists(f"bkt/direct/{orphan.path}")
    assert len(detfmt.open(url, storage_options=opts, cache_dir=tmp_path / "c")) == sum(SIZES)
