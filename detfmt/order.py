"""Epoch order: the sample permutation and its partition across ranks (numpy only).

The order is a pure function of (seed, epoch, n), defined bit-exactly in docs/spec-order.md, so
any implementation in any language, and any number of threads, workers or ranks, visits the same
samples in the same order. Everything here is vectorized: a 10M-sample permutation is one pass of
integer hashing plus one ``np.sort`` of uint64 keys (no argsort, no Python loop).

Public API (kept small on purpose; the scale-out code builds on it):

- ``epoch_permutation(seed, epoch, n)``: rule O-3, the uniformly shuffled order.
- ``epoch_key(seed, epoch)``, ``splitmix64_stream(state, start, count)`` and
  ``permutation_from_key(state, n)``: the building blocks (rules O-1 to O-3) for derived orders.
- ``quasi_random_permutation(seed, epoch, n, block, window)``: rule O-4, blocks of consecutive
  samples shuffled together, so reads are near-sequential on a cold cache.
- ``epoch_length(n, global_batch, world_size, drop_last)`` and
  ``rank_slice(order, rank, world_size, batch_size, drop_last)``: rules O-5 to O-7.
"""

from __future__ import annotations

import numpy as np

from detfmt.errors import UsageError

__all__ = [
    "GOLDEN_RATIO_64",
    "epoch_key",
    "epoch_length",
    "epoch_permutation",
    "mix64",
    "padded_order",
    "permutation_from_key",
    "quasi_random_permutation",
    "rank_slice",
    "splitmix64_stream",
]

GOLDEN_RATIO_64 = 0x9E3779B97F4A7C15
_MASK64 = (1 << 64) - 1
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
MAX_SAMPLES = 1 << 48  # keys keep >= 16 random bits above the index bits


def _u64(value: int, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise UsageError(f"{name} must be an integer, got {type(value).__name__}")
    value = int(value)
    if not 0 <= value <= _MASK64:
        raise UsageError(f"{name} must be in [0, 2**64), got {value}")
    return value


def _check_n(n: int) -> int:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
        raise UsageError(f"n must be an integer, got {type(n).__name__}")
    n = int(n)
    if not 0 <= n <= MAX_SAMPLES:
        raise UsageError(f"n must be in [0, 2**48], got {n}")
    return n


def mix64(z: int) -> int:
    """The splitmix64 finalizer on one integer (rule O-1), for keys and reference code."""
    z &= _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return z ^ (z >> 31)


_CHUNK = 1 << 16  # 512 KiB of uint64: the hash passes stay in cache


def _mix64_array(z: np.ndarray) -> np.ndarray:
    """mix64 over a uint64 array, in place, chunk by chunk (wrap-around multiply is the rule)."""
    flat = z.reshape(-1)
    tmp = np.empty(min(_CHUNK, flat.size), np.uint64)
    s30, s27, s31 = np.uint64(30), np.uint64(27), np.uint64(31)
    for lo in range(0, flat.size, _CHUNK):
        c = flat[lo : lo + _CHUNK]
        t = tmp[: c.size]
        np.right_shift(c, s30, out=t)
        c ^= t
        c *= _M1
        np.right_shift(c, s27, out=t)
        c ^= t
        c *= _M2
        np.right_shift(c, s31, out=t)
        c ^= t
    return z


def splitmix64_stream(state: int, start: int, count: int) -> np.ndarray:
    """Outputs start .. start+count-1 of the splitmix64 stream seeded with ``state`` (rule O-1).

    Output j is ``mix64(state + (j + 1) * GOLDEN_RATIO_64 mod 2**64)``.
    """
    j = np.arange(start + 1, start + count + 1, dtype=np.uint64)
    j *= np.uint64(GOLDEN_RATIO_64)
    j += np.uint64(state & _MASK64)
    return _mix64_array(j)


def epoch_key(seed: int, epoch: int) -> int:
    """The 64-bit stream state of one epoch (rule O-2): ``mix64(mix64(seed) XOR epoch)``."""
    return mix64(mix64(_u64(seed, "seed")) ^ _u64(epoch, "epoch"))


def permutation_from_key(key: int, n: int) -> np.ndarray:
    """Rule O-3 for a given stream state: sort 0..n-1 by (stream output >> b, index)."""
    if n == 0:
        return np.empty(0, dtype=np.int64)
    bits = max(1, (n - 1).bit_length())
    keys = splitmix64_stream(key, 0, n)
    keys >>= np.uint64(bits)
    keys <<= np.uint64(bits)
    keys |= np.arange(n, dtype=np.uint64)
    keys.sort()  # unique keys: any sort algorithm gives the same result
    keys &= np.uint64((1 << bits) - 1)
    return keys.view(np.int64)


_permutation_from_key = permutation_from_key  # the name detfmt.shard imported first


def epoch_permutation(seed: int, epoch: int, n: int) -> np.ndarray:
    """The shuffled order of samples 0..n-1 for one epoch (rule O-3), as int64.

    A pure function of (seed, epoch, n); different epochs give independent permutations.
    """
    return permutation_from_key(epoch_key(seed, epoch), _check_n(n))


def quasi_random_permutation(
    seed: int, epoch: int, n: int, block: int = 32, window: int = 8
) -> np.ndarray:
    """A near-sequential shuffle (rule O-4): shuffled blocks, mixed within windows of blocks.

    Samples are cut into blocks of ``block`` consecutive indices; the blocks are shuffled; each
    run of ``window`` consecutive shuffled blocks is shuffled as one group. A batch then touches
    at most about ``window`` byte ranges of the blob, so cold reads stay close to sequential.
    """
    n = _check_n(n)
    for name, value in (("block", block), ("window", window)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise UsageError(f"{name} must be a positive integer, got {value!r}")
    block, window = int(block), int(window)
    if n == 0:
        return np.empty(0, dtype=np.int64)
    key = epoch_key(seed, epoch)
    nblocks = -(-n // block)
    group = block * window
    ngroups = -(-nblocks // window)
    states = splitmix64_stream(key, 0, 1 + ngroups)
    block_order = permutation_from_key(int(states[0]), nblocks)
    # virtual sequence v: the blocks in shuffled order, each padded to `block` entries
    virtual = (block_order[:, None] * block + np.arange(block, dtype=np.int64)).ravel()
    total = nblocks * block
    bits = max(1, (group - 1).bit_length())
    local = np.arange(group, dtype=np.uint64)
    with np.errstate(over="ignore"):
        keys = (local + np.uint64(1)) * np.uint64(GOLDEN_RATIO_64) + states[1:, None]
    keys = _mix64_array(keys)
    keys >>= np.uint64(bits)
    keys <<= np.uint64(bits)
    keys |= local
    keys.sort(axis=1)
    keys &= np.uint64((1 << bits) - 1)
    positions = keys.view(np.int64) + (np.arange(ngroups, dtype=np.int64) * group)[:, None]
    positions = positions.ravel()
    positions = positions[positions < total]
    out = virtual[positions]
    return out[out < n]


def epoch_length(n: int, global_batch: int, world_size: int = 1, drop_last: bool = False) -> int:
    """Samples in one epoch's global order after rule O-5's drop or wrap-around padding."""
    n = _check_n(n)
    if global_batch < 1 or world_size < 1 or global_batch % world_size:
        raise UsageError(
            f"global batch {global_batch} must be a positive multiple of world_size {world_size}"
        )
    if drop_last:
        return (n // global_batch) * global_batch
    if world_size == 1:
        return n
    if n == 0:
        return 0
    return -(-n // global_batch) * global_batch


def padded_order(
    order: np.ndarray, global_batch: int, world_size: int = 1, drop_last: bool = False
) -> np.ndarray:
    """Apply rule O-5 to an epoch order: cut to whole global batches, or pad by wrap-around."""
    total = epoch_length(len(order), global_batch, world_size, drop_last)
    if total <= len(order):
        return order[:total]
    return order[np.arange(total) % len(order)]


def rank_slice(
    order: np.ndarray, rank: int, world_size: int, batch_size: int, drop_last: bool = False
) -> np.ndarray:
    """The samples rank ``rank`` reads, in its order (rule O-6), shaped (batches, batch_size).

    Global batch j is ``padded[j*G:(j+1)*G]`` with G = batch_size * world_size; rank r takes its
    contiguous share ``[r*batch_size:(r+1)*batch_size]`` of every global batch, so every rank
    gets the same number of equal batches and the global order does not depend on world_size.
    With world_size 1 and drop_last False, the last row may be short: it is returned as a list.
    """
    if not 0 <= rank < world_size:
        raise UsageError(f"rank {rank} must be in [0, world_size={world_size})")
    if batch_size < 1:
        raise UsageError(f"batch_size must be >= 1, got {batch_size}")
    g = batch_size * world_size
    padded = padded_order(np.asarray(order, dtype=np.int64), g, world_size, drop_last)
    full = len(padded) // g
    mine = padded[: full * g].reshape(full, world_size, batch_size)[:, rank, :]
    tail = padded[full * g :]
    if len(tail):  # only with world_size == 1 and drop_last False
        return [*mine, tail]
    return mine
