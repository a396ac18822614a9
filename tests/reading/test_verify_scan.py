"""verify reads images.bin once (file digest, payload checksums, padding and codecs in one pass
over blocks of samples): every broken byte is still found, in any block, and reported in the
order of SPEC §12 (file checksums, then payloads sample by sample); a shard's own checksum
first (§19.4)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

import detfmt
from detfmt.reading import verify
from detfmt.reading.dataset import Dataset
from detfmt.reading.sources import PackedSource
from tests.datasets import make_dataset, make_sharded_root, varied_shapes


def _flip(path: Path, position: int) -> None:
    with open(path, "r+b") as f:
        f.seek(position)
        byte = f.read(1)
        f.seek(position)
        f.write(bytes([byte[0] ^ 0x01]))


def _rules(report) -> list[tuple[str, int | None]]:
    return [(v.rule, v.index) for v in report.violations]


@pytest.fixture(params=[(1, False), (10**9, False), (1, True), (10**9, True)],
                ids=["bulk", "per-sample", "bulk-threaded", "per-sample-threaded"])
def small_blocks(monkeypatch, request):
    """Blocks of a few samples, so a small dataset spans many blocks; each block checked in
    bulk, or sample by sample (the two ways `_check_block` has); the file digests fed inline
    or by the helper thread (as for large files)."""
    bulk, threaded = request.param
    monkeypatch.setattr(verify, "_SCAN_BLOCK", 2048)
    monkeypatch.setattr(verify, "_BULK", bulk)
    monkeypatch.setattr(verify, "_THREADED_BYTES", 0 if threaded else 1 << 62)


def test_every_broken_payload_and_padding_byte_is_found_in_order(tmp_path, small_blocks):
    shapes = varied_shapes(60, seed=3)
    ds = make_dataset(tmp_path / "ds", shapes)
    offsets, nbytes = ds.offsets.astype(int), ds.nbytes.astype(int)
    ds.close()
    padded = [i for i in range(20, 50) if (offsets[i] + nbytes[i]) % 64]
    assert padded
    late = padded[-1]
    blob = tmp_path / "ds" / "images.bin"
    _flip(blob, offsets[5] + 1)  # a payload byte early
    _flip(blob, offsets[late] + nbytes[late])  # the first padding byte of a later sample
    _flip(blob, offsets[57] + nbytes[57] - 1)  # the last payload byte of a late sample
    report = detfmt.verify(tmp_path / "ds", raise_on_error=False)
    assert _rules(report) == [("FILE_CHECKSUM", None), ("CHECKSUM", 5),
                              ("PADDING_NONZERO", late), ("CHECKSUM", 57)]


def test_file_digest_of_a_valid_dataset_matches_the_header(tmp_path, small_blocks):
    ds = make_dataset(tmp_path / "ds", varied_shapes(40, seed=4), codec="png")
    ds.close()
    assert detfmt.verify(tmp_path / "ds").ok
    # a tail byte beyond the last payload's padding is part of the file digest too
    blob = tmp_path / "ds" / "images.bin"
    _flip(blob, os.path.getsize(blob) - 1)
    assert _rules(detfmt.verify(tmp_path / "ds", raise_on_error=False))[0][0] in {
        "FILE_CHECKSUM", "PADDING_NONZERO"}


@pytest.mark.parametrize("where", ["head", "payload", "tail"])
def test_shard_checksum_is_reported_first(tmp_path, small_blocks, where):
    root = tmp_path / "root"
    make_sharded_root(root, varied_shapes(30, seed=5), shard_sizes=(30,)).close()
    [shard] = sorted((root / "shards").rglob("*.detfmt"))
    assert detfmt.verify(root).ok
    reader = Dataset(PackedSource(shard))
    base = reader.blob_member.base
    first_payload = int(reader.offsets[3])
    reader.close()
    position = {"head": base - 1,  # the table of contents (or a gap): the shard does not open
                "payload": base + first_payload,
                "tail": os.path.getsize(shard) - 1}[where]
    _flip(shard, position)
    report = detfmt.verify(root, raise_on_error=False)
    assert report.violations and report.violations[0].rule == "SHARD_CHECKSUM"
    if where == "payload":
        assert [v.rule for v in report.violations][1:3] == ["FILE_CHECKSUM", "CHECKSUM"]


def test_scan_matches_a_plain_digest_of_every_block_size(tmp_path, monkeypatch):
    ds = make_dataset(tmp_path / "ds", varied_shapes(25, seed=6))
    import xxhash

    expected = xxhash.xxh3_64_hexdigest(ds.blob_member.view)
    for block in (1, 64, 1000, 1 << 20):
        for threshold in (0, 1 << 62):  # the digests in the helper thread, then inline
            monkeypatch.setattr(verify, "_SCAN_BLOCK", block)
            monkeypatch.setattr(verify, "_THREADED_BYTES", threshold)
            scan = verify._scan_blob(ds, None)
            assert scan.blob_digest == expected, (block, threshold)
            assert scan.violations == []
    assert np.all(ds.nbytes > 0)
    ds.close()
