"""detfmt.open(OUT, split=NAME): one split of a converted dataset (docs/converters.md layout)."""

from __future__ import annotations

import json

import pytest

import detfmt
from tests.samples import CLASSES, make_samples


@pytest.fixture
def split_root(tmp_path):
    root = tmp_path / "out"
    for name, n in (("train", 5), ("val", 3)):
        detfmt.write(make_samples(n, seed=n), root / name, classes=CLASSES)
    index = {"format": "detfmt-splits/1", "splits": {"train": {"path": "train"},
                                                      "val": {"path": "val"}}}
    (root / "splits.json").write_text(json.dumps(index))
    return root


def test_open_one_split(split_root):
    assert len(detfmt.open(split_root, split="val")) == 3
    assert len(detfmt.open(split_root, split="train")) == 5
    with pytest.raises(detfmt.UsageError, match="train"):  # the folder is not one dataset
        detfmt.open(split_root)
    with pytest.raises(detfmt.UsageError, match="no split"):
        detfmt.open(split_root, split="test")
    for bad in ("../out", "a/b", "", ".."):
        with pytest.raises(detfmt.UsageError):
            detfmt.open(split_root, split=bad)


def test_split_index_paths_stay_inside(split_root):
    index = json.loads((split_root / "splits.json").read_text())
    index["splits"]["val"]["path"] = "../elsewhere"
    (split_root / "splits.json").write_text(json.dumps(index))
    with pytest.raises(detfmt.FormatError, match="plain folder names") as caught:
        detfmt.open(split_root, split="val")
    assert caught.value.rule == "SPLITS_INVALID"


def test_a_plain_folder_of_datasets_is_no_split_root(split_root):
    """Without splits.json (an interrupted convert) the folder is refused, with the reason."""
    (split_root / "splits.json").unlink()
    with pytest.raises(detfmt.DatasetNotFoundError) as caught:
        detfmt.open(split_root, split="val")
    assert caught.value.rule == "SPLITS_MISSING"
    assert len(detfmt.open(split_root / "val")) == 3  # the split's own folder still opens
