"""``detfmt append ROOT SRC``: new shards holding the source's stored bytes, in one atomic commit
(issue 13 item 4); readers opened before the append keep reading the old dataset."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from shardkit import CLASSES, make_samples, write_partitioned

import detfmt
from detfmt.cli import main
from detfmt.errors import (
    CommitConflictError,
    DatasetNotFoundError,
    IncompatibleDatasetsError,
    TargetExistsError,
)
from detfmt.reading.sources import PackedSource
from detfmt.shard.append import append


def _flat(path, seed, n, **options):
    detfmt.write(make_samples(seed, n), path, classes=CLASSES, **options)
    return path


def _samples(ds):
    return [(s.image.copy(), s.boxes.copy(), s.classes.copy()) for s in ds]


def _same(a, b):
    assert len(a) == len(b)
    for (i1, b1, c1), (i2, b2, c2) in zip(a, b, strict=True):
        np.testing.assert_array_equal(i1, i2)
        np.testing.assert_array_equal(b1, b2)
        np.testing.assert_array_equal(c1, c2)


def _shard_files(root):
    return sorted(os.listdir(root / "shards"))


@pytest.fixture()
def root(tmp_path):
    path = tmp_path / "root"
    write_partitioned(path, [make_samples(1, 5), make_samples(2, 4)], codec="zstd")
    return path


def test_append_a_directory_keeps_payload_bytes_and_indices(root, tmp_path):
    flat = _flat(tmp_path / "flat", 3, 6, codec="png")
    before = _samples(detfmt.open(root))
    manifest = append(root, flat)
    assert manifest.num_samples == 15 and len(manifest.shards) == 3
    assert manifest.schema.codec == "mixed"  # zstd + png
    new = manifest.shards[-1]
    assert new.first_index == 9 and new.num_samples == 6
    # the new shard's members are the directory's files, byte for byte (no re-encode)
    entries = PackedSource(root / new.path).entries.values()
    data = (root / new.path).read_bytes()
    for member in entries:
        assert data[member.offset:member.offset + member.size] == (flat / member.name).read_bytes()
    ds = detfmt.open(root)
    _same(_samples(ds)[:9], before)  # old samples keep their indices
    _same(_samples(ds)[9:], _samples(detfmt.open(flat)))
    assert detfmt.verify(root).ok


def test_append_a_sharded_root_copies_its_shards_whole(root, tmp_path):
    other = tmp_path / "other"
    src = write_partitioned(other, [make_samples(4, 3), make_samples(5, 2)], codec="zstd")
    manifest = append(root, other)
    added = manifest.shards[-2:]
    for theirs, ours in zip(src.shards, added, strict=True):
        assert (root / ours.path).read_bytes() == (other / theirs.path).read_bytes()
        assert (ours.bytes, ours.xxh3_64) == (theirs.bytes, theirs.xxh3_64)
    assert manifest.schema.codec == "zstd"
    _same(_samples(detfmt.open(root))[9:], _samples(detfmt.open(other)))


def test_reader_opened_before_the_append_keeps_reading_the_old_dataset(root, tmp_path):
    """A reader that opened the root (and has touched only its first shard: shards open
    lazily) keeps its manifest and immutable shards through an append."""
    old = detfmt.open(root)
    first = old[0].image.copy()
    expected = _samples(detfmt.open(root))
    append(root, _flat(tmp_path / "flat", 3, 6))
    assert len(old) == 9
    np.testing.assert_array_equal(old[0].image, first)
    _same(_samples(old), expected)
    np.testing.assert_array_equal(old.batch(list(range(9))).images,
                                  detfmt.open(root).batch(list(range(9))).images)
    assert len(detfmt.open(root)) == 15


def test_classes_must_match_by_name(root, tmp_path):
    other = tmp_path / "other"
    detfmt.write(make_samples(3, 2), other, classes=["cat", "dog", "cow"])
    reordered = tmp_path / "reordered"
    detfmt.write(make_samples(3, 2), reordered, classes=["dog", "cat", "bird"])
    files = _shard_files(root)
    manifest = (root / "manifest.json").read_bytes()
    for src in (other, reordered):
        with pytest.raises(IncompatibleDatasetsError) as caught:
            append(root, src)
        assert "remap" in str(caught.value)
    assert _shard_files(root) == files and (root / "manifest.json").read_bytes() == manifest


def test_a_failed_source_adds_nothing(root, tmp_path):
    """The second source is bad: the first one's new shard is removed, nothing is published."""
    good = _flat(tmp_path / "good", 3, 2)
    files = _shard_files(root)
    with pytest.raises(DatasetNotFoundError):
        append(root, [good, tmp_path / "missing"])
    assert _shard_files(root) == files
    assert len(detfmt.open(root)) == 9


def test_racing_commit_makes_the_append_fail_cleanly(root, tmp_path, monkeypatch):
    """Another append commits between this append's read and its publish: this one gets
    CommitConflictError, removes its shards, and the winner's manifest stays."""
    import detfmt.shard.append as appending

    real = appending.publish
    winner = _flat(tmp_path / "winner", 6, 3)

    def publish_after_a_rival(storage, manifest, base):
        monkeypatch.setattr(appending, "publish", real)
        append(root, winner)  # the rival
        return real(storage, manifest, base)

    monkeypatch.setattr(appending, "publish", publish_after_a_rival)
    with pytest.raises(CommitConflictError):
        append(root, _flat(tmp_path / "loser", 7, 4))
    ds = detfmt.open(root)
    assert len(ds) == 12 and len(ds.shards) == 3  # the rival's append only
    assert len(_shard_files(root)) == 3  # the loser's shard is gone
    _same(_samples(ds)[9:], _samples(detfmt.open(winner)))


def test_append_creates_a_new_root_and_refuses_other_targets(tmp_path):
    root = tmp_path / "new"
    append(root, [_flat(tmp_path / "a", 1, 3), _flat(tmp_path / "b", 2, 2)])
    assert len(detfmt.open(root)) == 5
    flat = _flat(tmp_path / "flat", 3, 2)
    with pytest.raises(TargetExistsError):
        append(flat, _flat(tmp_path / "c", 4, 2))  # a 1.0 dataset is not a sharded root
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "notes.txt").write_text("mine")
    with pytest.raises(DatasetNotFoundError):
        append(busy, _flat(tmp_path / "d", 5, 2))
    assert os.listdir(busy) == ["notes.txt"]


def test_foreign_files_of_a_directory_stay_out_of_the_shard(root, tmp_path):
    flat = _flat(tmp_path / "flat", 3, 2)
    (flat / "README.txt").write_text("not a member")
    manifest = append(root, flat)
    names = list(PackedSource(root / manifest.shards[-1].path).entries)
    assert "README.txt" not in names
    assert detfmt.verify(root).ok


def test_a_damaged_source_is_refused(root, tmp_path):
    flat = _flat(tmp_path / "flat", 3, 2)
    blob = bytearray((flat / "images.bin").read_bytes())
    blob[5] ^= 0xFF
    (flat / "images.bin").write_bytes(bytes(blob))
    with pytest.raises(detfmt.errors.IntegrityError):
        append(root, flat)
    assert len(detfmt.open(root)) == 9


def test_cli_append(root, tmp_path, capsys):
    flat = _flat(tmp_path / "flat", 3, 4)
    assert main(["append", str(root), str(flat)]) == 0
    assert "appended 4 sample(s)" in capsys.readouterr().out
    assert len(detfmt.open(root)) == 13
    other = tmp_path / "other"
    detfmt.write(make_samples(3, 2), other, classes=["a", "b", "c"])
    assert main(["append", str(root), str(other)]) != 0
    assert "DATASETS_INCOMPATIBLE" in capsys.readouterr().err


def test_remote_reader_downloads_only_the_new_shards(root, tmp_path):
    """The node cache is keyed by content: after an append, a remote reader fetches only the
    shards it has not seen, not the whole root again."""
    pytest.importorskip("fsspec")
    pytest.importorskip("aiohttp")
    from scaleout_servers import http_range_server

    with http_range_server(str(root)) as url:
        a = detfmt.open(url, cache_dir=tmp_path / "cache")
        _samples(a)
        assert a._cache.stats["downloads"] == 2
        append(root, _flat(tmp_path / "flat", 3, 6))
        b = detfmt.open(url, cache_dir=tmp_path / "cache")
        _same(_samples(b), _samples(detfmt.open(root)))
        assert b._cache.stats["downloads"] == 1
        a.close()
        b.close()


def test_a_read_only_remote_root_is_a_typed_error(root, tmp_path):
    pytest.importorskip("aiohttp")
    from scaleout_servers import http_range_server

    from detfmt.shard.write import write_shard

    flat = _flat(tmp_path / "flat", 3, 2)
    with http_range_server(str(root)) as url:
        for call in (lambda: append(url, flat),
                     lambda: write_shard(make_samples(3, 2), url, "x", classes=CLASSES)):
            with pytest.raises(detfmt.errors.WriteError):
                call()
    assert len(detfmt.open(root)) == 9


SHARED = Path(os.environ.get("DETFMT_SHARED_DATA",
                             Path(__file__).resolve().parents[2].parent / "shared" / "data"))


@pytest.mark.slow
def test_append_grows_a_root_from_real_data_through_the_cli(tmp_path, capsys):
    """The raccoon dataset converted in two halves; `detfmt append` creates the root from the
    first and grows it by the second while a reader of the first generation reads on."""
    source = SHARED / "raccoon"
    if not source.is_dir():
        pytest.skip(f"{source} not available")
    from detfmt.convert.voc import from_voc

    xmls = sorted((source / "annotations").glob("*.xml"))
    halves = []
    for k, part in enumerate((xmls[:100], xmls[100:])):
        folder = tmp_path / f"ann{k}"
        folder.mkdir()
        for xml in part:
            shutil.copy(xml, folder / xml.name)
        ds = tmp_path / f"half{k}"
        from_voc(folder, source / "images", ds, codec="jpeg", max_side=96, workers=1)
        halves.append(ds)
    root = tmp_path / "root"
    assert main(["append", str(root), str(halves[0])]) == 0
    first = detfmt.open(root)
    want_first = _samples(first)
    capsys.readouterr()
    # raccoon-83.jpg and raccoon-120.jpg are the same image, one in each half: refused (issue
    # 29 item 8), the root untouched, then appended on request
    assert main(["append", str(root), str(halves[1])]) == 2
    assert "DUPLICATE_SAMPLES" in capsys.readouterr().err
    assert len(detfmt.open(root)) == 100
    assert main(["append", str(root), str(halves[1]), "--allow-duplicates"]) == 0
    assert "appended" in capsys.readouterr().out
    _same(_samples(first), want_first)  # the reader of the first generation reads on
    grown = detfmt.open(root)
    assert len(grown) == 200 and grown.class_names == ["raccoon"]
    _same(_samples(grown), want_first + _samples(detfmt.open(halves[1])))
    data = (root / grown.shards[1].path).read_bytes()
    # stored JPEGs, as they were
    for member in PackedSource(root / grown.shards[1].path).entries.values():
        assert data[member.offset:member.offset + member.size] == (
            halves[1] / member.name).read_bytes()
    assert detfmt.verify(root).ok
