"""Issue 12 property 2, publication is atomic and exclusive: a commit is a compare-and-swap on
the generation its write started from (of two concurrent commits one wins, the other gets
`CommitConflictError` and publishes nothing), and a published shard is never overwritten
(`upload` to a file:// target used to rewrite published shards in place under a reader).
Property 7 for what the sharded writer publishes: files get the user's umask.
(S3's conditional PUTs are tested against moto in tests/scaleout/test_shard_publish_s3.py.)"""

from __future__ import annotations

import multiprocessing as mp
import os
import stat
import threading
from pathlib import Path

import pytest
import relharness as rh

import detfmt
from detfmt.errors import CommitConflictError, TargetExistsError
from detfmt.shard.remote import upload
from detfmt.shard.write import commit, end_write, generation, write_shard
from detfmt.storage import read_manifest

FORK = mp.get_context("fork")
BOX_FIELDS = {"iscrowd": "|u1"}


def _shard(root: Path | str, key: str, seed: int, n: int = 2):
    return write_shard(rh.make_samples(n, seed), root, key, classes=rh.CLASSES,
                       box_fields=BOX_FIELDS)


def _job(root: str, name: str, seed: int, barrier, results) -> None:
    """One writing job: its own shards, then (with the rival) the commit."""
    try:
        metas = [_shard(root, f"{name}-{k}", seed + k) for k in range(2)]
        barrier.wait(60)
        commit(root, metas)
        results.put((name, "won"))
    except CommitConflictError as error:
        results.put((name, f"conflict {error.rule}"))
    except BaseException as error:
        results.put((name, f"error {error!r}"))


@pytest.mark.parametrize("fresh", [True, False], ids=["fresh-root", "published-root"])
def test_two_concurrent_jobs_one_wins_one_conflicts(fresh: bool, tmp_path: Path) -> None:
    for round_ in range(3):
        root = tmp_path / f"r{round_}"
        if not fresh:
            rh.build_sharded(root, key_prefix="old-")
            end_write(root)
        barrier, results = FORK.Barrier(2), FORK.Queue()
        procs = [FORK.Process(target=_job, args=(str(root), name, 10 * k, barrier, results))
                 for k, name in enumerate(("a", "b"))]
        for p in procs:
            p.start()
        outcome = dict(results.get(timeout=120) for _ in procs)
        for p in procs:
            p.join(60)
        assert sorted(outcome.values()) == ["conflict COMMIT_CONFLICT", "won"], outcome
        winner = next(name for name, said in outcome.items() if said == "won")
        keys = [s.key for s in read_manifest(root).shards]
        assert keys == [f"{winner}-0", f"{winner}-1"]  # exactly the winner's shards
        assert detfmt.verify(root).ok


def test_racing_threads_on_one_base_one_wins(tmp_path: Path) -> None:
    root = rh.build_sharded(tmp_path / "root")
    end_write(root)
    base = generation(root)
    metas = [[_shard(root, f"t{k}", 100 + k)] for k in range(6)]
    end_write(root)
    start = threading.Barrier(len(metas))
    outcome: list[str] = []

    def run(m) -> None:
        start.wait()
        try:
            commit(root, m, base=base)
            outcome.append("won")
        except CommitConflictError:
            outcome.append("conflict")

    threads = [threading.Thread(target=run, args=(m,)) for m in metas]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(outcome) == ["conflict"] * 5 + ["won"]
    assert len(read_manifest(root).shards) == 1 and detfmt.verify(root).ok


def test_a_loser_can_rebase_and_commit_everything(tmp_path: Path) -> None:
    root = rh.build_sharded(tmp_path / "root")
    end_write(root)
    base = generation(root)
    mine = [_shard(root, "mine", 1)]
    theirs = [_shard(root, "theirs", 2)]
    end_write(root)
    commit(root, theirs, base=base)
    with pytest.raises(CommitConflictError):
        commit(root, mine, base=base)
    assert [s.key for s in read_manifest(root).shards] == ["theirs"]
    commit(root, theirs + mine, base=generation(root))
    assert [s.key for s in read_manifest(root).shards] == ["mine", "theirs"]


def test_a_conflict_publishes_nothing_and_leaves_no_temporary(tmp_path: Path) -> None:
    root = rh.build_sharded(tmp_path / "root")
    end_write(root)
    before = (root / "manifest.json").read_bytes()
    stale = "xxh3:0000000000000000"
    with pytest.raises(CommitConflictError):
        commit(root, [_shard(root, "x", 3)], base=stale)
    assert (root / "manifest.json").read_bytes() == before
    assert not [p for p in os.listdir(root) if p.startswith(".manifest.")]


def _upload_target(tmp_path: Path) -> tuple[Path, Path, Path]:
    a = rh.build_sharded(tmp_path / "a", seed=1)
    b = rh.build_sharded(tmp_path / "b", seed=2)  # the same keys, other bytes
    end_write(a)
    end_write(b)
    return a, b, tmp_path / "target"


def test_upload_never_overwrites_a_published_shard(tmp_path: Path) -> None:
    """The SIGBUS scenario: a reader maps the target's shards, then another root with the same
    shard names is uploaded over it. The upload is refused, the reader reads on unchanged."""
    a, b, target = _upload_target(tmp_path)
    url = "file://" + str(target)
    upload(a, url)
    reader = detfmt.open(target)
    want = [reader[i].image.copy() for i in range(len(reader))]  # every shard mapped
    shard = target / read_manifest(target).shards[0].path
    before = (shard.stat().st_ino, shard.read_bytes())
    with pytest.raises(TargetExistsError) as caught:
        upload(b, url)
    assert caught.value.rule == "SHARD_PUBLISHED"
    assert (shard.stat().st_ino, shard.read_bytes()) == before
    for i, image in enumerate(want):
        assert (reader[i].image == image).all()
    assert detfmt.verify(target).ok


def test_upload_again_is_idempotent_without_rewriting(tmp_path: Path) -> None:
    a, _, target = _upload_target(tmp_path)
    upload(a, "file://" + str(target))
    shards = sorted((target / "shards").iterdir())
    inodes = [p.stat().st_ino for p in shards]
    upload(a, "file://" + str(target))
    assert [p.stat().st_ino for p in sorted((target / "shards").iterdir())] == inodes
    assert detfmt.verify(target).ok


def test_a_damaged_local_shard_is_not_uploaded(tmp_path: Path) -> None:
    a, _, target = _upload_target(tmp_path)
    shard = a / read_manifest(a).shards[0].path
    data = bytearray(shard.read_bytes())
    data[-1] ^= 1
    shard.write_bytes(bytes(data))
    with pytest.raises(detfmt.errors.IntegrityError):
        upload(a, "file://" + str(target))
    assert not (target / "manifest.json").exists()


@pytest.mark.parametrize("umask", [0o022, 0o002, 0o077])
def test_published_files_follow_the_umask(umask: int, tmp_path: Path) -> None:
    old = os.umask(umask)
    try:
        root = rh.build_sharded(tmp_path / "root")
        end_write(root)
        target = tmp_path / "target"
        upload(root, "file://" + str(target))
    finally:
        os.umask(old)
    for where in (root, target):
        files = [where / "manifest.json", *sorted((where / "shards").iterdir())]
        for path in files:
            assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~umask, path
        assert stat.S_IMODE((where / "shards").stat().st_mode) == 0o777 & ~umask
