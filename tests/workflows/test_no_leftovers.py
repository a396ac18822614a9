"""Issue 29 item 9: a finished command leaves only its output and report, no
``.NAME.detfmt-lock`` beside them; ``detfmt cleanup`` removes stale lock files and says so, and
removing lock files never lets two writers hold one target."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from detfmt import fileio as _io
from detfmt.cli import main
from tests.workflows.conftest import SAMPLE


def _locks(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")
                  if p.name.endswith(_io.LOCK_SUFFIX))


def test_commands_leave_no_lock_files(chess_sample, tmp_path, capsys):
    """convert, split, filter, merge, append on the bundled real sample: outputs and reports
    only."""
    out = tmp_path / "out"
    assert main(["convert", "coco", str(SAMPLE / "annotations.coco.json"), str(out / "conv"),
                 "--images", str(SAMPLE), "--no-progress", "--workers", "1", "--max-side",
                 "64", "--no-fingerprint"]) == 0
    assert main(["split", str(out / "conv"), str(out / "parts"), "--val", "0.25",
                 "--no-progress"]) == 0
    assert main(["filter", str(chess_sample), str(out / "kept"), "--min-boxes", "1",
                 "--no-progress"]) == 0
    assert main(["merge", str(chess_sample), str(out / "kept"), str(out / "both"),
                 "--no-progress"]) == 0
    assert main(["convert", "coco", str(SAMPLE / "annotations.coco.json"), str(out / "conv"),
                 "--images", str(SAMPLE), "--no-progress", "--workers", "1", "--max-side",
                 "64", "--no-fingerprint", "--overwrite"]) == 0
    assert main(["append", str(out / "root"), str(out / "conv")]) == 0
    capsys.readouterr()
    assert (out / "parts" / "splits.json").exists() and (out / "both" / "header.json").exists()
    assert _locks(out) == []
    assert sorted(os.listdir(out)) == ["both", "conv", "conv.report.json", "kept", "parts",
                                       "root"]
    assert sorted(os.listdir(out / "root")) == ["manifest.json", "shards"]
    assert sorted(os.listdir(out / "parts")) == ["splits.json", "train", "val"]


def test_cleanup_removes_stale_locks_and_says_so(tmp_path, capsys):
    stale = tmp_path / ".old-ds.detfmt-lock"  # a writer killed outright left it
    stale.write_text("12345@elsewhere\n")
    held = _io.lock_target(tmp_path / "busy")  # a live writer's lock stays
    try:
        assert main(["cleanup", str(tmp_path)]) == 0
        out = capsys.readouterr().out
        assert not stale.exists()
        assert (tmp_path / ".busy.detfmt-lock").exists()
        assert str(stale) in out
    finally:
        _io.unlock(held)
    assert _locks(tmp_path) == []


@pytest.mark.parametrize("threads", [4])
def test_removing_lock_files_keeps_one_holder(tmp_path, threads):
    """Many threads (separate open files: flock is per open file) take and release one
    target's lock; never two hold it at once, though each release removes the file."""
    target = tmp_path / "ds"
    inside, overlaps, taken = [0], [0], [0]
    guard = threading.Lock()

    def work() -> None:
        for _ in range(300):
            try:
                fd = _io.lock_target(target)
            except BlockingIOError:
                continue
            with guard:
                inside[0] += 1
                overlaps[0] += inside[0] > 1
                taken[0] += 1
            os.sched_yield()
            with guard:
                inside[0] -= 1
            _io.unlock(fd)

    workers = [threading.Thread(target=work) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert taken[0] > 0 and overlaps[0] == 0
    assert _locks(tmp_path) == []
