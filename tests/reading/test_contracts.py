"""Every storage backend, member source and dataset kind detfmt ships passes the reusable
contract tests of tests/contracts.py."""

from __future__ import annotations

import pytest

import detfmt
from detfmt.format.pack import pack_directory
from detfmt.reading.sources import DirectorySource, PackedSource
from detfmt.storage import FsspecStorage, LocalStorage
from tests.contracts import DatasetLikeTests, MemberSourceTests, StorageTests
from tests.samples import CLASSES, make_samples
from tests.scaleout.shardkit import make_samples as shard_samples
from tests.scaleout.shardkit import write_partitioned


@pytest.fixture(scope="module")
def directory(tmp_path_factory):
    path = tmp_path_factory.mktemp("contract") / "ds"
    detfmt.write(make_samples(9, seed=3, fields=True), path, classes=CLASSES,
                 box_fields={"iscrowd": "uint8"})
    return path


@pytest.fixture(scope="module")
def packed(directory, tmp_path_factory):
    path = tmp_path_factory.mktemp("contract-packed") / "ds.detfmt"
    with open(path, "wb") as out:
        pack_directory(directory, out)
    return path


@pytest.fixture(scope="module")
def sharded(tmp_path_factory):
    root = tmp_path_factory.mktemp("contract-sharded") / "root"
    write_partitioned(root, [shard_samples(1, 5), shard_samples(2, 4)])
    return root


class TestLocalStorage(StorageTests):
    @pytest.fixture
    def storage(self, tmp_path):
        return LocalStorage(str(tmp_path))


class TestFsspecMemoryStorage(StorageTests):
    @pytest.fixture
    def storage(self, tmp_path):
        pytest.importorskip("fsspec")
        url = f"memory://contract-{tmp_path.name}"
        return FsspecStorage(url)


class TestDirectorySource(MemberSourceTests):
    @pytest.fixture
    def source(self, directory):
        source = DirectorySource(directory)
        yield source
        source.close()


class TestPackedSource(MemberSourceTests):
    @pytest.fixture
    def source(self, packed):
        source = PackedSource(packed)
        yield source
        source.close()


class TestDataset(DatasetLikeTests):
    @pytest.fixture
    def dataset(self, directory):
        return detfmt.open(directory)


class TestShardedDataset(DatasetLikeTests):
    @pytest.fixture
    def dataset(self, sharded):
        return detfmt.open(sharded)


class TestMixture(DatasetLikeTests):
    @pytest.fixture
    def dataset(self, directory, tmp_path):
        other = tmp_path / "other"
        detfmt.write(make_samples(5, seed=8, fields=True), other, classes=CLASSES,
                     box_fields={"iscrowd": "uint8"})
        return detfmt.Mixture([directory, other], weights=[1, 1])
