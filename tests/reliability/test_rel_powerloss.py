"""Power loss at every traced call of write, overwrite, commit (sharded) and append.

Each operation runs once under ``powerloss.PowerLossTracer``; then, for every call it made (the
crash points) and every crash model (``synced``, ``metadata``, ``torn``, ``cache``: see
powerloss.py), the tree a power loss would leave is rebuilt in a fresh directory and must hold
the previous dataset or the new one, opening, reading back exactly and verifying (a target that
did not exist before may also still be absent). Once the operation has returned, the ``synced``
state must be the new dataset (nothing committed is lost), and from the first crash point at
which only-fsynced data already shows the new dataset, every later one must too. Deterministic:
no timing, no processes, no randomness.
"""

from __future__ import annotations

import os
import shutil
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import crashloop
import powerloss
import pytest
import relharness as rh

import detfmt

pytestmark = pytest.mark.slow

Classify = Callable[[Path], str]


def _classify_1_0(refs: dict[str, str]) -> Classify:
    def classify(ds: Path) -> str:
        if not os.path.lexists(ds):
            return "absent"
        try:
            digest = rh.content_digest(str(ds))
            violations = detfmt.verify(str(ds), raise_on_error=False).violations
        except detfmt.DetfmtError as error:
            return f"broken:{type(error).__name__}:{error.rule}"
        if violations:
            return f"broken:verify:{violations[0].rule}"
        return next((name for name, ref in refs.items() if ref == digest), "other")

    return classify


def _classify_sharded(refs: dict[str, str]) -> Classify:
    def classify(root: Path) -> str:
        if not os.path.lexists(root / "manifest.json"):
            return "absent"
        try:
            digest = rh.sharded_digest(str(root))
            violations = detfmt.verify(str(root), raise_on_error=False).violations
        except detfmt.DetfmtError as error:
            return f"broken:{type(error).__name__}:{error.rule}"
        if violations:
            return f"broken:verify:{violations[0].rule}"
        return next((name for name, ref in refs.items() if ref == digest), "other")

    return classify


def check_power_loss(tracer: powerloss.PowerLossTracer, target: str, classify: Classify,
                     scratch: Path, *, fresh: bool) -> dict[str, object]:
    """Every crash state of every crash point, classified; returns the problems and counts."""
    seen: dict[str, str] = {}
    problems: list[str] = []
    counts: Counter[str] = Counter()
    allowed = {"old", "new"} | ({"absent"} if fresh else set())
    first_new = None
    last = len(tracer.points) - 1
    for k in range(len(tracer.points)):
        for model, tree in tracer.crash_states(k):
            key = powerloss.tree_key(tree)
            if key not in seen:
                where = powerloss.materialize(tree, scratch / f"s{len(seen)}")
                seen[key] = classify(where / target)
                shutil.rmtree(where)
            state = seen[key]
            counts[f"{model}:{state}"] += 1
            call = tracer.points[k].call
            if state not in allowed:
                problems.append(f"crash after call {k} {call} ({model}): {state}")
            if model == "synced":
                if state == "new" and first_new is None:
                    first_new = k
                elif first_new is not None and state != "new":
                    problems.append(f"crash after call {k} {call} (synced): {state} although "
                                    f"call {first_new} had made the new dataset durable")
    final = next(state for model, tree in tracer.crash_states(last) if model == "synced"
                 for state in [seen[powerloss.tree_key(tree)]])
    if final != "new":
        problems.append(f"after the operation returned, a power loss leaves: {final} "
                        "(committed data lost)")
    return {"problems": problems, "points": len(tracer.points), "states": len(seen),
            "counts": dict(counts)}


def _refs_1_0(tmp: Path) -> dict[str, str]:
    refs = {}
    for name, seed in (("old", 1), ("new", 2)):
        path = rh.build_dataset(tmp / f"ref-{name}", n=4, seed=seed, codec="zstd")
        refs[name] = rh.content_digest(str(path))
    return refs


def run_write(tmp: Path, *, overwrite: bool, target: str = "ds") -> dict[str, object]:
    refs = _refs_1_0(tmp)
    base = tmp / "base"
    base.mkdir()
    if overwrite:
        rh.build_dataset(base / target, n=4, seed=1, codec="zstd")
    with powerloss.PowerLossTracer(base) as tracer:
        rh.build_dataset(base / target, n=4, seed=2, codec="zstd", overwrite=overwrite)
    return check_power_loss(tracer, target, _classify_1_0(refs), tmp / "states",
                            fresh=not overwrite)


def _write_generation(root: Path, seed: int) -> None:
    from detfmt.shard.write import commit, write_shard

    gen = crashloop.shard_generation(seed)
    metas = [write_shard(rh.make_samples(n, seed * 100 + k, hi=20), root,
                         f"{gen['key_prefix']}{k:05d}", classes=rh.CLASSES, codec=codec,
                         box_fields={"iscrowd": "|u1"})
             for k, (codec, n) in enumerate(gen["plan"])]
    commit(root, metas, write_id=gen["write_id"])


def run_commit(tmp: Path, *, fresh: bool) -> dict[str, object]:
    refs = {name: rh.sharded_digest(str(crashloop.build_generation(tmp / f"ref-{name}", seed)))
            for name, seed in (("old", 1), ("new", 2))}
    base = tmp / "base"
    base.mkdir()
    if not fresh:
        crashloop.build_generation(base / "root", 1)
    with powerloss.PowerLossTracer(base) as tracer:
        _write_generation(base / "root", 2)
    return check_power_loss(tracer, "root", _classify_sharded(refs), tmp / "states", fresh=fresh)


def run_append(tmp: Path, *, sharded_source: bool = False) -> dict[str, object]:
    from detfmt.shard.append import append

    source = (crashloop.build_generation(tmp / "source", 3) if sharded_source
              else rh.build_dataset(tmp / "source", n=3, seed=7, codec="raw"))
    old = crashloop.build_generation(tmp / "ref-old", 1)
    new = tmp / "ref-new"
    shutil.copytree(old, new)
    append(new, source)
    refs = {"old": rh.sharded_digest(str(old)), "new": rh.sharded_digest(str(new))}
    base = tmp / "base"
    base.mkdir()
    shutil.copytree(old, base / "root")
    os.sync()  # the copy is the durable starting point
    with powerloss.PowerLossTracer(base) as tracer:
        append(base / "root", source)
    return check_power_loss(tracer, "root", _classify_sharded(refs), tmp / "states",
                            fresh=False)


OPERATIONS: dict[str, Callable[[Path], dict[str, object]]] = {
    "write": lambda tmp: run_write(tmp, overwrite=False),
    "write-new-parents": lambda tmp: run_write(tmp, overwrite=False, target="new/parents/ds"),
    "overwrite": lambda tmp: run_write(tmp, overwrite=True),
    "commit-fresh": lambda tmp: run_commit(tmp, fresh=True),
    "commit": lambda tmp: run_commit(tmp, fresh=False),
    "append": run_append,
    "append-sharded-source": lambda tmp: run_append(tmp, sharded_source=True),
}


@pytest.mark.parametrize("operation", list(OPERATIONS))
def test_power_loss_at_every_call_keeps_old_or_new(operation: str, tmp_path: Path) -> None:
    report = OPERATIONS[operation](tmp_path)
    print(operation, {k: v for k, v in report.items() if k != "problems"})
    assert not report["problems"], "\n".join(report["problems"][:20])
    assert report["points"] > 10


@pytest.mark.parametrize("skipped", ["fsync", "fsync_dir"])
def test_the_model_catches_a_writer_that_skips_an_fsync(skipped: str, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Self-test: without file fsyncs (or directory fsyncs) a traced write must be reported
    (the kill -9 tests cannot see either)."""
    from detfmt import fileio

    monkeypatch.setattr(fileio, skipped, lambda *args: None)
    report = run_write(tmp_path, overwrite=True)
    assert report["problems"], report
