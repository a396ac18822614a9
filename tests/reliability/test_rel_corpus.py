"""Replay every fuzz reproducer in tests/corpus/ (a mutated dataset packed as .tar.gz): opening,
iterating and verifying it must end normally or with a DetfmtError, in a sandboxed child. A
finding saved by the fuzzers (``relharness.save_finding``) has a ``.json`` note beside it; when
the note records ``original_digest``, a replay that verifies cleanly must also read back as that
original (the fuzzers' second property: no silent corruption)."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest
import relharness

#: tools/fuzz_nightly.py replays the corpus it wrote to (its --corpus-out)
CORPUS = Path(os.environ.get("DETFMT_CORPUS_DIR", relharness.REPO / "tests" / "corpus"))
CASES = sorted(CORPUS.glob("*.tar.gz"))


@pytest.mark.parametrize("case", CASES, ids=[c.name.removesuffix(".tar.gz") for c in CASES])
def test_corpus_case_is_safe(case: Path, tmp_path: Path, worker: relharness.SafeWorker) -> None:
    ds = relharness.unpack_dir(case.read_bytes(), tmp_path / "ds")
    outcome = worker.call(_note(case).get("op", "op_check_all"), str(ds))
    assert outcome.kind == "ok", f"{case.name}: {outcome}"
    check_against_note(case, outcome.value)


def _note(case: Path) -> dict[str, object]:
    note = case.with_name(case.name.removesuffix(".tar.gz") + ".json")
    return json.loads(note.read_text()) if note.exists() else {}


def check_against_note(case: Path, result: dict[str, object]) -> None:
    original = _note(case).get("original_digest")
    clean = not result.get("violations") and "verify_error" not in result
    if original and clean:
        assert result.get("digest") == original, \
            f"{case.name}: verifies cleanly but reads back differently: {result}"


def test_a_note_makes_silent_corruption_fail(tmp_path: Path) -> None:
    """The replay's second property can fail: a clean verify with another digest."""
    case = tmp_path / "fuzz-x.tar.gz"
    case.with_name("fuzz-x.json").write_text(json.dumps({"original_digest": "a"}))
    check_against_note(case, {"digest": "a", "violations": []})
    check_against_note(case, {"digest": "b", "violations": [["CHECKSUM", 0]]})
    with pytest.raises(AssertionError, match="reads back differently"):
        check_against_note(case, {"digest": "b", "violations": []})


def test_corpus_is_not_empty() -> None:
    """The replay must not pass vacuously because the corpus went missing."""
    assert CASES, f"no reproducers in {CORPUS}"


def test_a_nightly_finding_is_kept_and_replayed(tmp_path: Path, base_datasets: dict[str, Path],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """A mutation-suite property failure in a nightly run lands in the corpus, with the
    original's digest, and the replay holds it to that."""
    import relstrategies
    from test_rel_mutation import check_property

    out = tmp_path / "corpus"
    monkeypatch.setenv(relharness.CORPUS_OUT_ENV, str(out))
    monkeypatch.setitem(relstrategies.FAILURES, "seen", False)
    ds = relharness.copy_dataset(base_datasets["raw"], tmp_path / "ds")
    silent = relharness.Outcome(kind="ok", value={"digest": "changed", "violations": []})
    with pytest.raises(AssertionError, match="silent corruption"):
        check_property(silent, "original", [{"file": "images.bin", "op": "bitflip"}], ds)
    [case] = sorted(out.glob("*.tar.gz"))
    assert _note(case)["original_digest"] == "original"
    back = relharness.unpack_dir(case.read_bytes(), tmp_path / "back")
    assert relharness.tree_digest(back) == relharness.tree_digest(ds)
    with pytest.raises(AssertionError, match="reads back differently"):
        check_against_note(case, silent.value)


def test_libfuzzer_artifacts_become_corpus_entries(tmp_path: Path) -> None:
    """A crash, timeout or oom that killed the atheris run is kept as a dataset too."""
    sys.path.insert(0, str(relharness.REPO / "tools"))
    import fuzz_open

    state = fuzz_open.State(tmp_path / "corpus")
    try:
        work = tmp_path / "work"
        work.mkdir()
        (work / "timeout-1234").write_bytes(bytes([1, 0, 2, 0, 9, 0, 0, 0]))
        (work / "corpus").mkdir()  # libFuzzer's own working corpus: not a finding
        kept = fuzz_open.export_artifacts(work, state)
    finally:
        shutil.rmtree(state.root, ignore_errors=True)
    assert len(kept) == 1 and kept[0].parent == tmp_path / "corpus"
    note = _note(kept[0])
    assert note["problem"] == "libFuzzer timeout-1234" and note["codec"] in relharness.CODECS
    assert (relharness.unpack_dir(kept[0].read_bytes(), tmp_path / "back") / "header.json").exists()
