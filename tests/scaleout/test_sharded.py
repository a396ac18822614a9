"""write_shard / commit / gc and reading a sharded root through detfmt.open (S-1..S-16)."""

from __future__ import annotations

import os
import pickle

import msgspec
import numpy as np
import pytest
from shardkit import CLASSES, make_samples, write_partitioned

import detfmt
from detfmt.errors import (
    DatasetNotFoundError,
    SchemaMismatchError,
    ShardChecksumError,
    UnsupportedVersionError,
    UsageError,
)
from detfmt.format.manifest import MANIFEST_NAME
from detfmt.shard.write import commit, end_write, gc, shard_path, write_shard
from detfmt.storage import read_manifest

SIZES = [(1, 5), (2, 0), (3, 7), (4, 4)]


@pytest.fixture(scope="module")
def parts():
    return [make_samples(seed, n) for seed, n in SIZES]


@pytest.fixture(scope="module", params=["raw", "zstd", "png"])
def pair(request, tmp_path_factory, parts):
    """The same samples as a sharded root and as one 1.0 directory."""
    base = tmp_path_factory.mktemp(request.param)
    root = base / "sharded"
    write_partitioned(root, parts, codec=request.param)
    flat = base / "flat"
    detfmt.write([s for p in parts for s in p], flat, classes=CLASSES, codec=request.param)
    return root, flat


def test_reads_like_the_single_directory(pair):
    root, flat = pair
    ds, ref = detfmt.open(root), detfmt.open(flat)
    assert isinstance(ds, detfmt.ShardedDataset) and len(ds) == len(ref) == 16
    for i in range(-1, len(ds)):
        a, b = ds[i], ref[i]
        assert a.index == b.index
        np.testing.assert_array_equal(a.image, b.image)
        np.testing.assert_array_equal(a.boxes, b.boxes)
        np.testing.assert_array_equal(a.classes, b.classes)
        assert a.fields["source_id"] == b.fields["source_id"]
    for idx in ([0, 15, 7, 3], [5, 5, 11], [], [12, 13, 14, 15]):
        x, y = ds.batch(idx), ref.batch(idx)
        for name in ("images", "sizes", "boxes", "classes", "mask", "indices"):
            np.testing.assert_array_equal(getattr(x, name), getattr(y, name), err_msg=name)
    with pytest.raises(IndexError):
        ds[16]
    with pytest.raises(IndexError):
        ds.batch([0, 16])
    assert ds.image_shape(3) == ref.image_shape(3)
    np.testing.assert_array_equal(ds.sizes, ref.sizes)
    np.testing.assert_array_equal(ds.counts, ref.counts)
    out = np.zeros(ds.image_shape(9), np.uint8)
    ds.decode_into(9, out)
    np.testing.assert_array_equal(out, ref[9].image)


def test_manifest_fields(pair):
    root, _ = pair
    m = read_manifest(root)
    assert m.version == "1.1" and m.required_features == ["sharded"]
    assert [s.num_samples for s in m.shards] == [n for _, n in SIZES]
    assert [s.first_index for s in m.shards] == [0, 5, 5, 12]
    assert [s.path for s in m.shards] == [shard_path(f"{i:05d}") for i in range(4)]
    for s in m.shards:
        assert os.path.getsize(root / s.path) == s.bytes
    assert [c.name for c in m.schema.classes] == CLASSES
    assert detfmt.verify(root).ok


def test_pickle_and_plan(pair):
    root, _ = pair
    ds = detfmt.open(root)
    clone = pickle.loads(pickle.dumps(ds))
    assert len(clone) == len(ds)
    plan = ds.plan(seed=3, epoch=1, batch_size=3)
    got = [b.indices.tolist() for b in ds.iter_batches(plan)]
    assert len(got) == 16 // 3
    assert sorted(i for b in got for i in b) == sorted(plan.order[:15].tolist())


def test_retry_overwrites_byte_identically(tmp_path, parts):
    meta1 = write_shard(parts[0], tmp_path, "a", classes=CLASSES)
    data1 = (tmp_path / meta1.path).read_bytes()
    meta2 = write_shard(parts[0], tmp_path, "a", classes=CLASSES)
    assert meta1 == meta2 and (tmp_path / meta2.path).read_bytes() == data1
    assert os.listdir(tmp_path / "shards") == ["part-a.detfmt"]  # no duplicate, no temp


def test_failed_task_leaves_no_shard(tmp_path, parts):
    def broken():
        yield from parts[0][:3]
        raise RuntimeError("task killed")

    with pytest.raises(RuntimeError):
        write_shard(broken(), tmp_path, "b", classes=CLASSES)
    assert os.listdir(tmp_path / "shards") == []
    assert not (tmp_path / MANIFEST_NAME).exists()


def test_orphans_are_invisible_and_collected(tmp_path, parts):
    metas = [write_shard(p, tmp_path, f"k{i}", classes=CLASSES) for i, p in enumerate(parts[:2])]
    orphan = write_shard(parts[2], tmp_path, "zz-orphan", classes=CLASSES)
    commit(tmp_path, metas)
    ds = detfmt.open(tmp_path)
    assert len(ds) == 5 and len(ds.shards) == 2
    assert gc(tmp_path, grace_seconds=3600) == []  # too young
    removed = gc(tmp_path, grace_seconds=0)
    assert removed == [str(tmp_path / orphan.path)]
    assert len(detfmt.open(tmp_path)) == 5


def test_commit_orders_by_key_not_arrival(tmp_path, parts):
    metas = [
        write_shard(p, tmp_path, k, classes=CLASSES) for k, p in zip("ba", parts, strict=False)
    ]
    m = commit(tmp_path, metas, write_id="1" * 32)
    assert [s.key for s in m.shards] == ["a", "b"]
    m2 = commit(tmp_path, list(reversed(metas)), write_id="1" * 32)
    assert m2 == m


def test_commit_rejects_mixed_schema_and_bad_metas(tmp_path, parts):
    a = write_shard(parts[0], tmp_path, "a", classes=CLASSES)
    b = write_shard(parts[2], tmp_path, "b", classes=[*CLASSES, "fish"])
    with pytest.raises(UsageError) as e:
        commit(tmp_path, [a, b])
    assert e.value.rule == "SCHEMA_MISMATCH"
    with pytest.raises(UsageError):
        commit(tmp_path, [a, a])
    with pytest.raises(detfmt.WriteError):
        commit(tmp_path, [msgspec.structs.replace(a, bytes=a.bytes + 1)])
    with pytest.raises(UsageError):
        write_shard(parts[0], tmp_path, "../x", classes=CLASSES)
    assert not (tmp_path / MANIFEST_NAME).exists()


def test_reader_checks_shards_against_manifest(tmp_path, parts):
    a = write_shard(parts[0], tmp_path, "a", classes=CLASSES)
    commit(tmp_path, [a])
    # same size, different classes: swap in a foreign shard under the listed name
    other = tmp_path / "other"
    b = write_shard(parts[0], other, "a", classes=["cow", "pig", "hawk"])
    assert b.bytes == a.bytes
    os.replace(other / b.path, tmp_path / a.path)
    ds = detfmt.open(tmp_path)
    with pytest.raises(SchemaMismatchError) as e:
        ds[0]
    assert e.value.rule == "SCHEMA_MISMATCH"
    with pytest.raises(ShardChecksumError):
        detfmt.verify(tmp_path)
    with open(tmp_path / a.path, "ab") as f:  # a truncated or grown shard fails its size check
        f.write(b"\0")
    with pytest.raises(ShardChecksumError) as e:
        detfmt.open(tmp_path)[0]
    assert e.value.rule == "SHARD_SIZE"


def test_versions_refuse_cleanly(tmp_path, parts):
    commit(tmp_path, [write_shard(parts[0], tmp_path, "a", classes=CLASSES)])
    with pytest.raises(DatasetNotFoundError) as e:
        detfmt.Dataset(tmp_path)  # a 1.0 reader finds no header.json
    assert e.value.rule == "HEADER_MISSING"
    raw = msgspec.json.decode((tmp_path / MANIFEST_NAME).read_bytes())
    raw["version"] = "1.3"  # 1.1 and 1.2 are the known manifest minors
    (tmp_path / MANIFEST_NAME).write_bytes(msgspec.json.encode(raw))
    with pytest.raises(UnsupportedVersionError):
        detfmt.open(tmp_path)


def test_box_fields_and_fixed_shape(tmp_path):
    parts = []
    for seed in (7, 8):
        p = make_samples(seed, 3)
        for s in p:
            s["iscrowd"] = np.ones(len(s["boxes"]), np.uint8)
        parts.append(p)
    m = write_partitioned(tmp_path, parts, box_fields={"iscrowd": "uint8"}, fixed_size=(16, 16))
    assert m.schema.fixed_shape == [16, 16, 3]
    ds = detfmt.open(tmp_path)
    b = ds.batch(range(6))
    assert b.images.shape == (6, 16, 16, 3)
    np.testing.assert_array_equal(b.fields["iscrowd"], b.mask.astype(np.uint8))


def test_cli_gc(tmp_path, parts, capsys):
    from detfmt.cli import main

    commit(tmp_path, [write_shard(parts[0], tmp_path, "a", classes=CLASSES)])
    orphan = write_shard(parts[2], tmp_path, "b", classes=CLASSES)
    assert main(["gc", str(tmp_path), "--grace", "0"]) == 0  # this write is still in progress
    assert (tmp_path / orphan.path).exists()
    assert "in progress" in capsys.readouterr().out
    end_write(tmp_path)  # abandoned: its lease ends
    assert main(["gc", str(tmp_path)]) == 0  # default grace keeps young files
    assert (tmp_path / orphan.path).exists()
    assert main(["gc", str(tmp_path), "--grace", "0"]) == 0
    assert not (tmp_path / orphan.path).exists()
    assert str(tmp_path / orphan.path) in capsys.readouterr().out
    assert len(detfmt.open(tmp_path)) == 5


def test_mixed_codecs_across_shards(tmp_path, parts):
    a = write_shard(parts[0], tmp_path, "a", classes=CLASSES, codec="raw")
    b = write_shard(parts[2], tmp_path, "b", classes=CLASSES, codec="png")
    m = commit(tmp_path, [a, b])
    assert (a.schema.codec, b.schema.codec, m.schema.codec) == ("raw", "png", "mixed")
    ds = detfmt.open(tmp_path)
    np.testing.assert_array_equal(ds[6].image, parts[2][1]["image"])


def test_verify_sharded_root(tmp_path, parts):
    from detfmt import verify as verify_sharded

    m = write_partitioned(tmp_path, parts, codec="zstd")
    report = detfmt.verify(tmp_path)  # dispatches to the sharded verifier
    assert report.ok and report.num_samples == 16
    # flip one payload byte inside shard 2: the shard hash and the sample checksum both catch it
    shard = m.shards[2]
    ds = detfmt.open(tmp_path).shard(2)
    pos = ds.blob_member.base + int(ds.index["offset"][3]) + 5
    data = bytearray((tmp_path / shard.path).read_bytes())
    data[pos] ^= 0xFF
    (tmp_path / shard.path).write_bytes(bytes(data))
    report = verify_sharded(tmp_path, raise_on_error=False)
    rules = {v.rule for v in report.violations}
    assert {"SHARD_CHECKSUM", "CHECKSUM", "FILE_CHECKSUM"} <= rules
    bad = next(v for v in report.violations if v.rule == "CHECKSUM")
    assert bad.index == 3 and shard.path in bad.path
    with pytest.raises(ShardChecksumError):
        detfmt.verify(tmp_path)
