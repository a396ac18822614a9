"""`detfmt.fileio` on the paths users give: relative ones included."""

from __future__ import annotations

import os

import detfmt
from detfmt import fileio
from tests.samples import CLASSES, make_samples
from tests.scaleout.shardkit import make_samples as shard_samples
from tests.scaleout.shardkit import write_partitioned


def test_make_dirs_creates_relative_paths(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    fileio.make_dirs("root")  # its parent is the working directory: "" as os.path.dirname says
    fileio.make_dirs("a/b/c")
    fileio.make_dirs("a/b/c")  # and again: nothing to do
    assert os.path.isdir(tmp_path / "root") and os.path.isdir(tmp_path / "a" / "b" / "c")


def test_writers_take_relative_targets(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    detfmt.write(make_samples(3), "ds", classes=CLASSES)
    detfmt.write(make_samples(3), "new/parent/ds", classes=CLASSES)
    write_partitioned("root", [shard_samples(1, 3)])
    assert [len(detfmt.open(p)) for p in ("ds", "new/parent/ds", "root")] == [3, 3, 3]
