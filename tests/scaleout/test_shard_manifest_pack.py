"""Manifest schema/rules (S-3..S-6, S-15) and the packed shard layout (S-9..S-11)."""

from __future__ import annotations

import io
import os
import struct

import msgspec
import pytest

from detfmt.errors import (
    ManifestError,
    NotDetfmtError,
    PackError,
    UnsafePathError,
    UnsupportedVersionError,
)
from detfmt.format.manifest import (
    Manifest,
    Schema,
    ShardInfo,
    decode_manifest,
    encode_manifest,
)
from detfmt.format.pack import MAGIC, align64, pack_directory
from detfmt.reading.sources import PackedSource
from detfmt.storage import publish_manifest, read_manifest


def make_manifest(**over):
    shards = [
        ShardInfo(
            path="shards/part-a.detfmt",
            key="a",
            num_samples=3,
            first_index=0,
            bytes=4096,  # at least 48 bytes per sample (S-5)
            xxh3_64="0" * 16,
            max_boxes=2,
        ),
        ShardInfo(
            path="shards/part-b.detfmt",
            key="b",
            num_samples=4,
            first_index=3,
            bytes=4096,  # at least 48 bytes per sample (S-5)
            xxh3_64="f" * 16,
            max_boxes=0,
        ),
    ]
    fields = dict(
        format="detfmt",
        version="1.1",
        required_features=["sharded"],
        write_id="ab" * 16,
        num_samples=7,
        schema=Schema(codec="raw", classes=[]),
        shards=shards,
    )
    fields.update(over)
    return Manifest(**fields)


def as_dict(m):
    return msgspec.to_builtins(m)


def encode_raw(d):
    return msgspec.json.encode(d)


def test_roundtrip_is_canonical(tmp_path):
    m = make_manifest()
    data = encode_manifest(m)
    assert decode_manifest(data) == m
    assert encode_manifest(decode_manifest(data)) == data
    publish_manifest(tmp_path, m)
    assert read_manifest(tmp_path) == m
    assert sorted(os.listdir(tmp_path)) == ["manifest.json"]  # no temp file left


@pytest.mark.parametrize(
    "mutate,error,rule",
    [
        (lambda d: d.update(format="other"), NotDetfmtError, "NOT_DETFMT"),
        (lambda d: d.update(version="2.0"), UnsupportedVersionError, "VERSION_UNSUPPORTED"),
        (lambda d: d.update(version="1.9"), UnsupportedVersionError, "VERSION_UNSUPPORTED"),
        (
            lambda d: d.update(required_features=["sharded", "x"]),
            UnsupportedVersionError,
            "FEATURE_UNSUPPORTED",
        ),
        (lambda d: d.update(required_features=[]), ManifestError, "MANIFEST_SCHEMA"),
        (lambda d: d.update(extra=1), ManifestError, "MANIFEST_SCHEMA"),
        (lambda d: d.pop("shards"), ManifestError, "MANIFEST_SCHEMA"),
        (lambda d: d.update(write_id="xyz"), ManifestError, "MANIFEST_SCHEMA"),
        (lambda d: d.update(num_samples=8), ManifestError, "SHARD_INDEXING"),
        (lambda d: d["shards"][1].update(first_index=4), ManifestError, "SHARD_INDEXING"),
        (lambda d: d["shards"][0].update(num_samples=-1), ManifestError, "MANIFEST_SCHEMA"),
        (lambda d: d["shards"][0].update(xxh3_64="XYZ"), ManifestError, "MANIFEST_SCHEMA"),
        (lambda d: d["shards"][0].update(path="../evil"), UnsafePathError, "PATH_UNSAFE"),
        (lambda d: d["shards"][0].update(path="/abs"), UnsafePathError, "PATH_UNSAFE"),
        (lambda d: d["shards"][0].update(path="a\\b"), UnsafePathError, "PATH_UNSAFE"),
        (
            lambda d: d["shards"][1].update(path="shards/part-a.detfmt"),
            UnsafePathError,
            "PATH_UNSAFE",
        ),
    ],
)
def test_rejections(mutate, error, rule):
    d = as_dict(make_manifest())
    mutate(d)
    with pytest.raises(error) as e:
        decode_manifest(encode_raw(d))
    assert e.value.rule == rule


def test_not_json_and_too_large():
    with pytest.raises(ManifestError):
        decode_manifest(b"{nope")
    with pytest.raises(ManifestError):
        decode_manifest(b" " * (64 * 1024 * 1024 + 1))


def _dataset_dir(tmp_path):
    d = tmp_path / "ds"
    d.mkdir()
    (d / "header.json").write_bytes(b'{"format":"detfmt"}')
    (d / "images.bin").write_bytes(b"\x01" * 130)
    (d / "counts.npy").write_bytes(b"\x02" * 64)
    (d / "boxes.npy").write_bytes(b"")
    return d


def test_pack_layout(tmp_path):
    d = _dataset_dir(tmp_path)
    buf = io.BytesIO()
    toc = pack_directory(d, buf)
    data = buf.getvalue()
    assert data[:8] == MAGIC
    names = [m.name for m in toc.members]
    assert names == ["images.bin", "boxes.npy", "counts.npy", "header.json"]  # canonical order
    assert toc.members[0].offset % 4096 == 0  # the images start page aligned
    for m in toc.members:
        assert m.offset % 64 == 0
        assert data[m.offset : m.offset + m.size] == (d / m.name).read_bytes()
    assert len(data) == toc.end
    p = tmp_path / "x.detfmt"
    p.write_bytes(data)
    assert [(e.name, e.offset, e.size) for e in PackedSource(p).entries.values()] == [
        (m.name, m.offset, m.size) for m in toc.members]
    buf2 = io.BytesIO()
    pack_directory(d, buf2)
    assert buf2.getvalue() == data  # deterministic (S-14)


def _corrupt(tmp_path, fn):
    d = _dataset_dir(tmp_path)
    buf = io.BytesIO()
    toc = pack_directory(d, buf)
    data = bytearray(buf.getvalue())
    fn(data, toc)
    p = tmp_path / "bad.detfmt"
    p.write_bytes(bytes(data))
    return p


@pytest.mark.parametrize(
    "fn,error,rule",
    [
        (lambda d, t: d.__setitem__(slice(0, 8), b"NOTDETFM"), NotDetfmtError, "PACK_MAGIC"),
        (
            lambda d, t: d.__setitem__(slice(8, 12), struct.pack("<I", 2)),
            UnsupportedVersionError,
            "VERSION_UNSUPPORTED",
        ),
        (lambda d, t: d.extend(b"\0"), PackError, "PACK_LAYOUT"),
        (lambda d, t: d.__delitem__(slice(len(d) - 1, None)), PackError, "PACK_LAYOUT"),
        (lambda d, t: d.__setitem__(t.members[1].offset - 1, 7), PackError, "PACK_LAYOUT"),
        (lambda d, t: d.__setitem__(20, ord("x")), PackError, "PACK_LAYOUT"),
    ],
)
def test_pack_rejections(tmp_path, fn, error, rule):
    p = _corrupt(tmp_path, fn)
    with pytest.raises(error) as e:
        PackedSource(p)
    assert e.value.rule == rule


def test_align64():
    assert [align64(n) for n in (0, 1, 63, 64, 65)] == [0, 64, 64, 64, 128]
