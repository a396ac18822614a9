"""Mutation fuzzing of sharded (1.1) roots: any damage to manifest.json or to any shard file
either reads back as the original or fails with a DetfmtError, never a crash, a hang or silent
corruption.

The base root has four shards (raw, zstd, an empty raw shard, zstd; 8 samples). For each mutated
copy, in the sandboxed child (1 GiB address space, 10 s): ``detfmt.open``, every sample, one
batch across all shards, a shuffled ``plan()`` through ``iter_batches``, and ``detfmt.verify``
raise nothing but DetfmtError; if ``verify`` reports nothing, the content is the original.
Mutations aim at every part of a shard file (prefix, table of contents, zero padding, member
bodies, tail), at the manifest (bytes, any JSON value at any key, extreme integers, sample
counts kept consistent with S-5), and at whole files (deleted, swapped, one copied over
another); half of the shard mutations re-seal the manifest (size and xxh3 of the damaged file)
so that the checks behind S-7 are reached too.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import relharness
import relstrategies
from hypothesis import given, settings
from hypothesis import strategies as st
from test_rel_mutation import check_property

# one root with four shards and both codecs stands in for the 1.0 suite's four codecs
SHARDED_SETTINGS = settings(relstrategies.FUZZ_SETTINGS,
                            max_examples=max(40, relstrategies.MAX_EXAMPLES * 2))


@pytest.fixture(scope="module")
def sharded_base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return relharness.build_sharded(tmp_path_factory.mktemp("sharded") / "root")


@pytest.fixture(scope="module")
def original(sharded_base: Path, worker: relharness.SafeWorker) -> str:
    outcome = worker.call("op_check_sharded", str(sharded_base))
    assert outcome.kind == "ok" and outcome.value.get("violations") == [], str(outcome)
    return outcome.value["digest"]


def _fresh(base: Path, dst: Path) -> Path:
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(base, dst)
    return dst


def test_sharded_mutations_are_detected_or_harmless(sharded_base: Path, original: str,
                                                    worker: relharness.SafeWorker,
                                                    tmp_path: Path) -> None:
    @SHARDED_SETTINGS
    @given(mutations=relstrategies.st_sharded_mutations(sharded_base))
    def run(mutations: list[dict[str, Any]]) -> None:
        relstrategies.within_budget()
        root = _fresh(sharded_base, tmp_path / "root")
        for m in mutations:
            relstrategies.apply_sharded_mutation(root, m)
        check_property(worker.call("op_check_sharded", str(root)), original, mutations, root,
                       "op_check_sharded")

    run()


@settings(relstrategies.PER_FILE_SETTINGS, max_examples=max(6, relstrategies.MAX_EXAMPLES // 25))
@given(data=st.data())
def test_every_file_every_region(data: st.DataObject, sharded_base: Path, original: str,
                                 worker: relharness.SafeWorker, tmp_path: Path) -> None:
    """Each file, and each region of each shard file, at least once per example."""
    relstrategies.within_budget()
    files = relharness.sharded_files(sharded_base)
    sizes = {f: (sharded_base / f).stat().st_size for f in files}
    regions = {f: relstrategies.shard_regions(sharded_base / f) for f in files
               if f != "manifest.json"}
    targets = [("manifest.json", None)] + [(f, r) for f in regions for r in regions[f]]
    for file, region in targets:
        root = _fresh(sharded_base, tmp_path / "root")
        only = {file: {region: regions[file][region]}} if region else {}
        m = data.draw(relstrategies.st_sharded_mutation([file], only, sizes),
                      label=f"{file}:{region}")
        relstrategies.apply_sharded_mutation(root, m)
        check_property(worker.call("op_check_sharded", str(root)), original, m, root,
                       "op_check_sharded")


@pytest.mark.parametrize("op", relstrategies.SHARD_FILE_OPS)
def test_whole_file_damage(op: str, sharded_base: Path, original: str,
                           worker: relharness.SafeWorker, tmp_path: Path) -> None:
    """Deleted, swapped and duplicated shard files: always reported by verify, and a typed error
    on reading when a shard that holds samples is hit. (The reader opens shards lazily, on first
    use, so the damaged file of the empty shard is found by verify only.)"""
    import json

    manifest = json.loads((sharded_base / "manifest.json").read_bytes())
    holds = {s["path"]: s["num_samples"] > 0 for s in manifest["shards"]}
    shards = [f for f in relharness.sharded_files(sharded_base) if f != "manifest.json"]
    for file in shards:
        for other in shards:
            if other == file:
                continue
            root = _fresh(sharded_base, tmp_path / "root")
            relharness.mutate_sharded(root, file, op, other=other)
            outcome = worker.call("op_check_sharded", str(root))
            check_property(outcome, original, (file, op, other))
            assert outcome.value.get("violations"), (file, op, other, outcome)
            if holds[file] or (op == "swap" and holds[other]):
                assert "open_error" in outcome.value, (file, op, other, outcome)
            if op == "delete":
                break


@pytest.mark.parametrize("kind", ["directory", "fifo", "symlink", "through_a_file", "dangling"])
def test_shard_that_is_not_a_regular_file(kind: str, sharded_base: Path, original: str,
                                          worker: relharness.SafeWorker, tmp_path: Path) -> None:
    """A shard path that names a directory, a FIFO (opening it would block), a symbolic link,
    a path through a regular file, or a dangling link: typed errors from reading and verify,
    no hang, for a shard with samples and for the empty one."""
    import json
    import os

    for victim in (0, 2):  # shard 2 holds no samples: only verify opens it
        root = _fresh(sharded_base, tmp_path / "root")
        m = json.loads((root / "manifest.json").read_bytes())
        rel = m["shards"][victim]["path"]
        p = root / rel
        if kind == "through_a_file":
            m["shards"][victim]["path"] = rel + "/x"
            (root / "manifest.json").write_bytes(json.dumps(m).encode())
        else:
            data = p.read_bytes()
            p.unlink()
            if kind == "directory":
                p.mkdir()
            elif kind == "fifo":
                os.mkfifo(p)
            elif kind == "symlink":
                (root / "elsewhere").write_bytes(data)
                p.symlink_to(root / "elsewhere")
            else:
                p.symlink_to(root / "nowhere")
        outcome = worker.call("op_check_sharded", str(root))
        check_property(outcome, original, (kind, victim))
        assert outcome.value.get("violations"), (kind, victim, outcome)
        if victim == 0:
            assert "open_error" in outcome.value, (kind, victim, outcome)


@pytest.mark.parametrize("value", [4, 2**20, 2**40, 2**62, 2**63 - 1, 2**64 - 1])
@pytest.mark.parametrize("shard", [0, 2, 3])
def test_sample_counts_the_shards_cannot_hold(value: int, shard: int, sharded_base: Path,
                                              original: str, worker: relharness.SafeWorker,
                                              tmp_path: Path) -> None:
    """A shard entry's num_samples changed with first_index and the total kept consistent
    (S-5 holds), also with the entry's bytes raised to match: a typed error before any array is
    sized by the count (plan() included), never OverflowError or MemoryError."""
    root = _fresh(sharded_base, tmp_path / "root")
    relharness.mutate_sharded(root, "manifest.json", "set_count", shard=shard, value=value)
    outcome = worker.call("op_check_sharded", str(root))
    check_property(outcome, original, (shard, value))
    assert "open_error" in outcome.value and outcome.value["violations"], outcome
    relharness.mutate_sharded(root, "manifest.json", "set_json",
                              path=f"shards/{shard}/bytes", value=min(2**64 - 1, value * 48))
    outcome = worker.call("op_check_sharded", str(root))
    check_property(outcome, original, (shard, value, "bytes"))
    assert "open_error" in outcome.value and outcome.value["violations"], outcome
    assert "plan_error" in outcome.value, outcome
