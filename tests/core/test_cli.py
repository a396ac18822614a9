"""The detfmt command: info, validate, cleanup; exit codes."""

from __future__ import annotations

import json

import detfmt
from detfmt.cli import main
from tests.core.conftest import CLASSES, make_samples


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
