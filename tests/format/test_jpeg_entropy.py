"""SPEC §9.3 J4 (1.2.1): detfmt's entropy walk and the spec reader's agree, byte for byte.

The conformance cases pin one payload per rule; here both walks meet seeded random corruptions of
the suite's frozen JPEGs (baseline, restart markers, 4:2:0, 4:2:2, progressive with refinement
scans) and real photographs, which they must accept.
"""

from __future__ import annotations

import os
import random
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tools"))

import conformance_payloads as payloads  # noqa: E402

from conformance import spec_reader  # noqa: E402
from detfmt.errors import DecodeError  # noqa: E402
from detfmt.format.jpeg_entropy import check_entropy  # noqa: E402

SOURCES = {
    "baseline": (payloads.FROZEN_JPEG[5, 7], (5, 7)),
    "restart": (payloads.FROZEN_JPEG_MORE["RESTART"], (16, 24)),
    "progressive": (payloads.FROZEN_JPEG_MORE["PROGRESSIVE"], (16, 24)),
    "sub_420": (payloads.FROZEN_JPEG_MORE["SUB_420"], (16, 24)),
    "scans_256": (payloads.progressive_gray(256), (8, 8)),
}


def _detfmt(data: bytes) -> str:
    try:
        check_entropy(data, path="payload", index=0)
    except DecodeError as error:
        assert error.rule == "IMAGE_DECODE"
        return "IMAGE_DECODE"
    return "ok"


def _spec(data: bytes) -> str:
    try:
        spec_reader.jpeg_entropy(data)
    except spec_reader.Reject as error:
        return str(error)
    return "ok"


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_the_two_walks_agree_on_corrupted_payloads(name: str) -> None:
    data, (height, width) = SOURCES[name]
    assert _detfmt(data) == _spec(data) == "ok"
    rng = random.Random(name)
    start = data.index(b"\xff\xda")
    answers = {"ok": 0, "IMAGE_DECODE": 0}
    for _ in range(150):
        mutated = bytearray(data)
        for _ in range(rng.choice((1, 1, 2, 3))):
            at = rng.randrange(start, len(mutated) - 2)
            roll = rng.random()
            if roll < 0.6:
                mutated[at] = rng.randrange(256)
            elif roll < 0.8:
                del mutated[at]
            else:
                mutated.insert(at, rng.randrange(256))
        try:  # J1 to J3 first: the walk's input has passed them
            spec_reader.check_jpeg(bytes(mutated), height, width)
        except spec_reader.Reject:
            continue
        got = _detfmt(bytes(mutated))
        assert got == _spec(bytes(mutated)), mutated.hex()
        answers[got] += 1
    assert answers["IMAGE_DECODE"] > 0


def test_real_photographs_pass() -> None:
    shared = Path(os.environ.get("DETFMT_SHARED_DATA", REPO.parent / "shared" / "data"))
    photos = sorted(shared.glob("*/**/*.jpg"))[::97][:4]
    if not photos:
        pytest.skip("the shared real datasets are not on this machine")
    for photo in photos:
        data = photo.read_bytes()
        assert _detfmt(data) == _spec(data) == "ok", photo.name


def test_the_native_walk_agrees_with_the_python_walk(monkeypatch: pytest.MonkeyPatch) -> None:
    """Sequential scans go through the numba kernel when numba is installed: same verdicts."""
    from detfmt.format import jpeg_entropy_native as native

    if native.sequential_kernel() is None:
        pytest.skip("numba is not installed (detfmt[fast])")
    rng = random.Random(26)
    checked = 0
    for name in ("baseline", "restart", "sub_420"):
        data, (height, width) = SOURCES[name]
        start = data.index(b"\xff\xda")
        for _ in range(150):
            mutated = bytearray(data)
            at = rng.randrange(start, len(mutated) - 2)
            mutated[at] = rng.randrange(256)
            try:
                spec_reader.check_jpeg(bytes(mutated), height, width)
            except spec_reader.Reject:
                continue
            fast = _detfmt(bytes(mutated))
            with monkeypatch.context() as patch:
                patch.setattr(native, "sequential_kernel", lambda: None)
                assert _detfmt(bytes(mutated)) == fast, mutated.hex()
            checked += 1
    assert checked > 100
