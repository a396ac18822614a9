"""S-1 (ROOT_LAYOUT): a root is a 1.0 dataset or a 1.1 sharded dataset, never both."""

from __future__ import annotations

import os

import pytest
from shardkit import CLASSES, make_samples, write_partitioned

import detfmt
from detfmt import verify as verify_sharded
from detfmt.errors import LayoutError, RootLayoutError
from detfmt.reading.sharded import ShardedDataset


@pytest.fixture()
def root(tmp_path):
    """A valid sharded root of two shards."""
    path = tmp_path / "root"
    write_partitioned(path, [make_samples(1, 3), make_samples(2, 2)])
    return path


def _refused(call) -> RootLayoutError:
    with pytest.raises(RootLayoutError) as caught:
        call()
    assert isinstance(caught.value, LayoutError) and caught.value.rule == "ROOT_LAYOUT"
    return caught.value


def test_sharded_root_alone_opens(root):
    with detfmt.open(root) as ds:
        assert isinstance(ds, ShardedDataset) and len(ds) == 5
    assert verify_sharded(root).violations == []


def test_root_with_a_complete_1_0_dataset_too_is_refused(root, tmp_path):
    """Both layouts valid on their own: every entry point refuses instead of picking one."""
    flat = tmp_path / "flat"
    detfmt.write(make_samples(3, 2), flat, classes=CLASSES)
    for entry in os.scandir(flat):
        os.link(entry.path, root / entry.name)
    assert detfmt.verify(flat).violations == []
    error = _refused(lambda: detfmt.open(root))
    assert str(root) in str(error)
    _refused(lambda: ShardedDataset(root))
    _refused(lambda: verify_sharded(root))
    _refused(lambda: detfmt.verify(root))  # the top-level verify too, not the 1.0 half of it
    report = verify_sharded(root, raise_on_error=False)
    assert [v.rule for v in report.violations] == ["ROOT_LAYOUT"]


@pytest.mark.parametrize("kind", ["file", "directory", "broken symlink"])
def test_any_entry_named_header_json_counts(root, kind):
    target = root / "header.json"
    if kind == "file":
        target.write_bytes(b"{}")
    elif kind == "directory":
        target.mkdir()
    else:
        target.symlink_to(root / "no-such-file")
    _refused(lambda: detfmt.open(root))
    _refused(lambda: verify_sharded(root))


def test_a_1_0_dataset_with_a_stray_manifest_directory_is_refused(tmp_path):
    """Any entry named manifest.json makes a root sharded (SPEC §19.2, as header.json of any
    type does for S-1), so a 1.0 dataset holding one is neither: ROOT_LAYOUT."""
    flat = tmp_path / "flat"
    detfmt.write(make_samples(4, 2), flat, classes=CLASSES)
    (flat / "manifest.json").mkdir()
    with pytest.raises(detfmt.DetfmtError) as caught:
        detfmt.open(flat)
    assert caught.value.rule == "ROOT_LAYOUT"
