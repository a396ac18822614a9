"""The SPEC §9 structure checks of a compressed payload run once per sample and process
(issue 27 item 1: they cost ~5% of a JPEG decode), and a payload that fails them fails on
every read, never remembered as good."""

from __future__ import annotations

import numpy as np
import pytest

from detfmt import errors
from detfmt.format import codecs
from tests.datasets import make_dataset, varied_shapes


def _count_walks(monkeypatch) -> list[int]:
    """The sample indices `codecs.check_jpeg` (the SPEC §9.3 walk) is called with, in order."""
    calls: list[int] = []
    check = codecs.check_jpeg

    def counting(payload, height, width, *, path, index):
        calls.append(index)
        check(payload, height, width, path=path, index=index)

    monkeypatch.setattr(codecs, "check_jpeg", counting)
    return calls


def _with_sample_1_broken(tmp_path):
    """A 3-sample JPEG dataset whose sample 1 does not start with SOI (J1), opened afresh."""
    import detfmt

    ds = make_dataset(tmp_path / "ds", varied_shapes(3, seed=2), codec="jpeg")
    start = int(ds.offsets[1])
    blob = next(p for p in (tmp_path / "ds").iterdir() if p.name.startswith("images"))
    del ds
    with open(blob, "r+b") as f:
        f.seek(start)
        f.write(b"\x00")
    return detfmt.open(tmp_path / "ds")


def test_structure_checked_once_per_sample(tmp_path, monkeypatch):
    ds = make_dataset(tmp_path / "ds", varied_shapes(6, seed=2), codec="jpeg")
    calls = _count_walks(monkeypatch)
    first = ds.batch([0, 1, 2, 3, 4, 5], num_threads=1)
    assert sorted(calls) == [0, 1, 2, 3, 4, 5]
    second = ds.batch([5, 4, 3, 2, 1, 0], num_threads=1)
    assert len(calls) == 6  # not walked again
    assert np.array_equal(first.images[::-1], second.images)  # same pixels either way


def test_a_bad_payload_fails_on_every_read(tmp_path):
    ds = _with_sample_1_broken(tmp_path)
    ds.batch([0, 2])
    for _ in range(2):
        with pytest.raises(errors.DecodeError):
            ds.batch([0, 1, 2], num_threads=1)


def test_read_image_walks_once_and_equals_the_batch(tmp_path, monkeypatch):
    ds = make_dataset(tmp_path / "ds", varied_shapes(4, seed=3), codec="jpeg")
    calls = _count_walks(monkeypatch)
    first = [ds.read_image(i) for i in range(4)]
    assert sorted(calls) == [0, 1, 2, 3]
    again = [ds[i].image for i in range(4)]
    assert len(calls) == 4  # not walked again
    batch = ds.batch(range(4), num_threads=1)
    for i, (a, b) in enumerate(zip(first, again, strict=True)):
        h, w = a.shape[:2]
        assert np.array_equal(a, b) and np.array_equal(a, batch.images[i, :h, :w])


def test_read_image_of_a_bad_payload_fails_every_time(tmp_path):
    ds = _with_sample_1_broken(tmp_path)
    ds.read_image(0)
    for _ in range(2):
        with pytest.raises(errors.DecodeError):
            ds.read_image(1)
