"""Mutation fuzzing in CI: any damage to any file either reads back as the original or fails with
a DetfmtError, never a crash, a hang or silent corruption.

The property, checked in a sandboxed child for each mutated copy:
- opening + iterating every sample + batching, and ``verify()``, raise nothing but DetfmtError;
- if ``verify()`` finds nothing, the dataset reads back exactly as the original.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
import relharness
import relstrategies
from hypothesis import given
from hypothesis import strategies as st


def check_property(outcome: relharness.Outcome, original: str, label: Any,
                   ds: Path | None = None, op: str = "op_check_all") -> None:
    """The property; in a nightly run (relharness.CORPUS_OUT_ENV set) a dataset ``ds`` that
    breaks it is also kept as a corpus entry, replayed by test_rel_corpus.py with ``op``."""
    try:
        assert outcome.kind == "ok", f"{label}: {outcome}"
        result = outcome.value
        clean = not result.get("violations") and "verify_error" not in result
        if clean:
            assert "open_error" not in result, f"{label}: verify passed but open failed: {result}"
            assert result["digest"] == original, \
                f"{label}: silent corruption, verify passed: {result}"
    except AssertionError as error:
        relstrategies.FAILURES["seen"] = True
        out = os.environ.get(relharness.CORPUS_OUT_ENV)
        if out and ds is not None:
            relharness.save_finding(ds, Path(out), "mutation", {
                "problem": str(error)[:2000], "mutations": label, "op": op,
                "original_digest": original})
        raise


@pytest.mark.parametrize("codec", relharness.CODECS)
def test_mutations_are_detected_or_harmless(codec: str, base_datasets: dict[str, Path],
                                            worker: relharness.SafeWorker) -> None:
    base = base_datasets[codec]
    original = worker.call("op_open_iterate", str(base))
    assert original.kind == "ok", str(original)
    scratch = Path(tempfile.mkdtemp(prefix="relmut-"))

    @relstrategies.FUZZ_SETTINGS
    @given(mutations=relstrategies.st_mutations(base))
    def run(mutations: list[dict[str, Any]]) -> None:
        relstrategies.within_budget()
        ds = scratch / "ds"
        shutil.rmtree(ds, ignore_errors=True)
        shutil.copytree(base, ds)
        for m in mutations:
            relstrategies.apply_mutation(ds, m)
        check_property(worker.call("op_check_all", str(ds)), original.value, mutations, ds)

    try:
        run()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


@relstrategies.PER_FILE_SETTINGS
@given(data=st.data())
def test_every_file_every_op(data: st.DataObject, base_datasets: dict[str, Path],
                             worker: relharness.SafeWorker, tmp_path: Path) -> None:
    """Each (file, op) pair at least once per run, on the zstd dataset (most parsing paths)."""
    relstrategies.within_budget()
    base = base_datasets["zstd"]
    files = list(relharness.iter_files(base))
    sizes = {f: (base / f).stat().st_size for f in files}
    original = worker.call("op_open_iterate", str(base))
    for file in files:
        ds = tmp_path / f"ds-{file}"
        shutil.rmtree(ds, ignore_errors=True)
        shutil.copytree(base, ds)
        m = data.draw(relstrategies.st_mutation([file], sizes), label=file)
        relstrategies.apply_mutation(ds, m)
        check_property(worker.call("op_check_all", str(ds)), original.value, m, ds)


@relstrategies.FUZZ_SETTINGS
@given(path=st.sampled_from(relstrategies.HEADER_PATHS), value=relstrategies.JSON_VALUES)
def test_any_json_value_in_any_header_key(path: str, value: Any, base_datasets: dict[str, Path],
                                          worker: relharness.SafeWorker,
                                          tmp_path: Path) -> None:
    """Arbitrary JSON (nested, huge ints, wrong types) at any header key: a typed error or,
    if the header still describes the same data, the same content."""
    relstrategies.within_budget()
    base = base_datasets["raw"]
    original = worker.call("op_open_iterate", str(base))
    ds = tmp_path / "ds"
    shutil.rmtree(ds, ignore_errors=True)
    shutil.copytree(base, ds)
    header = relharness.read_header(ds)
    relstrategies.set_json_path(header, path, value)
    relharness.write_header(ds, header)
    check_property(worker.call("op_check_all", str(ds)), original.value, (path, value), ds)


@relstrategies.FUZZ_SETTINGS
@given(data=st.data())
def test_ragged_label_mutations(data: st.DataObject, ragged_base: Path,
                                worker: relharness.SafeWorker, tmp_path: Path) -> None:
    """Damage aimed at ragged labels (SPEC §10.2), alone or with any byte-level mutation.
    Header edits (and byte-level damage): a typed error or, if it verifies, the original
    content. Resealed edits of the counts or the label rows (so only R-49 and the shape checks
    stand between them and the reader): typed errors only, and with no other damage, labels
    that no longer hold together (`relstrategies.ragged_labels_consistent`) are refused."""
    relstrategies.within_budget()
    header = relharness.read_header(ragged_base)
    assert header["required_features"] == ["ragged_labels"], header  # the layout under test
    n, t, m = header["num_samples"], header["num_boxes"], header["max_boxes"]
    original = worker.call("op_open_iterate", str(ragged_base))
    ds = tmp_path / "ds"
    shutil.rmtree(ds, ignore_errors=True)
    shutil.copytree(ragged_base, ds)
    ragged = data.draw(st.lists(relstrategies.st_ragged_mutation(n, t, m), min_size=1,
                                max_size=2), label="ragged")
    generic = data.draw(st.one_of(st.just([]), relstrategies.st_mutations(
        ragged_base, max_count=2, header_keys=relstrategies.RAGGED_HEADER_INT_KEYS)),
        label="generic")
    for mutation in ragged:
        relstrategies.apply_ragged_mutation(ds, mutation)
    consistent = relstrategies.ragged_labels_consistent(ds)
    for mutation in generic:
        relstrategies.apply_mutation(ds, mutation)
    outcome = worker.call("op_check_all", str(ds))
    label = {"ragged": ragged, "generic": generic}
    if all(mutation["op"] == "header" for mutation in ragged):
        check_property(outcome, original.value, label, ds)
        return
    assert outcome.kind == "ok", f"{label}: {outcome}"
    if not generic and not consistent:
        result = outcome.value
        assert result.get("violations") or "verify_error" in result, \
            f"{label}: ragged labels that do not hold together verified cleanly: {result}"
