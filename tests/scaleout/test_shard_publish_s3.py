"""Publication on S3 (moto on loopback): the manifest commit is a conditional PUT (If-Match on
the ETag read, If-None-Match for a new root), shards are created with If-None-Match and never
overwritten, gc refuses a prefix that is not a sharded root and keeps a live write's shards,
and append grows a remote root."""

from __future__ import annotations

import pytest
from shardkit import CLASSES, make_samples

import detfmt
from detfmt.errors import CommitConflictError, NotDetfmtError, TargetExistsError
from detfmt.shard.append import append
from detfmt.shard.remote import upload
from detfmt.shard.write import commit, end_write, gc, generation, write_shard
from detfmt.storage import S3Storage, open_storage

fsspec = pytest.importorskip("fsspec")
pytest.importorskip("s3fs")
pytest.importorskip("moto")

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def s3():
    from scaleout_servers import moto_s3

    mp = pytest.MonkeyPatch()
    mp.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with moto_s3() as endpoint:
        opts = {"key": "k", "secret": "s", "client_kwargs": {"endpoint_url": endpoint}}
        fs = fsspec.filesystem("s3", **opts)
        fs.call_s3("create_bucket", Bucket="bkt")
        yield opts, fs
    mp.undo()


def _shard(url, opts, key, seed, n=3):
    return write_shard(make_samples(seed, n), url, key, classes=CLASSES, storage_options=opts)


def test_s3_storage_uses_conditional_puts(s3, tmp_path):
    opts, fs = s3
    storage = open_storage("s3://bkt/prims", opts)
    assert isinstance(storage, S3Storage) and storage.atomic_publish
    local = tmp_path / "f"
    local.write_bytes(b"one")
    assert storage.put_file(str(local), "x", exclusive=True)
    local.write_bytes(b"two")
    assert not storage.put_file(str(local), "x", exclusive=True)
    assert fs.cat_file("bkt/prims/x") == b"one"
    first = storage.swap("m", b"v1", None)
    with pytest.raises(CommitConflictError):
        storage.swap("m", b"v1-again", None)  # create-only: it exists
    second = storage.swap("m", b"v2", first)
    with pytest.raises(CommitConflictError):
        storage.swap("m", b"v3", first)  # stale ETag
    assert storage.read_generation("m", 100) == (b"v2", second)


def test_two_commits_from_one_generation_one_conflicts(s3, tmp_path):
    opts, _ = s3
    url = "s3://bkt/cas"
    commit(url, [_shard(url, opts, "base", 1)], storage_options=opts)
    base = generation(url, storage_options=opts)
    a = [_shard(url, opts, "a", 2)]
    b = [_shard(url, opts, "b", 3)]
    end_write(url, storage_options=opts)
    commit(url, a, base=base, storage_options=opts)
    with pytest.raises(CommitConflictError):
        commit(url, b, base=base, storage_options=opts)
    ds = detfmt.open(url, storage_options=opts, cache_dir=tmp_path / "c")
    assert [s.key for s in ds.shards] == ["a"]
    ds.close()


def test_two_new_roots_at_one_prefix_one_conflicts(s3):
    opts, _ = s3
    url = "s3://bkt/fresh"
    a = [_shard(url, opts, "a", 4)]
    end_write(url, storage_options=opts)
    b = [_shard(url, opts, "b", 5)]
    end_write(url, storage_options=opts)
    commit(url, a, base=None, storage_options=opts)
    with pytest.raises(CommitConflictError):
        commit(url, b, base=None, storage_options=opts)


def test_published_shards_are_never_overwritten_on_s3(s3, tmp_path):
    opts, fs = s3
    url = "s3://bkt/immutable"
    meta = _shard(url, opts, "k", 6)
    commit(url, [meta], storage_options=opts)
    etag = fs.info(f"bkt/immutable/{meta.path}")["ETag"]
    assert _shard(url, opts, "k", 6) == meta  # a retry: the same bytes, accepted
    with pytest.raises(TargetExistsError) as caught:
        _shard(url, opts, "k", 7)
    assert caught.value.rule == "SHARD_PUBLISHED"
    fs.invalidate_cache()
    assert fs.info(f"bkt/immutable/{meta.path}")["ETag"] == etag
    # upload of another root with the same shard name: refused, the object unchanged
    other = tmp_path / "other"
    commit(other, [write_shard(make_samples(8, 3), other, "k", classes=CLASSES)])
    end_write(other)
    with pytest.raises(TargetExistsError):
        upload(other, url, storage_options=opts)
    fs.invalidate_cache()
    assert fs.info(f"bkt/immutable/{meta.path}")["ETag"] == etag


def test_gc_on_s3_is_confined(s3):
    opts, fs = s3
    fs.pipe_file("bkt/foreign/shards/part-x.detfmt", b"DETFMTPK" + bytes(8))
    fs.pipe_file("bkt/foreign/shards/.tmp-x-0123456789ab", b"x")
    with pytest.raises(NotDetfmtError):
        gc("s3://bkt/foreign", grace_seconds=0, storage_options=opts)
    assert sorted(fs.ls("bkt/foreign/shards")) == ["bkt/foreign/shards/.tmp-x-0123456789ab",
                                                   "bkt/foreign/shards/part-x.detfmt"]
    url = "s3://bkt/inflight"
    commit(url, [_shard(url, opts, "done", 9)], storage_options=opts)
    pending = _shard(url, opts, "pending", 10)  # this process's write, not committed yet
    assert gc(url, grace_seconds=0, storage_options=opts) == []
    assert fs.exists(f"bkt/inflight/{pending.path}")
    end_write(url, storage_options=opts)
    assert gc(url, grace_seconds=0, storage_options=opts) == [f"{url}/{pending.path}"]


def test_append_to_an_s3_root(s3, tmp_path):
    opts, _ = s3
    url = "s3://bkt/grow"
    commit(url, [_shard(url, opts, "first", 11)], storage_options=opts)
    flat = tmp_path / "flat"
    detfmt.write(make_samples(12, 4), flat, classes=CLASSES)
    old = detfmt.open(url, storage_options=opts, cache_dir=tmp_path / "c")
    before = [old[i].image.copy() for i in range(len(old))]
    manifest = append(url, flat, storage_options=opts)
    assert manifest.num_samples == 7
    new = detfmt.open(url, storage_options=opts, cache_dir=tmp_path / "c")
    for i, image in enumerate(before):
        assert (old[i].image == image).all() and (new[i].image == image).all()
    ref = detfmt.open(flat)
    for i in range(4):
        assert (new[3 + i].image == ref[i].image).all()
    old.close()
    new.close()
