"""Multi-process reading with real gloo process groups (S-18..S-20): world sizes 1, 2, 4 see the
same global sequence, every rank runs the same number of batches, and a run resumes on another
world size from {seed, epoch, samples_seen} with no gaps or duplicates."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from shardkit import make_samples, write_partitioned

torch = pytest.importorskip("torch")

import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

from detfmt.order import sharded_epoch_order  # noqa: E402

SEED, EPOCH, GLOBAL_BATCH, WINDOW = 11, 2, 8, 2
SIZES = [9, 14, 0, 11, 7, 13, 6]  # 60 samples, uneven shards, one empty


RESUME_AT = 3 * GLOBAL_BATCH  # a 2-rank run stopped after 3 steps; the 4-rank run resumes here


def _epoch(ds, world, rank, samples_seen):
    """This rank's batches as [indices, pixel sum, box sum], one collective per step."""
    plan = ds.plan(
        seed=SEED,
        epoch=EPOCH,
        batch_size=GLOBAL_BATCH // world,
        world_size=world,
        rank=rank,
        shard_window=WINDOW,
        samples_seen=samples_seen,
    )
    mine = []
    for batch in ds.iter_batches(plan):
        # a content digest ties the indices to the bytes actually read on this rank
        mine.append(
            [
                batch.indices.tolist(),
                int(batch.images.astype(np.int64).sum()),
                float(batch.boxes.sum()),
            ]
        )
        dist.all_reduce(torch.ones(1))  # unequal batch counts would hang here
    top = torch.tensor([len(mine)])
    dist.all_reduce(top, op=dist.ReduceOp.MAX)
    everyone = [None] * world
    dist.all_gather_object(everyone, mine)
    return {"ranks": everyone, "max": int(top)}


def _rank(rank: int, world: int, root: str, init: str, out: str) -> None:
    import detfmt

    dist.init_process_group("gloo", init_method=f"file://{init}", rank=rank, world_size=world)
    try:
        ds = detfmt.open(root)
        result = {"full": _epoch(ds, world, rank, 0)}
        if world == 4:
            result["resumed"] = _epoch(ds, world, rank, RESUME_AT)
        if rank == 0:
            Path(out).write_text(json.dumps(result))
        dist.barrier()
    finally:
        dist.destroy_process_group()


def run(tmp_path, root, world):
    """Run ``world`` ranks; returns {name: (stitched global sequence, per-step rows)}."""
    out = tmp_path / f"out-{world}.json"
    init = tmp_path / f"init-{world}"
    if world == 1:  # in this process (gloo with world size 1)
        _rank(0, 1, str(root), str(init), str(out))
    else:
        mp.start_processes(
            _rank,
            args=(world, str(root), str(init), str(out)),
            nprocs=world,
            join=True,
            start_method="fork",  # torch is imported already: no re-import per rank
        )
    results = {}
    for name, result in json.loads(out.read_text()).items():
        ranks = result["ranks"]
        assert {len(r) for r in ranks} == {result["max"]}, "ranks ran different batch counts"
        rows = [ranks[r][t] for t in range(result["max"]) for r in range(world)]
        results[name] = ([i for row in rows for i in row[0]], rows)
    return results


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("dist") / "ds"
    write_partitioned(root, [make_samples(50 + k, n) for k, n in enumerate(SIZES)], codec="zstd")
    return root


@pytest.mark.slow
@pytest.mark.timeout(300)  # forked ranks: a hang fails instead of blocking CI
def test_same_global_sequence_for_world_1_2_4_and_resume(tmp_path, root):
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import detfmt

    order = sharded_epoch_order(SIZES, seed=SEED, epoch=EPOCH, window=WINDOW).tolist()
    full = (sum(SIZES) // GLOBAL_BATCH) * GLOBAL_BATCH
    ref = detfmt.open(root)
    runs = {world: run(tmp_path, root, world) for world in (1, 2, 4)}
    for world, results in runs.items():
        seq, rows = results["full"]
        assert seq == order[:full], f"world {world} visits another sequence"
        for idx, pixel_sum, box_sum in rows:
            b = ref.batch(idx)
            assert pixel_sum == int(b.images.astype(np.int64).sum())
            assert box_sum == pytest.approx(float(b.boxes.sum()))
    assert runs[1]["full"][0] == runs[2]["full"][0] == runs[4]["full"][0]

    # the 2-rank run's first 3 steps, then the same epoch resumed on 4 ranks
    first = runs[2]["full"][0][:RESUME_AT]
    rest = runs[4]["resumed"][0]
    assert len(rest) == ((sum(SIZES) - RESUME_AT) // GLOBAL_BATCH) * GLOBAL_BATCH
    assert first + rest == order[: len(first) + len(rest)]
    assert len(set(first + rest)) == len(first + rest)
