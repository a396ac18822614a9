"""The forked-children helper never blocks: a dead, hung or SIGTERM-proof child fails fast."""

from __future__ import annotations

import os
import signal
import time

import pytest

from tests.forking import run_forked


def _square(x):
    return x * x


def _die(_):
    os._exit(3)


def _hang_deaf(_):
    signal.signal(signal.SIGTERM, lambda *a: None)  # as a leftover handler that never exits
    while True:
        time.sleep(1)


def _raise(_):
    raise ValueError("boom")


def test_results_in_order():
    assert run_forked(_square, [1, 2, 3], timeout=30) == [1, 4, 9]


@pytest.mark.timeout(60)
def test_a_dead_child_fails_at_once():
    start = time.monotonic()
    with pytest.raises(AssertionError, match=r"died without a result \(exit code 3\)"):
        run_forked(_die, [0, 1], timeout=30)
    assert time.monotonic() - start < 20


@pytest.mark.timeout(60)
def test_a_hung_child_that_ignores_sigterm_fails_after_the_timeout():
    start = time.monotonic()
    with pytest.raises(AssertionError, match="no result within 2 s"):
        run_forked(_hang_deaf, [0], timeout=2)
    assert time.monotonic() - start < 20


def test_a_child_s_exception_is_reported():
    with pytest.raises(AssertionError, match="ValueError: boom"):
        run_forked(_raise, [0], timeout=30)
