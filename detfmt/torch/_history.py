"""Resuming transforms that carry samples from batch to batch (`Mosaic`'s ring buffer).

Such a transform's output depends on the samples it was given before (its ``history``: how many
of the most recent ones). A loader's position (seed, epoch, samples_seen) fixes which samples
those were, so the loader does not save them: when a pass starts anywhere but where the
transform left off (a resume, a new transform, a pass stopped early while batches ran ahead),
it empties the transform (``reset_history``) and runs it again over this rank's batches that
precede the start, back to ``history`` samples, before the first new batch. The transform
then holds what it held in the uninterrupted run, and the batches that follow are identical.

That replay assumes the batches before the start were cut as this run cuts them: the same
batch size, world size and ``drop_last``, and every earlier epoch run from its start. A state
saved with another batching is still resumed (at the same position), but the replayed history
is this run's, not the saving run's: the loader warns.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from detfmt.order import Schedule

__all__ = ["batching", "check_batching", "history_of", "preceding_batches", "reset_history"]


def _parts(transform: Any) -> list[Any]:
    if isinstance(transform, torch.nn.Module):
        return list(transform.modules())
    return [transform]


def history_of(transform: Any) -> int:
    """Samples of history the transform's output depends on: the sum of the ``history`` of it
    and its submodules (a chain of buffered modules needs the sum), 0 for a plain callable."""
    total = 0
    for part in _parts(transform):
        value = getattr(part, "history", 0)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            total += value
    return total


def reset_history(transform: Any) -> None:
    """Empty what the transform (and each submodule) carries over from earlier batches."""
    for part in _parts(transform):
        reset = getattr(part, "reset_history", None)
        if callable(reset):
            reset()


def preceding_batches(schedule: Schedule, epoch: int, position: int,
                      samples: int) -> list[tuple[int, int, np.ndarray]]:
    """This rank's batches before ``position`` of ``epoch`` (back into earlier epochs), oldest
    first, as (epoch, position of the batch's first sample on this rank, indices): the fewest
    that hold at least ``samples`` samples, or all of them from epoch 0 on."""
    found: list[tuple[int, int, np.ndarray]] = []
    count = 0
    limit: int | None = position
    while count < samples and epoch >= 0:
        plan = schedule.plan(epoch, 0)
        earlier = []
        for step, indices in enumerate(plan.batches()):
            start = plan.position(step) - schedule.rank * schedule.batch_size
            if limit is not None and start >= limit:
                break
            earlier.append((epoch, plan.position(step), np.asarray(indices, dtype=np.int64)))
        for item in reversed(earlier):
            if count >= samples:
                break
            found.append(item)
            count += len(item[2])
        epoch -= 1
        limit = None  # earlier epochs ran to their end
    found.reverse()
    return found


def batching(schedule: Schedule) -> dict[str, Any]:
    """How this run cuts the order into batches (saved with a loader's state)."""
    return {"batch_size": schedule.batch_size, "world_size": schedule.world_size,
            "drop_last": schedule.drop_last}


def check_batching(saved: Mapping[str, Any] | None, schedule: Schedule) -> None:
    """Warn when a resumed transform's history cannot be the saving run's (other batching)."""
    if saved is None:
        return  # a state from before this field: assumed to be this run's batching
    current = batching(schedule)
    if dict(saved) != current:
        warnings.warn(
            f"resuming with batching {current} from a state saved with {dict(saved)}: the "
            "order resumes exactly, but the transform's history (Mosaic's buffer) is refilled "
            "from this run's batches, so augmented batches differ from the saving run's",
            RuntimeWarning, stacklevel=3)
