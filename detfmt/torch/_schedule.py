"""The epoch schedule shared by `Loader` and `RingDataLoader`: order, rank share, resume.

It holds only what rule O-7 (docs/spec-order.md) needs to resume exactly: seed, epoch, order and
its parameters, drop_last, the global batch and how many global batches were handed out.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from detfmt.errors import UsageError
from detfmt.order import (
    epoch_length,
    epoch_permutation,
    quasi_random_permutation,
    rank_slice,
)

__all__ = [
    "ORDERS", "ElasticSchedule", "EpochSchedule", "default_quasi_block", "default_rank_world",
]

STATE_VERSION = 1
ORDERS = ("random", "quasi_random", "sequential")


def default_quasi_block(nbytes: np.ndarray, target: int = 8 << 20) -> int:
    """Samples per ~8 MiB of payload: rule O-4's block L for near-sequential reads."""
    mean = float(np.mean(nbytes)) if len(nbytes) else 1.0
    return max(1, round(target / max(mean, 1.0)))


def default_rank_world(rank: int | None, world_size: int | None) -> tuple[int, int]:
    """(rank, world_size) as given, else from an initialized torch.distributed, else (0, 1)."""
    if rank is None and world_size is None:
        dist = torch.distributed
        if dist.is_available() and dist.is_initialized():
            return dist.get_rank(), dist.get_world_size()
        return 0, 1
    if rank is None or world_size is None:
        raise UsageError("pass both rank and world_size, or neither")
    if not (isinstance(world_size, int) and world_size >= 1 and isinstance(rank, int)):
        raise UsageError(f"world_size must be a positive int, rank an int: {world_size}, {rank}")
    if not 0 <= rank < world_size:
        raise UsageError(f"rank {rank} is outside [0, {world_size})")
    return rank, world_size


class EpochSchedule:
    """Mixin: which samples this rank reads, batch by batch, and where iteration stands."""

    def _init_schedule(
        self, n: int, batch_size: int, seed: int, drop_last: bool | None, rank: int | None,
        world_size: int | None, order: str, quasi_block: int, quasi_window: int,
    ) -> None:
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
            raise UsageError(f"batch_size must be a positive int, got {batch_size!r}")
        if order not in ORDERS:
            raise UsageError(f"order must be one of {ORDERS}, got {order!r}")
        self.rank, self.world_size = default_rank_world(rank, world_size)
        self.n = int(n)
        self.batch_size = batch_size
        self.seed = int(seed)
        self.drop_last = bool(self.world_size > 1 if drop_last is None else drop_last)
        self.order = order
        self.quasi_block = int(quasi_block)
        self.quasi_window = int(quasi_window)
        self.epoch = 0
        self.batches_done = 0  # global batches handed out in self.epoch

    @property
    def global_batch(self) -> int:
        return self.batch_size * self.world_size

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch whose order the next ``iter()`` runs (restarting it)."""
        if not isinstance(epoch, int) or epoch < 0:
            raise UsageError(f"epoch must be a non-negative int, got {epoch!r}")
        if epoch != self.epoch or self.batches_done >= len(self):
            self.batches_done = 0  # a new epoch, or a finished one run again
        self.epoch = epoch  # the same unfinished epoch keeps its position (resume)

    def epoch_order(self, epoch: int | None = None) -> np.ndarray:
        """The global sample order of an epoch, before drop/padding (rules O-3, O-4)."""
        epoch = self.epoch if epoch is None else epoch
        if self.order == "random":
            return epoch_permutation(self.seed, epoch, self.n)
        if self.order == "quasi_random":
            return quasi_random_permutation(
                self.seed, epoch, self.n, self.quasi_block, self.quasi_window
            )
        return np.arange(self.n, dtype=np.int64)

    def rank_batches(self, epoch: int | None = None) -> list[np.ndarray]:
        """This rank's batches of an epoch, as arrays of sample indices (rule O-6)."""
        rows = rank_slice(
            self.epoch_order(epoch), self.rank, self.world_size, self.batch_size, self.drop_last
        )
        return [np.asarray(row, dtype=np.int64) for row in rows]

    def __len__(self) -> int:
        total = epoch_length(self.n, self.global_batch, self.world_size, self.drop_last)
        return -(-total // self.global_batch) if total else 0

    def state_dict(self) -> dict[str, Any]:
        """Where the iteration stands: enough to resume exactly (rule O-7)."""
        return {
            "version": STATE_VERSION,
            "seed": self.seed,
            "epoch": self.epoch,
            "batches_done": self.batches_done,
            "order": self.order,
            "quasi_block": self.quasi_block,
            "quasi_window": self.quasi_window,
            "num_samples": self.n,
            "global_batch": self.global_batch,
            "drop_last": self.drop_last,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue where ``state`` stopped; thread and (same global batch) rank counts may vary."""
        if not isinstance(state, dict) or state.get("version") != STATE_VERSION:
            raise UsageError("not a detfmt.torch loader state_dict (or from another version)")
        if state["num_samples"] != self.n:
            raise UsageError(f"state is for {state['num_samples']} samples, dataset has {self.n}")
        if state["global_batch"] != self.global_batch:
            raise UsageError(
                f"state has global batch {state['global_batch']}, this loader "
                f"{self.batch_size} x {self.world_size} = {self.global_batch}"
            )
        self.seed = int(state["seed"])
        self.order = state["order"]
        self.quasi_block = int(state["quasi_block"])
        self.quasi_window = int(state["quasi_window"])
        self.drop_last = bool(state["drop_last"])
        self.epoch = int(state["epoch"])
        self.batches_done = int(state["batches_done"])

    def _mark(self, position: int, total: int) -> None:
        """``position`` of this rank's ``total`` batches of the running epoch were handed out."""
        self.batches_done = position

    def _begin_epoch(self) -> tuple[list[np.ndarray], int]:
        """This rank's batches and the position to start at; a finished epoch moves on."""
        batches = self.rank_batches()
        start = self.batches_done
        if start >= len(batches) and start > 0:
            self.epoch += 1
            self.batches_done = start = 0
            batches = self.rank_batches()
        return batches, start


ELASTIC_STATE_KIND = "sharded"


class ElasticSchedule(EpochSchedule):
    """Mixin for sharded datasets: the elastic order of SPEC §19.6 (S-18..S-20).

    The epoch order depends on ``(seed, epoch, shard_window, shuffle)`` and the manifest's
    sample counts only; ranks slice each global batch contiguously (S-19); the position is
    ``samples_seen`` (S-20), so a state resumes on any world size and batch size. With
    ``drop_last`` false the tail is wrap-padded to whole global batches when ``world_size > 1``
    (O-5), and the last batch is short with one rank.
    """

    def _init_elastic(
        self, counts: list[int], batch_size: int, seed: int, drop_last: bool | None,
        rank: int | None, world_size: int | None, shuffle: bool, shard_window: int,
    ) -> None:
        if not isinstance(shard_window, int) or isinstance(shard_window, bool) or shard_window < 1:
            raise UsageError(f"shard_window must be a positive int, got {shard_window!r}")
        self._init_schedule(
            sum(counts), batch_size, seed, drop_last, rank, world_size,
            "random" if shuffle else "sequential", 1, 1,
        )
        self.shard_counts = [int(c) for c in counts]
        self.shuffle = bool(shuffle)
        self.shard_window = shard_window
        self.samples_seen = 0  # position in this epoch's order (S-20)
        self._start_seen = 0  # where the running iteration started

    def plan(self, epoch: int | None = None, samples_seen: int | None = None) -> Any:
        """This rank's `detfmt.shard.order.EpochPlan` from ``samples_seen`` (default: now)."""
        import dataclasses

        from detfmt.shard.order import EpochPlan, OrderState

        epoch = self.epoch if epoch is None else epoch
        seen = self.samples_seen if samples_seen is None else samples_seen
        key = (self.seed, epoch, self.shard_window, self.shuffle)
        cached = getattr(self, "_plan_cache", None)
        if cached is not None and cached[0] == key:  # the order of an epoch is computed once
            plan = dataclasses.replace(
                cached[1], world_size=self.world_size, rank=self.rank,
                batch_size=self.batch_size, samples_seen=seen, drop_last=self.drop_last,
            )
            len(plan)  # the same checks as build (position range)
            return plan
        plan = EpochPlan.build(
            self.shard_counts, OrderState(self.seed, epoch, seen),
            world_size=self.world_size, rank=self.rank, batch_size=self.batch_size,
            window=self.shard_window, shuffle=self.shuffle, drop_last=self.drop_last,
        )
        self._plan_cache = (key, plan)
        return plan

    def epoch_order(self, epoch: int | None = None) -> np.ndarray:
        """The global sample order of an epoch (S-18), before drop/padding."""
        return self.plan(epoch, 0).order

    def rank_batches(self, epoch: int | None = None) -> list[np.ndarray]:
        """This rank's batches of a whole epoch (S-19 with O-5's drop or padding)."""
        return [np.asarray(b, dtype=np.int64) for b in self.plan(epoch, 0).batches()]

    def __len__(self) -> int:
        from detfmt.shard.order import num_steps

        return num_steps(self.n, self.world_size, self.batch_size, 0, self.drop_last)

    def _finished(self) -> bool:
        return self.n > 0 and self.samples_seen >= self.n

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch whose order the next ``iter()`` runs (restarting it)."""
        if not isinstance(epoch, int) or epoch < 0:
            raise UsageError(f"epoch must be a non-negative int, got {epoch!r}")
        if epoch != self.epoch or self._finished():
            self.samples_seen = 0  # a new epoch, or a finished one run again
            self.batches_done = 0
        self.epoch = epoch  # the same unfinished epoch keeps its position (resume)

    def state_dict(self) -> dict[str, Any]:
        """``{seed, epoch, samples_seen}`` (S-20) plus the order's configuration; valid on any
        world size and batch size. ``samples_seen == num_samples`` marks a finished epoch."""
        return {
            "version": STATE_VERSION,
            "kind": ELASTIC_STATE_KIND,
            "seed": self.seed,
            "epoch": self.epoch,
            "samples_seen": self.samples_seen,
            "shard_window": self.shard_window,
            "shuffle": self.shuffle,
            "drop_last": self.drop_last,
            "num_samples": self.n,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue at position ``samples_seen`` of ``epoch`` with the saved seed, shard window
        and shuffle; ranks, batch size, threads and ``drop_last`` may differ from the run that
        saved it (``drop_last`` is this loader's own: it only decides this run's tail)."""
        if (
            not isinstance(state, dict)
            or state.get("version") != STATE_VERSION
            or state.get("kind") != ELASTIC_STATE_KIND
        ):
            raise UsageError("not a detfmt.torch state_dict of a sharded dataset's Loader")
        if state["num_samples"] != self.n:
            raise UsageError(f"state is for {state['num_samples']} samples, dataset has {self.n}")
        seen = state["samples_seen"]
        if not isinstance(seen, int) or not 0 <= seen <= self.n:
            raise UsageError(f"samples_seen {seen!r} outside 0..{self.n}")
        window = state["shard_window"]
        if not isinstance(window, int) or window < 1:
            raise UsageError(f"shard_window {window!r} in the state is not a positive int")
        self.seed = int(state["seed"])
        self.epoch = int(state["epoch"])
        self.shard_window = window
        self.shuffle = bool(state["shuffle"])
        self.order = "random" if self.shuffle else "sequential"
        # drop_last stays this loader's own: it decides only this run's tail, and its natural
        # value depends on the world size, which may differ from the saving run's
        self.samples_seen = seen
        self.batches_done = 0

    def _begin_epoch(self) -> tuple[list[np.ndarray], int]:
        """This rank's remaining batches of the epoch; a finished epoch moves on."""
        if self._finished():
            self.epoch += 1
            self.samples_seen = 0
        self.batches_done = 0
        self._start_seen = self.samples_seen
        return [np.asarray(b, dtype=np.int64) for b in self.plan().batches()], 0

    def _mark(self, position: int, total: int) -> None:
        from detfmt.shard.order import position_after

        self.batches_done = position
        self.samples_seen = position_after(
            self.n, self.world_size, self.batch_size, self._start_seen, position, self.drop_last
        )
