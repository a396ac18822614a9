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
