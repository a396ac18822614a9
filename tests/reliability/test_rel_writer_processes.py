"""Issue 12, property 4: a writer's processes do not outlive it, and nothing is left behind.

A writer with worker processes is killed (SIGKILL, SIGTERM) or interrupted (SIGINT to its whole
process group, as Ctrl-C does) in the middle of a write. Its workers must be gone within
moments, the target lock must be free at once, a lock error must name the holder, SIGTERM and
Ctrl-C must leave no temporary directory, and `detfmt cleanup` must say what it kept and why.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import relharness as rh

CHILD = Path(__file__).resolve().parent / "relwrite_child.py"
pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="uses /proc")


def start_slow_writer(target: Path, workers: int = 2) -> tuple[subprocess.Popen[str], Path]:
    """A writer in the middle of a write: samples are flowing (its marker file exists) and each
    of its ``workers`` processes is running with SIGINT ignored. Waits for those events, not
    for a time: on a loaded machine a worker can take seconds between its fork and its
    initializer, and a Ctrl-C in that window is a different test (the worker's traceback)."""
    marker = target.parent / f"{target.name}.started"
    proc = subprocess.Popen([sys.executable, str(CHILD), "slow-write", str(target), str(workers),
                             str(marker)], env=rh.child_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 300  # a bound on a hang, never reached by a working writer
    while not (marker.exists() and len(ignoring_sigint(children_of(proc.pid))) >= workers):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"the writer did not start: {proc.communicate()}")
        time.sleep(0.02)
    return proc, marker


def ignoring_sigint(pids: list[int]) -> list[int]:
    """The processes among ``pids`` whose SIGINT disposition is SIG_IGN (/proc's SigIgn mask)."""
    found = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/status") as handle:
                masks = dict(line.split(":\t", 1) for line in handle if ":\t" in line)
        except OSError:
            continue
        if int(masks.get("SigIgn", "0"), 16) & (1 << (signal.SIGINT - 1)):
            found.append(pid)
    return found


def _processes(keep) -> list[int]:
    """PIDs whose /proc stat fields after the command name (state, ppid, pgid, ...) pass
    ``keep``."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as handle:
                    fields = handle.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if keep(fields):
                found.append(int(entry))
    return found


def children_of(pid: int) -> list[int]:
    return _processes(lambda fields: int(fields[1]) == pid)


def running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def wait_gone(pids: list[int], seconds: float = 120.0) -> list[int]:
    """``pids`` still running after they all exit or ``seconds`` pass (a bound on a hang: a
    killed worker goes in moments, but a loaded machine may not schedule it for a while)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        alive = [pid for pid in pids if running(pid)]
        if not alive:
            return []
        time.sleep(0.05)
    return [pid for pid in pids if running(pid)]


def write_small(target: Path) -> None:
    import detfmt

    detfmt.write(rh.make_samples(3, seed=2), target, classes=rh.CLASSES, progress=False,
                 box_fields={"iscrowd": "|u1"})


@pytest.fixture
def survivors() -> list[int]:
    """Processes a test must kill at the end if the code under test left them running."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        if running(pid):
            os.kill(pid, signal.SIGKILL)


def test_sigkill_of_the_writer_takes_its_workers_and_frees_the_lock(tmp_path: Path,
                                                                    survivors: list[int]) -> None:
    import detfmt

    target = tmp_path / "ds"
    proc, _ = start_slow_writer(target)
    workers = children_of(proc.pid)
    survivors.extend(workers)
    assert workers, "the writer should have started worker processes"
    proc.kill()
    proc.wait()
    assert wait_gone(workers) == [], "worker processes outlived the killed writer"
    write_small(target)  # the lock died with the writer: no TargetLockedError
    assert len(detfmt.open(target)) == 3
    report = detfmt.cleanup(tmp_path)
    assert len(report) == 1 and rh.temp_leftovers(tmp_path) == []


@pytest.mark.parametrize("how", ["SIGTERM", "Ctrl-C"])
def test_sigterm_and_ctrl_c_leave_nothing_behind(how: str, tmp_path: Path,
                                                 survivors: list[int]) -> None:
    target = tmp_path / "ds"
    proc, marker = start_slow_writer(target)
    workers = children_of(proc.pid)
    survivors.extend(workers)
    if how == "SIGTERM":
        proc.send_signal(signal.SIGTERM)
    else:  # the terminal sends SIGINT to the whole foreground process group
        os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode != 0
    if how == "SIGTERM":
        assert proc.returncode == -signal.SIGTERM, err  # the program's own SIGTERM disposition
    assert wait_gone(workers) == [], "worker processes outlived the writer"
    assert err.count("Traceback") <= 1, f"one report, not one per worker:\n{err}"
    marker.unlink()
    # a writer killed by SIGTERM cannot remove its lock file (the kernel dropped the lock)
    left = [n for n in os.listdir(tmp_path) if n != ".ds.detfmt-lock"]
    assert left == [], "something was left behind"
    write_small(target)


def test_the_lock_error_names_the_holder(tmp_path: Path, survivors: list[int]) -> None:
    import detfmt

    target = tmp_path / "ds"
    proc, _ = start_slow_writer(target, workers=0)
    try:
        with pytest.raises(detfmt.TargetLockedError) as info:
            write_small(target)
        assert str(proc.pid) in str(info.value) and socket.gethostname() in str(info.value)
        leftovers = detfmt.cleanup(tmp_path)
        assert list(leftovers) == []
        (kept, reason), = leftovers.kept
        assert kept.name.startswith(".detfmt-tmp-ds-") and str(proc.pid) in reason
        assert "still writing" in leftovers.summary()
    finally:
        proc.kill()
        proc.wait()


def test_cleanup_says_why_it_removed_nothing(tmp_path: Path) -> None:
    import detfmt

    empty = tmp_path / "empty"
    empty.mkdir()
    assert "no .detfmt-tmp-" in detfmt.cleanup(empty).summary()
    dataset = rh.build_dataset(tmp_path / "data" / "ds", n=2)
    assert "parent" in detfmt.cleanup(dataset).summary()  # a dataset itself: look beside it
    with pytest.raises(detfmt.UsageError):
        detfmt.cleanup(tmp_path / "missing")
    with pytest.raises(detfmt.UsageError):
        detfmt.cleanup(dataset / "header.json")


def test_cleanup_removes_only_what_a_writer_wrote(tmp_path: Path) -> None:
    """A leftover that holds anything a writer does not write is kept (with the reason), a
    symbolic link named like a leftover is not followed, and the only copy of a dataset
    parked by an interrupted two-rename replace is not deleted."""
    import detfmt

    parent = tmp_path / "p"
    parent.mkdir()
    ours = parent / ".detfmt-tmp-ds-123-0a1b2c3d"
    ours.mkdir()
    (ours / "images.bin").write_bytes(b"x")
    (ours / "box_iscrowd.npy").write_bytes(b"x")
    theirs = parent / ".detfmt-tmp-pics-123-0a1b2c3e"
    theirs.mkdir()
    (theirs / "images.bin").write_bytes(b"x")
    (theirs / "holiday.jpg").write_bytes(b"precious")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "images.bin").write_bytes(b"precious")
    (parent / ".detfmt-tmp-link-123-0a1b2c3f").symlink_to(outside)
    parked = rh.build_dataset(tmp_path / "tmpbuild", n=2)
    parked.rename(parent / ".detfmt-tmp-gone-123-0a1b2c40-old")
    report = detfmt.cleanup(parent)
    assert list(report) == [ours] and not ours.exists()
    kept = dict(report.kept)
    assert (theirs / "holiday.jpg").read_bytes() == b"precious" and theirs in kept
    assert (outside / "images.bin").read_bytes() == b"precious"
    assert parent / ".detfmt-tmp-link-123-0a1b2c3f" in kept
    assert "rename it back" in kept[parent / ".detfmt-tmp-gone-123-0a1b2c40-old"]
    assert len(detfmt.open(parent / ".detfmt-tmp-gone-123-0a1b2c40-old")) == 2


def group_members(pgid: int) -> list[int]:
    """Live (not zombie) processes of the process group."""
    return _processes(lambda fields: int(fields[2]) == pgid and fields[0] != "Z")


def test_a_killed_conversion_leaves_no_worker(tmp_path: Path, survivors: list[int]) -> None:
    """`detfmt convert` with workers (its decode pre-check pool and the writer's pool) killed
    by SIGKILL: every process it started is gone within moments."""
    import numpy as np
    from PIL import Image

    src = tmp_path / "yolo"
    (src / "images").mkdir(parents=True)
    (src / "labels").mkdir()
    (src / "names.txt").write_text("a\n")
    pixels = np.random.default_rng(0).integers(0, 256, (48, 48, 3), dtype=np.uint8)
    for i in range(600):
        Image.fromarray(pixels).save(src / "images" / f"{i}.jpg")
        (src / "labels" / f"{i}.txt").write_text("0 0.5 0.5 0.2 0.2\n")
    proc = subprocess.Popen(
        [sys.executable, "-m", "detfmt", "convert", "yolo", str(src), str(tmp_path / "out"),
         "--names", str(src / "names.txt"), "--workers", "2", "--on-error", "skip",
         "--max-side", "16", "--no-progress"], env=rh.child_env(), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.monotonic() + 300  # a bound on a hang only
    while len(group_members(proc.pid)) < 4 and proc.poll() is None:  # itself + 3 workers
        assert time.monotonic() < deadline, "the conversion never started its workers"
        time.sleep(0.05)
    members = [pid for pid in group_members(proc.pid) if pid != proc.pid]
    survivors.extend(members)
    assert members, "the conversion finished before it could be killed: make it longer"
    proc.kill()
    proc.communicate()
    assert wait_gone(members) == [], "worker processes outlived the killed conversion"
