"""Elastic global sample order (docs/spec-sharding.md §6, S-17..S-20).

The epoch order is a function of (seed, epoch, window) and the manifest only, so any world size
sees the same global sequence, ranks slice each global batch contiguously, and the resume state
``{seed, epoch, samples_seen}`` is valid on another world size. It reuses the loader's bit-exact
PRNG and permutation (docs/spec-order.md O-1..O-3) with O-4's sub-stream layout: stream output 0
keys the shard permutation, output w + 1 keys window w.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from detfmt.errors import UsageError
from detfmt.order import epoch_key, permutation_from_key, splitmix64_stream

__all__ = [
    "DEFAULT_SHARD_WINDOW",
    "EpochPlan",
    "OrderState",
    "ShardWorkingSet",
    "epoch_order",
    "num_steps",
    "position_after",
    "rank_batches",
]

DEFAULT_SHARD_WINDOW = 4  # shards shuffled together (S-18's W) unless the caller says otherwise


def epoch_order(
    counts: Sequence[int],
    *,
    seed: int,
    epoch: int,
    window: int = DEFAULT_SHARD_WINDOW,
    shuffle: bool = True,
) -> np.ndarray:
    """Global sample indices of one epoch, in visiting order (S-18).

    ``counts`` are the shards' sample counts in manifest order.
    """
    if window < 1:
        raise UsageError(f"shuffle window must be >= 1 shard, got {window}")
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
            [np.arange(firsts[k], firsts[k] + counts[k], dtype=np.int64) for k in members]
        )
        parts.append(idx[permutation_from_key(states[w + 1], len(idx))])
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def _check_position(total: int, samples_seen: int) -> None:
    if not 0 <= samples_seen <= total:
        raise UsageError(f"samples_seen {samples_seen} outside 0..{total}")


def num_steps(
    total: int, world_size: int, batch_size: int, samples_seen: int = 0, drop_last: bool = True
) -> int:
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


def rank_batches(
    order: np.ndarray,
    *,
    world_size: int,
    rank: int,
    batch_size: int,
    samples_seen: int = 0,
    drop_last: bool = True,
) -> Iterator[np.ndarray]:
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


def position_after(
    total: int, world_size: int, batch_size: int, samples_seen: int, steps: int,
    drop_last: bool = True,
) -> int:
    """``samples_seen`` after ``steps`` more steps; the epoch's end is N (the dropped tail or
    the wrap-around padding counts as seen), so a finished epoch is finished on any world size."""
    left = num_steps(total, world_size, batch_size, samples_seen, drop_last)
    if steps >= left:
        return total
    return samples_seen + steps * world_size * batch_size


class ShardWorkingSet:
    """Which shards a sequence of batches needs at each step: the ones in use, and the next
    ``ahead`` shards by first use (to prefetch). Drives cache protection and prefetch for
    remote roots (`ShardedDataset.iter_batches`, the torch `Loader`)."""

    def __init__(
        self, batches: Sequence[np.ndarray], shard_of: np.ndarray, num_shards: int, ahead: int = 2
    ) -> None:
        steps = len(batches)
        self.first = np.full(num_shards, steps, np.int64)
        self.last = np.full(num_shards, -1, np.int64)
        for t, b in enumerate(batches):
            ks = np.unique(shard_of[np.asarray(b, dtype=np.int64)])
            self.first[ks] = np.minimum(self.first[ks], t)
            self.last[ks] = t
        self.by_first = [int(k) for k in np.argsort(self.first, kind="stable") if self.last[k] >= 0]
        self.rank_of = {k: r for r, k in enumerate(self.by_first)}
        self.ahead = int(ahead)

    def wanted(self, lo: int, hi: int | None = None) -> list[int]:
        """Shards used by any step in [lo, hi], then the next ``ahead`` ones not started by hi."""
        hi = lo if hi is None else hi
        first, last = self.first, self.last
        active = [k for k in self.by_first if first[k] <= hi and last[k] >= lo]
        top = max((self.rank_of[k] for k in active), default=-1)
        nxt = self.by_first[top + 1 : top + 1 + self.ahead]
        return active + [k for k in nxt if first[k] > hi]


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
    """One rank's view of one epoch: its batches and the shards they touch, in order."""

    order: np.ndarray
    shard_of: np.ndarray  # global index -> shard number
    world_size: int
    rank: int
    batch_size: int
    samples_seen: int
    drop_last: bool = True

    @classmethod
    def build(
        cls,
        counts: Sequence[int],
        state: OrderState,
        *,
        world_size: int = 1,
        rank: int = 0,
        batch_size: int = 1,
        window: int = DEFAULT_SHARD_WINDOW,
        shuffle: bool = True,
        drop_last: bool = True,
    ) -> EpochPlan:
        order = epoch_order(
            counts, seed=state.seed, epoch=state.epoch, window=window, shuffle=shuffle
        )
        shard_of = np.repeat(np.arange(len(counts), dtype=np.int64), np.asarray(counts, np.int64))
        num_steps(len(order), world_size, batch_size, state.samples_seen, drop_last)  # checks
        if not 0 <= rank < world_size:
            raise UsageError(f"rank {rank} outside 0..{world_size - 1}")
        return cls(
            order, shard_of, world_size, rank, batch_size, state.samples_seen, bool(drop_last)
        )

    def __len__(self) -> int:
        return num_steps(
            len(self.order), self.world_size, self.batch_size, self.samples_seen, self.drop_last
        )

    def batches(self) -> Iterator[np.ndarray]:
        return rank_batches(
            self.order,
            world_size=self.world_size,
            rank=self.rank,
            batch_size=self.batch_size,
            samples_seen=self.samples_seen,
            drop_last=self.drop_last,
        )

    def samples_seen_after(self, steps: int) -> int:
        """The resume position (S-20) once this plan's first ``steps`` steps are consumed."""
        return position_after(
            len(self.order), self.world_size, self.batch_size, self.samples_seen, steps,
            self.drop_last,
        )

    def working_set(self, ahead: int = 2) -> ShardWorkingSet:
        """The shards this rank needs step by step (for cache protection and prefetch)."""
        num_shards = int(self.shard_of[-1]) + 1 if len(self.shard_of) else 0
        return ShardWorkingSet(list(self.batches()), self.shard_of, num_shards, ahead)

    def shard_sequence(self) -> list[int]:
        """Shards in the order this rank first needs them (drives prefetch and cache pinning)."""
        seen: dict[int, None] = {}
        for b in self.batches():
            for k in self.shard_of[b].tolist():
                seen.setdefault(k, None)
        return list(seen)
