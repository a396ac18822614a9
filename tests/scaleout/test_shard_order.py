"""Global order (S-17..S-20): a pure function of (seed, epoch, window), elastic across ranks."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from detfmt.errors import UsageError
from detfmt.order import epoch_key, mix64, permutation_from_key, splitmix64_stream
from detfmt.shard.order import EpochPlan, OrderState, epoch_order, num_steps, rank_batches

COUNTS = [7, 0, 5, 12, 3, 9, 1, 8]


def reference_order(counts, seed, epoch, window):
    """Scalar re-statement of S-17/S-18 (Python ints, no numpy tricks)."""
    mask = (1 << 64) - 1

    def x(state, j):
        return mix64((state + (j + 1) * 0x9E3779B97F4A7C15) & mask)

    def perm(state, n):
        b = max(1, (n - 1).bit_length()) if n else 1
        keys = sorted((((x(state, i) >> b) << b) | i) for i in range(n))
        return [k & ((1 << b) - 1) for k in keys]

    k = mix64(mix64(seed) ^ epoch)
    firsts = [sum(counts[:i]) for i in range(len(counts))]
    q = perm(x(k, 0), len(counts))
    out = []
    for w in range(-(-len(counts) // window)):
        lst = [firsts[s] + t for s in q[w * window : (w + 1) * window] for t in range(counts[s])]
        out += [lst[t] for t in perm(x(k, w + 1), len(lst))]
    return out


@pytest.mark.parametrize(
    "seed,epoch,window", [(0, 0, 1), (1, 3, 2), (2**64 - 1, 5, 4), (9, 0, 100)]
)
def test_matches_scalar_reference(seed, epoch, window):
    got = epoch_order(COUNTS, seed=seed, epoch=epoch, window=window)
    assert got.tolist() == reference_order(COUNTS, seed, epoch, window)
    assert sorted(got.tolist()) == list(range(sum(COUNTS)))


def test_golden_vector():
    # pins the bytes so an accidental change of the algorithm fails (S-18 test vector)
    o = epoch_order([3, 5, 0, 7, 2], seed=1, epoch=0, window=2)
    assert o.tolist() == [15, 16, 6, 5, 4, 0, 1, 2, 7, 3, 13, 11, 14, 12, 8, 9, 10]
    big = epoch_order([100] * 50, seed=42, epoch=3, window=4)
    assert hashlib.sha256(big.astype("<i8").tobytes()).hexdigest()[:16] == GOLDEN_BIG


GOLDEN_BIG = "c42b2d2670ddb8fc"


def test_uses_loader_prng():
    k = epoch_key(5, 2)
    states = splitmix64_stream(k, 0, 2).tolist()
    o = epoch_order([4, 6], seed=5, epoch=2, window=2)
    shards = permutation_from_key(states[0], 2).tolist()
    lst = [i for s in shards for i in (range(0, 4) if s == 0 else range(4, 10))]
    assert o.tolist() == [lst[t] for t in permutation_from_key(states[1], 10).tolist()]


def test_window_locality():
    # each run of a window's samples comes from at most `window` shards
    counts = [10] * 12
    o = epoch_order(counts, seed=3, epoch=1, window=3)
    for w in range(4):
        assert len(set((o[w * 30 : (w + 1) * 30] // 10).tolist())) == 3


def test_epochs_differ_and_no_shuffle_is_identity():
    a = epoch_order(COUNTS, seed=1, epoch=0)
    b = epoch_order(COUNTS, seed=1, epoch=1)
    assert a.tolist() != b.tolist()
    assert epoch_order(COUNTS, seed=1, epoch=0, shuffle=False).tolist() == list(range(45))
    assert epoch_order([], seed=1, epoch=0).tolist() == []


@pytest.mark.parametrize("batch", [1, 2, 3])
def test_world_size_independent_and_equal_counts(batch):
    order = epoch_order(COUNTS, seed=7, epoch=2)
    n = len(order)
    for world in (1, 2, 4):
        per_rank = [
            list(rank_batches(order, world_size=world, rank=r, batch_size=batch))
            for r in range(world)
        ]
        steps = {len(p) for p in per_rank}
        assert steps == {n // (world * batch)}
        stitched = [i for t in range(steps.pop()) for r in range(world) for i in per_rank[r][t]]
        assert stitched == order[: len(stitched)].tolist()


def test_resume_on_other_world_size_has_no_gaps_or_duplicates():
    counts = [13, 11, 17, 9]
    old = [
        list(
            EpochPlan.build(
                counts, OrderState(seed=3, epoch=4), world_size=2, rank=r, batch_size=3
            ).batches()
        )
        for r in range(2)
    ]
    first = [i for t in range(4) for r in range(2) for i in old[r][t].tolist()]
    state = OrderState(3, 4).advanced(4, world_size=2, batch_size=3)
    assert state.samples_seen == 24
    rest = []
    plans = [EpochPlan.build(counts, state, world_size=4, rank=r, batch_size=2) for r in range(4)]
    assert {len(p) for p in plans} == {(50 - 24) // 8}
    per = [list(p.batches()) for p in plans]
    for t in range(len(plans[0])):
        for r in range(4):
            rest += per[r][t].tolist()
    order = epoch_order(counts, seed=3, epoch=4)
    assert first + rest == order[: 24 + len(rest)].tolist()
    assert len(set(first + rest)) == len(first + rest)


def test_shard_sequence_follows_batches():
    counts = [5, 5, 5, 5]
    plan = EpochPlan.build(counts, OrderState(1, 0), batch_size=2, window=1)
    seq = plan.shard_sequence()
    assert sorted(seq) == [0, 1, 2, 3]
    first_batch_shard = int(plan.shard_of[next(iter(plan.batches()))[0]])
    assert seq[0] == first_batch_shard


def test_usage_errors():
    with pytest.raises(UsageError):
        epoch_order(COUNTS, seed=1, epoch=0, window=0)
    with pytest.raises(UsageError):
        num_steps(10, 0, 1)
    with pytest.raises(UsageError):
        num_steps(10, 1, 1, samples_seen=11)
    with pytest.raises(UsageError):
        list(rank_batches(np.arange(4), world_size=2, rank=2, batch_size=1))
