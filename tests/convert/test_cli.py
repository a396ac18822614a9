"""The CLI subcommands on the bundled sample (no ../shared needed)."""

from __future__ import annotations

import json
from pathlib import Path

from PIL import Image

import detfmt
from detfmt.cli import main

SAMPLE = Path(detfmt.__file__).parent / "samples" / "chess"


def test_convert_export_show(tmp_path, capsys):
    ds = tmp_path / "chess"
    rc = main(["convert", "coco", str(SAMPLE / "annotations.coco.json"), str(ds),
               "--max-side", "160", "--workers", "2", "--no-progress"])
    out = capsys.readouterr()
    assert rc == 0
    assert "8 in source, 8 kept" in out.out and "codec: raw (auto: raw size" in out.out
    assert (tmp_path / "chess.report.json").is_file()
    assert main(["export", "coco", str(ds), str(tmp_path / "x.json")]) == 0
    assert len(json.loads((tmp_path / "x.json").read_text())["annotations"]) == 34
    assert main(["show", str(ds), "--index", "0", "3", "--out", str(tmp_path / "g.png"),
                 "--cell", "128"]) == 0
    grid = Image.open(tmp_path / "g.png")
    assert grid.format == "PNG" and grid.width >= 256


def test_bad_input_exit_code_and_message(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    rc = main(["convert", "coco", str(bad), str(tmp_path / "ds"), "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 2 and "JSON_INVALID" in err and str(bad) in err
    assert main(["show", str(tmp_path / "missing")]) != 0


def test_yolo_and_voc_layouts(tmp_path, capsys):
    from tests.convert.conftest import save_image

    save_image(tmp_path / "y" / "images" / "a.jpg", 50, 40)
    (tmp_path / "y" / "labels").mkdir()
    (tmp_path / "y" / "labels" / "a.txt").write_text("1 0.5 0.5 0.2 0.2\n")
    (tmp_path / "y" / "data.yaml").write_text("names: [zero, one]\n")
    assert main(["convert", "yolo", str(tmp_path / "y"), str(tmp_path / "yd"),
                 "--workers", "0", "--no-progress"]) == 0
    with detfmt.open(tmp_path / "yd") as ds:
        assert [c.name for c in ds.header.classes] == ["zero", "one"]
    save_image(tmp_path / "v" / "JPEGImages" / "a.jpg", 50, 40)
    (tmp_path / "v" / "Annotations").mkdir()
    (tmp_path / "v" / "Annotations" / "a.xml").write_text(
        "<annotation><filename>a.jpg</filename><object><name>cat</name><bndbox><xmin>1</xmin>"
        "<ymin>1</ymin><xmax>10</xmax><ymax>10</ymax></bndbox></object></annotation>")
    assert main(["convert", "voc", str(tmp_path / "v"), str(tmp_path / "vd"), "--workers", "0",
                 "--classes", "cat,dog", "--no-progress"]) == 0
    with detfmt.open(tmp_path / "vd") as ds:
        assert [c.name for c in ds.header.classes] == ["cat", "dog"]
        assert ds[0].boxes.tolist() == [[0.0, 0.0, 10.0, 10.0]]
