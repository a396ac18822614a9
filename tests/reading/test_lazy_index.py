"""The index is checked lazily, record by record: open() is O(1), and no record is used
unchecked (its links to both neighbours included)."""

from __future__ import annotations

import numpy as np
import pytest

import detfmt
from detfmt.format import npy, spec
from detfmt.format import rules as validate
from tests.samples import CLASSES, make_samples


def corrupt_record(path, i, field, value):
    index_file = path / spec.INDEX_FILE
    raw = bytearray(index_file.read_bytes())
    header = npy.parse_header(bytes(raw[:4096]), len(raw), str(index_file))
    records = np.frombuffer(raw, spec.INDEX_DTYPE, offset=header.data_offset).copy()
    records[i][field] = value
    raw[header.data_offset :] = records.tobytes()
    index_file.write_bytes(bytes(raw))


@pytest.fixture
def small_chunks(monkeypatch):
    monkeypatch.setattr(validate, "INDEX_CHUNK", 4)


@pytest.mark.parametrize(("field", "value", "rule"), [
    ("offset", 64, "OFFSETS_NON_MONOTONIC"),
    ("offset", 1, "OFFSET_ALIGNMENT"),
    ("nbytes", 1 << 40, "OFFSETS_BOUNDS"),
    ("codec", 9, "CODEC_UNKNOWN"),
    ("height", 0, "LIMIT_EXCEEDED"),
])
def test_a_bad_record_is_caught_before_its_sample_is_read(tmp_path, small_chunks, field, value,
                                                          rule):
    detfmt.write(make_samples(20, seed=8), tmp_path / "ds", classes=CLASSES)
    corrupt_record(tmp_path / "ds", 13, field, value)
    ds = detfmt.open(tmp_path / "ds")  # only records 0-3 (INDEX_CHUNK) and the tail are checked
    assert ds[2].image.shape[2] == 3
    with pytest.raises(detfmt.FormatError) as caught:
        ds[13]
    assert caught.value.rule == rule
    assert caught.value.index in (12, 13)  # a broken chain names the first bad link
    with pytest.raises(detfmt.FormatError):
        ds.batch([0, 13])
    if field in ("codec", "height"):  # a record checked alone: its neighbours still read
        assert len(ds.batch([0, 12, 14])) == 3
    with pytest.raises(detfmt.FormatError) as caught:
        detfmt.verify(tmp_path / "ds")
    assert caught.value.rule == rule


def test_tail_and_blob_size_are_checked_at_open(tmp_path, small_chunks):
    detfmt.write(make_samples(20, seed=8), tmp_path / "ds", classes=CLASSES)
    corrupt_record(tmp_path / "ds", 19, "nbytes", 5)
    with pytest.raises(detfmt.LayoutError) as caught:
        detfmt.open(tmp_path / "ds")
    assert caught.value.rule == "BLOB_SIZE"


def test_counts_are_checked_per_chunk(tmp_path, small_chunks):
    detfmt.write(make_samples(20, seed=8), tmp_path / "ds", classes=CLASSES)
    path = tmp_path / "ds" / spec.COUNTS_FILE
    raw = bytearray(path.read_bytes())
    header = npy.parse_header(bytes(raw[:4096]), len(raw), str(path))
    raw[header.data_offset + 4 * 17 : header.data_offset + 4 * 18] = np.int32(99).tobytes()
    path.write_bytes(bytes(raw))
    ds = detfmt.open(tmp_path / "ds")
    with pytest.raises(detfmt.LabelError) as caught:
        ds.batch([1, 17])
    assert (caught.value.rule, caught.value.index) == ("COUNT_RANGE", 17)
