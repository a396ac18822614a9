"""The detfmt command: info, validate, cleanup; exit codes."""

from __future__ import annotations

import json

import detfmt
from detfmt.cli import main
from tests.samples import CLASSES, make_samples


def test_info_and_validate(tmp_path, capsys):
    detfmt.write(make_samples(6, seed=1), tmp_path / "ds", classes=CLASSES, codec="zstd")
    assert main(["info", str(tmp_path / "ds")]) == 0
    out = capsys.readouterr().out
    assert "6 samples" in out and "zstd 6" in out and "zebra" in out
    assert main(["info", "--json", str(tmp_path / "ds")]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["num_samples"] == 6
    assert info["boxes"]["total"] == sum(c["boxes"] for c in info["classes"])
    assert main(["validate", str(tmp_path / "ds")]) == 0
    blob = tmp_path / "ds" / "images.bin"
    data = bytearray(blob.read_bytes())
    data[100] ^= 0xFF
    blob.write_bytes(bytes(data))
    assert main(["validate", str(tmp_path / "ds")]) == 1
    err = capsys.readouterr().err
    assert "CHECKSUM" in err and "sample" in err


def test_invalid_dataset_exit_code(tmp_path, capsys):
    assert main(["info", str(tmp_path / "nothing")]) == 2
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "header.json").write_text("{")
    assert main(["info", str(tmp_path / "bad")]) == 1
    assert "HEADER_JSON" in capsys.readouterr().err


def test_cleanup_removes_dead_writers_temp_dirs(tmp_path, capsys):
    leftover = tmp_path / ".detfmt-tmp-ds-123-abcd"
    leftover.mkdir()
    (leftover / "images.bin").write_bytes(b"x")
    assert main(["cleanup", str(tmp_path)]) == 0
    assert not leftover.exists()


def test_commands_agree_on_a_directory_and_a_sharded_root(tmp_path, capsys):
    """info, validate, show and export coco give the same answers for the same samples stored
    as one 1.0 directory and as a sharded root of several shards."""
    from tests.datasets import corrupt_payload, make_dataset, make_sharded_root, varied_shapes

    shapes = varied_shapes(23, seed=3)
    roots = {"dir": tmp_path / "dir", "sharded": tmp_path / "root"}
    make_dataset(roots["dir"], shapes, codec="zstd").close()
    make_sharded_root(roots["sharded"], shapes, codec="zstd").close()
    infos, exports, grids = {}, {}, {}
    for kind, root in roots.items():
        assert main(["info", "--json", str(root)]) == 0
        infos[kind] = json.loads(capsys.readouterr().out)
        assert main(["info", str(root)]) == 0  # the text form works too
        assert "23 samples" in capsys.readouterr().out
        assert main(["validate", str(root)]) == 0
        assert "valid (23 samples" in capsys.readouterr().out
        assert main(["show", str(root), "--out", str(tmp_path / f"{kind}.png")]) == 0
        grids[kind] = (tmp_path / f"{kind}.png").read_bytes()
        assert main(["export", "coco", str(root), str(tmp_path / f"{kind}.json")]) == 0
        exports[kind] = json.loads((tmp_path / f"{kind}.json").read_bytes())
        exports[kind].pop("info")  # names the source location
        capsys.readouterr()
    assert infos["dir"]["version"] == "1.0" and infos["sharded"]["version"] == "1.1"
    for info in infos.values():
        for key in ("path", "version", "bytes", "metadata"):
            info.pop(key)
    assert infos["dir"] == infos["sharded"]
    assert infos["dir"]["num_samples"] == 23 and infos["dir"]["boxes"]["total"] > 0
    assert exports["dir"] == exports["sharded"] and len(exports["dir"]["annotations"]) > 0
    assert grids["dir"] == grids["sharded"]
    for kind, root in roots.items():  # the same broken payload, the same verdict
        corrupt_payload(detfmt.open(root), 7)
        assert main(["validate", str(root)]) == 1, kind
        err = capsys.readouterr().err
        assert "CHECKSUM" in err and "INVALID" in err, kind


def test_info_of_a_split_root_gives_every_split(tmp_path, capsys):
    """`detfmt info ROOT` of a split root summarises each split (it refused before)."""
    from detfmt.cli import main
    from tests.datasets import make_dataset

    for name, n in (("train", 3), ("val", 2)):
        make_dataset(tmp_path / "root" / name, [(8, 8)] * n).close()
    (tmp_path / "root" / "splits.json").write_text(
        '{"format": "detfmt-splits/1", "splits": {"train": {"path": "train"}, '
        '"val": {"path": "val"}}}')
    assert main(["info", "--json", str(tmp_path / "root")]) == 0
    info = json.loads(capsys.readouterr().out)
    assert {name: part["num_samples"] for name, part in info.items()} == {"train": 3, "val": 2}


def test_version_names_the_newest_format_written(tmp_path, capsys):
    """`detfmt --version`: the package version and the newest format version this package
    writes (a ragged dataset is 1.2; it said 1.0)."""
    import re

    import pytest

    from detfmt.cli import main
    from detfmt.version import __version__
    from tests.datasets import make_dataset, make_sharded_root

    written = [make_dataset(tmp_path / kind, [(8, 8)] * 3, labels=kind).format_version
               for kind in ("padded", "ragged")]
    written.append(make_sharded_root(tmp_path / "root", [(8, 8)] * 3).format_version)
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert __version__ in out.split()[1]
    versions = re.findall(r"\bformat (\d+)\.(\d+)", out)
    assert versions, out
    newest = max(tuple(int(p) for p in v.split(".")) for v in written)
    assert tuple(int(p) for p in versions[0]) == newest
