"""detfmt's own reader against every conformance case, plus the suite's own safeguards."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tools"))

import make_conformance  # noqa: E402

from conformance import spec_reader  # noqa: E402
from conformance.dump import canonical_dump  # noqa: E402
from conformance.runner import check_dump, load_cases, materialize  # noqa: E402
from detfmt import DetfmtError  # noqa: E402

CASES = load_cases()
VALID = [case for case in CASES if case.kind == "valid"]
INVALID = [case for case in CASES if case.kind == "invalid"]


def _expected(case) -> dict:
    return json.loads(case.expected.read_text(encoding="utf-8"))


@pytest.mark.parametrize("case", VALID, ids=[case.id for case in VALID])
def test_valid_case(case) -> None:
    dump = json.loads(json.dumps(canonical_dump(case.path)))  # what a subprocess would print
    assert check_dump(dump, _expected(case)) == []


@pytest.mark.parametrize("case", INVALID, ids=[case.id for case in INVALID])
def test_invalid_case(case) -> None:
    with materialize(case) as path, pytest.raises(DetfmtError) as caught:
        canonical_dump(path)
    assert caught.value.rule == case.rule, str(caught.value)


@pytest.mark.parametrize("case", CASES, ids=[f"{case.kind}-{case.id}" for case in CASES])
def test_spec_reader_agrees(case) -> None:
    """The second reader, written from SPEC.md alone, passes every case too."""
    with materialize(case) as path:
        if case.kind == "valid":
            dump = json.loads(json.dumps(spec_reader.dump(str(path))))
            assert check_dump(dump, _expected(case)) == []
        else:
            with pytest.raises(spec_reader.Reject) as caught:
                spec_reader.dump(str(path))
            assert caught.value.rule == case.rule


def test_goldens_are_what_the_generator_writes() -> None:
    """Golden files are never regenerated silently: any drift is a failure to look at."""
    assert make_conformance.differences() == []


def test_suite_is_small_and_complete() -> None:
    files = [path for path in (REPO / "conformance" / "v1").rglob("*") if path.is_file()]
    assert sum(path.stat().st_size for path in files) < 1_000_000
    assert len({case.id for case in CASES}) == len(CASES)
    for case in VALID:
        assert case.path.is_dir() and case.expected.is_file()


def test_check_dump_rejects_wrong_answers() -> None:
    case = next(case for case in VALID if case.id == "raw_variable")
    good = json.loads(json.dumps(canonical_dump(case.path)))
    assert check_dump(good, _expected(case)) == []
    for mutate in (
        lambda d: d["samples"][0].__setitem__("pixels", d["samples"][1]["pixels"]),
        lambda d: d["samples"][1].__setitem__("boxes_sha256", "0" * 64),
        lambda d: d["samples"].pop(),
        lambda d: d["header"].__setitem__("max_boxes", 9),
        lambda d: d["samples"][2].__setitem__("count", 2),
    ):
        bad = copy.deepcopy(good)
        mutate(bad)
        assert check_dump(bad, _expected(case)) != []


def test_jpeg_tolerance_is_enforced() -> None:
    case = next(case for case in VALID if case.id == "jpeg")
    dump = json.loads(json.dumps(canonical_dump(case.path)))
    import base64

    pixels = bytearray(base64.b64decode(dump["samples"][1]["pixels"]))
    pixels[0] ^= 0x80  # one pixel off by 128 exceeds max_abs_error
    dump["samples"][1]["pixels"] = base64.b64encode(bytes(pixels)).decode()
    assert any("JPEG" in problem for problem in check_dump(dump, _expected(case)))


def test_command_protocol_end_to_end() -> None:
    reader = f"{sys.executable} -m conformance.detfmt_reader"
    done = subprocess.run(
        [sys.executable, "-m", "conformance", "--reader", reader, "--json",
         "--case", "mixed_codecs", "--case", "checksum", "--case", "header_too_large"],
        cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout) == {"passed": 3, "failed": {}}
    broken = f"{sys.executable} -c print(1)"
    done = subprocess.run([sys.executable, "-m", "conformance", "--reader", broken,
                           "--case", "checksum"], cwd=REPO, capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 1 and "FAIL" in done.stdout
