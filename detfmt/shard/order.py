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
    "EpochPlan",
    "OrderState",
    "epoch_order",
    "num_steps",
    "rank_batches",
]


def epoch_order(
    counts: Sequence[int], *, seed: int, epoch: int, window: int = 4, shuffle: bool = True
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


def num_steps(total: int, world_size: int, batch_size: int, samples_seen: int = 0) -> int:
    """Batches every rank yields: floor((N - samples_seen) / (world * batch)) (S-19)."""
    if world_size < 1 or batch_size < 1:
        raise UsageError("world_size and batch_size must be >= 1")
    if not 0 <= samples_seen <= total:
        raise UsageError(f"samples_seen {samples_seen} outside 0..{total}")
    return (total - samples_seen) // (world_size * batch_size)


def rank_batches(
    order: np.ndarray, *, world_size: int, rank: int, batch_size: int, samples_seen: int = 0
) -> Iterator[np.ndarray]:
    """Rank ``rank``'s batches: a contiguous slice of each global batch (S-19)."""
    if not 0 <= rank < world_size:
        raise UsageError(f"rank {rank} outside 0..{world_size - 1}")
    g = world_size * batch_size
    for t in range(num_steps(len(order), world_size, batch_size, samples_seen)):
        lo = samples_seen + t * g + rank * batch_size
        yield order[lo : lo + batch_size]


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

    @classmethod
    def build(
        cls,
        counts: Sequence[int],
        state: OrderState,
        *,
        world_size: int = 1,
        rank: int = 0,
        batch_size: int = 1,
        window: int = 4,
        shuffle: bool = True,
    ) -> EpochPlan:
        order = epoch_order(
            counts, seed=state.seed, epoch=state.epoch, window=window, shuffle=shuffle
        )
        shard_of = np.repeat(np.arange(len(counts), dtype=np.int64), np.asarray(counts, np.int64))
        return cls(order, shard_of, world_size, rank, batch_size, state.samples_seen)

    def __len__(self) -> int:
        return num_steps(len(self.order), self.world_size, self.batch_size, self.samples_seen)

    def batches(self) -> Iterator[np.ndarray]:
        return rank_batches(
            self.order,
            world_size=self.world_size,
            rank=self.rank,
            batch_size=self.batch_size,
            samples_seen=self.samples_seen,
        )

    def shard_sequence(self) -> list[int]:
        """Shards in the order this rank first needs them (drives prefetch and cache pinning)."""
        seen: dict[int, None] = {}
        for b in self.batches():
            for k in self.shard_of[b].tolist():
                seen.setdefault(k, None)
        return list(seen)
