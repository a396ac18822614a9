"""Issue 29 item 7 (and issue 25 item 3): one notion of a dataset across commands. A split root
(``splits.json`` and one dataset per split, as the converters and ``detfmt split`` write it) is
taken by every command that takes a dataset, split by split, with the same result as giving
each split's folder; ``detfmt.open(ROOT, split=...)`` needs ``splits.json``, finds ``val`` for
``valid`` and never serves a split folder that leads out of the root."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

import detfmt
from detfmt.cli import main
from detfmt.workflows.split import split
from tests.convert.conftest import shared_dataset


@pytest.fixture(scope="module")
def split_root(chess_coco, tmp_path_factory) -> Path:
    """16 real chess-coco images split into train and val."""
    root = tmp_path_factory.mktemp("split_root") / "root"
    split(chess_coco, root, val=0.25, seed=0, progress=False)
    return root


@pytest.fixture
def roboflow_root(tmp_path) -> Path:
    """6 real chess-coco images in Roboflow's layout (``valid/_annotations.coco.json``),
    converted by the CLI into a split root."""
    source = shared_dataset("chess-coco") / "valid"
    data = json.loads((source / "_annotations.coco.json").read_text())
    data["images"] = data["images"][:6]
    keep = {image["id"] for image in data["images"]}
    data["annotations"] = [a for a in data["annotations"] if a["image_id"] in keep]
    (tmp_path / "src" / "valid").mkdir(parents=True)
    (tmp_path / "src" / "valid" / "_annotations.coco.json").write_text(json.dumps(data))
    for image in data["images"]:
        shutil.copy(source / image["file_name"], tmp_path / "src" / "valid")
    out = tmp_path / "out"
    assert main(["convert", "coco", str(tmp_path / "src"), str(out), "--no-progress",
                 "--workers", "1", "--max-side", "128", "--no-fingerprint"]) == 0
    return out


def _splits(root: Path) -> dict[str, Path]:
    index = json.loads((root / "splits.json").read_text())["splits"]
    return {name: root / entry["path"] for name, entry in index.items()}


def test_info_validate_show_export_take_a_split_root(split_root, tmp_path, capsys):
    """Each command on the root gives, per split, what it gives on that split's folder."""
    splits = _splits(split_root)
    assert sorted(splits) == ["train", "val"]
    assert main(["info", "--json", str(split_root)]) == 0
    infos = json.loads(capsys.readouterr().out)
    assert sorted(infos) == sorted(splits)
    for name, folder in splits.items():
        assert main(["info", "--json", str(folder)]) == 0
        alone = json.loads(capsys.readouterr().out)
        assert infos[name]["num_samples"] == alone["num_samples"] == len(detfmt.open(folder))
        assert infos[name]["boxes"] == alone["boxes"] and infos[name]["boxes"]["total"] > 0
    assert main(["info", str(split_root)]) == 0  # the text form too

    assert main(["validate", str(split_root)]) == 0

    grid = tmp_path / "grid.png"
    assert main(["show", str(split_root), "--out", str(grid), "--cell", "64"]) == 0
    coco = tmp_path / "labels.json"
    assert main(["export", "coco", str(split_root), str(coco)]) == 0
    for name, folder in splits.items():
        alone_grid, alone_coco = tmp_path / f"alone_{name}.png", tmp_path / f"alone_{name}.json"
        assert main(["show", str(folder), "--out", str(alone_grid), "--cell", "64"]) == 0
        assert main(["export", "coco", str(folder), str(alone_coco)]) == 0
        assert (tmp_path / f"grid_{name}.png").read_bytes() == alone_grid.read_bytes()
        ours = json.loads((tmp_path / f"labels_{name}.json").read_text())
        theirs = json.loads(alone_coco.read_text())
        assert ours["images"] == theirs["images"] and ours["annotations"] == theirs["annotations"]
        assert len(ours["images"]) == len(detfmt.open(folder))


def test_validate_finds_a_broken_split(split_root, tmp_path, capsys):
    root = tmp_path / "root"
    shutil.copytree(split_root, root)
    blob = _splits(root)["val"] / "images.bin"
    data = bytearray(blob.read_bytes())
    data[len(data) // 2] ^= 0xFF
    blob.write_bytes(bytes(data))
    assert main(["validate", str(root)]) == 1


def test_valid_opens_val(roboflow_root):
    """A Roboflow ``valid`` split is stored as ``val``; ``split="valid"`` opens it."""
    assert sorted(_splits(roboflow_root)) == ["val"]
    with detfmt.open(roboflow_root, split="valid") as ds, \
            detfmt.open(roboflow_root, split="val") as val:
        assert len(ds) == len(val) == 6
        assert ds.location == val.location
        assert [bytes(ds.payload(i)) for i in range(6)] == [bytes(val.payload(i))
                                                            for i in range(6)]


def test_a_folder_without_splits_json_is_refused(roboflow_root):
    """An interrupted convert (the datasets written, splits.json not yet) is no split root."""
    (roboflow_root / "splits.json").unlink()
    assert (roboflow_root / "val" / "header.json").exists()
    with pytest.raises(detfmt.DatasetNotFoundError) as caught:
        detfmt.open(roboflow_root, split="val")
    assert caught.value.rule == "SPLITS_MISSING"
    with pytest.raises(detfmt.DatasetNotFoundError):  # one dataset is no split root either
        detfmt.open(roboflow_root / "val", split="val")


def test_a_split_folder_leading_out_of_the_root_is_not_served(split_root, chess_sample,
                                                              tmp_path, capsys):
    """A split folder replaced by a symlink to another dataset: typed error, no sample."""
    root = tmp_path / "root"
    shutil.copytree(split_root, root)
    shutil.rmtree(root / "val")
    os.symlink(chess_sample, root / "val")
    with pytest.raises(detfmt.UnsafePathError) as caught:
        detfmt.open(root, split="val")
    assert caught.value.rule == "PATH_UNSAFE"
    assert len(detfmt.open(root, split="train")) > 0  # the real split still opens
    for command in (["info", str(root)], ["validate", str(root)],
                    ["export", "coco", str(root), str(tmp_path / "x.json")]):
        assert main(command) != 0
        assert not np.any([p.name.startswith("x_val") for p in tmp_path.iterdir()])
