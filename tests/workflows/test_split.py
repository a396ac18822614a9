"""``detfmt split``: deterministic, order-independent, stratified within one image, the
converters' split layout, payloads as stored (issue 13 item 2)."""

from __future__ import annotations

import json

import numpy as np
import pytest

import detfmt
from detfmt.cli import main
from detfmt.errors import TargetExistsError, UsageError
from detfmt.workflows import split, split_indices
from detfmt.workflows._copy import copy_samples
from tests.workflows.conftest import labels_by_name, payloads_by_name


def _names(ds, indices):
    return sorted(ds.string_field("file_name", int(i)) for i in indices)


def _reversed_copy(src, dst):
    with detfmt.open(src) as ds:
        copy_samples(ds, np.arange(len(ds))[::-1], dst, classes=ds.schema.classes,
                     metadata=ds.metadata)
    return dst


def _multilabel(path, n=240, classes=12, seed=0):
    """Images holding 1-4 classes with very uneven frequencies (a hard case to stratify)."""
    rng = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, classes + 1) ** 1.2
    samples = []
    for i in range(n):
        k = int(rng.integers(0 if i % 9 == 0 else 1, 5))
        ids = rng.choice(classes, size=k, p=weights / weights.sum())
        boxes = np.tile([1.0, 1.0, 5.0, 6.0], (k, 1))
        samples.append({"image": np.full((8, 8, 3), i % 256, np.uint8), "boxes": boxes,
                        "classes": ids, "file_name": f"img_{i:04d}.png"})
    detfmt.write(samples, path, classes=[f"c{j}" for j in range(classes)])
    return path


def _check_within_one_image(ds, parts):
    present = np.zeros((len(ds), len(ds.class_names)), bool)
    labels = ds.labels(np.arange(len(ds)))
    for row in range(len(ds)):
        present[row, labels.classes[row][labels.mask[row]]] = True
    total = present.sum(axis=0)
    for indices in parts.values():
        ideal = total * len(indices) / len(ds)
        got = present[indices].sum(axis=0)
        assert np.abs(got - ideal).max() <= 1.0 + 1e-9, (got, ideal)


@pytest.mark.parametrize("stratify", [False, True])
def test_same_seed_same_split_whatever_the_storage_order(coco128, tmp_path, stratify):
    reversed_ = _reversed_copy(coco128, tmp_path / "reversed")
    with detfmt.open(coco128) as ds, detfmt.open(reversed_) as rev:
        a = split_indices(ds, val=0.2, test=0.1, seed=7, stratify=stratify)
        b = split_indices(ds, val=0.2, test=0.1, seed=7, stratify=stratify)
        c = split_indices(rev, val=0.2, test=0.1, seed=7, stratify=stratify)
        other = split_indices(ds, val=0.2, test=0.1, seed=8, stratify=stratify)
        for name in ("train", "val", "test"):
            np.testing.assert_array_equal(a[name], b[name])
            assert _names(ds, a[name]) == _names(rev, c[name])
        assert _names(ds, a["val"]) != _names(ds, other["val"])
        assert {k: len(v) for k, v in a.items()} == {"train": 89, "val": 26, "test": 13}
        everything = np.concatenate(list(a.values()))
        assert sorted(everything.tolist()) == list(range(len(ds)))  # a partition


@pytest.mark.parametrize("seed", range(8))
def test_stratified_shares_within_one_image_on_coco128(coco128, seed):
    with detfmt.open(coco128) as ds:
        parts = split_indices(ds, val=0.2, test=0.1, seed=seed, stratify=True)
        _check_within_one_image(ds, parts)


@pytest.mark.parametrize("seed", range(6))
def test_stratified_shares_within_one_image_on_uneven_multilabel_data(tmp_path, seed):
    path = _multilabel(tmp_path / "ml", seed=seed)
    with detfmt.open(path) as ds:
        for val, test in ((0.2, None), (0.15, 0.15), (0.5, None), (37, 11)):
            parts = split_indices(ds, val=val, test=test, seed=seed, stratify=True)
            _check_within_one_image(ds, parts)


@pytest.mark.parametrize("n,classes,most", [(60, 5, 3), (300, 20, 6), (800, 60, 10)])
def test_assignment_keeps_sizes_and_the_tolerance_on_random_class_combinations(n, classes, most):
    """The stratifier alone, over many random presence matrices (Zipf-like class frequencies,
    up to ``most`` classes per image, some images without any)."""
    from detfmt.workflows._stratify import assign_stratified, deviation

    for seed in range(8):
        rng = np.random.default_rng(seed)
        weights = 1.0 / np.arange(1, classes + 1) ** 1.2
        present = np.zeros((n, classes), bool)
        counts = rng.integers(0, most + 1, n)
        present[np.repeat(np.arange(n), counts),
                rng.choice(classes, size=counts.sum(), p=weights / weights.sum())] = True
        for fractions in ((0.2, 0.1), (0.5,), (0.05, 0.05)):
            sizes = [max(1, round(f * n)) for f in fractions]
            sizes = np.array([n - sum(sizes), *sizes])
            assignment = assign_stratified(present, sizes)
            np.testing.assert_array_equal(np.bincount(assignment, minlength=len(sizes)), sizes)
            assert deviation(present, assignment, len(sizes)).max() <= 1.0 + 1e-9


def test_unstratified_split_is_not_stratified_by_accident(tmp_path):
    """The property above is the stratifier's doing: a plain random split misses it."""
    path = _multilabel(tmp_path / "ml")
    with detfmt.open(path) as ds, pytest.raises(AssertionError):
        for seed in range(4):
            _check_within_one_image(ds, split_indices(ds, val=0.2, seed=seed))


def test_split_writes_the_converters_layout_with_payloads_as_stored(coco128, tmp_path):
    out = tmp_path / "out"
    report = split(coco128, out, val=0.25, seed=3, stratify=True)
    assert list(report.splits) == ["train", "val"]
    index = json.loads((out / "splits.json").read_text())
    assert index["format"] == "detfmt-splits/1"
    assert {k: v["images"] for k, v in index["splits"].items()} == {"train": 96, "val": 32}
    source_payloads, source_labels = payloads_by_name(coco128), labels_by_name(coco128)
    seen: set[str] = set()
    for name in ("train", "val"):
        with detfmt.open(out, split=name) as ds:
            assert ds.metadata["card.split"] == name
            assert ds.class_names == detfmt.open(coco128).class_names
            lineage = json.loads(ds.metadata["card.lineage"])
            assert lineage[-1]["op"] == "split" and lineage[-1]["args"]["split"] == name
            assert ds.metadata["card.fingerprint"]  # the source's card travels
        payloads, labels = payloads_by_name(out / name), labels_by_name(out / name)
        assert not seen & set(payloads)
        seen |= set(payloads)
        for file_name, data in payloads.items():
            assert data == source_payloads[file_name]
            assert labels[file_name] == source_labels[file_name]
        assert detfmt.verify(out / name).ok
    assert seen == set(source_payloads)


def test_split_cli_is_deterministic_and_refuses_foreign_targets(chess_sample, tmp_path,
                                                               capsys):
    for out in ("a", "b"):
        assert main(["split", str(chess_sample), str(tmp_path / out), "--val", "3", "--test",
                     "0.25", "--seed", "11", "--no-progress"]) == 0
    for name in ("train", "val", "test"):
        assert payloads_by_name(tmp_path / "a" / name) == payloads_by_name(tmp_path / "b" / name)
    assert len(detfmt.open(tmp_path / "a", split="val")) == 3
    assert len(detfmt.open(tmp_path / "a", split="test")) == 2
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "notes.txt").write_text("mine")
    assert main(["split", str(chess_sample), str(tmp_path / "foreign"), "--val", "0.5"]) == 2
    assert (tmp_path / "foreign" / "notes.txt").read_text() == "mine"
    assert main(["split", str(chess_sample), str(tmp_path / "a"), "--val", "0.5"]) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert main(["split", str(chess_sample), str(tmp_path / "a"), "--val", "0.5",
                 "--overwrite"]) == 0
    assert len(detfmt.open(tmp_path / "a", split="val")) == 4
    assert main(["split", str(tmp_path / "a"), str(tmp_path / "c"), "--val", "0.5"]) == 2
    assert "split already" in capsys.readouterr().err  # a split root: split one split


@pytest.mark.parametrize("val,test", [(0.0, None), (1.5, None), (8, None), (0.5, 0.5),
                                      (True, None), (-1, None)])
def test_sizes_that_leave_train_or_a_split_empty_are_refused(chess_sample, tmp_path, val, test):
    with pytest.raises(UsageError):
        split(chess_sample, tmp_path / "out", val=val, test=test)
    assert not (tmp_path / "out").exists()


def test_split_of_a_sharded_root(chess_sample, tmp_path):
    """Any dataset kind splits the same: a sharded copy gives the same split."""
    from detfmt.shard.append import append

    append(tmp_path / "root", chess_sample)
    with detfmt.open(tmp_path / "root") as sharded, detfmt.open(chess_sample) as flat:
        a = split_indices(sharded, val=0.25, seed=5, stratify=True)
        b = split_indices(flat, val=0.25, seed=5, stratify=True)
        for name in a:
            assert _names(sharded, a[name]) == _names(flat, b[name])
    split(tmp_path / "root", tmp_path / "out", val=0.25, seed=5)
    assert len(detfmt.open(tmp_path / "out", split="val")) == 2
    with pytest.raises(TargetExistsError):
        split(tmp_path / "root", tmp_path / "out", val=0.25, seed=5)
