"""``detfmt filter`` and ``detfmt remap``: the right samples and classes, payload bytes and every
field identical to the source's (issue 13 item 3)."""

from __future__ import annotations

import json

import numpy as np
import pytest

import detfmt
from detfmt.cli import main
from detfmt.errors import SampleIndexError, UsageError
from detfmt.workflows import filter_dataset, remap
from tests.workflows.conftest import labels_by_name, payloads_by_name


def _same_payloads_and_fields(src, dst):
    """Every sample of dst is a sample of src with the same payload bytes, checksum, codec,
    size and per-image fields (matched by file name)."""
    with detfmt.open(src) as a, detfmt.open(dst) as b:
        where = {a.string_field("file_name", i): i for i in range(len(a))}
        for j in range(len(b)):
            i = where[b.string_field("file_name", j)]
            assert bytes(b.payload(j)) == bytes(a.payload(i))
            assert b.payload_checksum(j) == a.payload_checksum(i)
            assert b.codec(j) == a.codec(i)
            np.testing.assert_array_equal(b.sizes[j], a.sizes[i])
            for name in ("orig_size", "scale_offset", "source_id"):
                np.testing.assert_array_equal(b.image_field(name)[j], a.image_field(name)[i])
        assert [f.name for f in b.schema.box_fields] == [f.name for f in a.schema.box_fields]
        assert b.schema.max_side == a.schema.max_side
    assert detfmt.verify(dst).ok


def test_class_filter_drops_images_with_other_classes_by_default(coco128, tmp_path):
    report = filter_dataset(coco128, tmp_path / "out", classes=["person", "dog"])
    source = labels_by_name(coco128)
    expected = {name for name, rows in source.items()
                if all(row[0] in ("person", "dog") for row in rows)}
    got = labels_by_name(tmp_path / "out")
    assert set(got) == expected and report.samples == len(expected)
    for name, rows in got.items():
        assert rows == source[name]  # every box of a kept image, unchanged
    with detfmt.open(tmp_path / "out") as ds:
        assert ds.class_names == ["person", "dog"]
        assert [c.source_id for c in ds.schema.classes] == [0, 16]
    _same_payloads_and_fields(coco128, tmp_path / "out")


def test_drop_boxes_keeps_images_and_min_boxes_counts_after(coco128, tmp_path):
    filter_dataset(coco128, tmp_path / "out", classes=["person", "car"], drop="boxes",
                   min_boxes=2)
    source = labels_by_name(coco128)
    expected = {}
    for name, rows in source.items():
        kept = [row for row in rows if row[0] in ("person", "car")]
        if len(kept) >= 2:
            expected[name] = kept
    assert labels_by_name(tmp_path / "out") == expected
    _same_payloads_and_fields(coco128, tmp_path / "out")


def test_indices_and_file_name_globs(chess_coco, tmp_path):
    with detfmt.open(chess_coco) as ds:
        names = [ds.string_field("file_name", i) for i in range(len(ds))]
    filter_dataset(chess_coco, tmp_path / "idx", indices=[9, 2, 2, 5])
    assert list(payloads_by_name(tmp_path / "idx")) == [names[2], names[5], names[9]]
    pattern = names[3][:6] + "*"
    filter_dataset(chess_coco, tmp_path / "glob", file_names=[pattern])
    assert sorted(payloads_by_name(tmp_path / "glob")) == sorted(
        n for n in names if n.startswith(names[3][:6]))
    _same_payloads_and_fields(chess_coco, tmp_path / "glob")
    with pytest.raises(SampleIndexError):
        filter_dataset(chess_coco, tmp_path / "bad", indices=[len(names)])
    with pytest.raises(UsageError):
        filter_dataset(chess_coco, tmp_path / "bad", indices=np.array([True, False]))


def test_filter_cli_options_and_refusals(coco128, tmp_path, capsys):
    (tmp_path / "indices.txt").write_text("# picked by hand\n0, 1\n5 7\n")
    assert main(["filter", str(coco128), str(tmp_path / "out"), "--indices",
                 str(tmp_path / "indices.txt"), "--min-boxes", "3", "--no-progress"]) == 0
    with detfmt.open(coco128) as ds:
        expected = [i for i in (0, 1, 5, 7) if ds.counts[i] >= 3]
        names = [ds.string_field("file_name", i) for i in expected]
    assert list(payloads_by_name(tmp_path / "out")) == names
    assert main(["filter", str(coco128), str(tmp_path / "x"), "--classes", "persn"]) == 2
    assert "did you mean 'person'" in capsys.readouterr().err
    assert main(["filter", str(coco128), str(tmp_path / "x"), "--min-boxes", "1000"]) == 2
    assert "--allow-empty" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()
    assert main(["filter", str(coco128), str(tmp_path / "x"), "--min-boxes", "1000",
                 "--allow-empty"]) == 0
    assert len(detfmt.open(tmp_path / "x")) == 0
    with pytest.raises(SystemExit):
        main(["filter", str(coco128), str(tmp_path / "y"), "--drop-boxes"])  # no --classes


def test_remap_merges_renames_and_drops(coco128, tmp_path):
    report = remap(coco128, tmp_path / "out", {"car": "vehicle", "truck": "vehicle",
                                               "bus": "vehicle", "person": "human"},
                   drop=["dog", "cat"])
    assert report.mapping["car"] == "vehicle" and report.mapping["dog"] is None
    source, got = labels_by_name(coco128), labels_by_name(tmp_path / "out")
    rename = {"car": "vehicle", "truck": "vehicle", "bus": "vehicle", "person": "human"}
    for name, rows in source.items():  # every image kept; boxes renamed or gone
        expected = sorted((rename.get(r[0], r[0]), *r[1:]) for r in rows
                          if r[0] not in ("dog", "cat"))
        assert got[name] == expected
    with detfmt.open(tmp_path / "out") as ds, detfmt.open(coco128) as src:
        names = ds.class_names
        assert names[0] == "human" and "vehicle" in names and "dog" not in names
        assert len(names) == 80 - 2 - 2  # 3 merged into one, 2 dropped
        info = {c.name: c.source_id for c in ds.schema.classes}
        assert info["vehicle"] is None  # three source ids: none kept
        assert info["human"] == src.schema.classes[0].source_id  # a rename keeps its id
        lineage = json.loads(ds.metadata["card.lineage"])
        assert lineage[-1]["op"] == "remap" and lineage[-1]["args"]["drop"] == ["cat", "dog"]
    _same_payloads_and_fields(coco128, tmp_path / "out")


def test_remap_drop_images_and_errors(coco128, tmp_path, capsys):
    remap(coco128, tmp_path / "out", drop=["person"], drop_images=True)
    source = labels_by_name(coco128)
    assert set(labels_by_name(tmp_path / "out")) == {
        name for name, rows in source.items() if all(r[0] != "person" for r in rows)}
    with pytest.raises(UsageError, match="both mapped and dropped"):
        remap(coco128, tmp_path / "x", {"dog": "pet"}, drop=["dog"])
    with pytest.raises(UsageError, match="no class"):
        remap(coco128, tmp_path / "x", {"unicorn": "horse"})
    assert main(["remap", str(coco128), str(tmp_path / "cli"), "--map", "car=vehicle,bus="
                 "vehicle", "--map", "truck=vehicle", "--drop", "dog"]) == 0
    assert "car -> vehicle" in capsys.readouterr().out
    assert main(["remap", str(coco128), str(tmp_path / "cli2"), "--map", "car"]) == 2
    assert not (tmp_path / "x").exists() and not (tmp_path / "cli2").exists()


def test_fields_survive_filter_and_remap_on_voc_and_coco(raccoon, chess_coco, tmp_path):
    """VOC's difficult/truncated and COCO's iscrowd/ann_id travel with their boxes."""
    remap(raccoon, tmp_path / "voc", {"raccoon": "procyon"})
    with detfmt.open(tmp_path / "voc") as ds:
        assert [f.name for f in ds.schema.box_fields] == ["difficult", "truncated"]
    source = labels_by_name(raccoon)
    assert {k: [("raccoon", *r[1:]) for r in v] for k, v in
            labels_by_name(tmp_path / "voc").items()} == source
    with detfmt.open(chess_coco) as ds:
        wanted = ds.class_names[5:9]
    filter_dataset(chess_coco, tmp_path / "coco", classes=wanted, drop="boxes")
    got = labels_by_name(tmp_path / "coco")
    for name, rows in labels_by_name(chess_coco).items():
        assert got[name] == [r for r in rows if r[0] in wanted]
    _same_payloads_and_fields(chess_coco, tmp_path / "coco")
