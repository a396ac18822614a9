"""Worker processes and signals of a write: nothing outlives its owner, nothing is left behind.

- A worker dies with the process that started it, SIGKILL of that process included
  (``PR_SET_PDEATHSIG`` on Linux), and a forked worker closes the writer lock fds it inherited, so
  a lock is never kept alive by an orphan after its writer died.
- Workers ignore SIGINT: Ctrl-C interrupts the writer once, which stops them itself.
- While a write runs in the main thread, SIGTERM raises `Terminated` there, so the write unwinds
  (temporary files removed, workers stopped, lock released) before the signal is delivered again
  with the handler the program had.
"""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from detfmt import fileio

__all__ = ["Terminated", "die_with_parent", "process_pool", "stop_pool", "terminating"]

PR_SET_PDEATHSIG = 1


class Terminated(BaseException):
    """SIGTERM arrived during a write (a BaseException, like KeyboardInterrupt, so that no
    ``except Exception`` swallows it)."""


def die_with_parent(parent: int | None = None) -> None:
    """Pool initializer: ask the kernel to SIGKILL this process when its parent dies, and exit
    at once if the parent is already gone. Also ignore SIGINT (the parent handles Ctrl-C)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if parent is not None and os.getppid() != parent:
        os._exit(1)


def _init_forked_worker(parent: int, setup: Callable[..., None] | None, args: tuple) -> None:
    fileio.close_inherited_locks()
    die_with_parent(parent)
    if setup is not None:
        setup(*args)


def process_pool(workers: int, setup: Callable[..., None] | None = None,
                 args: tuple = ()) -> ProcessPoolExecutor:
    """A pool of ``workers`` processes that die with this one; ``setup(*args)`` runs once in
    each (to hand it what every task needs without pickling it per task)."""
    method = "fork" if "fork" in multiprocessing.get_all_start_methods() else None
    return ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context(method),
                               initializer=_init_forked_worker,
                               initargs=(os.getpid(), setup, args))


def stop_pool(pool: ProcessPoolExecutor, *, kill: bool) -> None:
    """Shut the pool down; with ``kill``, terminate its workers first instead of waiting for
    tasks in flight (after an error or an interrupt nobody needs their results)."""
    if not kill:
        pool.shutdown(wait=True)
        return
    workers = list((getattr(pool, "_processes", None) or {}).values())  # no public API (3.14+)
    # (shutdown forgets the pool's queues: take the result pipe's write end first, see below)
    writer = getattr(getattr(pool, "_result_queue", None), "_writer", None)
    pool.shutdown(wait=False, cancel_futures=True)
    for worker in workers:
        with contextlib.suppress(OSError, ValueError, AttributeError):
            worker.kill()
    for worker in workers:
        with contextlib.suppress(OSError, ValueError, AttributeError, AssertionError):
            worker.join(timeout=5)
    # A worker killed while writing a result leaves half a message in the result pipe, and the
    # pool's manager thread would wait for the rest forever (then so would interpreter exit,
    # which joins it). With the workers dead, our copy of the pipe's write end is the last one:
    # closing it turns that wait into EOF, and the thread ends as for a broken pool.
    with contextlib.suppress(OSError, AttributeError):
        writer.close()


_local = threading.local()


@contextlib.contextmanager
def terminating() -> Iterator[None]:
    """Turn SIGTERM into `Terminated` for the duration, in the main thread (elsewhere a signal
    handler cannot be set: the signal keeps its usual effect). On `Terminated` the signal is
    raised again after the block unwound, with the program's own handler back in place."""
    if threading.current_thread() is not threading.main_thread() or getattr(
            _local, "active", False) or signal.getsignal(signal.SIGTERM) == signal.SIG_IGN:
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        raise Terminated()

    previous = signal.signal(signal.SIGTERM, handler)
    if previous is None:  # a handler set outside Python: the default is the closest we can do
        previous = signal.SIG_DFL
    _local.active = True
    try:
        yield
    except Terminated:
        _local.active = False
        signal.signal(signal.SIGTERM, previous)
        os.kill(os.getpid(), signal.SIGTERM)  # now with the program's handler (default: exit)
        raise
    finally:
        _local.active = False
        signal.signal(signal.SIGTERM, previous)
