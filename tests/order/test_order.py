"""The epoch order (SPEC §18, §19.6) against deliberately simple scalar references, and the one
slicing/resume model (S-19, S-20) both kinds of dataset share."""

from __future__ import annotations

import hashlib
import math
from fractions import Fraction

import numpy as np
import pytest

from detfmt.errors import UsageError
from detfmt.order import (
    EpochPlan,
    MixtureOrder,
    MixtureSource,
    OrderSpec,
    OrderState,
    RepeatFactorOrder,
    Schedule,
    epoch_key,
    epoch_permutation,
    mix64,
    mixture_quotas,
    num_steps,
    permutation_from_key,
    quasi_random_permutation,
    rank_batches,
    repeat_counts,
    repeat_factor_order,
    repeat_factors,
    sharded_epoch_order,
    splitmix64_stream,
)
from detfmt.reading.sharded import ShardWorkingSet

M64 = (1 << 64) - 1
GAMMA = 0x9E3779B97F4A7C15


def ref_mix64(z: int) -> int:
    z &= M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def ref_stream(state: int, j: int) -> int:
    return ref_mix64(state + (j + 1) * GAMMA)


def ref_bits(m: int) -> int:
    return max(1, (m - 1).bit_length())


def reference_permutation_from_state(state: int, n: int) -> list[int]:
    """O-3, one sample at a time: sort by (top bits of the stream output, index)."""
    b = ref_bits(n)
    return sorted(range(n), key=lambda i: (ref_stream(state, i) >> b, i))


def reference_permutation(seed: int, epoch: int, n: int) -> list[int]:
    """O-2 + O-3."""
    return reference_permutation_from_state(ref_mix64(ref_mix64(seed) ^ epoch), n)


def reference_quasi(seed: int, epoch: int, n: int, block: int, window: int) -> list[int]:
    """O-4, literally."""
    k = ref_mix64(ref_mix64(seed) ^ epoch)
    nb = -(-n // block)
    group = block * window
    ng = -(-nb // window)
    c = ref_bits(group)
    q = reference_permutation_from_state(ref_stream(k, 0), nb)
    v = [q[p // block] * block + p % block for p in range(nb * block)]
    out = []
    for g in range(ng):
        state = ref_stream(k, g + 1)
        local = sorted(range(group), key=lambda pos, s=state: (ref_stream(s, pos) >> c, pos))
        out.extend(v[g * group + pos] for pos in local if g * group + pos < nb * block)
    return [x for x in out if x < n]


def reference_sharded(counts, seed, epoch, window):
    """Scalar re-statement of S-17/S-18 (Python ints, no numpy tricks)."""
    def perm(state, n):
        b = max(1, (n - 1).bit_length()) if n else 1
        keys = sorted((((ref_stream(state, i) >> b) << b) | i) for i in range(n))
        return [k & ((1 << b) - 1) for k in keys]

    k = ref_mix64(ref_mix64(seed) ^ epoch)
    firsts = [sum(counts[:i]) for i in range(len(counts))]
    q = perm(ref_stream(k, 0), len(counts))
    out = []
    for w in range(-(-len(counts) // window)):
        lst = [firsts[s] + t for s in q[w * window : (w + 1) * window] for t in range(counts[s])]
        out += [lst[t] for t in perm(ref_stream(k, w + 1), len(lst))]
    return out


def sha(values) -> str:
    return hashlib.sha256(np.asarray(values, dtype="<i8").tobytes()).hexdigest()


# Golden vectors computed by the scalar references above (also in SPEC.md O-8 and S-18).
GOLDEN_SMALL = [2, 4, 6, 8, 5, 1, 7, 0, 9, 3]
GOLDEN = {
    (0, 0, 10): "4048f57cfe899a4cbf46ddcca0766068303964e86361cf8ee228139e8abc808b",
    (123, 7, 1000): "709328b0cd2ce2f8672e857c861c28b53bee608c17b08ee97bde143887807938",
}
GOLDEN_QUASI = [19, 18, 10, 16, 8, 11, 17, 9, 22, 21, 20, 0, 1, 2, 3, 13, 7, 14, 12, 4, 5, 15, 6]
GOLDEN_SHARDED = [15, 16, 6, 5, 4, 0, 1, 2, 7, 3, 13, 11, 14, 12, 8, 9, 10]
GOLDEN_SHARDED_BIG = "c42b2d2670ddb8fc"
COUNTS = [7, 0, 5, 9, 4, 6]  # N = 31, prime-ish against every global batch below
N = sum(COUNTS)

# ------------------------------------------------------------------ the orders themselves


def test_mix64_vectors():
    assert mix64(0) == 0
    assert mix64(1) == ref_mix64(1) == 0x5692161D100B05E5


def test_golden_vectors_from_scalar_references():
    assert reference_permutation(0, 0, 10) == GOLDEN_SMALL
    for (seed, epoch, n), digest in GOLDEN.items():
        assert sha(reference_permutation(seed, epoch, n)) == digest
        assert sha(epoch_permutation(seed, epoch, n)) == digest
    assert epoch_permutation(0, 0, 10).tolist() == GOLDEN_SMALL
    assert reference_quasi(1, 0, 23, 4, 2) == GOLDEN_QUASI
    assert quasi_random_permutation(1, 0, 23, 4, 2).tolist() == GOLDEN_QUASI
    assert reference_sharded([3, 5, 0, 7, 2], 1, 0, 2) == GOLDEN_SHARDED
    assert sharded_epoch_order([3, 5, 0, 7, 2], seed=1, epoch=0, window=2).tolist() == \
        GOLDEN_SHARDED
    big = sharded_epoch_order([100] * 50, seed=42, epoch=3, window=4)
    assert sha(big)[:16] == GOLDEN_SHARDED_BIG


@pytest.mark.parametrize("n", [0, 1, 2, 3, 7, 64, 65, 257])
@pytest.mark.parametrize("seed,epoch", [(0, 0), (1, 5), (M64, M64), (2**63, 3)])
def test_vectorized_equals_reference(n, seed, epoch):
    assert epoch_permutation(seed, epoch, n).tolist() == reference_permutation(seed, epoch, n)


@pytest.mark.parametrize("n,block,window", [(0, 4, 2), (1, 1, 1), (23, 4, 2), (100, 7, 3),
                                            (96, 8, 4), (50, 64, 8), (33, 1, 5)])
def test_quasi_equals_reference(n, block, window):
    got = quasi_random_permutation(9, 2, n, block, window).tolist()
    assert got == reference_quasi(9, 2, n, block, window)
    assert sorted(got) == list(range(n))


@pytest.mark.parametrize("seed,epoch,window", [(0, 0, 1), (1, 3, 2), (2**64 - 1, 5, 4),
                                               (9, 0, 100)])
def test_sharded_equals_reference(seed, epoch, window):
    counts = [7, 0, 5, 12, 3, 9, 1, 8]
    got = sharded_epoch_order(counts, seed=seed, epoch=epoch, window=window)
    assert got.tolist() == reference_sharded(counts, seed, epoch, window)
    assert sorted(got.tolist()) == list(range(sum(counts)))


def test_sharded_order_uses_the_loader_prng():
    states = splitmix64_stream(epoch_key(5, 2), 0, 2).tolist()
    order = sharded_epoch_order([4, 6], seed=5, epoch=2, window=2)
    shards = permutation_from_key(states[0], 2).tolist()
    lst = [i for s in shards for i in (range(0, 4) if s == 0 else range(4, 10))]
    assert order.tolist() == [lst[t] for t in permutation_from_key(states[1], 10).tolist()]


def test_permutation_properties():
    p = epoch_permutation(5, 0, 10_000)
    assert p.dtype == np.int64
    assert np.array_equal(np.sort(p), np.arange(10_000))
    assert not np.array_equal(p, epoch_permutation(5, 1, 10_000))
    assert not np.array_equal(p, epoch_permutation(6, 0, 10_000))
    assert np.array_equal(p, epoch_permutation(5, 0, 10_000))


def test_locality_of_quasi_and_sharded_orders():
    q = quasi_random_permutation(0, 0, 4096, block=16, window=4)
    for lo in range(0, 4096, 64):  # 64 consecutive positions come from at most 4 blocks of 16
        assert len(np.unique(q[lo : lo + 64] // 16)) <= 4
    o = sharded_epoch_order([10] * 12, seed=3, epoch=1, window=3)
    for w in range(4):  # each window's samples come from `window` shards
        assert len(set((o[w * 30 : (w + 1) * 30] // 10).tolist())) == 3


def test_epochs_differ_and_sequential_is_identity():
    a = sharded_epoch_order(COUNTS, seed=1, epoch=0)
    assert a.tolist() != sharded_epoch_order(COUNTS, seed=1, epoch=1).tolist()
    assert sharded_epoch_order(COUNTS, seed=1, epoch=0, shuffle=False).tolist() == list(range(N))
    assert sharded_epoch_order([], seed=1, epoch=0).tolist() == []
    for spec in (OrderSpec(N, "sequential"), OrderSpec(N, "sequential", tuple(COUNTS))):
        assert spec.epoch_order(1, 0).tolist() == list(range(N))


def test_bad_arguments_are_usage_errors():
    for args in [(-1, 0, 3), (0, -1, 3), (0, 0, -1), (0, 2**64, 3), (0.5, 0, 3), (0, 0, 2**49)]:
        with pytest.raises(UsageError):
            epoch_permutation(*args)
    with pytest.raises(UsageError):
        quasi_random_permutation(0, 0, 10, block=0)
    with pytest.raises(UsageError):
        sharded_epoch_order(COUNTS, seed=1, epoch=0, window=0)
    with pytest.raises(UsageError):
        OrderSpec(N, "quasi_random", tuple(COUNTS))  # a sharded root has its own locality
    with pytest.raises(UsageError):
        OrderSpec(N, "shuffled")

# ------------------------------------------------------------------ slicing (S-19), one model

SPECS = {"1.0": OrderSpec(N), "sharded": OrderSpec(N, shard_counts=tuple(COUNTS), shard_window=2)}


def plans(spec, world, batch, seen=0, drop_last=False, epoch=2):
    return [EpochPlan.build(spec, OrderState(3, epoch, seen), world_size=world, rank=r,
                            batch_size=batch, drop_last=drop_last) for r in range(world)]


def global_sequence(ps):
    steps = [list(p.batches()) for p in ps]
    assert len({len(s) for s in steps}) == 1
    return [int(i) for t in range(len(steps[0])) for s in steps for i in s[t]]


@pytest.mark.parametrize("kind", SPECS)
@pytest.mark.parametrize("world,batch", [(2, 4), (4, 2), (3, 5), (2, 1)])
def test_wrap_padding_equal_counts_cover_everything(kind, world, batch):
    spec = SPECS[kind]
    ps = plans(spec, world, batch)
    order = spec.epoch_order(3, 2)
    g = world * batch
    total = -(-N // g) * g
    for p in ps:
        rows = list(p.batches())
        assert len(rows) == len(p) == total // g
        assert all(len(r) == batch for r in rows)
    seq = global_sequence(ps)
    assert seq == [int(order[q % N]) for q in range(total)]  # position p holds E[p mod N]
    assert set(seq) == set(range(N))


@pytest.mark.parametrize("kind", SPECS)
def test_one_rank_keeps_a_short_last_batch(kind):
    (p,) = plans(SPECS[kind], 1, 8)
    rows = list(p.batches())
    assert [len(r) for r in rows] == [8, 8, 8, 7]
    assert np.concatenate(rows).tolist() == SPECS[kind].epoch_order(3, 2).tolist()


@pytest.mark.parametrize("kind", SPECS)
def test_drop_last_gives_the_same_global_batches_on_any_world_size(kind):
    spec = SPECS[kind]
    for world, batch in [(1, 8), (2, 4), (4, 2)]:
        ps = plans(spec, world, batch, drop_last=True)
        assert all(len(p) == N // (world * batch) == 3 for p in ps)
        assert global_sequence(ps) == global_sequence(plans(spec, 1, 8, drop_last=True))
        assert global_sequence(ps) == spec.epoch_order(3, 2)[:24].tolist()
    default = EpochPlan.build(spec, OrderState(3, 2), world_size=2, rank=0, batch_size=4)
    assert default.drop_last and len(default) == 3


@pytest.mark.parametrize("n", [0, 1, 5, 31, 32, 33, 100])
@pytest.mark.parametrize("world,batch", [(1, 4), (2, 4), (3, 5), (4, 1)])
@pytest.mark.parametrize("drop_last", [False, True])
def test_rank_partition(n, world, batch, drop_last):
    spec = OrderSpec(n)
    order = spec.epoch_order(3, 1)
    g = world * batch
    shares = [list(p.batches()) for p in plans(spec, world, batch, drop_last=drop_last, epoch=1)]
    total = (n // g) * g if drop_last else (n if world == 1 or n == 0 else -(-n // g) * g)
    if world > 1:
        assert len({len(s) for s in shares}) == 1  # equal shares
        assert all(len(row) == batch for s in shares for row in s)
    flat = np.concatenate([np.asarray(row) for s in shares for row in s] or [np.empty(0, int)])
    assert flat.size == total
    if drop_last:
        assert len(np.unique(flat)) == flat.size  # disjoint
    else:
        assert set(flat.tolist()) == set(range(n))  # covering
        if total <= n:
            assert len(np.unique(flat)) == flat.size
        else:  # padding repeats exactly the first total - n samples of the order
            padded = np.asarray(global_sequence(plans(spec, world, batch, epoch=1)))
            assert np.array_equal(padded[n:], order[np.arange(n, total) % max(n, 1)])


@pytest.mark.parametrize("kind", SPECS)
def test_padded_resume_on_other_world_size(kind):
    """4 ranks x 2 for two steps, then 2 ranks x 3 to the end: positions 16.. exactly once,
    then wrap-around padding to a whole global batch of the new size."""
    spec = SPECS[kind]
    order = spec.epoch_order(3, 2)
    first = global_sequence(plans(spec, 4, 2))[:16]
    seen = plans(spec, 4, 2)[0].samples_seen_after(2)
    assert seen == 16
    rest = global_sequence(plans(spec, 2, 3, seen=seen))
    assert first + rest[: N - seen] == order.tolist()
    assert len(rest) % 6 == 0
    assert rest[N - seen :] == [int(order[q % N]) for q in range(len(rest) - (N - seen))]
    assert plans(spec, 2, 3, seen=seen)[1].samples_seen_after(len(rest) // 6) == N  # done
    assert all(len(p) == 0 for p in plans(spec, 2, 3, seen=N))


@pytest.mark.parametrize("kind", SPECS)
def test_resume_drop_last_on_other_world_size_has_no_gaps_or_duplicates(kind):
    spec = SPECS[kind]
    old = [list(p.batches()) for p in plans(spec, 2, 3, drop_last=True, epoch=4)]
    first = [i for t in range(4) for r in range(2) for i in old[r][t].tolist()]
    state = OrderState(3, 4).advanced(4, world_size=2, batch_size=3)
    assert state.samples_seen == 24
    new = [EpochPlan.build(spec, state, world_size=4, rank=r, batch_size=2) for r in range(4)]
    assert {len(p) for p in new} == {(N - 24) // 8}
    rest = global_sequence(new)
    assert first + rest == spec.epoch_order(3, 4)[: 24 + len(rest)].tolist()
    assert len(set(first + rest)) == len(first + rest)


def test_num_steps_and_errors():
    assert num_steps(31, 2, 4, drop_last=False) == 4
    assert num_steps(31, 2, 4, drop_last=True) == 3
    assert num_steps(31, 1, 8, samples_seen=30, drop_last=False) == 1
    assert num_steps(0, 2, 4, drop_last=False) == 0
    with pytest.raises(UsageError):
        num_steps(31, 2, 4, samples_seen=32, drop_last=False)
    with pytest.raises(UsageError):
        num_steps(10, 0, 1)
    with pytest.raises(UsageError):
        list(rank_batches(np.arange(5), world_size=2, rank=2, batch_size=1, drop_last=False))
    with pytest.raises(UsageError):
        EpochPlan.build(SPECS["sharded"], OrderState(3, 2), world_size=2, rank=5, batch_size=1)


# ------------------------------------------------------------------ the stateful schedule


@pytest.mark.parametrize("kind", SPECS)
def test_schedule_resumes_on_another_world_size_and_batch_size(kind):
    """Stop a 1-rank epoch after k batches, resume on 2 ranks with another per-rank batch size:
    every remaining sample exactly once, for 1.0 and sharded orders alike."""
    spec = SPECS[kind]
    one = Schedule(spec, batch_size=4, seed=9)
    one.set_epoch(3)
    seen_first = [i for b in one.begin_epoch()[:3] for i in b.tolist()]
    one.mark(3)
    state = one.state_dict()
    assert state["samples_seen"] == 12
    ranks = []
    for r in range(2):
        s = Schedule(spec, batch_size=3, seed=0, rank=r, world_size=2, drop_last=False)
        s.load_state_dict(state)
        ranks.append(s.begin_epoch())
    rest = [i for t in range(len(ranks[0])) for r in range(2) for i in ranks[r][t].tolist()]
    left = N - 12
    assert seen_first + rest[:left] == spec.epoch_order(9, 3).tolist()
    assert sorted(seen_first + rest[:left]) == list(range(N))


def test_schedule_accepts_the_previous_loaders_states():
    spec = SPECS["1.0"]
    s = Schedule(spec, batch_size=4, seed=1)
    s.load_state_dict({"version": 1, "seed": 5, "epoch": 2, "batches_done": 2, "order": "random",
                       "quasi_block": 32, "quasi_window": 8, "num_samples": N,
                       "global_batch": 8, "drop_last": True})
    assert (s.seed, s.epoch, s.samples_seen) == (5, 2, 16)
    s.load_state_dict({"version": 1, "kind": "sharded", "seed": 5, "epoch": 2,
                       "samples_seen": 7, "shard_window": 2, "shuffle": False, "drop_last": True,
                       "num_samples": N})
    assert (s.samples_seen, s.spec.order) == (7, "sequential")
    for bad in ({"version": 99}, {"version": 2, **s.state_dict(), "num_samples": N + 1}, None):
        with pytest.raises(UsageError):
            s.load_state_dict(bad)


def test_working_set_keeps_in_use_and_next_shards():
    (p,) = plans(SPECS["sharded"], 1, 4, drop_last=True)
    rows = list(p.batches())
    starts = np.concatenate([[0], np.cumsum(COUNTS)[:-1]])
    shard_of = np.repeat(np.arange(len(COUNTS)), COUNTS)
    ws = ShardWorkingSet(rows, starts, ahead=1)
    for t, row in enumerate(rows):
        wanted = ws.wanted(t)
        assert set(shard_of[row].tolist()) <= set(wanted)
        later = [k for k in ws.by_first if ws.first[k] > t]
        assert [k for k in wanted if k in later] == later[:1]
    span = ws.wanted(0, 3)  # several steps in flight: the union of their shards
    for row in rows[:4]:
        assert set(shard_of[row].tolist()) <= set(span)
    assert 1 not in ws.by_first  # an empty shard is never needed


def ref_working_set(batches, starts, ahead, lo, hi):
    """The working set restated one batch at a time: shards each step reads, first and last
    step per shard, then those in use over [lo, hi] and the next ``ahead`` by first use."""
    first, last = {}, {}
    for t, b in enumerate(batches):
        for k in set((np.searchsorted(starts, np.asarray(b), side="right") - 1).tolist()):
            first.setdefault(k, t)
            last[k] = t
    by_first = sorted(first, key=lambda k: (first[k], k))
    active = [k for k in by_first if first[k] <= hi and last[k] >= lo]
    top = max((by_first.index(k) for k in active), default=-1)
    return active + [k for k in by_first[top + 1 : top + 1 + ahead] if first[k] > hi]


def test_working_set_matches_the_per_batch_statement():
    rng = np.random.default_rng(3)
    for _ in range(150):
        sizes = rng.integers(0, 15, int(rng.integers(1, 9)))
        if not sizes.sum():
            continue
        starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        n = int(sizes.sum())
        perm = rng.permutation(n) if rng.random() < 0.5 else np.arange(n)
        size = int(rng.integers(1, 7))
        batches = [perm[i : i + size] for i in range(0, n, size)]
        ahead = int(rng.integers(0, 4))
        ws = ShardWorkingSet(batches, starts, ahead=ahead)
        for lo in range(len(batches)):
            for hi in (lo, min(lo + 2, len(batches) - 1)):
                assert ws.wanted(lo, hi) == ref_working_set(batches, starts, ahead, lo, hi)


def test_working_set_is_built_in_whole_array_steps(monkeypatch):
    """A remote epoch builds it before its first batch: a loop of array calls per batch made
    the first batch of a 1M-sample root wait ~0.4 s (tools/bench_remote.py)."""
    calls = []
    real = np.searchsorted
    monkeypatch.setattr(np, "searchsorted", lambda *a, **k: calls.append(1) or real(*a, **k))
    starts = np.arange(0, 10_000, 100)
    batches = [np.arange(i, i + 10) for i in range(0, 10_000, 10)]  # 1000 batches
    ws = ShardWorkingSet(batches, starts, ahead=2)
    assert len(calls) <= 2
    assert ws.wanted(0) == [0, 1, 2] and ws.wanted(999) == [99]


# ------------------------------------------------------------------ repeat factors and mixtures
# Scalar re-statements of O-9 .. O-12 (Python ints, floats and Fractions, one sample at a time).


def ref_repeat_factors(image_classes: list[list[int]], t: float) -> list[float]:
    """O-9: f(c) = n_c / N, r(c) = max(1, sqrt(t / f(c))), an image's factor its largest."""
    n = len(image_classes)
    having: dict[int, int] = {}
    for classes in image_classes:
        for c in set(classes):
            having[c] = having.get(c, 0) + 1
    per_class = {c: max(1.0, math.sqrt(t / (k / n))) for c, k in having.items()}
    return [max((per_class[c] for c in set(cl)), default=1.0) for cl in image_classes]


def ref_repeat_order(factors: list[float], state: int) -> list[int]:
    """O-10: stochastic rounding with u_i from the stream x_0(state), the list permuted by
    P(x_1(state), L)."""
    u_state = ref_stream(state, 0)
    listed: list[int] = []
    for i, r in enumerate(factors):
        whole = math.floor(r)
        u = (ref_stream(u_state, i) >> 11) / 2**53
        listed += [i] * (whole + (1 if u < r - whole else 0))
    return [listed[t] for t in reference_permutation_from_state(ref_stream(state, 1),
                                                                len(listed))]


def ref_quotas(weights: list[float], length: int) -> list[int]:
    """O-11: largest remainder on the exact rationals of the weights."""
    w = [Fraction(x) for x in weights]
    exact = [length * x / sum(w) for x in w]
    quotas = [math.floor(e) for e in exact]
    for k in sorted(range(len(w)), key=lambda k: (-(exact[k] - quotas[k]), k))[
            : length - sum(quotas)]:
        quotas[k] += 1
    return quotas


def ref_mixture(sizes, weights, length, seed, epoch, factors=None) -> list[int]:
    """O-12: each source's passes cut to its quota, the positions dealt by P(x_0(k), L)."""
    k = ref_mix64(ref_mix64(seed) ^ epoch)
    quotas = ref_quotas(weights, length)
    lists = []
    for s, (n, c) in enumerate(zip(sizes, quotas, strict=True)):
        source_key = ref_stream(k, s + 1)
        taken: list[int] = []
        j = 0
        while len(taken) < c:
            state = ref_stream(source_key, j)
            one = (reference_permutation_from_state(state, n)
                   if factors is None or factors[s] is None
                   else ref_repeat_order(factors[s], state))
            taken += one[: c - len(taken)]
            j += 1
        lists.append([sum(sizes[:s]) + i for i in taken])
    labels = [s for s, c in enumerate(quotas) for _ in range(c)]
    used = [0] * len(sizes)
    out = []
    for t in reference_permutation_from_state(ref_stream(k, 0), length):
        s = labels[t]
        out.append(lists[s][used[s]])
        used[s] += 1
    return out


def presence(image_classes):
    images = [i for i, cl in enumerate(image_classes) for _ in cl]
    classes = [c for cl in image_classes for c in cl]
    return np.asarray(images, np.int64), np.asarray(classes, np.int64)


# Golden vectors of SPEC §18.13 (O-13), computed by the scalar references above.
RF_CLASSES = [[0], [0, 1], [], [2], [0], [0, 3, 3], [1], [0]]
RF_FACTORS = [1.0, math.sqrt(2.0), 1.0, 2.0, 1.0, 2.0, math.sqrt(2.0), 1.0]
RF_ORDER = [3, 1, 7, 5, 0, 5, 3, 4, 6, 2]  # threshold 0.5, state k(0, 0)
QUOTAS = {((0.7, 0.2, 0.1), 10): [7, 2, 1], ((1, 1, 1), 10): [4, 3, 3],
          ((0.5, 0.3, 0.2), 7): [4, 2, 1]}
MIX_ORDER = [9, 0, 1, 3, 6, 7, 2, 4, 0, 1, 8, 2]  # sizes 3, 5, 2; weights .5 .3 .2; L 12; 1, 0
MIX_RF_ORDER = [5, 10, 9, 8, 9, 1, 3, 1, 7, 10]  # sizes 8 (RF_FACTORS), 3; 1:1; L 10; 2, 1
MIX_BIG = "f0298c0ab4c0bf94"  # sizes 1000, 300, 50; weights .5 .3 .2; L 2000; seed 123, ep 7
RF_BIG = "09a39ae1213ef539"  # factors 1 + (i mod 7) / 4, i < 1000; state k(123, 7); L 1726


def mixture(sizes, weights, length=None, factors=None):
    sources = [MixtureSource(n) if factors is None or factors[k] is None
               else MixtureSource(n, np.asarray(factors[k]), 0.5)
               for k, n in enumerate(sizes)]
    return MixtureOrder(sources, weights, length)


def test_sampling_golden_vectors_from_scalar_references():
    assert ref_repeat_factors(RF_CLASSES, 0.5) == RF_FACTORS
    assert repeat_factors(*presence(RF_CLASSES), len(RF_CLASSES), 0.5).tolist() == RF_FACTORS
    assert ref_repeat_order(RF_FACTORS, epoch_key(0, 0)) == RF_ORDER
    assert repeat_factor_order(np.array(RF_FACTORS), epoch_key(0, 0)).tolist() == RF_ORDER
    assert RepeatFactorOrder(np.array(RF_FACTORS), 0.5).epoch_order(0, 0).tolist() == RF_ORDER
    for (weights, length), quotas in QUOTAS.items():
        assert ref_quotas(list(weights), length) == quotas
        assert mixture_quotas(weights, length) == quotas
    assert ref_mixture([3, 5, 2], [0.5, 0.3, 0.2], 12, 1, 0) == MIX_ORDER
    assert mixture([3, 5, 2], [0.5, 0.3, 0.2], 12).epoch_order(1, 0).tolist() == MIX_ORDER
    assert ref_mixture([8, 3], [1, 1], 10, 2, 1, [RF_FACTORS, None]) == MIX_RF_ORDER
    assert mixture([8, 3], [1, 1], 10, [RF_FACTORS, None]).epoch_order(2, 1).tolist() == \
        MIX_RF_ORDER
    big = ref_mixture([1000, 300, 50], [0.5, 0.3, 0.2], 2000, 123, 7)
    assert sha(big)[:16] == MIX_BIG
    assert sha(mixture([1000, 300, 50], [0.5, 0.3, 0.2], 2000).epoch_order(123, 7))[:16] == \
        MIX_BIG
    factors = [1 + (i % 7) / 4 for i in range(1000)]
    rf = ref_repeat_order(factors, epoch_key(123, 7))
    assert len(rf) == 1726 and sha(rf)[:16] == RF_BIG
    assert sha(repeat_factor_order(np.array(factors), epoch_key(123, 7)))[:16] == RF_BIG


@pytest.mark.parametrize("seed", range(6))
def test_repeat_factors_and_order_equal_the_references(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 60))
    image_classes = [rng.integers(0, 9, size=int(rng.integers(0, 4))).tolist() for _ in range(n)]
    t = float(rng.choice([1e-3, 0.05, 0.3, 0.77, 1.0, 3.0]))
    want = ref_repeat_factors(image_classes, t)
    got = repeat_factors(*presence(image_classes), n, t)
    assert got.tolist() == want  # bit for bit
    state = epoch_key(seed, 3)
    assert repeat_factor_order(got, state).tolist() == ref_repeat_order(want, state)


def test_repeat_counts_round_stochastically_to_the_factor():
    factors = np.array([1.0, 1.25, 1.5, 2.0, 2.75, 7.1])
    counts = np.stack([repeat_counts(factors, epoch_key(4, e)) for e in range(4000)])
    assert (counts >= np.floor(factors)).all() and (counts <= np.floor(factors) + 1).all()
    assert (counts[:, [0, 3]] == [1, 2]).all()  # whole factors never round up
    np.testing.assert_allclose(counts.mean(0), factors, atol=0.03)  # ~4 sigma at 4000 epochs
    order = RepeatFactorOrder(factors, 0.1)
    assert len({len(order.epoch_order(4, e)) for e in range(20)}) > 1  # its length varies


@pytest.mark.parametrize("seed", range(8))
def test_mixture_equals_the_reference(seed):
    rng = np.random.default_rng(100 + seed)
    k = int(rng.integers(1, 5))
    sizes = rng.integers(0, 12, size=k).tolist()
    sizes[0] = max(sizes[0], 1)
    weights = [float(w) if n else 0.0 for w, n in zip(rng.random(k), sizes, strict=True)]
    weights[0] = max(weights[0], 0.01)
    length = int(rng.integers(0, 3 * sum(sizes) + 2))
    got = mixture(sizes, weights, length).epoch_order(seed, 2).tolist()
    assert got == ref_mixture(sizes, weights, length, seed, 2)
    assert ref_quotas(weights, length) == mixture_quotas(weights, length)


def test_mixture_proportions_and_passes_without_replacement():
    sizes, weights = [500, 120, 40], [0.5, 0.3, 0.2]
    mix = mixture(sizes, weights, 3000)
    order = mix.epoch_order(7, 1)
    source = np.searchsorted(np.cumsum(sizes), order, side="right")
    assert np.bincount(source, minlength=3).tolist() == mix.quotas == [1500, 900, 600]
    for window in np.split(source, 6):  # every sixth of the epoch is near the weights
        share = np.bincount(window, minlength=3) / len(window)
        assert np.abs(share - weights).max() < 0.05
    for k, n in enumerate(sizes):  # each pass uses every sample once before any repeats
        local = order[source == k] - sum(sizes[:k])
        for p in range(0, len(local), n):
            chunk = local[p : p + n]
            assert len(np.unique(chunk)) == len(chunk)
    counts = np.bincount(order, minlength=sum(sizes))
    assert (counts[:500] == 3).all()  # source 0: exactly 3 passes
    assert set(counts[500:620].tolist()) == {7, 8}  # source 1: 7.5 passes, each sample 7 or 8


def test_mixture_defaults_and_errors():
    assert mixture([4, 6], None).quotas == [4, 6]  # weights default to the sizes: one pass each
    assert sorted(mixture([4, 6], None).epoch_order(0, 0).tolist()) == list(range(10))
    assert mixture([4, 0, 6], [1, 0, 1], 10).quotas == [5, 0, 5]
    for sizes, weights, length in [([3, 0], [1, 1], 4), ([3], [-1.0], 3), ([3], [math.nan], 3),
                                   ([3, 2], [0, 0], 3), ([3, 2], [1], 3), ([3], [1], -1),
                                   ([3], [True], 3), ([], [], 0)]:
        with pytest.raises(UsageError):
            mixture(sizes, weights, length)
    for t in (0, -1.0, math.inf, math.nan, "0.1"):
        with pytest.raises(UsageError):
            repeat_factors(np.zeros(1, np.int64), np.zeros(1, np.int64), 1, t)
    with pytest.raises(UsageError):
        RepeatFactorOrder(np.array([0.5]), 0.1)  # a factor below 1


@pytest.mark.parametrize("kind", ["mixture", "repeat_factor"])
def test_sampling_orders_resume_on_another_world_size(kind):
    """Stop after 3 batches of one rank, resume on 3 ranks with another batch size: the rest of
    the epoch exactly once, in order; a different configuration is refused."""
    factors = np.array([1 + (i % 5) / 3 for i in range(40)])
    spec = (mixture([25, 9, 6], [0.6, 0.3, 0.1], 50) if kind == "mixture"
            else RepeatFactorOrder(factors, 0.2))
    one = Schedule(spec, batch_size=4, seed=5)
    one.set_epoch(2)
    first = [i for b in one.begin_epoch()[:3] for i in b.tolist()]
    one.mark(3)
    state = one.state_dict()
    length = one.epoch_length()
    ranks = []
    for r in range(3):
        s = Schedule(spec, batch_size=5, seed=0, rank=r, world_size=3, drop_last=False)
        s.load_state_dict(state)
        ranks.append(s.begin_epoch())
    rest = [i for t in range(len(ranks[0])) for r in range(3) for i in ranks[r][t].tolist()]
    assert first + rest[: length - 12] == spec.epoch_order(5, 2).tolist()
    other = (mixture([25, 9, 6], [0.5, 0.3, 0.2], 50) if kind == "mixture"
             else RepeatFactorOrder(factors, 0.3))
    for wrong in (Schedule(other, batch_size=4), Schedule(OrderSpec(40), batch_size=4)):
        if wrong.num_samples != state["num_samples"]:
            continue
        with pytest.raises(UsageError):
            wrong.load_state_dict(state)
    plain = Schedule(OrderSpec(one.num_samples), batch_size=4)
    plain.set_epoch(1)
    plain.mark(1)
    with pytest.raises(UsageError):  # a plain state does not resume a sampling order
        Schedule(spec, batch_size=4).load_state_dict(plain.state_dict())
