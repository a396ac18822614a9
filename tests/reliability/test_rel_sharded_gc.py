"""Issue 12 property 1, deletion is confined: ``gc`` never deletes outside the root or anything
the writer did not create, refuses directories that are not sharded roots, and never collects
the shards of a write in progress, however long it takes (a lease its live writer keeps, not
a timer). Attacks: symbolic links (the ``shards`` directory, shard names, temporaries), foreign
files of every kind, a slow writer in a second process, a killed writer, leases of other
hosts, a second process running ``detfmt gc``."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import relharness as rh

import detfmt
from detfmt.errors import DetfmtError, NotDetfmtError, UnsafePathError, UsageError
from detfmt.shard.write import commit, end_write, gc, write_shard

OLD = 1_000_000_000  # an mtime far older than any grace period

FORK = mp.get_context("fork")
BOX_FIELDS = {"iscrowd": "|u1"}


def _magic_file(path: Path) -> Path:
    path.write_bytes(b"DETFMTPK" + bytes(64))
    os.utime(path, (OLD, OLD))
    return path


def _tree(path: Path) -> dict[str, bytes | str]:
    """Everything under ``path`` (links as their target), to prove nothing changed."""
    out: dict[str, bytes | str] = {}
    for dirpath, dirs, files in os.walk(path):
        for name in dirs + files:
            full = Path(dirpath, name)
            rel = str(full.relative_to(path))
            if full.is_symlink():
                out[rel] = "-> " + os.readlink(full)
            elif full.is_file():
                out[rel] = full.read_bytes()
            elif full.is_dir():
                out[rel] = "dir"
            else:
                out[rel] = "special"
    return out


@pytest.fixture()
def root(tmp_path: Path) -> Path:
    path = rh.build_sharded(tmp_path / "root")
    end_write(path)  # this process's write is over: only the test's own actions stay
    return path


@pytest.fixture()
def outside(tmp_path: Path) -> Path:
    """A directory outside the root holding what gc would take for shards and temporaries."""
    path = tmp_path / "outside"
    path.mkdir()
    _magic_file(path / "part-victim.detfmt")
    (path / ".tmp-victim-0123456789ab").mkdir()
    _magic_file(path / ".tmp-victim-0123456789ab" / "part-x.detfmt")
    (path / "precious.txt").write_text("keep me")
    return path


def test_a_shards_symlink_is_never_followed(root: Path, outside: Path) -> None:
    for entry in (root / "shards").iterdir():
        entry.rename(root / entry.name)  # keep the shards somewhere, and link shards/ away
    (root / "shards").rmdir()
    (root / "shards").symlink_to(outside)
    before = _tree(outside)
    with pytest.raises(UnsafePathError):
        gc(root, grace_seconds=0)
    assert _tree(outside) == before


def test_links_and_foreign_files_inside_shards_are_kept(root: Path, outside: Path) -> None:
    shards = root / "shards"
    (shards / "part-link.detfmt").symlink_to(outside / "part-victim.detfmt")
    (shards / ".tmp-link-0123456789ab").symlink_to(outside / ".tmp-victim-0123456789ab")
    (shards / "part-dir.detfmt").mkdir()
    _magic_file(shards / "part-dir.detfmt" / "inner")
    os.mkfifo(shards / "part-fifo.detfmt")
    (shards / "part-foreign.detfmt").write_bytes(b"not a shard at all")  # no pack magic
    (shards / "notes.txt").write_text("mine")
    (shards / "part-bad name.detfmt").write_bytes(b"DETFMTPK")
    tmp = shards / ".tmp-k0-0123456789ab"  # a real temporary of ours, holding a link out
    tmp.mkdir()
    (tmp / "escape").symlink_to(outside)
    for path in shards.iterdir():
        os.utime(path, (OLD, OLD), follow_symlinks=False)
    (root / "my-notes.txt").write_text("mine")
    (root / ".manifest.json.bak").write_text("mine")
    dead_tmp = root / ".manifest.json.0123456789ab.tmp"  # a crashed commit's temporary
    dead_tmp.write_bytes(b"{}")
    dead_lease_tmp = root / ".tmp-.detfmt-lease-x.json-0123456789ab"  # a crashed lease write
    dead_lease_tmp.write_bytes(b"{}")
    (root / ".tmp-dir-0123456789ab").mkdir()  # a directory of that name is not ours at the top
    for path in (dead_tmp, dead_lease_tmp):
        os.utime(path, (OLD, OLD))
    before = _tree(outside)
    removed = gc(root, grace_seconds=0)
    assert sorted(removed) == sorted([str(tmp), str(dead_tmp), str(dead_lease_tmp)])
    assert (root / ".tmp-dir-0123456789ab").is_dir()
    assert _tree(outside) == before
    kept = {p.name for p in shards.iterdir()}
    assert {"part-link.detfmt", ".tmp-link-0123456789ab", "part-dir.detfmt", "part-fifo.detfmt",
            "part-foreign.detfmt", "notes.txt", "part-bad name.detfmt"} <= kept
    assert (root / "my-notes.txt").exists() and (root / ".manifest.json.bak").exists()
    assert detfmt.verify(root).ok


@pytest.mark.parametrize("kind", ["empty", "orphans", "dataset-1.0", "bad-manifest"])
def test_a_directory_that_is_not_a_sharded_root_is_refused(kind: str, tmp_path: Path,
                                                           outside: Path) -> None:
    target = tmp_path / "target"
    if kind == "dataset-1.0":
        rh.build_dataset(target, n=3, seed=1, codec="raw")
        (target / "shards").mkdir()
    else:
        (target / "shards").mkdir(parents=True)
    _magic_file(target / "shards" / "part-a.detfmt")
    (target / "shards" / ".tmp-a-0123456789ab").mkdir()
    if kind == "bad-manifest":
        (target / "manifest.json").write_text('{"format": "detfmt", "version": ')
    before = _tree(target)
    expected = {"dataset-1.0": UsageError}.get(kind, DetfmtError)
    with pytest.raises(expected) as caught:
        gc(target, grace_seconds=0)
    if kind in ("empty", "orphans"):
        assert isinstance(caught.value, NotDetfmtError)
    assert _tree(target) == before
    cli = subprocess.run([sys.executable, "-m", "detfmt", "gc", str(target), "--grace", "0"],
                         capture_output=True, text=True, timeout=60)
    assert cli.returncode != 0 and "Traceback" not in cli.stderr
    assert _tree(target) == before


def _slow_writer(root: str, wrote, go, done) -> None:
    """A write that pauses between its shards until the parent says go."""
    a = write_shard(rh.make_samples(3, 11), root, "slow-a", classes=rh.CLASSES,
                       box_fields=BOX_FIELDS)
    wrote.set()
    go.wait(60)
    b = write_shard(rh.make_samples(2, 12), root, "slow-b", classes=rh.CLASSES,
                       box_fields=BOX_FIELDS)
    commit(root, [a, b])
    done.set()


@pytest.mark.parametrize("fresh", [True, False], ids=["fresh-root", "published-root"])
def test_a_slow_writer_in_another_process_is_never_collected(fresh: bool, tmp_path: Path,
                                                             root: Path) -> None:
    """However long a write pauses, gc (grace 0, from this process and from a separate
    `detfmt gc` process) keeps its shards: its lease names a live process. The lease's mtime is
    made ancient, so no timer is what keeps it."""
    target = tmp_path / "fresh" if fresh else root
    wrote, go, done = FORK.Event(), FORK.Event(), FORK.Event()
    proc = FORK.Process(target=_slow_writer, args=(str(target), wrote, go, done))
    proc.start()
    try:
        assert wrote.wait(60)
        shard = target / "shards" / "part-slow-a.detfmt"
        assert shard.exists()
        for lease in target.glob(".detfmt-lease-*.json"):
            os.utime(lease, (OLD, OLD))
        os.utime(shard, (OLD, OLD))
        assert gc(target, grace_seconds=0) == []
        cli = subprocess.run([sys.executable, "-m", "detfmt", "gc", str(target), "--grace", "0"],
                             capture_output=True, text=True, timeout=60)
        assert cli.returncode == 0, cli.stderr
        assert "write is in progress" in cli.stdout
        assert shard.exists()
        go.set()
        assert done.wait(60)
    finally:
        go.set()
        proc.join(60)
    assert proc.exitcode == 0
    ds = detfmt.open(target)
    assert len(ds) == 5 and ds.shards[0].key == "slow-a"
    assert not list(target.glob(".detfmt-lease-*"))  # the committed write released its lease


def _killed_writer(root: str) -> None:
    write_shard(rh.make_samples(3, 21), root, "dead", classes=rh.CLASSES,
                       box_fields=BOX_FIELDS)
    os.kill(os.getpid(), signal.SIGKILL)


@pytest.mark.parametrize("fresh", [True, False], ids=["fresh-root", "published-root"])
def test_a_killed_writer_is_collected_at_once(fresh: bool, tmp_path: Path, root: Path) -> None:
    target = tmp_path / "fresh" if fresh else root
    proc = FORK.Process(target=_killed_writer, args=(str(target),))
    proc.start()
    proc.join(60)
    assert proc.exitcode == -signal.SIGKILL
    orphan = target / "shards" / "part-dead.detfmt"
    assert orphan.exists() and list(target.glob(".detfmt-lease-*.json"))
    removed = gc(target, grace_seconds=0)
    assert str(orphan) in removed and not orphan.exists()
    assert not list(target.glob(".detfmt-lease-*.json"))
    if fresh:  # nothing is left that makes it a sharded root
        with pytest.raises(NotDetfmtError):
            gc(target, grace_seconds=0)
    else:
        assert detfmt.verify(target).ok


def test_leases_of_other_hosts_hold_until_they_go_silent(root: Path) -> None:
    """A lease written on another machine (its PID means nothing here) protects the write
    while it is refreshed, and stops protecting once it is older than its ttl."""
    orphan = root / "shards" / "part-remote.detfmt"
    _magic_file(orphan)
    lease = root / f".detfmt-lease-{'e' * 32}.json"
    lease.write_text(json.dumps({"token": "e" * 32, "host": "another-host", "pid": 1,
                                 "ttl": 60.0, "created": time.time()}))
    assert gc(root, grace_seconds=0) == []
    assert orphan.exists()
    os.utime(lease, (time.time() - 120, time.time() - 120))  # two ttls without a heartbeat
    assert sorted(gc(root, grace_seconds=0)) == sorted([str(orphan), str(lease)])


def test_this_process_write_in_progress_is_kept(root: Path) -> None:
    meta = write_shard(rh.make_samples(2, 31), root, "mine", classes=rh.CLASSES,
                       box_fields=BOX_FIELDS)
    os.utime(root / meta.path, (OLD, OLD))
    assert gc(root, grace_seconds=0) == []
    end_write(root)
    assert gc(root, grace_seconds=0) == [str(root / meta.path)]


@pytest.mark.parametrize("kind", ["missing", "a-file"])
def test_gc_of_a_path_that_is_no_directory_creates_nothing(kind: str, tmp_path: Path) -> None:
    target = tmp_path / "target"
    if kind == "a-file":
        target.write_bytes(b"mine")
    with pytest.raises(NotDetfmtError):
        gc(target, grace_seconds=0)
    assert sorted(p.name for p in tmp_path.iterdir()) == ([] if kind == "missing" else ["target"])
    assert kind == "missing" or target.read_bytes() == b"mine"


def test_grace_still_applies_without_writers(root: Path) -> None:
    orphan = _magic_file(root / "shards" / "part-young.detfmt")
    os.utime(orphan, None)  # now
    assert gc(root) == []
    assert gc(root, grace_seconds=0) == [str(orphan)]
