"""Suite-wide hygiene: each test starts with the signal handlers the session started with.

``ray.init`` (tests/scaleout) installs a Python SIGTERM handler and keeps it after
``ray.shutdown``, and ``detfmt.cli.main`` run in-process installs its SIGINT handler. Processes
forked by later tests inherit them; a pool worker with a Python SIGTERM handler can miss the
pool's terminate (the signal lands just before it blocks on the pool's queue lock: the handler
is noted, never run) and the pool then waits for it forever.
"""

from __future__ import annotations

import signal

import pytest

#: the small synthetic datasets' fixtures (``samples``), for every folder of tests
pytest_plugins = ["tests.samples"]

_SIGNALS = (signal.SIGTERM, signal.SIGINT)
_initial: dict[int, object] = {}


def pytest_sessionstart(session: pytest.Session) -> None:
    for sig in _SIGNALS:
        _initial[sig] = signal.getsignal(sig)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None):
    try:
        return (yield)
    finally:
        for sig, handler in _initial.items():
            if handler is not None and signal.getsignal(sig) is not handler:
                signal.signal(sig, handler)
