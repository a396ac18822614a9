"""Issue 29 item 8: ``append`` never adds the same samples twice silently (refused before
anything is copied unless ``allow_duplicates``), and ``merge`` names the duplicates it finds.
On real data: raccoon holds 4 images stored twice under other names."""

from __future__ import annotations

import shutil

import pytest

import detfmt
from detfmt.cli import main
from detfmt.shard.append import append
from detfmt.workflows.merge import merge


def _files(root):
    return {p.relative_to(root): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_append_refuses_samples_already_in_the_root(raccoon, tmp_path, capsys):
    root = tmp_path / "root"
    append(root, raccoon)  # repeats inside one source are the source's own
    before = _files(root)
    with pytest.raises(detfmt.IncompatibleDatasetsError) as caught:
        append(root, raccoon)
    assert caught.value.rule == "DUPLICATE_SAMPLES"
    assert _files(root) == before  # nothing published, nothing left
    assert main(["append", str(root), str(raccoon)]) == 2
    assert "DUPLICATE_SAMPLES" in capsys.readouterr().err
    assert _files(root) == before
    with pytest.raises(detfmt.IncompatibleDatasetsError):  # the same source twice in one call
        append(tmp_path / "other", [raccoon, raccoon])
    assert not (tmp_path / "other" / "manifest.json").exists()
    again = tmp_path / "again"  # a sharded root as the source
    append(again, raccoon)
    with pytest.raises(detfmt.IncompatibleDatasetsError):
        append(again, root)
    assert len(detfmt.open(again)) == len(detfmt.open(raccoon))
    assert main(["append", str(root), str(raccoon), "--allow-duplicates"]) == 0
    assert len(detfmt.open(root)) == 2 * len(detfmt.open(raccoon))


def test_append_refuses_a_copy_under_another_name(chess_sample, tmp_path):
    """The same samples in a sharded root appended again from a copied folder."""
    root = tmp_path / "root"
    append(root, chess_sample)
    copy = tmp_path / "copy"
    shutil.copytree(chess_sample, copy)
    with pytest.raises(detfmt.IncompatibleDatasetsError) as caught:
        append(root, copy)
    assert caught.value.rule == "DUPLICATE_SAMPLES"
    assert len(detfmt.open(root)) == len(detfmt.open(chess_sample))


def test_merge_names_each_duplicate(raccoon, chess_sample, tmp_path, capsys):
    report = merge([chess_sample, raccoon], tmp_path / "merged", progress=False)
    found = report.duplicates
    assert len(found) == report.identical_payloads == 4
    opened = {str(p): detfmt.open(p) for p in (chess_sample, raccoon)}
    for dup in found:
        a, b = opened[dup.location], opened[dup.first_location]
        assert bytes(a.payload(dup.index)) == bytes(b.payload(dup.first_index))
        assert (dup.location, dup.index) != (dup.first_location, dup.first_index)
        assert dup.name == a.string_field("file_name", dup.index)
        assert dup.first_name == b.string_field("file_name", dup.first_index)
    assert main(["merge", str(chess_sample), str(raccoon), str(tmp_path / "cli"),
                 "--no-progress"]) == 0
    out = capsys.readouterr().out
    for dup in found:
        assert dup.name in out and dup.first_name in out


def test_merge_of_a_dataset_with_its_copy_pairs_every_sample(chess_sample, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(chess_sample, copy)
    report = merge([chess_sample, copy], tmp_path / "merged", progress=False)
    n = len(detfmt.open(chess_sample))
    assert [(d.index, d.first_index) for d in report.duplicates] == [(i, i) for i in range(n)]
    assert all(d.location == str(copy) for d in report.duplicates)
