"""Issue 29 item 7 over HTTP: a split root whose splits are sharded roots, served by URL, is
taken split by split like a local one (``splits.json`` read through the storage layer)."""

from __future__ import annotations

import json

import pytest
from shardkit import make_samples, write_partitioned

import detfmt
from detfmt.cli import main

pytest.importorskip("fsspec")
pytest.importorskip("aiohttp")


def test_a_remote_split_root_opens_by_split_and_in_info(tmp_path, monkeypatch, capsys):
    from scaleout_servers import http_range_server

    monkeypatch.setenv("DETFMT_CACHE_DIR", str(tmp_path / "cache"))
    root = tmp_path / "root"
    sizes = {"train": 7, "val": 3}
    for name, n in sizes.items():
        write_partitioned(root / name, [make_samples(n, n)], codec="zstd")
    (root / "splits.json").write_text(json.dumps(
        {"format": "detfmt-splits/1", "splits": {name: {"path": name} for name in sizes}}))
    with http_range_server(str(root)) as url:
        for alias, name in (("valid", "val"), ("train", "train")):
            with detfmt.open(url, split=alias) as remote, \
                    detfmt.open(root, split=name) as local:
                assert len(remote) == len(local) == sizes[name]
                assert [bytes(remote.payload(i)) for i in range(len(remote))] == [
                    bytes(local.payload(i)) for i in range(len(local))]
        assert main(["info", "--json", url]) == 0
        info = json.loads(capsys.readouterr().out)
        assert {name: part["num_samples"] for name, part in info.items()} == sizes
        assert main(["validate", url]) == 0
