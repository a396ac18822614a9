"""A real torch.distributed run: 2 CPU processes (gloo) read disjoint, equal, covering shares."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.utils.data as tud

from detfmt.order import epoch_permutation
from tests.datasets import make_dataset, varied_shapes

N, BATCH, WORLD, SEED = 23, 3, 2, 7


def _worker(rank: int, path: str, init: str, out: str) -> None:
    from detfmt.torch import Delivery, DetectionDataset, Loader, collate

    dist.init_process_group("gloo", init_method=f"file://{init}", rank=rank, world_size=WORLD)
    try:
        result = {}
        for drop_last in (False, True):
            loader = Loader(
                path,
                BATCH,
                seed=SEED,
                drop_last=drop_last,
                delivery=Delivery(num_threads=2),
            )
            assert (loader.rank, loader.world_size) == (rank, WORLD)
            mine = []
            for batch in loader:
                mine.append(batch.indices.tolist())
                dist.all_reduce(torch.ones(1))  # one collective per step: unequal shares hang
            everyone = [None] * WORLD
            dist.all_gather_object(everyone, mine)
            result[f"loader_drop{int(drop_last)}"] = everyone
        dataset = DetectionDataset(path)
        sampler = tud.DistributedSampler(dataset, shuffle=True, seed=SEED)
        seen = [b.indices.tolist() for b in
                tud.DataLoader(dataset, BATCH, sampler=sampler, collate_fn=collate)]
        everyone = [None] * WORLD
        dist.all_gather_object(everyone, seen)
        result["sampler"] = everyone
        if rank == 0:
            Path(out).write_text(json.dumps(result))
        dist.barrier()
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_two_process_gloo_partition(tmp_path):
    ds = make_dataset(tmp_path / "ds", varied_shapes(N))
    out = tmp_path / "result.json"
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    mp.start_processes(_worker, args=(str(ds.path), str(tmp_path / "init"), str(out)),
                       nprocs=WORLD, join=True, start_method="spawn")
    result = json.loads(out.read_text())
    order = epoch_permutation(SEED, 0, N).tolist()
    for drop_last in (0, 1):
        shares = result[f"loader_drop{drop_last}"]
        assert len(shares[0]) == len(shares[1])  # equal number of steps
        assert all(len(b) == BATCH for share in shares for b in share)
        steps = len(shares[0])
        merged = [x for j in range(steps) for r in range(WORLD) for x in shares[r][j]]
        if drop_last:  # disjoint, the first floor(N/G)*G of the order
            assert merged == order[: steps * BATCH * WORLD] and len(set(merged)) == len(merged)
        else:  # covering, wrap-around padding at the end
            assert merged == [order[p % N] for p in range(steps * BATCH * WORLD)]
            assert set(merged) == set(range(N))
    sampler = result["sampler"]
    flat0 = [x for b in sampler[0] for x in b]
    flat1 = [x for b in sampler[1] for x in b]
    assert len(flat0) == len(flat1) and set(flat0) | set(flat1) == set(range(N))
