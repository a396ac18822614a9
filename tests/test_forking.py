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


# No wall-clock assertions (issue 29): which message comes back says which path was taken (a
# death seen at once, or the timeout), and pytest-timeout only bounds a hang.
@pytest.mark.timeout(900)
def test_a_dead_child_fails_at_once():
    """Reported as a death, not as the (long) timeout running out."""
    with pytest.raises(AssertionError, match=r"died without a result \(exit code 3\)"):
        run_forked(_die, [0, 1], timeout=600)


@pytest.mark.timeout(900)
def test_a_hung_child_that_ignores_sigterm_fails_after_the_timeout():
    with pytest.raises(AssertionError, match="no result within 2 s"):
        run_forked(_hang_deaf, [0], timeout=2)


def test_a_child_s_exception_is_reported():
    with pytest.raises(AssertionError, match="ValueError: boom"):
        run_forked(_raise, [0], timeout=30)
