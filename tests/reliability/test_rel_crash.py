"""Crash safety (cases 25 and 26): a kill -9 loop over a writer whose renames and deletes are
slowed down, half the iterations overwriting an existing dataset, with an observer polling the
path; and two writers racing for one path."""

from __future__ import annotations

import json
from pathlib import Path

import crashloop
import pytest
import relharness as rh

pytestmark = pytest.mark.slow


def test_kill9_loop(tmp_path: Path, worker30: rh.SafeWorker) -> None:
    report = crashloop.kill_loop(tmp_path, iterations=50, seed=1234, delay=0.03, worker=worker30,
                                 kill_window=(0.0, 1.25))
    summary = report.summary()
    print("kill-9 loop:", json.dumps(summary))
    assert not report.problems, summary
    assert summary["iterations"] == 50
    states = summary["states"]
    # the random kill times must actually land before, during and after the switch
    # (loose bounds: write times vary with the machine's load)
    assert states.get("overwrite:old", 0) >= 3 and states.get("overwrite:new", 0) >= 2, states
    assert states.get("fresh:absent", 0) >= 3 and states.get("fresh:new", 0) >= 2, states
    assert summary["killed"] >= 25, summary


def test_kill9_loop_catches_a_non_atomic_switch(tmp_path: Path, worker30: rh.SafeWorker) -> None:
    """Self-test: without RENAME_EXCHANGE the writer replaces in two renames; the slowed-down
    window between them must be caught (the path disappears, or a kill leaves nothing)."""
    report = crashloop.kill_loop(tmp_path, iterations=8, seed=7, delay=0.03, worker=worker30,
                                 nonatomic=True, modes=("overwrite",), kill_window=(0.7, 1.6))
    assert any("path missing" in p or "absent" in p for p in report.problems), report.summary()


def test_cleanup_command_removes_leftovers(tmp_path: Path) -> None:
    """`detfmt cleanup DIR` removes a dead writer's temporary directory, not the dataset."""
    import subprocess
    import sys

    ds = rh.build_dataset(tmp_path / "ds", n=2, seed=1)
    leftover = tmp_path / ".detfmt-tmp-ds-999999-deadbeef"
    leftover.mkdir()
    (leftover / "images.bin").write_bytes(b"partial")
    out = subprocess.run([sys.executable, "-m", "detfmt", "cleanup", str(tmp_path)],
                         capture_output=True, text=True, timeout=60, env=rh.child_env())
    assert out.returncode == 0, out.stderr
    assert not leftover.exists() and "1 temporary directory removed" in out.stdout
    import detfmt

    assert detfmt.verify(ds).ok


@pytest.mark.parametrize("overwrite", [False, True], ids=["new-target", "overwrite"])
def test_two_writers_one_path(overwrite: bool, tmp_path: Path, worker30: rh.SafeWorker) -> None:
    report = crashloop.race(tmp_path, rounds=4, overwrite=overwrite, delay=0.03,
                            worker=worker30)
    summary = report.summary()
    print("race:", json.dumps(summary), [it.get("loser_rules") for it in report.iterations])
    assert not report.problems, report.problems


@pytest.mark.parametrize("suffix", ["", "-old"])
def test_cleanup_keeps_a_live_writers_temporaries(suffix: str, tmp_path: Path) -> None:
    """A writer that is still running (it holds the target's lock) keeps its temporary
    directory, including the '-old' copy the two-rename fallback parks the old dataset in."""
    import detfmt
    from detfmt import fileio

    leftover = tmp_path / f".detfmt-tmp-my-ds-{12345}-cafe0123{suffix}"
    leftover.mkdir()
    fd = fileio.lock_target(tmp_path / "my-ds")
    try:
        assert detfmt.cleanup(tmp_path) == []
        assert leftover.exists()
    finally:
        fileio.unlock(fd)
    assert detfmt.cleanup(tmp_path) == [leftover]
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # the lock file too
