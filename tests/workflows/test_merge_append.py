"""``detfmt merge`` (classes matched by name, payloads as stored) and ``detfmt append`` on the
real datasets (issue 13 item 4)."""

from __future__ import annotations

import json

import numpy as np
import pytest

import detfmt
from detfmt.cli import main
from detfmt.errors import IncompatibleDatasetsError, UsageError
from detfmt.workflows import filter_dataset, merge, remap, split
from tests.workflows.conftest import labels_by_name, payloads_by_name


def test_merge_matches_overlapping_class_names(chess_sample, chess_coco, tmp_path):
    """A source holding two of the other's classes, in another order and with other ids, lands
    on the same class names; every box and payload is kept."""
    with detfmt.open(chess_coco) as ds:
        classes = ds.class_names
    subset = tmp_path / "subset"
    filter_dataset(chess_sample, subset, classes=["white-pawn", "black-pawn", "white-rook"],
                   drop="boxes")
    remap(subset, tmp_path / "renamed", {"white-rook": "castle"})  # a name only it has
    report = merge([chess_coco, tmp_path / "renamed"], tmp_path / "out")
    with detfmt.open(tmp_path / "out") as out:
        assert out.class_names == [*classes, "castle"]
        assert len(out) == 16 + 8
        mapping = report.plan.mappings[1]
        with detfmt.open(tmp_path / "renamed") as renamed:
            for i, name in enumerate(renamed.class_names):
                assert out.class_names[mapping[i]] == name
    merged = labels_by_name(tmp_path / "out")
    strip = {"ann_id", "iscrowd"}  # fields one source lacks are filled in
    for source in (chess_coco, tmp_path / "renamed"):
        for name, rows in labels_by_name(source).items():
            assert [(r[0], r[1]) for r in merged[name]] == [(r[0], r[1]) for r in rows]
            for row in merged[name]:
                assert {f for f, _ in row[2]} == strip
        for name, data in payloads_by_name(source).items():
            assert payloads_by_name(tmp_path / "out")[name] == data
    assert detfmt.verify(tmp_path / "out").ok


def test_merge_fills_missing_fields_and_keeps_what_sources_agree_on(raccoon, chess_coco,
                                                                     tmp_path):
    report = merge([chess_coco, raccoon], tmp_path / "out")
    assert report.plan.added_fields == [["difficult", "truncated"], ["iscrowd", "ann_id"]]
    with detfmt.open(tmp_path / "out") as ds, detfmt.open(chess_coco) as chess:
        labels = ds.labels(np.arange(len(ds)))
        raccoon_rows = np.arange(len(ds)) >= len(chess)
        assert (labels.fields["ann_id"][raccoon_rows][labels.mask[raccoon_rows]] == -1).all()
        assert (labels.fields["difficult"][~raccoon_rows][labels.mask[~raccoon_rows]] == 0).all()
        chess_labels = chess.labels(np.arange(len(chess)))
        np.testing.assert_array_equal(labels.fields["ann_id"][: len(chess)][
            labels.mask[: len(chess)]], chess_labels.fields["ann_id"][chess_labels.mask])
        assert "card.fingerprint" not in ds.metadata  # the sources' cards differ
        assert ds.metadata["card.format"] == "detfmt-card/1"  # ... but this they share
        sources = json.loads(ds.metadata["card.lineage"])[-1]["sources"]
        assert [s["samples"] for s in sources] == [16, 200]
        assert [s["fingerprint"] for s in sources] == [
            detfmt.open(chess_coco).metadata["card.fingerprint"],
            detfmt.open(raccoon).metadata["card.fingerprint"]]
        assert ds.schema.max_side == 256  # the largest of 256 and 128
    assert report.identical_payloads == 4  # raccoon holds 4 duplicate images


def test_merge_cli_and_refusals(chess_sample, tmp_path, capsys):
    from detfmt.shard.append import append

    append(tmp_path / "sharded", chess_sample)  # a sharded source merges like any other
    assert main(["merge", str(chess_sample), str(tmp_path / "sharded"), str(tmp_path / "out"),
                 "--no-progress"]) == 0
    assert "16 samples (8 + 8)" in capsys.readouterr().out
    with detfmt.open(tmp_path / "out") as ds:
        assert len(ds) == 16
        assert bytes(ds.payload(8)) == bytes(detfmt.open(chess_sample).payload(0))
    with pytest.raises(SystemExit) as caught:  # a usage error: argparse exits 2
        main(["merge", str(chess_sample), str(tmp_path / "x")])
    assert caught.value.code == 2
    with pytest.raises(UsageError):
        merge([chess_sample], tmp_path / "x")
    one = tmp_path / "one"
    detfmt.write([{"image": np.zeros((4, 4, 3), np.uint8), "boxes": [[0, 0, 1, 1]],
                   "classes": [0], "iscrowd": [1.5]}], one, classes=["a"],
                 box_fields={"iscrowd": "float32"})
    with pytest.raises(IncompatibleDatasetsError, match="iscrowd"):
        merge([chess_sample, one], tmp_path / "x")
    assert not (tmp_path / "x").exists()


def test_append_grows_a_root_and_an_earlier_reader_keeps_reading(chess_sample, chess_coco,
                                                                 tmp_path):
    """Real converted datasets appended to a new sharded root, in two commits; a reader
    opened between them keeps its view."""
    root = tmp_path / "root"
    remap(chess_sample, tmp_path / "zstd_like", {})  # same classes; another copy
    assert main(["append", str(root), str(chess_coco)]) == 0
    early = detfmt.open(root)
    first = [bytes(early.payload(i)) for i in range(len(early))]
    assert main(["append", str(root), str(tmp_path / "zstd_like")]) == 0
    assert len(early) == 16 and [bytes(early.payload(i)) for i in range(16)] == first
    np.testing.assert_array_equal(early.batch(np.arange(16)).images,
                                  detfmt.open(chess_coco).batch(np.arange(16)).images)
    with detfmt.open(root) as grown:
        assert len(grown) == 24
        assert [bytes(grown.payload(i)) for i in range(16)] == first
        assert bytes(grown.payload(16)) == bytes(detfmt.open(chess_sample).payload(0))
    assert detfmt.verify(root).ok
    assert main(["append", str(root), str(tmp_path / "missing")]) == 2


def test_split_roots_stay_split_through_filter_remap_and_merge(coco128, tmp_path, capsys):
    """A split root in, a split root out: train and val never mix, one class list for all."""
    root = tmp_path / "root"
    split(coco128, root, val=0.25, seed=2)
    assert main(["filter", str(root), str(tmp_path / "people"), "--classes", "person",
                 "--drop-boxes", "--min-boxes", "1"]) == 0
    assert main(["remap", str(root), str(tmp_path / "renamed"), "--map", "person=human",
                 "--drop", "car"]) == 0
    assert main(["merge", str(tmp_path / "people"), str(tmp_path / "renamed"),
                 str(tmp_path / "merged")]) == 0
    for name in ("train", "val"):
        source = payloads_by_name(root / name)
        people = labels_by_name(tmp_path / "people" / name)
        assert set(people) <= set(source)
        assert all(rows and all(r[0] == "person" for r in rows) for rows in people.values())
        merged = payloads_by_name(tmp_path / "merged" / name)
        assert set(merged) == set(source)  # the union of two subsets of the same split
        with detfmt.open(tmp_path / "merged", split=name) as ds:
            assert ds.class_names[0] == "person" and "human" in ds.class_names
            assert ds.class_names.count("car") == 0  # dropped by the remap, absent in people
            assert ds.metadata["card.split"] == name
    assert main(["info", str(tmp_path / "merged" / "val")]) == 0
    assert "merge -> " in capsys.readouterr().out  # the lineage, shown by info
    other = tmp_path / "other"
    split(coco128, other, val=0.25, seed=3)  # another seed: some val images are train here
    with pytest.raises(UsageError, match="mix the splits") as caught:
        merge([root, other], tmp_path / "leak")
    assert caught.value.rule == "SPLIT_OVERLAP" and not (tmp_path / "leak").exists()
    merge([root, other], tmp_path / "leak", allow_overlap=True)
    with pytest.raises(UsageError, match="split roots"):
        merge([root, coco128], tmp_path / "mixed")
    with pytest.raises(UsageError, match="one split"):
        filter_dataset(root, tmp_path / "x", indices=[0])


def test_remap_to_a_roots_class_list_then_append(chess_sample, chess_coco, tmp_path, capsys):
    """A source with fewer classes, in another order, takes the root's class list (names and
    source ids) with remap --classes-from, and then appends."""
    root = tmp_path / "root"
    assert main(["append", str(root), str(chess_coco)]) == 0
    subset = tmp_path / "subset"
    filter_dataset(chess_sample, subset, classes=["white-rook", "black-pawn"], drop="boxes")
    with detfmt.open(subset) as ds:
        assert ds.class_names == ["black-pawn", "white-rook"]
    assert main(["append", str(root), str(subset)]) != 0
    assert "lacks" in capsys.readouterr().err
    assert main(["remap", str(subset), str(tmp_path / "fitted"), "--classes-from",
                 str(root)]) == 0
    with detfmt.open(tmp_path / "fitted") as fitted, detfmt.open(root) as grown:
        assert fitted.schema.classes == grown.schema.classes
    assert labels_by_name(tmp_path / "fitted") == labels_by_name(subset)
    assert main(["append", str(root), str(tmp_path / "fitted")]) == 0
    with detfmt.open(root) as grown:
        assert len(grown) == 16 + 8
    remap(subset, tmp_path / "ordered", order=["x", "white-rook", "y", "black-pawn"])
    with detfmt.open(tmp_path / "ordered") as ds:
        assert ds.class_names == ["x", "white-rook", "y", "black-pawn"]
    assert labels_by_name(tmp_path / "ordered") == labels_by_name(subset)
    with pytest.raises(UsageError, match="not in the class list"):
        remap(subset, tmp_path / "bad", order=["white-rook"])
