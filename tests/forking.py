"""Run a function in forked child processes, bounded: a child that dies, hangs or ignores
SIGTERM fails the test (naming the child and its exit code) instead of blocking the suite.

`multiprocessing.Pool` is avoided on purpose. ``Pool.map`` waits forever for a task whose
worker died, and ``Pool.terminate`` waits forever for a worker that inherited a Python-level
SIGTERM handler (``ray.init`` installs one) when the signal lands just before the worker blocks
on the pool's queue lock: the handler is noted but never run, and the worker sleeps on. Here
every child ends by returning, or by SIGKILL, which nothing can catch or lose.
"""

from __future__ import annotations

import multiprocessing as mp
import signal
import time
from collections.abc import Callable, Sequence
from typing import Any


def run_forked(fn: Callable[[Any], Any], args: Sequence[Any], timeout: float = 60.0) -> list:
    """``[fn(a) for a in args]``, each call in its own forked child, all within ``timeout``
    seconds. A child's exception is re-raised here as an AssertionError with its text."""
    ctx = mp.get_context("fork")
    children: list[tuple[Any, Any]] = []
    try:
        for a in args:
            reader, writer = ctx.Pipe(duplex=False)
            child = ctx.Process(target=_child, args=(fn, a, writer), daemon=True)
            child.start()
            writer.close()  # only the child holds the write end: its death is EOF here
            children.append((child, reader))
        deadline = time.monotonic() + timeout
        results = []
        for k, (child, reader) in enumerate(children):
            if not reader.poll(max(0.0, deadline - time.monotonic())):
                raise AssertionError(f"forked child {k} (pid {child.pid}) gave no result "
                                     f"within {timeout:.0f} s")
            try:
                ok, value = reader.recv()
            except EOFError:
                child.join(5)
                raise AssertionError(f"forked child {k} (pid {child.pid}) died without a "
                                     f"result (exit code {child.exitcode})") from None
            if not ok:
                raise AssertionError(f"forked child {k} raised {value}")
            results.append(value)
        return results
    finally:
        for child, reader in children:
            if child.is_alive():
                child.kill()
            child.join(10)
            reader.close()


def _child(fn: Callable[[Any], Any], a: Any, writer: Any) -> None:
    # the test process's handlers (a leftover from an earlier test) are not the child's
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    try:
        writer.send((True, fn(a)))
    except BaseException as error:  # reported by the parent
        writer.send((False, f"{type(error).__name__}: {error}"))
    finally:
        writer.close()
