"""Epoch order, rank slicing and resume, for every kind of dataset (numpy only; SPEC §18, §19.6).

The order of an epoch is a pure function of (seed, epoch) and the dataset's sample counts,
defined bit-exactly in SPEC.md, so any implementation in any language, and any number of threads,
workers or ranks, visits the same samples in the same order:

- a 1.0 dataset: O-3 (``random``: `epoch_permutation`), O-4 (``quasi_random``:
  `quasi_random_permutation`, near-sequential reads on a cold cache) or ``sequential``;
- a sharded root: S-18 (`sharded_epoch_order`: shards shuffled, then samples within windows of
  ``shard_window`` shards), or ``sequential``.

Everything after the order is one model for both (S-19, S-20, which contain O-5 to O-7): the
global batch ``G = world_size * batch_size`` is sliced contiguously across ranks from a position
``samples_seen``, the tail is dropped or wrap-padded, and the resume state is ``{seed, epoch,
samples_seen}``, valid on any world size and per-rank batch size. `EpochPlan` is one rank's
batches of one epoch; `Schedule` is the stateful position the loaders keep.

Two sampling orders build on the same PRNG and permutation (SPEC §18.9-18.13):

- repeat-factor sampling for rare classes (O-9, O-10: `repeat_factors`, `repeat_factor_order`,
  `RepeatFactorOrder`): an image is visited about ``max(1, sqrt(t / f(c)))`` times per epoch for
  its rarest class c, the fraction rounded stochastically by the epoch's stream;
- a weighted mixture of several datasets (O-11, O-12: `mixture_quotas`, `mixture_epoch_order`,
  `MixtureOrder`): each source's share of an epoch of fixed length, its samples taken pass by
  pass without replacement, the sources interleaved by one permutation.

Their epoch length may differ from the dataset's size (and, with repeat factors, from epoch to
epoch); slicing and resume (S-19, S-20) apply to the epoch's own length.

Everything is vectorized: a 10M-sample permutation is one pass of integer hashing plus one
``np.sort`` of uint64 keys (no argsort, no Python loop).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any, Protocol

import numpy as np

from detfmt.errors import UsageError
from detfmt.format import spec

__all__ = [
    "DEFAULT_SHARD_WINDOW",
    "GOLDEN_RATIO_64",
    "LABEL_BLOCK",
    "ORDERS",
    "EpochOrder",
    "EpochPlan",
    "MixtureOrder",
    "MixtureSource",
    "OrderSpec",
    "OrderState",
    "RepeatFactorOrder",
    "Schedule",
    "SubsetOrder",
    "class_presence",
    "default_quasi_block",
    "epoch_key",
    "epoch_permutation",
    "factors_for",
    "mix64",
    "mixture_epoch_order",
    "mixture_quotas",
    "num_steps",
    "permutation_from_key",
    "position_after",
    "quasi_random_permutation",
    "rank_batches",
    "repeat_counts",
    "repeat_factor_order",
    "repeat_factor_order_for",
    "repeat_factors",
    "sharded_epoch_order",
    "splitmix64_stream",
    "stream_output",
    "uniform53",
]

GOLDEN_RATIO_64 = 0x9E3779B97F4A7C15
_MASK64 = (1 << 64) - 1
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
MAX_SAMPLES = spec.MAX_ORDER_SAMPLES  # keys keep >= 16 random bits above the index bits
ORDERS = ("random", "quasi_random", "sequential")
DEFAULT_SHARD_WINDOW = 4  # shards shuffled together (S-18's W) unless the caller says otherwise


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
        raise UsageError(f"n must be in [0, 2**48], got {n}", rule="ORDER_LIMIT")
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




def sharded_epoch_order(counts: Sequence[int], *, seed: int, epoch: int,
                        window: int = DEFAULT_SHARD_WINDOW, shuffle: bool = True) -> np.ndarray:
    """Global sample indices of one epoch of a sharded root, in visiting order (S-17, S-18).

    ``counts`` are the shards' sample counts in manifest order.
    """
    if isinstance(window, bool) or not isinstance(window, (int, np.integer)) or window < 1:
        raise UsageError(f"shuffle window must be >= 1 shard, got {window!r}")
    counts = [int(c) for c in counts]
    total = sum(counts)
    if not shuffle:
        return np.arange(total, dtype=np.int64)
    firsts = np.concatenate([[0], np.cumsum(counts, dtype=np.int64)[:-1]]) if counts else []
    nwin = -(-len(counts) // window)
    states = splitmix64_stream(epoch_key(seed, epoch), 0, 1 + nwin).tolist()
    shard_perm = permutation_from_key(states[0], len(counts))
    parts = []
    for w in range(nwin):
        members = shard_perm[w * window : (w + 1) * window]
        idx = np.concatenate(
            [np.arange(firsts[k], firsts[k] + counts[k], dtype=np.int64) for k in members])
        parts.append(idx[permutation_from_key(states[w + 1], len(idx))])
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def default_quasi_block(nbytes: np.ndarray, target: int = 8 << 20) -> int:
    """Samples per ~8 MiB of payload: rule O-4's block L for near-sequential reads."""
    mean = float(np.mean(nbytes)) if len(nbytes) else 1.0
    return max(1, round(target / max(mean, 1.0)))


# ------------------------------------------------------------------ repeat factors (O-9, O-10)


def stream_output(state: int, j: int) -> int:
    """``x_j(state)`` of rule O-1, one value (a stream state for a nested stream)."""
    return mix64((state + (j + 1) * GOLDEN_RATIO_64) & _MASK64)


def uniform53(values: np.ndarray) -> np.ndarray:
    """Stream outputs as binary64 in [0, 1): ``(x >> 11) * 2**-53`` (exact; rule O-10)."""
    return (values >> np.uint64(11)).astype(np.float64) * (2.0 ** -53)


def _check_threshold(threshold: float) -> float:
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float, np.floating,
                                                                 np.integer)):
        raise UsageError(f"repeat_threshold must be a number, got {threshold!r}")
    t = float(threshold)
    if not (math.isfinite(t) and t > 0.0):
        raise UsageError(f"repeat_threshold must be finite and > 0, got {threshold!r}")
    return t


def repeat_factors(images: np.ndarray, classes: np.ndarray, num_images: int,
                   threshold: float) -> np.ndarray:
    """Per-image repeat factors of rule O-9 (LVIS repeat-factor sampling), float64 (N,).

    ``images``/``classes`` are the (image, class id) pairs of every valid box (duplicates are
    fine: presence counts). With ``f(c)`` the fraction of images holding class ``c``,
    ``r(c) = max(1, sqrt(t / f(c)))`` and an image's factor is the largest ``r(c)`` of its
    classes (1 without boxes); every step is one correctly rounded binary64 operation, so any
    language gets the same bits.
    """
    n = _check_n(num_images)
    t = _check_threshold(threshold)
    images = np.asarray(images, dtype=np.int64).reshape(-1)
    classes = np.asarray(classes, dtype=np.int64).reshape(-1)
    if images.shape != classes.shape:
        raise UsageError("images and classes must pair up (same length)")
    if images.size and (images.min() < 0 or images.max() >= n or classes.min() < 0):
        raise UsageError("image ids must be in 0..N-1 and class ids >= 0")
    factors = np.ones(n, dtype=np.float64)
    if not images.size:
        return factors
    num_classes = int(classes.max()) + 1
    pairs = np.unique(images * num_classes + classes)  # presence: one entry per (image, class)
    present_images, present_classes = pairs // num_classes, pairs % num_classes
    images_with = np.bincount(present_classes, minlength=num_classes).astype(np.float64)
    with np.errstate(divide="ignore"):
        frequency = images_with / float(n)  # f(c) = n_c / N
        per_class = np.maximum(1.0, np.sqrt(t / frequency))  # classes absent: never indexed
    np.maximum.at(factors, present_images, per_class[present_classes])
    return factors


def _check_factors(factors: np.ndarray) -> np.ndarray:
    factors = np.asarray(factors, dtype=np.float64).reshape(-1)
    _check_n(factors.size)
    if factors.size and not (np.all(np.isfinite(factors)) and factors.min() >= 1.0):
        raise UsageError("repeat factors must be finite and >= 1")
    return factors


def repeat_counts(factors: np.ndarray, state: int) -> np.ndarray:
    """How often each sample is visited in the epoch with stream state ``state`` (rule O-10):
    ``floor(r_i)``, plus one when ``u_i < r_i - floor(r_i)`` (``u_i`` from the stream
    ``x_0(state)``), as int64."""
    factors = _check_factors(factors)
    whole = np.floor(factors)
    u = uniform53(splitmix64_stream(stream_output(state, 0), 0, factors.size))
    return whole.astype(np.int64) + (u < factors - whole)


def repeat_factor_order(factors: np.ndarray, state: int) -> np.ndarray:
    """The repeat-factor order of rule O-10: sample i listed `repeat_counts` times (ascending),
    the list permuted by ``P(x_1(state), L)``."""
    counts = repeat_counts(factors, state)
    total = int(counts.sum())
    if total > MAX_SAMPLES:
        raise UsageError(f"repeat factors give {total} samples in an epoch, more than 2**48",
                         rule="ORDER_LIMIT")
    listed = np.repeat(np.arange(counts.size, dtype=np.int64), counts)
    return listed[permutation_from_key(stream_output(state, 1), total)]


# ------------------------------------------------------------------ mixtures (O-11, O-12)


def _check_weights(weights: Sequence[float]) -> list[float]:
    out = []
    for k, w in enumerate(weights):
        if isinstance(w, bool) or not isinstance(w, (int, float, np.integer, np.floating)):
            raise UsageError(f"weight {k} must be a number, got {w!r}", rule="MIXTURE_WEIGHTS")
        w = float(w)
        if not (math.isfinite(w) and w >= 0.0):
            raise UsageError(f"weight {k} must be finite and >= 0, got {w!r}",
                             rule="MIXTURE_WEIGHTS")
        out.append(w)
    if not out or not any(out):
        raise UsageError("a mixture needs at least one source with a weight > 0",
                         rule="MIXTURE_WEIGHTS")
    return out


def mixture_quotas(weights: Sequence[float], length: int) -> list[int]:
    """Samples of each source in an epoch of ``length`` samples (rule O-11).

    Largest remainder on exact rationals of the binary64 weights: source k gets
    ``floor(L * w_k / W)``, and the samples left over go one each to the sources with the
    largest fractional parts (ties: the smaller k). The quotas sum to ``length``.
    """
    weights = _check_weights(weights)
    length = _check_n(length)
    exact = [Fraction(w) for w in weights]
    total = sum(exact, Fraction(0))
    shares = [length * w / total for w in exact]
    quotas = [math.floor(s) for s in shares]
    left = length - sum(quotas)
    by_remainder = sorted(range(len(shares)), key=lambda k: (-(shares[k] - quotas[k]), k))
    for k in by_remainder[:left]:
        quotas[k] += 1
    return quotas


def mixture_epoch_order(quotas: Sequence[int], offsets: Sequence[int], key: int,
                        pass_order: Callable[[int, int], np.ndarray]) -> np.ndarray:
    """The mixture order of rule O-12 for epoch key ``key``.

    ``pass_order(k, state)`` is one pass over source k's local indices for a stream state
    (O-3's ``P(state, N_k)``, or O-10's order with repeat factors). Source k's list is its
    passes j = 0, 1, ... (states ``x_j(x_(k+1)(key))``) concatenated and cut to ``quotas[k]``
    samples, shifted by ``offsets[k]``; the positions of the epoch are given to the sources by
    ``P(x_0(key), L)`` over the list of source labels (``quotas[k]`` labels k, in order), and
    each source fills its positions with its list, in order.
    """
    quotas = [int(c) for c in quotas]
    total = sum(quotas)
    _check_n(total)
    labels = np.repeat(np.arange(len(quotas), dtype=np.int64), quotas)
    source_at = labels[permutation_from_key(stream_output(key, 0), total)]
    order = np.empty(total, dtype=np.int64)
    for k, quota in enumerate(quotas):
        if quota == 0:
            continue
        source_key = stream_output(key, k + 1)
        taken: list[np.ndarray] = []
        got = 0
        j = 0
        while got < quota:
            one_pass = np.asarray(pass_order(k, stream_output(source_key, j)), dtype=np.int64)
            if not one_pass.size:
                raise UsageError(f"mixture source {k} is empty but its quota is {quota}",
                                 rule="MIXTURE_WEIGHTS")
            taken.append(one_pass[: quota - got])
            got += len(taken[-1])
            j += 1
        order[source_at == k] = np.concatenate(taken) + int(offsets[k])
    return order


def _positive(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise UsageError(f"{name} must be a positive int, got {value!r}")
    return int(value)


@dataclass(frozen=True)
class OrderSpec:
    """Everything that fixes an epoch's order besides (seed, epoch).

    ``shard_counts`` is None for a 1.0 dataset (orders O-3, O-4, sequential) and the manifest's
    per-shard sample counts for a sharded root (S-18 with ``shard_window``, or sequential).
    """

    num_samples: int
    order: str = "random"
    shard_counts: tuple[int, ...] | None = None
    shard_window: int = DEFAULT_SHARD_WINDOW
    quasi_block: int = 32
    quasi_window: int = 8

    def __post_init__(self) -> None:
        if self.order not in ORDERS:
            raise UsageError(f"order must be one of {ORDERS}, got {self.order!r}")
        if self.shard_counts is not None and self.order == "quasi_random":
            raise UsageError("order='quasi_random' is for 1.0 datasets; a sharded root's order "
                             "already reads whole shards in windows (shard_window)")
        for name in ("shard_window", "quasi_block", "quasi_window"):
            _positive(name, getattr(self, name))

    def epoch_order(self, seed: int, epoch: int) -> np.ndarray:
        """The global sample order of one epoch, before rank slicing and tail handling."""
        if self.order == "sequential":
            return np.arange(self.num_samples, dtype=np.int64)
        if self.shard_counts is not None:
            return sharded_epoch_order(self.shard_counts, seed=seed, epoch=epoch,
                                       window=self.shard_window)
        if self.order == "quasi_random":
            return quasi_random_permutation(seed, epoch, self.num_samples, self.quasi_block,
                                            self.quasi_window)
        return epoch_permutation(seed, epoch, self.num_samples)

    def config(self) -> dict[str, Any]:
        """The parameters a resume state carries (the order, not the dataset)."""
        return {"order": self.order, "shard_window": self.shard_window,
                "quasi_block": self.quasi_block, "quasi_window": self.quasi_window}

    def configured(self, state: Mapping[str, Any]) -> OrderSpec:
        """This dataset's order with the configuration a resume state was saved with (the
        saved order wins: resuming continues the order that was running)."""
        if state.get("order") not in ORDERS:
            raise UsageError(f"the state was saved with order {state.get('order')!r}, this "
                             f"loader runs {self.order!r}: resume with the same sampling "
                             "options (repeat_threshold, mixture weights)",
                             rule="RESUME_MISMATCH")
        try:
            return replace(self, order=state["order"], shard_window=state["shard_window"],
                           quasi_block=state["quasi_block"], quasi_window=state["quasi_window"])
        except (TypeError, KeyError) as error:
            raise UsageError(f"not a detfmt loader state: {error}") from error


class EpochOrder(Protocol):
    """What a `Schedule` needs of an order: the index space, the name, each epoch's order, and
    the configuration a resume state carries (`OrderSpec`, `RepeatFactorOrder`,
    `MixtureOrder`)."""

    @property
    def num_samples(self) -> int:
        """Size of the index space (the dataset's, or the mixture's summed, sample count)."""

    @property
    def order(self) -> str: ...

    def epoch_order(self, seed: int, epoch: int) -> np.ndarray:
        """The global order of one epoch (its length may differ from ``num_samples``)."""

    def config(self) -> dict[str, Any]: ...

    def configured(self, state: Mapping[str, Any]) -> EpochOrder:
        """This order, checked against (or adapted to) a saved state's configuration."""


def _digest(factors: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(factors, dtype="<f8").tobytes()).hexdigest()[:16]


def _same(state: Mapping[str, Any], config: Mapping[str, Any]) -> None:
    """A resume state must have been saved with exactly this configuration."""
    for name, value in config.items():
        saved = state.get(name)
        if saved != value:
            raise UsageError(f"the state was saved with {name}={saved!r}, this loader has "
                             f"{value!r}: resume with the same datasets and sampling options",
                             rule="RESUME_MISMATCH")


class RepeatFactorOrder:
    """Repeat-factor sampling over one dataset (rules O-9, O-10): each epoch visits sample i
    ``floor(r_i)`` or ``floor(r_i) + 1`` times, shuffled. Build one from a dataset with
    `repeat_factor_order_for`."""

    order = "repeat_factor"

    def __init__(self, factors: np.ndarray, threshold: float) -> None:
        self.factors = _check_factors(factors).copy()
        self.factors.flags.writeable = False
        self.threshold = _check_threshold(threshold)
        self.digest = _digest(self.factors)

    @property
    def num_samples(self) -> int:
        return int(self.factors.size)

    def epoch_order(self, seed: int, epoch: int) -> np.ndarray:
        return repeat_factor_order(self.factors, epoch_key(seed, epoch))

    def config(self) -> dict[str, Any]:
        return {"order": self.order, "repeat_threshold": self.threshold,
                "repeat_factors_sha256": self.digest}

    def configured(self, state: Mapping[str, Any]) -> RepeatFactorOrder:
        _same(state, self.config())
        return self

    def __repr__(self) -> str:
        return (f"RepeatFactorOrder(samples={self.num_samples}, threshold={self.threshold}, "
                f"mean factor={float(self.factors.mean()) if self.factors.size else 1.0:.3f})")


class SubsetOrder:
    """Some of a dataset's samples: by default the same samples in the same order every epoch
    (e.g. one rank's contiguous share of a validation set, so that the ranks together read each
    sample once); with ``shuffle``, each epoch in the order O-3 gives ``len(indices)`` samples,
    mapped through ``indices`` (a training subset, no copy of the dataset)."""

    order = "subset"

    def __init__(self, num_samples: int, indices: Sequence[int] | np.ndarray, *,
                 shuffle: bool = False) -> None:
        self.shuffle = bool(shuffle)
        self._total = _check_n(num_samples)
        self.indices = np.array(indices, dtype=np.int64).reshape(-1)
        if self.indices.size and (self.indices.min() < 0 or self.indices.max() >= self._total):
            raise UsageError(f"subset indices must be in 0..{self._total - 1}")
        self.indices.flags.writeable = False
        self.digest = _digest(self.indices.astype(np.float64))

    @classmethod
    def share(cls, num_samples: int, rank: int, world_size: int) -> SubsetOrder:
        """Rank ``rank``'s contiguous share ``[N*r//R, N*(r+1)//R)`` of ``0..N-1``."""
        if not 0 <= rank < world_size:
            raise UsageError(f"rank {rank} outside 0..{world_size - 1}")
        lo, hi = num_samples * rank // world_size, num_samples * (rank + 1) // world_size
        return cls(num_samples, np.arange(lo, hi, dtype=np.int64))

    @property
    def num_samples(self) -> int:
        return self._total

    def epoch_order(self, seed: int, epoch: int) -> np.ndarray:
        if self.shuffle:
            return self.indices[epoch_permutation(seed, epoch, int(self.indices.size))]
        return self.indices.copy()  # batches are views of it, handed out as writable tensors

    def config(self) -> dict[str, Any]:
        return {"order": self.order, "subset_length": int(self.indices.size),
                "subset_sha256": self.digest, "subset_shuffle": self.shuffle}

    def configured(self, state: Mapping[str, Any]) -> SubsetOrder:
        _same(state, self.config())
        return self


@dataclass(frozen=True, eq=False)
class MixtureSource:
    """One source of a mixture: its sample count and, for repeat-factor sampling inside it,
    its factors (O-9) and threshold."""

    num_samples: int
    factors: np.ndarray | None = None
    threshold: float | None = None

    def pass_order(self, state: int) -> np.ndarray:
        """One pass over the source's local indices (O-12): O-3's ``P(state, N_k)``, or O-10's
        order with repeat factors."""
        if self.factors is None:
            return permutation_from_key(state, self.num_samples)
        return repeat_factor_order(self.factors, state)

    def config(self) -> dict[str, Any]:
        return {"samples": self.num_samples, "repeat_threshold": self.threshold,
                "repeat_factors_sha256": None if self.factors is None else _digest(self.factors)}


class MixtureOrder:
    """A weighted mixture of datasets (rules O-11, O-12): an epoch of ``epoch_length`` samples
    (default: all sources' samples together), source k's share by the largest remainder of its
    weight, taken pass by pass through its own shuffled order (no sample repeats before the
    source is exhausted), the sources interleaved by one permutation. Indices are global over
    the sources concatenated in order (source k's sample j is ``offsets[k] + j``)."""

    order = "mixture"

    def __init__(self, sources: Sequence[MixtureSource], weights: Sequence[float] | None = None,
                 epoch_length: int | None = None) -> None:
        self.sources = tuple(sources)
        if not self.sources:
            raise UsageError("a mixture needs at least one source")
        sizes = [s.num_samples for s in self.sources]
        self.weights = _check_weights([float(n) for n in sizes] if weights is None else weights)
        if len(self.weights) != len(self.sources):
            raise UsageError(f"{len(self.weights)} weights for {len(self.sources)} sources")
        total = sum(sizes)
        self.epoch_length = _check_n(total if epoch_length is None else epoch_length)
        self.quotas = mixture_quotas(self.weights, self.epoch_length)
        for k, (quota, size) in enumerate(zip(self.quotas, sizes, strict=True)):
            if quota and not size:
                raise UsageError(f"mixture source {k} has no samples but weight "
                                 f"{self.weights[k]!r}", rule="MIXTURE_WEIGHTS")
        self.offsets = [0, *np.cumsum(sizes, dtype=np.int64).tolist()[:-1]]
        self._total = total

    @property
    def num_samples(self) -> int:
        return self._total

    def epoch_order(self, seed: int, epoch: int) -> np.ndarray:
        return mixture_epoch_order(self.quotas, self.offsets, epoch_key(seed, epoch),
                                   lambda k, state: self.sources[k].pass_order(state))

    def config(self) -> dict[str, Any]:
        return {"order": self.order, "weights": list(self.weights),
                "epoch_length": self.epoch_length,
                "sources": [s.config() for s in self.sources]}

    def configured(self, state: Mapping[str, Any]) -> MixtureOrder:
        _same(state, self.config())
        return self

    def __repr__(self) -> str:
        return (f"MixtureOrder(sources={len(self.sources)}, quotas={self.quotas}, "
                f"epoch_length={self.epoch_length})")


def _check_position(total: int, samples_seen: int) -> None:
    if isinstance(samples_seen, bool) or not isinstance(samples_seen, (int, np.integer)) \
            or not 0 <= samples_seen <= total:
        raise UsageError(f"samples_seen {samples_seen!r} outside 0..{total}")


def num_steps(total: int, world_size: int, batch_size: int, samples_seen: int = 0,
              drop_last: bool = True) -> int:
    """Batches every rank yields from position ``samples_seen`` on (S-19, O-5).

    ``drop_last``: floor((N - samples_seen) / G) with G = world * batch; otherwise
    ceil((N - samples_seen) / G) (padded by wrap-around when world > 1, the last batch short when
    world == 1).
    """
    if world_size < 1 or batch_size < 1:
        raise UsageError("world_size and batch_size must be >= 1")
    _check_position(total, samples_seen)
    g = world_size * batch_size
    left = total - samples_seen
    return left // g if drop_last else -(-left // g)


def rank_batches(order: np.ndarray, *, world_size: int, rank: int, batch_size: int,
                 samples_seen: int = 0, drop_last: bool = True) -> Iterator[np.ndarray]:
    """Rank ``rank``'s batches: a contiguous slice of each global batch (S-19).

    Step t covers positions [p0 + tG, p0 + (t+1)G) of the epoch order (p0 = ``samples_seen``);
    rank r takes [p0 + tG + rB, p0 + tG + (r+1)B). With ``drop_last`` false and world > 1,
    positions p >= N hold ``order[p mod N]`` (O-5 wrap-around padding), so every rank yields
    the same number of full batches; with world 1 the last batch is short instead.
    """
    if not 0 <= rank < world_size:
        raise UsageError(f"rank {rank} outside 0..{world_size - 1}")
    n = len(order)
    g = world_size * batch_size
    pad = not drop_last and world_size > 1
    for t in range(num_steps(n, world_size, batch_size, samples_seen, drop_last)):
        lo = samples_seen + t * g + rank * batch_size
        hi = lo + batch_size
        if hi <= n:
            yield order[lo:hi]
        elif pad:
            yield order[np.arange(lo, hi, dtype=np.int64) % n]
        else:
            yield order[lo:n]


def position_after(total: int, world_size: int, batch_size: int, samples_seen: int, steps: int,
                   drop_last: bool = True) -> int:
    """``samples_seen`` after ``steps`` more steps; the epoch's end is N (the dropped tail or
    the wrap-around padding counts as seen), so a finished epoch is finished on any world size."""
    left = num_steps(total, world_size, batch_size, samples_seen, drop_last)
    if steps >= left:
        return total
    return samples_seen + steps * world_size * batch_size


@dataclass(frozen=True)
class OrderState:
    """Resume state (S-20): a position in the epoch order, valid on any world size."""

    seed: int
    epoch: int
    samples_seen: int = 0

    def advanced(self, steps: int, world_size: int, batch_size: int) -> OrderState:
        seen = self.samples_seen + steps * world_size * batch_size
        return OrderState(self.seed, self.epoch, seen)


@dataclass(frozen=True)
class EpochPlan:
    """One rank's view of one epoch: its batches from position ``samples_seen`` on."""

    order: np.ndarray
    world_size: int
    rank: int
    batch_size: int
    samples_seen: int
    drop_last: bool = True

    @classmethod
    def build(cls, spec_: EpochOrder, state: OrderState, *, world_size: int = 1, rank: int = 0,
              batch_size: int = 1, drop_last: bool = True,
              order: np.ndarray | None = None) -> EpochPlan:
        """The plan of ``state``'s epoch (``order``: that epoch's order, when already known)."""
        _positive("world_size", world_size)
        _positive("batch_size", batch_size)
        if not 0 <= rank < world_size:
            raise UsageError(f"rank {rank} outside 0..{world_size - 1}")
        if order is None:
            order = spec_.epoch_order(state.seed, state.epoch)
        num_steps(len(order), world_size, batch_size, state.samples_seen, drop_last)  # checks
        return cls(order, world_size, rank, batch_size, state.samples_seen, bool(drop_last))

    def __len__(self) -> int:
        return num_steps(len(self.order), self.world_size, self.batch_size, self.samples_seen,
                         self.drop_last)

    def batches(self) -> Iterator[np.ndarray]:
        return rank_batches(self.order, world_size=self.world_size, rank=self.rank,
                            batch_size=self.batch_size, samples_seen=self.samples_seen,
                            drop_last=self.drop_last)

    def samples_seen_after(self, steps: int) -> int:
        """The resume position (S-20) once this plan's first ``steps`` steps are consumed."""
        return position_after(len(self.order), self.world_size, self.batch_size,
                              self.samples_seen, steps, self.drop_last)

    def position(self, step: int) -> int:
        """Position in the epoch order of this rank's first sample of batch ``step``."""
        return self.samples_seen + step * self.world_size * self.batch_size \
            + self.rank * self.batch_size


STATE_VERSION = 2


class Schedule:
    """Where an iteration over a dataset stands: seed, epoch, position; and this rank's share.

    The loaders keep one. ``state_dict()`` is ``{seed, epoch, samples_seen}`` plus the order's
    configuration (S-20): it resumes on any world size, per-rank batch size and thread count,
    for 1.0 datasets, sharded roots, repeat-factor orders and mixtures alike. ``drop_last`` is
    this run's own choice (it only decides this run's tail). Positions count in the epoch's own
    order, whose length (`epoch_length`) may differ from the dataset's size.
    """

    def __init__(self, spec_: EpochOrder, *, batch_size: int, seed: int = 0, rank: int = 0,
                 world_size: int = 1, drop_last: bool | None = None) -> None:
        self.spec = spec_
        self.batch_size = _positive("batch_size", batch_size)
        self.world_size = _positive("world_size", world_size)
        if isinstance(rank, bool) or not isinstance(rank, (int, np.integer)) \
                or not 0 <= rank < world_size:
            raise UsageError(f"rank {rank!r} is outside [0, {world_size})")
        self.rank = int(rank)
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
            raise UsageError(f"seed must be an int, got {seed!r}")
        self.seed = int(seed)
        self.drop_last = bool(self.world_size > 1 if drop_last is None else drop_last)
        self.epoch = 0
        self.samples_seen = 0  # position in this epoch's order (S-20)
        self._start = 0  # where the running iteration started
        self._cached: tuple[tuple, np.ndarray] | None = None

    @property
    def num_samples(self) -> int:
        return self.spec.num_samples

    @property
    def global_batch(self) -> int:
        return self.batch_size * self.world_size

    def epoch_length(self, epoch: int | None = None) -> int:
        """Positions in an epoch's order (the dataset's size, except for repeat factors and
        mixtures)."""
        return len(self.epoch_order(epoch))

    def __len__(self) -> int:
        """Batches this rank yields in the whole current epoch."""
        return num_steps(self.epoch_length(), self.world_size, self.batch_size, 0,
                         self.drop_last)

    def epoch_order(self, epoch: int | None = None) -> np.ndarray:
        """The global order of an epoch (computed once per epoch)."""
        epoch = self.epoch if epoch is None else epoch
        key = (self.seed, epoch, self.spec)
        if self._cached is None or self._cached[0] != key:
            self._cached = (key, self.spec.epoch_order(self.seed, epoch))
        return self._cached[1]

    def plan(self, epoch: int | None = None, samples_seen: int | None = None) -> EpochPlan:
        """This rank's plan of an epoch from ``samples_seen`` (default: where it stands now)."""
        epoch = self.epoch if epoch is None else epoch
        seen = self.samples_seen if samples_seen is None else samples_seen
        return EpochPlan.build(self.spec, OrderState(self.seed, epoch, seen),
                               world_size=self.world_size, rank=self.rank,
                               batch_size=self.batch_size, drop_last=self.drop_last,
                               order=self.epoch_order(epoch))

    def rank_batches(self, epoch: int | None = None) -> list[np.ndarray]:
        """This rank's batches of a whole epoch."""
        return [np.asarray(b, dtype=np.int64) for b in self.plan(epoch, 0).batches()]

    def _finished(self) -> bool:
        length = self.epoch_length()
        return length > 0 and self.samples_seen >= length

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch the next iteration runs; a new epoch (or a finished one) restarts at
        position 0, the same unfinished epoch continues (resume)."""
        if isinstance(epoch, bool) or not isinstance(epoch, (int, np.integer)) or epoch < 0:
            raise UsageError(f"epoch must be a non-negative int, got {epoch!r}")
        if epoch != self.epoch or self._finished():
            self.samples_seen = 0
        self.epoch = int(epoch)

    def begin_epoch(self) -> list[np.ndarray]:
        """This rank's remaining batches of the epoch; a finished epoch moves to the next."""
        if self._finished():
            self.epoch += 1
            self.samples_seen = 0
        self._start = self.samples_seen
        return [np.asarray(b, dtype=np.int64) for b in self.plan().batches()]

    def position(self, step: int) -> int:
        """Epoch-order position of this rank's first sample in batch ``step`` of the batches
        `begin_epoch` returned (a key for per-batch randomness that a resume reproduces)."""
        return self._start + step * self.global_batch + self.rank * self.batch_size

    def mark(self, steps: int) -> None:
        """``steps`` of the batches `begin_epoch` returned were handed out."""
        self.samples_seen = position_after(self.epoch_length(), self.world_size,
                                           self.batch_size, self._start, steps, self.drop_last)

    def state_dict(self) -> dict[str, Any]:
        """``{seed, epoch, samples_seen}`` and the order's configuration (S-20); ``samples_seen
        == epoch_length`` marks a finished epoch."""
        return {"version": STATE_VERSION, "seed": self.seed, "epoch": self.epoch,
                "samples_seen": self.samples_seen, "num_samples": self.num_samples,
                **self.spec.config()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue at position ``samples_seen`` of ``epoch`` with the saved seed and order;
        world size, batch size, threads and ``drop_last`` may differ from the saving run.

        States of the previous loaders (version 1: ``batches_done`` of a 1.0 loader, or the
        sharded loader's ``samples_seen``) are accepted."""
        state = _upgrade_state(state, self.spec)
        if state.get("num_samples") != self.num_samples:
            raise UsageError(f"state is for {state.get('num_samples')} samples, the dataset "
                             f"has {self.num_samples}", rule="RESUME_MISMATCH")
        spec_ = self.spec.configured(state)
        try:
            seed, epoch = int(state["seed"]), int(state["epoch"])
        except (TypeError, KeyError, ValueError) as error:
            raise UsageError(f"not a detfmt loader state: {error}") from error
        _check_position(len(spec_.epoch_order(seed, epoch)), state.get("samples_seen"))
        self.spec = spec_
        self.seed = seed
        self.epoch = epoch
        self.samples_seen = int(state["samples_seen"])


def _upgrade_state(state: Mapping[str, Any], spec_: EpochOrder) -> dict[str, Any]:
    if not isinstance(state, Mapping) or state.get("version") not in (1, STATE_VERSION):
        raise UsageError("not a detfmt loader state_dict (or from an unknown version)")
    state = dict(state)
    if state["version"] == STATE_VERSION:
        return state
    quasi = {"quasi_block": getattr(spec_, "quasi_block", 32),
             "quasi_window": getattr(spec_, "quasi_window", 8)}
    if state.get("kind") == "sharded":  # version 1 of the sharded loader
        return {**state, "order": "random" if state.get("shuffle", True) else "sequential",
                **quasi}
    # version 1 of the 1.0 loader: batches_done global batches of global_batch samples (the O-7
    # of SPEC 1.2; 1.2.1 states resume as a position)
    n, g = int(state["num_samples"]), int(state["global_batch"])
    done = int(state["batches_done"])
    finished = done >= num_steps(n, 1, g, 0, bool(state.get("drop_last", False)))
    return {**state, "samples_seen": n if finished else done * g,
            "shard_window": getattr(spec_, "shard_window", DEFAULT_SHARD_WINDOW)}


# Repeat-factor sampling from a dataset's labels (SPEC §18.9-18.10). The factors need, for
# every image, the classes of its valid boxes, read through ``ds.labels`` (the checked label
# gather every batch uses), a block at a time: a label that breaks a rule is the same typed
# error here as in a batch, never a silently skewed factor.

LABEL_BLOCK = 1 << 16  # samples per labels() call: bounded memory on large datasets


def class_presence(ds: Any, class_map: np.ndarray | None = None,
                   block: int = LABEL_BLOCK) -> tuple[np.ndarray, np.ndarray]:
    """(image, class id) of every valid box of ``ds`` as two int64 arrays.

    ``class_map`` (optional) maps the dataset's class ids to other ids (a mixture's), before
    presence is counted, so classes merged by a mapping count as one.
    """
    n = len(ds)
    images: list[np.ndarray] = []
    classes: list[np.ndarray] = []
    for start in range(0, n, block):
        rows = np.arange(start, min(n, start + block), dtype=np.int64)
        labels = ds.labels(rows)
        hit_rows, hit_slots = np.nonzero(np.asarray(labels.mask))
        ids = np.asarray(labels.classes)[hit_rows, hit_slots].astype(np.int64)
        if class_map is not None:
            ids = np.asarray(class_map, dtype=np.int64)[ids]
        images.append(rows[hit_rows])
        classes.append(ids)
    if not images:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return np.concatenate(images), np.concatenate(classes)


def factors_for(ds: Any, threshold: float, class_map: np.ndarray | None = None) -> np.ndarray:
    """The O-9 repeat factors of every image of ``ds`` (float64, (N,))."""
    if len(ds) == 0:
        raise UsageError("repeat-factor sampling needs a dataset with samples",
                         path=getattr(ds, "location", None))
    images, classes = class_presence(ds, class_map)
    return repeat_factors(images, classes, len(ds), threshold)


def repeat_factor_order_for(ds: Any, threshold: float) -> RepeatFactorOrder:
    """Repeat-factor sampling over ``ds`` (O-9, O-10) with frequency threshold ``threshold``:
    an image whose rarest class is held by a fraction ``f < t`` of the images is visited about
    ``sqrt(t / f)`` times per epoch."""
    return RepeatFactorOrder(factors_for(ds, threshold), threshold)
