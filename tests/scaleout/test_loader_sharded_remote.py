"""The torch Loader over remote sharded roots (loopback HTTP range server, moto S3).

Shards come through the node cache: the loader pins the shards its batches in flight use and
prefetches the next ones along the plan, like ``ShardedDataset.iter_batches``.
"""

from __future__ import annotations

import gc
import pickle
import threading

import numpy as np
import pytest
from shardkit import make_samples, write_partitioned

import detfmt

torch = pytest.importorskip("torch")
fsspec = pytest.importorskip("fsspec")
pytest.importorskip("aiohttp")

from detfmt.torch import Delivery, DetectionDataset, Loader, Sampling  # noqa: E402

SIZES = [12, 9, 14, 0, 11, 10]
MAX_BOXES = [1, 4, 2, 0, 6, 3]  # per-shard label padding differs (S-12)


@pytest.fixture(scope="module")
def local_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("remote-loader") / "ds"
    parts = [make_samples(90 + k, n, max_boxes=m) for k, (n, m) in enumerate(zip(SIZES, MAX_BOXES,
                                                                               strict=True))]
    write_partitioned(root, parts, codec="zstd")
    return root


def epoch(loader):
    return [
        (b.indices.tolist(), b.images.permute(0, 2, 3, 1).numpy().copy(), b.boxes.numpy().copy(),
         b.classes.numpy().copy(), b.mask.numpy().copy())
        for b in loader
    ]


def assert_same(got, want):
    assert len(got) == len(want) > 0
    for g, w in zip(got, want, strict=True):
        assert g[0] == w[0]
        for a, b in zip(g[1:], w[1:], strict=True):
            np.testing.assert_array_equal(a, b)


def loader_threads():
    return [t for t in threading.enumerate() if t.name.startswith("detfmt-loader")]


def test_loader_over_http_root_matches_local_and_plan(tmp_path, local_root):
    from scaleout_servers import http_range_server

    local = detfmt.open(local_root)
    want = epoch(Loader(
        local,
        4,
        seed=5,
        sampling=Sampling(shard_window=2),
        delivery=Delivery(num_threads=2),
    ))
    plan = local.plan(seed=5, epoch=0, batch_size=4, shard_window=2, drop_last=False)
    assert [w[0] for w in want] == [b.tolist() for b in plan.batches()]
    with http_range_server(str(local_root)) as url:
        # a cache of one byte: every shard is evicted as soon as the plan no longer needs it
        loader = Loader(
            url,
            4,
            seed=5,
            sampling=Sampling(shard_window=2),
            delivery=Delivery(num_threads=2, prefetch_shards=1),
            open_options={"cache_dir": str(tmp_path / "cache"), "cache_limit": 1},
        )
        assert loader.ds.is_remote
        calls = []
        keep = loader.ds.keep_shards
        loader.ds.keep_shards = lambda shards: (calls.append(list(shards)), keep(shards))
        assert_same(epoch(loader), want)
        first_batch = {local.locate(i)[0] for i in next(iter(plan.batches())).tolist()}
        assert first_batch < set(calls[0])  # the next shard is prefetched before it is needed
        assert {k for c in calls for k in c} == {k for k, n in enumerate(SIZES) if n}
        stats = loader.ds._cache.stats
        assert stats["downloads"] >= 5 and stats["evictions"] > 0
        state = loader.state_dict()
        assert state["samples_seen"] == sum(SIZES)

        # pickles as (URL, open options, write_id): a worker opens the same node cache
        items = pickle.loads(pickle.dumps(DetectionDataset(
            detfmt.open(url, cache_dir=str(tmp_path / "cache3")))))
        sample = local[13]
        np.testing.assert_array_equal(items[13]["image"].numpy(), sample.image)
        np.testing.assert_array_equal(items[13]["boxes"].numpy(), sample.boxes)
        assert items.ds._cache.dir.startswith(str(tmp_path / "cache3"))

        it = iter(Loader(
            url,
            3,
            delivery=Delivery(num_threads=3, prefetch=4),
            open_options={"cache_dir": str(tmp_path / "cache2")},
        ))
        next(it)
        del it
        gc.collect()
        assert not loader_threads()
        loader.ds.close()


@pytest.mark.slow
def test_loader_over_s3_two_ranks_resume_on_one(tmp_path, local_root):
    pytest.importorskip("s3fs")
    pytest.importorskip("moto")
    from scaleout_servers import moto_s3

    from detfmt.shard.remote import upload

    local = detfmt.open(local_root)
    plan = local.plan(seed=1, epoch=0, batch_size=1, shard_window=3, drop_last=False)
    order = plan.order.tolist()
    mp = pytest.MonkeyPatch()
    mp.setenv("AWS_DEFAULT_REGION", "us-east-1")
    try:
        with moto_s3() as endpoint:
            opts = {"key": "k", "secret": "s", "client_kwargs": {"endpoint_url": endpoint}}
            fsspec.filesystem("s3", **opts).call_s3("create_bucket", Bucket="bkt")
            upload(local_root, "s3://bkt/ds", storage_options=opts)
            open_options = {"storage_options": opts, "cache_dir": str(tmp_path / "c")}
            ranks = [Loader(
                "s3://bkt/ds",
                3,
                seed=1,
                rank=r,
                world_size=2,
                sampling=Sampling(shard_window=3),
                delivery=Delivery(num_threads=2),
                open_options=open_options,
            ) for r in range(2)]
            head = []
            its = [iter(loader) for loader in ranks]
            for _ in range(3):
                for it in its:
                    batch = next(it)
                    head += batch.indices.tolist()
                    np.testing.assert_array_equal(
                        batch.images.permute(0, 2, 3, 1).numpy(),
                        local.batch(batch.indices.numpy()).images,
                    )
            del its, it  # dropping the suspended generators stops their threads
            state = ranks[0].state_dict()
            assert state["samples_seen"] == 18 and head == order[:18]
            one = Loader(
                "s3://bkt/ds",
                4,
                drop_last=False,
                delivery=Delivery(num_threads=2),
                open_options=open_options,
            )
            one.load_state_dict(state)
            tail = [i for b in one for i in b.indices.tolist()]
            assert head + tail == order  # no duplicates, no gaps
            for loader in [*ranks, one]:
                loader.ds.close()
    finally:
        mp.undo()
    gc.collect()
    assert not loader_threads()
