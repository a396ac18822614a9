"""Replay every fuzz reproducer in tests/corpus/ (a mutated dataset packed as .tar.gz): opening,
iterating and verifying it must end normally or with a DetfmtError, in a sandboxed child."""

from __future__ import annotations

from pathlib import Path

import pytest
import relharness

CORPUS = relharness.REPO / "tests" / "corpus"
CASES = sorted(CORPUS.glob("*.tar.gz"))


@pytest.mark.parametrize("case", CASES, ids=[c.name.removesuffix(".tar.gz") for c in CASES])
def test_corpus_case_is_safe(case: Path, tmp_path: Path, worker: relharness.SafeWorker) -> None:
    ds = relharness.unpack_dir(case.read_bytes(), tmp_path / "ds")
    outcome = worker.call("op_check_all", str(ds))
    assert outcome.kind == "ok", f"{case.name}: {outcome}"


def test_corpus_is_not_empty() -> None:
    """The replay must not pass vacuously because the corpus went missing."""
    assert CASES, f"no reproducers in {CORPUS}"
