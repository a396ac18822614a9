"""The README's multi-node recipe (tools/example_ddp.py) under real torchrun process groups:
the same global order at world sizes 1 and 2, and a resume on another world size that neither
repeats nor skips a sample."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import detfmt
from detfmt.shard.write import commit, write_partition

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "tools" / "example_ddp.py"
N, GLOBAL_BATCH, EPOCHS = 50, 8, 2


@pytest.fixture(scope="module")
def roots(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ddp")
    rng = np.random.default_rng(7)
    samples = []
    for _ in range(N):
        h, w = int(rng.integers(20, 40)), int(rng.integers(20, 40))
        k = int(rng.integers(0, 4))
        xy = rng.uniform(0, 10, (k, 2))
        samples.append({"image": rng.integers(0, 255, (h, w, 3), dtype=np.uint8),
                        "boxes": np.concatenate([xy, xy + 5], axis=1).astype(np.float32),
                        "classes": rng.integers(0, 3, k).astype(np.int32)})
    single = tmp / "single"
    detfmt.write(samples, single, classes=["a", "b", "c"], progress=False)
    sharded = tmp / "sharded"  # 5 partitions of 10 samples, shards rolled at ~6 KB
    metas = [m for p in range(5) for m in write_partition(
        samples[p * 10 : (p + 1) * 10], sharded, p, classes=["a", "b", "c"], shard_bytes=6000)]
    commit(sharded, metas)
    assert len(metas) > 5
    return {"single": single, "sharded": sharded}


def torchrun(world, root, report, *extra):
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           f"--nproc_per_node={world}", str(EXAMPLE), str(root),
           f"--batch-size={GLOBAL_BATCH // world}", f"--epochs={EPOCHS}", "--threads=1",
           f"--report={report}", *extra]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads(Path(report).read_text())


@pytest.mark.parametrize("kind", ["single", "sharded"])
def test_same_global_order_on_any_world_size_and_resume_across_them(tmp_path, roots, kind):
    root = roots[kind]
    one = torchrun(1, root, tmp_path / "one.json")
    two = torchrun(2, root, tmp_path / "two.json", "--augment")
    assert one["steps"] == two["steps"] == EPOCHS * (N // GLOBAL_BATCH)
    assert one["order"] == two["order"]
    for e in range(EPOCHS):  # each epoch: distinct samples, N // G * G of them
        epoch = one["order"][e * 48 : (e + 1) * 48]
        assert len(set(epoch)) == len(epoch) == 48 and set(epoch) <= set(range(N))
    assert one["order"][:48] != one["order"][48:]  # set_epoch reshuffles

    state = tmp_path / "state.json"
    head = torchrun(2, root, tmp_path / "head.json", "--stop-after=7", f"--state={state}")
    tail = torchrun(1, root, tmp_path / "tail.json", "--resume", f"--state={state}")
    assert head["steps"] == 7
    assert head["order"] + tail["order"] == one["order"]  # no repeat, no gap
