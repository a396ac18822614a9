"""Reusable test bases for the three extension points of detfmt (as zarr's ``StoreTests``).

A new backend or dataset kind subclasses the matching base, provides its fixture, and inherits
every test: `StorageTests` (a `detfmt.storage.Storage`: a dataset root's bytes), `MemberSourceTests`
(a `detfmt.reading.sources.MemberSource`: one 1.0 dataset's members) and `DatasetLikeTests`
(a `detfmt.reading.protocol.DatasetLike`: what every command and loader reads). The bases state
the contracts the docstrings of those classes promise; tests/reading/test_contracts.py runs them
against every kind detfmt ships.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import detfmt
from detfmt.errors import CommitConflictError, DetfmtError, SampleIndexError
from detfmt.format import spec
from detfmt.storage import ANY_GENERATION, Storage


class StorageTests:
    """Contract of `Storage`. Subclasses provide the fixture ``storage``: an empty root."""

    @pytest.fixture
    def storage(self) -> Storage:  # pragma: no cover - subclasses override
        raise NotImplementedError

    def test_put_bytes_then_read_size_exists(self, storage: Storage) -> None:
        storage.put_bytes(b"hello", "a.bin")
        assert storage.read("a.bin", 100) == b"hello"
        assert storage.size("a.bin") == 5
        assert storage.exists("a.bin") and not storage.exists("missing.bin")

    def test_read_returns_at_most_limit_plus_one(self, storage: Storage) -> None:
        storage.put_bytes(b"x" * 10, "big.bin")
        assert storage.read("big.bin", 3) == b"xxxx"  # limit + 1: the caller sees "too large"

    def test_missing_member_is_file_not_found(self, storage: Storage) -> None:
        with pytest.raises(FileNotFoundError):
            storage.read("missing.bin", 10)
        with pytest.raises(FileNotFoundError):
            storage.size("missing.bin")

    def test_open_read_and_digest_agree_with_the_bytes(self, storage: Storage) -> None:
        data = bytes(range(256)) * 3
        storage.put_bytes(data, "d.bin")
        with storage.open_read("d.bin") as f:
            assert f.read() == data
        digest = storage.digest("d.bin")
        assert digest.size == len(data)

    def test_put_file_exclusive_never_overwrites(self, storage: Storage, tmp_path) -> None:
        first, second = tmp_path / "first", tmp_path / "second"
        first.write_bytes(b"first")
        second.write_bytes(b"second")
        assert storage.put_file(str(first), "f.bin", exclusive=True) is True
        assert storage.put_file(str(second), "f.bin", exclusive=True) is False
        assert storage.read("f.bin", 100) == b"first"
        assert second.read_bytes() == b"second"  # not moved: the caller's file is untouched

    def test_list_dir_names_what_was_put(self, storage: Storage) -> None:
        storage.makedirs("sub")
        storage.put_bytes(b"1", "sub/one.bin")
        storage.put_bytes(b"22", "sub/two.bin")
        names = sorted(entry.rel.rsplit("/", 1)[-1] for entry in storage.list_dir("sub"))
        assert names == ["one.bin", "two.bin"]
        assert storage.list_dir("nowhere") == []

    def test_swap_is_compare_and_swap(self, storage: Storage) -> None:
        generation = storage.swap("m.json", b"v1", None)  # None: must not exist yet
        with pytest.raises(CommitConflictError):
            storage.swap("m.json", b"v1-again", None)
        data, current = storage.read_generation("m.json", 100)
        assert data == b"v1" and current == generation
        storage.swap("m.json", b"v2", current)
        with pytest.raises(CommitConflictError):
            storage.swap("m.json", b"stale", current)  # the generation it was given is gone
        storage.swap("m.json", b"v3", ANY_GENERATION)
        assert storage.read_generation("m.json", 100)[0] == b"v3"
        assert storage.read_generation("absent.json", 100) == (None, None)

    def test_delete_removes_the_member(self, storage: Storage) -> None:
        storage.put_bytes(b"gone", "g.bin")
        storage.delete("g.bin")
        assert not storage.exists("g.bin")

    def test_local_path_is_given_exactly_when_local(self, storage: Storage) -> None:
        storage.put_bytes(b"z", "z.bin")
        path = storage.local_path("z.bin")
        assert (path is not None) == storage.is_local
        if path is not None:
            with open(path, "rb") as f:
                assert f.read() == b"z"


class MemberSourceTests:
    """Contract of `MemberSource`. Subclasses provide the fixture ``source``: the members of a
    valid dataset written by `detfmt.write`."""

    @pytest.fixture
    def source(self):  # pragma: no cover - subclasses override
        raise NotImplementedError

    def test_header_is_bounded_json(self, source) -> None:
        header = json.loads(source.read_header(spec.MAX_HEADER_BYTES))
        assert header["format"] == spec.FORMAT_NAME
        with pytest.raises(DetfmtError):
            source.read_header(8)  # over the limit: HEADER_TOO_LARGE, never a truncated read

    def test_every_member_the_header_names_opens_with_its_size(self, source) -> None:
        files = json.loads(source.read_header(spec.MAX_HEADER_BYTES))["files"]
        assert spec.BLOB_FILE in files
        for name, info in files.items():
            member = source.member(name)
            assert member.size == info["size"], name
            assert len(member.prefix(16)) == min(16, info["size"])
        source.check_names([*files, spec.HEADER_FILE])

    def test_a_member_the_header_does_not_name_is_file_missing(self, source) -> None:
        with pytest.raises(DetfmtError) as info:
            source.member("no-such-member.npy")
        assert info.value.rule in ("FILE_MISSING", "PATH_UNSAFE")

    def test_unchanged_source_checks_clean_and_reopens(self, source) -> None:
        source.check_unchanged()
        opener, args = source.reopen_spec()
        again = opener(*args)
        try:
            assert again.read_header(spec.MAX_HEADER_BYTES) == source.read_header(
                spec.MAX_HEADER_BYTES)
        finally:
            again.close()


class DatasetLikeTests:
    """Contract of `DatasetLike`. Subclasses provide ``dataset`` (open, non-empty)."""

    @pytest.fixture
    def dataset(self):  # pragma: no cover - subclasses override
        raise NotImplementedError

    def test_is_dataset_like(self, dataset) -> None:
        assert isinstance(dataset, detfmt.DatasetLike)
        assert len(dataset) > 0 and isinstance(dataset.location, str)

    def test_sample_matches_its_batch_row(self, dataset) -> None:
        rows = [0, len(dataset) - 1]
        batch = dataset.batch(rows)
        for k, i in enumerate(rows):
            sample = dataset[i]
            h, w = sample.image.shape[:2]
            assert np.array_equal(np.asarray(batch.images)[k, :h, :w], sample.image)
            n = len(sample.boxes)
            assert int(np.asarray(batch.mask)[k].sum()) == n
            assert np.array_equal(np.asarray(batch.boxes)[k][np.asarray(batch.mask)[k]],
                                  sample.boxes)

    def test_labels_match_samples(self, dataset) -> None:
        rows = np.arange(min(len(dataset), 8))
        labels = dataset.labels(rows)
        counts = np.asarray(dataset.counts)
        for k, i in enumerate(rows):
            sample = dataset[int(i)]
            mask = np.asarray(labels.mask)[k]
            assert int(mask.sum()) == len(sample.boxes) == int(counts[i])
            assert np.array_equal(np.asarray(labels.classes)[k][mask], sample.classes)

    def test_sizes_and_image_shape_agree_with_pixels(self, dataset) -> None:
        sizes = np.asarray(dataset.sizes)
        for i in (0, len(dataset) - 1):
            h, w, c = dataset.image_shape(i)
            assert dataset[i].image.shape == (h, w, c)
            assert (int(sizes[i][0]), int(sizes[i][1])) == (h, w)

    def test_decode_into_writes_the_sample(self, dataset) -> None:
        h, w, c = dataset.image_shape(0)
        out = np.zeros((h, w, c), np.uint8)
        dataset.decode_into(0, out)
        assert np.array_equal(out, dataset[0].image)

    def test_out_of_range_is_a_typed_error(self, dataset) -> None:
        with pytest.raises(SampleIndexError):
            dataset[len(dataset)]
        with pytest.raises(SampleIndexError):
            dataset.batch([len(dataset)])

    def test_schema_and_classes(self, dataset) -> None:
        names = dataset.class_names
        assert names and all(isinstance(n, str) for n in names)
        assert dataset.schema is not None
