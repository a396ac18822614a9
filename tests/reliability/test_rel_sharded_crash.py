"""Crash safety of the sharded (1.1) write path: ``write_shard`` x3 then ``commit`` SIGKILLed at
random moments (a quarter of the kills inside the commit), on a fresh root and on a root
holding an older committed generation, with ``os.replace``/``os.fsync`` slowed down in the
writer so that kills land between the steps of a publish. The root afterwards holds the old
manifest with its shards intact, or the new one, complete and verifying; a fresh root never
opens before its commit; ``gc`` never removes what the manifest names. Also: failures injected
into the commit's own calls leave the previous manifest in place."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import crashloop
import pytest
import relharness as rh

pytestmark = pytest.mark.slow


def test_sharded_kill9_loop(tmp_path: Path, worker30: rh.SafeWorker) -> None:
    report = crashloop.shard_kill_loop(tmp_path, iterations=16, seed=4321, delay=0.005,
                                       worker=worker30)
    summary = report.summary()
    print("sharded kill-9 loop:", json.dumps(summary))
    assert not report.problems, summary
    states = summary["states"]
    # kills must land before and after the commit on both kinds of roots (loose bounds)
    assert states.get("fresh-any:absent", 0) + states.get("fresh-commit:absent", 0) >= 2, states
    assert states.get("update-any:old", 0) + states.get("update-commit:old", 0) >= 2, states
    assert states.get("fresh-commit:new", 0) + states.get("update-commit:new", 0) >= 1, states
    assert summary["killed"] >= 8, summary


@pytest.mark.parametrize("call", ["fsync", "replace"])
def test_commit_failure_is_typed_and_keeps_a_valid_root(call: str, tmp_path: Path,
                                                        worker30: rh.SafeWorker,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The N-th os.fsync / os.replace of a commit fails (EIO or ENOSPC), for every N: commit
    raises WriteError, no manifest temporary is left, and the root holds the old generation
    intact, or (a failure after the switch: the directory fsync) the new one, and then the
    error says that it was published."""
    import detfmt
    from detfmt.shard.write import commit, write_shard

    gen = crashloop.shard_generation(2)
    digests = {}
    for name, seed in (("old", 1), ("new", 2)):
        ref = crashloop.build_generation(tmp_path / f"ref-{name}", seed)
        digests[name] = worker30.call("op_sharded_iterate", str(ref)).value
    seen = set()
    for n in range(1, 8):
        root = crashloop.build_generation(tmp_path / f"root-{n}", 1)
        metas = [write_shard(rh.make_samples(k_n, 200 + k, hi=20), root,
                             f"{gen['key_prefix']}{k:05d}", classes=rh.CLASSES, codec=codec,
                             box_fields={"iscrowd": "|u1"})
                 for k, (codec, k_n) in enumerate(gen["plan"])]
        count = 0
        real = getattr(os, call)

        def faulty(*args, _real=real, _n=n, **kwargs):
            nonlocal count
            count += 1
            if count == _n:
                raise OSError(errno.EIO if _n % 2 else errno.ENOSPC, "injected")
            return _real(*args, **kwargs)

        error = None
        with monkeypatch.context() as m:
            m.setattr(os, call, faulty)
            try:
                commit(root, metas, write_id=gen["write_id"])
            except detfmt.errors.WriteError as e:
                error = e
        state = crashloop.classify_sharded(root, worker30, digests)
        assert not [p for p in os.listdir(root) if p.startswith(".manifest.")], (call, n)
        if count < n:  # the commit made fewer calls: nothing was injected
            assert error is None and state == "new", (call, n, state)
            break
        assert error is not None, (call, n, state)
        assert state in ("old", "new"), (call, n, state)
        if state == "new":
            assert "published" in str(error), (call, n, str(error))
        seen.add(state)
    assert "old" in seen, (call, seen)
    if call == "fsync":
        assert seen == {"old", "new"}, seen  # the file's fsync, then the directory's
