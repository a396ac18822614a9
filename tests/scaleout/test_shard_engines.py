"""The same input partitioning written by Dask (bag.map_partitions), plain multiprocessing and
in-process gives byte-identical roots (Ray is compared in test_shard_ray.py)."""

from __future__ import annotations

import multiprocessing as mp
import os

import pytest
from shardkit import CLASSES, make_samples

import detfmt
from detfmt.shard.write import commit, write_partition

PARTS, PER_PART, SHARD_BYTES, WRITE_ID = 3, 7, 2500, "7" * 32
OPTIONS = {"classes": CLASSES, "codec": "zstd", "shard_bytes": SHARD_BYTES}


def partitions():
    samples = make_samples(321, PARTS * PER_PART, side=(10, 20))
    return [samples[i * PER_PART : (i + 1) * PER_PART] for i in range(PARTS)]


def tree_bytes(root):
    out = {}
    for dirpath, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        for f in files:
            with open(os.path.join(dirpath, f), "rb") as fh:
                out[os.path.relpath(os.path.join(dirpath, f), root)] = fh.read()
    return out


def in_process(root):
    metas = [m for i, p in enumerate(partitions()) for m in write_partition(p, root, i, **OPTIONS)]
    return commit(root, metas, write_id=WRITE_ID)


def _mp_task(args):
    root, i, part = args
    return write_partition(part, root, i, **OPTIONS)


def with_multiprocessing(root):
    with mp.get_context("fork").Pool(2) as pool:
        results = pool.map(_mp_task, [(root, i, p) for i, p in enumerate(partitions())])
    return commit(root, [m for r in results for m in r], write_id=WRITE_ID)


def _dask_write(part, index, root):
    """bag.map_partitions body: one partition -> its shard metas (plain dicts)."""
    import msgspec

    (i,) = index
    return [msgspec.to_builtins(m) for m in write_partition(part, root, i, **OPTIONS)]


def with_dask(root, scheduler):
    import dask.bag as db

    parts = partitions()
    bag = db.from_sequence([s for p in parts for s in p], partition_size=PER_PART)
    assert bag.npartitions == PARTS
    index = db.from_sequence(range(PARTS), npartitions=PARTS)
    metas = bag.map_partitions(_dask_write, index, str(root)).compute(scheduler=scheduler)
    return commit(root, metas, write_id=WRITE_ID)


@pytest.mark.timeout(120)
def test_multiprocessing_equals_in_process(tmp_path):
    in_process(tmp_path / "a")
    with_multiprocessing(tmp_path / "b")
    assert tree_bytes(tmp_path / "a") == tree_bytes(tmp_path / "b")
    assert len(detfmt.open(tmp_path / "b")) == PARTS * PER_PART


@pytest.mark.parametrize(
    "scheduler", ["threads", pytest.param("processes", marks=pytest.mark.slow)]
)
def test_dask_equals_in_process(tmp_path, scheduler):
    pytest.importorskip("dask.bag")
    manifest = in_process(tmp_path / "a")
    assert with_dask(tmp_path / "d", scheduler) == manifest
    assert tree_bytes(tmp_path / "a") == tree_bytes(tmp_path / "d")
