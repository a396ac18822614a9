"""Thread budgets of the threads detfmt starts (the loader's workers), per thread.

A trainer's ``torch.set_num_threads`` (Ultralytics sets 1) must not decide how fast the loader
augments, and the loader must not change the trainer's count. Both hold because the count is
per thread here: torch's intra-op count is OpenMP's per-thread setting, and the budget below
(read by the augmentation's CPU backend to size its per-sample pool) is thread-local. A thread
the loader starts calls `configure_thread` once; every other thread keeps its own settings.
"""

from __future__ import annotations

import os
import threading

import torch

__all__ = ["configure_thread", "default_transform_threads", "thread_budget"]

_local = threading.local()


def configure_thread(threads: int) -> None:
    """Give the calling thread ``threads`` torch intra-op threads and the same budget for the
    augmentation's per-sample pool (`thread_budget`)."""
    threads = max(1, int(threads))
    _local.budget = threads
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)  # OpenMP: this thread's count only


def thread_budget() -> int | None:
    """The budget `configure_thread` gave this thread, or None (a thread detfmt did not start:
    callers use torch's count of this thread)."""
    return getattr(_local, "budget", None)


def default_transform_threads(loader_threads: int, cores: int | None = None) -> int:
    """Threads each of ``loader_threads`` loader threads gets for its transform: the cores
    shared out among them (at least 1, at most 8). Each loader thread already augments whole
    batches in parallel with the others; giving each all the cores oversubscribes them, and on
    a small machine the switching and OpenMP spin-waits cost more CPU per image than the extra
    threads save."""
    cores = cores if cores is not None else (os.cpu_count() or 1)
    return max(1, min(8, cores // max(1, int(loader_threads))))
