"""S-2 / S-7 at open for local roots: every listed shard file exists, is a regular file and has
the manifest's size, checked by `detfmt.open` itself (one lstat per shard), so a damaged root
fails at open, including an empty shard that no batch would ever read."""

from __future__ import annotations

import os

import pytest
from shardkit import CLASSES, make_samples

import detfmt
from detfmt.shard.write import commit, write_shard


@pytest.fixture()
def root(tmp_path):
    path = tmp_path / "root"
    metas = [write_shard(make_samples(1, 3), path, "a", classes=CLASSES),
             write_shard([], path, "b", classes=CLASSES),  # empty: no sample points at it
             write_shard(make_samples(2, 2), path, "c", classes=CLASSES)]
    commit(path, metas)
    return path, metas


def shard_file(root, meta):
    return root / meta.path


@pytest.mark.parametrize("which", [0, 1, 2])
def test_missing_shard_fails_at_open(root, which):
    path, metas = root
    os.unlink(shard_file(path, metas[which]))
    with pytest.raises(detfmt.FormatError) as caught:
        detfmt.open(path)
    assert caught.value.rule == "FILE_MISSING" and metas[which].path in str(caught.value)
    report = detfmt.verify(path, raise_on_error=False)
    assert [v.rule for v in report.violations] == ["FILE_MISSING"]


def test_wrong_size_directory_and_link_fail_at_open(root, tmp_path):
    path, metas = root
    target = shard_file(path, metas[2])
    with open(target, "ab") as f:
        f.write(b"\0")
    with pytest.raises(detfmt.FormatError, match="SHARD_SIZE"):
        detfmt.open(path)
    os.unlink(target)
    os.mkdir(target)
    with pytest.raises(detfmt.UnsafePathError, match="regular file"):
        detfmt.open(path)
    os.rmdir(target)
    good = tmp_path / "elsewhere.detfmt"
    good.write_bytes(b"\0" * metas[2].bytes)
    os.symlink(good, target)
    with pytest.raises(detfmt.UnsafePathError):
        detfmt.open(path)


def test_intact_root_opens_and_reads(root):
    path, _ = root
    with detfmt.open(path) as ds:
        assert len(ds) == 5 and len(ds.batch([0, 4]).indices) == 2
