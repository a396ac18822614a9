"""The epoch order against a deliberately simple scalar reference of docs/spec-order.md."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from detfmt.errors import UsageError
from detfmt.order import (
    epoch_length,
    epoch_permutation,
    mix64,
    padded_order,
    quasi_random_permutation,
    rank_slice,
)

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


def sha(values) -> str:
    return hashlib.sha256(np.asarray(values, dtype="<i8").tobytes()).hexdigest()


# Golden vectors computed by the scalar reference above (also in docs/spec-order.md O-8).
GOLDEN_SMALL = [2, 4, 6, 8, 5, 1, 7, 0, 9, 3]
GOLDEN = {
    (0, 0, 10): "4048f57cfe899a4cbf46ddcca0766068303964e86361cf8ee228139e8abc808b",
    (123, 7, 1000): "709328b0cd2ce2f8672e857c861c28b53bee608c17b08ee97bde143887807938",
}
GOLDEN_QUASI = [19, 18, 10, 16, 8, 11, 17, 9, 22, 21, 20, 0, 1, 2, 3, 13, 7, 14, 12, 4, 5, 15, 6]


def test_mix64_vectors():
    assert mix64(0) == 0
    assert mix64(1) == ref_mix64(1) == 0x5692161D100B05E5


def test_golden_vectors_from_scalar_reference():
    assert reference_permutation(0, 0, 10) == GOLDEN_SMALL
    for (seed, epoch, n), digest in GOLDEN.items():
        assert sha(reference_permutation(seed, epoch, n)) == digest
        assert sha(epoch_permutation(seed, epoch, n)) == digest
    assert epoch_permutation(0, 0, 10).tolist() == GOLDEN_SMALL
    assert reference_quasi(1, 0, 23, 4, 2) == GOLDEN_QUASI
    assert quasi_random_permutation(1, 0, 23, 4, 2).tolist() == GOLDEN_QUASI


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


def test_permutation_properties():
    p = epoch_permutation(5, 0, 10_000)
    assert p.dtype == np.int64
    assert np.array_equal(np.sort(p), np.arange(10_000))
    assert not np.array_equal(p, epoch_permutation(5, 1, 10_000))
    assert not np.array_equal(p, epoch_permutation(6, 0, 10_000))
    assert np.array_equal(p, epoch_permutation(5, 0, 10_000))


def test_quasi_is_local():
    q = quasi_random_permutation(0, 0, 4096, block=16, window=4)
    # every run of 64 consecutive positions comes from at most 4 blocks of 16 samples
    for lo in range(0, 4096, 64):
        assert len(np.unique(q[lo : lo + 64] // 16)) <= 4


def test_bad_arguments_are_usage_errors():
    for args in [(-1, 0, 3), (0, -1, 3), (0, 0, -1), (0, 2**64, 3), (0.5, 0, 3), (0, 0, 2**49)]:
        with pytest.raises(UsageError):
            epoch_permutation(*args)
    with pytest.raises(UsageError):
        quasi_random_permutation(0, 0, 10, block=0)
    with pytest.raises(UsageError):
        rank_slice(np.arange(10), 2, 2, 3)


@pytest.mark.parametrize("n", [0, 1, 5, 31, 32, 33, 100])
@pytest.mark.parametrize("world,batch", [(1, 4), (2, 4), (3, 5), (4, 1)])
@pytest.mark.parametrize("drop_last", [False, True])
def test_rank_partition(n, world, batch, drop_last):
    order = epoch_permutation(3, 1, n)
    shares = [rank_slice(order, r, world, batch, drop_last) for r in range(world)]
    total = epoch_length(n, world * batch, world, drop_last)
    if world > 1:
        sizes = {np.asarray(s).size for s in shares}
        assert len(sizes) == 1  # equal shares
        counts = [len(s) for s in shares]
        assert len(set(counts)) == 1 and all(len(row) == batch for s in shares for row in s)
    flat = np.concatenate([np.concatenate([np.asarray(r) for r in s]) if len(s) else
                           np.empty(0, np.int64) for s in shares])
    assert flat.size == total
    if drop_last:
        assert len(np.unique(flat)) == flat.size  # disjoint
    else:
        assert set(flat.tolist()) == set(range(n))  # covering
        if total <= n:
            assert len(np.unique(flat)) == flat.size
        else:  # padding repeats exactly the first total - n samples of the order
            assert np.array_equal(padded_order(order, world * batch, world)[n:],
                                  order[np.arange(n, total) % max(n, 1)])


def test_elastic_same_global_batches():
    order = epoch_permutation(11, 4, 1000)
    two = [rank_slice(order, r, 2, 16, True) for r in range(2)]
    four = [rank_slice(order, r, 4, 8, True) for r in range(4)]
    for j in range(len(two[0])):
        a = np.concatenate([two[r][j] for r in range(2)])
        b = np.concatenate([four[r][j] for r in range(4)])
        assert np.array_equal(a, b)
        assert np.array_equal(a, order[j * 32 : (j + 1) * 32])
