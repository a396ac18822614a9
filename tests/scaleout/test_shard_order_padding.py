"""drop_last=False for the elastic sharded order (O-5 applied to S-19); the shard working set."""

from __future__ import annotations

import numpy as np
import pytest

from detfmt.errors import UsageError
from detfmt.shard.order import (
    EpochPlan,
    OrderState,
    ShardWorkingSet,
    epoch_order,
    num_steps,
    rank_batches,
)

COUNTS = [7, 0, 5, 9, 4, 6]  # N = 31, prime-ish against every global batch below
N = sum(COUNTS)


def plans(world, batch, seen=0, drop_last=False, epoch=2):
    return [
        EpochPlan.build(
            COUNTS, OrderState(3, epoch, seen), world_size=world, rank=r, batch_size=batch,
            window=2, drop_last=drop_last,
        )
        for r in range(world)
    ]


def global_sequence(ps):
    steps = [list(p.batches()) for p in ps]
    assert len({len(s) for s in steps}) == 1
    return [int(i) for t in range(len(steps[0])) for s in steps for i in s[t]]


@pytest.mark.parametrize("world,batch", [(2, 4), (4, 2), (3, 5), (2, 1)])
def test_wrap_padding_equal_counts_cover_everything(world, batch):
    ps = plans(world, batch)
    order = epoch_order(COUNTS, seed=3, epoch=2, window=2)
    g = world * batch
    total = -(-N // g) * g
    for p in ps:
        rows = list(p.batches())
        assert len(rows) == len(p) == total // g
        assert all(len(r) == batch for r in rows)
    seq = global_sequence(ps)
    assert seq == [int(order[q % N]) for q in range(total)]  # position p holds E[p mod N]
    assert set(seq) == set(range(N))


def test_one_rank_keeps_a_short_last_batch():
    (p,) = plans(1, 8)
    rows = list(p.batches())
    assert [len(r) for r in rows] == [8, 8, 8, 7]
    assert np.concatenate(rows).tolist() == epoch_order(COUNTS, seed=3, epoch=2, window=2).tolist()


def test_drop_last_default_is_unchanged():
    for world, batch in [(1, 8), (2, 4), (4, 2)]:
        ps = plans(world, batch, drop_last=True)
        assert all(len(p) == N // (world * batch) == 3 for p in ps)
        assert global_sequence(ps) == global_sequence(plans(1, 24 // 3, drop_last=True))
    default = EpochPlan.build(COUNTS, OrderState(3, 2), world_size=2, rank=0, batch_size=4)
    assert default.drop_last and len(default) == 3


def test_padded_resume_on_other_world_size():
    """4 ranks x 2 for two steps, then 2 ranks x 3 to the end: positions 16.. exactly once,
    then wrap-around padding to a whole global batch of the new size."""
    order = epoch_order(COUNTS, seed=3, epoch=2, window=2)
    first = global_sequence([EpochPlan.build(
        COUNTS, OrderState(3, 2), world_size=4, rank=r, batch_size=2, window=2, drop_last=False,
    ) for r in range(4)])[:16]
    seen = plans(4, 2)[0].samples_seen_after(2)
    assert seen == 16
    rest = global_sequence(plans(2, 3, seen=seen))
    assert first + rest[: N - seen] == order.tolist()
    assert len(rest) % 6 == 0 and rest[N - seen :] == [int(order[q % N]) for q in range(N - seen)][
        : len(rest) - (N - seen)
    ]
    assert plans(2, 3, seen=seen)[1].samples_seen_after(len(rest) // 6) == N  # epoch done
    assert all(len(p) == 0 for p in plans(2, 3, seen=N))


def test_num_steps_and_errors():
    assert num_steps(31, 2, 4, drop_last=False) == 4
    assert num_steps(31, 2, 4, drop_last=True) == 3
    assert num_steps(31, 1, 8, samples_seen=30, drop_last=False) == 1
    assert num_steps(0, 2, 4, drop_last=False) == 0
    with pytest.raises(UsageError):
        num_steps(31, 2, 4, samples_seen=32, drop_last=False)
    with pytest.raises(UsageError):
        list(rank_batches(np.arange(5), world_size=2, rank=2, batch_size=1, drop_last=False))
    with pytest.raises(UsageError):
        EpochPlan.build(COUNTS, OrderState(3, 2), world_size=2, rank=5, batch_size=1)


def test_working_set_keeps_in_use_and_next_shards():
    (p,) = plans(1, 4, drop_last=True)
    rows = list(p.batches())
    ws = ShardWorkingSet(rows, p.shard_of, len(COUNTS), ahead=1)
    for t, row in enumerate(rows):
        wanted = ws.wanted(t)
        assert set(p.shard_of[row].tolist()) <= set(wanted)
        later = [k for k in ws.by_first if ws.first[k] > t]
        assert [k for k in wanted if k in later] == later[:1]
    span = ws.wanted(0, 3)  # several steps in flight: the union of their shards
    for row in rows[:4]:
        assert set(p.shard_of[row].tolist()) <= set(span)
    assert 1 not in ws.by_first  # an empty shard is never needed
