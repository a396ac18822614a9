"""Thread budgets of the threads detfmt starts (the loader's workers), per thread.

A trainer's ``torch.set_num_threads`` (Ultralytics sets 1) must not decide how fast the loader
augments, and the loader must not change the trainer's count. Both hold because the count is
per thread here: torch's intra-op count is OpenMP's per-thread setting, and the budget below
(read by the augmentation's CPU backend to size its per-sample pool) is thread-local. A thread
the loader starts calls `configure_thread` once; every other thread keeps its own settings.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import torch

__all__ = ["batches_are_stable", "configure_thread", "stable_batches", "thread_budget"]

_local = threading.local()


def configure_thread(threads: int, torch_threads: int | None = None) -> None:
    """Give the calling thread a budget of ``threads`` for the augmentation's per-sample pool
    (`thread_budget`) and ``torch_threads`` (default: ``threads``) torch intra-op threads."""
    threads = max(1, int(threads))
    _local.budget = threads
    intra = max(1, int(torch_threads)) if torch_threads is not None else threads
    if torch.get_num_threads() != intra:
        torch.set_num_threads(intra)  # OpenMP: this thread's count only


def thread_budget() -> int | None:
    """The budget `configure_thread` gave this thread, or None (a thread detfmt did not start:
    callers use torch's count of this thread)."""
    return getattr(_local, "budget", None)


@contextlib.contextmanager
def stable_batches() -> Iterator[None]:
    """Promise, for this thread, that a batch handed to a transform inside is not written again
    while the transform holds a view of it, so the transform may keep views instead of copies
    (`Mosaic`'s ring buffer). The loader makes it: it reuses a batch buffer only once nothing
    references it, and writes nothing else into one."""
    previous = getattr(_local, "stable", False)
    _local.stable = True
    try:
        yield
    finally:
        _local.stable = previous


def batches_are_stable() -> bool:
    """Whether this thread runs inside `stable_batches`."""
    return bool(getattr(_local, "stable", False))
