"""The dataset card (issue 13 item 7): stored in the header metadata, shown by `detfmt info`,
with a fingerprint of the source files and the conversion report; `--check-source`."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import detfmt
from detfmt.cli import main
from detfmt.convert import ConversionError, DatasetCard, check_source, from_coco, from_yolo
from detfmt.convert.card import CARD_BUDGET, card_lines, compact_report, read_card
from detfmt.convert.report import ConversionReport
from tests.convert.conftest import save_image, shared_dataset, write_coco

SAMPLE = Path(detfmt.__file__).parent / "samples" / "chess"


def _yolo(root: Path, rows: dict[str, str]) -> tuple[Path, Path]:
    for i, (stem, text) in enumerate(rows.items()):
        save_image(root / "images" / f"{stem}.jpg", 48, 32, seed=i)
        (root / "labels").mkdir(parents=True, exist_ok=True)
        (root / "labels" / f"{stem}.txt").write_text(text)
    return root / "images", root / "labels"


def test_card_is_stored_in_the_dataset_and_shown_by_info(tmp_path, capsys):
    images, labels = _yolo(tmp_path / "src", {"a": "0 0.5 0.5 0.2 0.2\n", "b": "1 0.5 0.5 0.5 0.5\n"
                                              "1 0.5 0.5 0.5 0.5\n"})
    card = DatasetCard(description="two test images", license="CC-BY-4.0",
                       source="https://example.org/data", extra={"author": "me"})
    report = from_yolo(images, labels, tmp_path / "ds", names=["p", "q"], card=card, workers=0)
    with detfmt.open(tmp_path / "ds") as ds:
        meta = ds.header.metadata
    assert meta["card.license"] == "CC-BY-4.0" and meta["card.description"] == "two test images"
    assert meta["card.source"] == "https://example.org/data" and meta["card.extra.author"] == "me"
    assert meta["card.source_format"] == "yolo"
    assert meta["card.fingerprint"].startswith("xxh3-128:")
    assert meta["card.fingerprint_files"] == "4"  # 2 images + 2 label files
    stored = json.loads(meta["conversion.report"])
    assert stored["images"] == {"source": 2, "kept": 2, "skipped": {}}
    assert stored["boxes"]["dropped"] == {"box_duplicate": 1} and stored["balanced"]
    assert stored["boxes"]["kept"] == report.boxes_kept == 2
    assert (tmp_path / "ds.report.json").is_file()  # the full report is kept beside it too
    assert main(["info", str(tmp_path / "ds")]) == 0
    out = capsys.readouterr().out
    assert "license: CC-BY-4.0" in out and "fingerprint: xxh3-128:" in out
    assert "box_duplicate 1" in out


def test_fingerprint_follows_the_bytes_not_the_location(tmp_path):
    a = tmp_path / "one"
    _yolo(a, {"a": "0 0.5 0.5 0.2 0.2\n", "b": "0 0.2 0.2 0.1 0.1\n"})
    shutil.copytree(a, tmp_path / "two")

    def fingerprint(root: Path, name: str) -> str:
        from_yolo(root / "images", root / "labels", tmp_path / name, names=["p"], workers=0)
        with detfmt.open(tmp_path / name) as ds:
            return ds.header.metadata["card.fingerprint"]

    first = fingerprint(a, "d1")
    assert fingerprint(tmp_path / "two", "d2") == first  # moved: same fingerprint
    (tmp_path / "two" / "labels" / "b.txt").write_text("0 0.2 0.2 0.1 0.15\n")
    assert fingerprint(tmp_path / "two", "d3") != first  # one label changed
    (tmp_path / "one" / "images" / "b.jpg").rename(tmp_path / "one" / "images" / "c.jpg")
    (tmp_path / "one" / "labels" / "b.txt").rename(tmp_path / "one" / "labels" / "c.txt")
    assert fingerprint(a, "d4") != first  # renamed: the names are part of it


def test_report_in_the_card_is_truncated_to_its_budget(tmp_path):
    report = ConversionReport("yolo", "src", "dst")
    report.images_source = 5000
    for i in range(5000):
        report.skip_image("LABEL_MALFORMED", f"labels/{i:05d}.txt", "line 1: bad " * 20, 1)
    text = compact_report(report, budget=4000)
    data = json.loads(text)
    assert len(text) <= 4000 and data["truncated"] and data["problems"]
    assert data["images"]["skipped"] == {"LABEL_MALFORMED": 5000}  # counts stay exact
    assert data["problems"][0][:2] == ["LABEL_MALFORMED", "labels/00000.txt"]


def test_card_of_a_conversion_with_many_problems_fits_the_header(tmp_path):
    rows = {f"i{i:03d}": "0 0.5 0.5 0.2 0.2\n" if i % 3 else "0 nan 0.5 0.2 0.2\n"
            for i in range(60)}
    images, labels = _yolo(tmp_path / "src", rows)
    from_yolo(images, labels, tmp_path / "ds", names=["p"], workers=0, on_error="skip",
              card={"description": "d" * 8000})
    with detfmt.open(tmp_path / "ds") as ds:
        meta = ds.header.metadata
    assert sum(len(k) + len(v) for k, v in meta.items()) <= CARD_BUDGET + 200
    assert json.loads(meta["conversion.report"])["images"]["skipped"] == {"LABEL_MALFORMED": 20}
    detfmt.verify(tmp_path / "ds")


def test_card_limits_are_typed_errors(tmp_path):
    images, labels = _yolo(tmp_path / "src", {"a": "0 0.5 0.5 0.2 0.2\n"})
    for card in ({"description": "x" * 9000}, {"licence": "typo"}, {"extra": {"Bad Key": "x"}}):
        with pytest.raises(ConversionError) as info:
            from_yolo(images, labels, tmp_path / "ds", names=["p"], card=card)
        assert info.value.rule == "USAGE"


def test_cli_card_options_and_bundled_sample(tmp_path, capsys):
    assert main(["convert", "coco", str(SAMPLE / "annotations.coco.json"), str(tmp_path / "ds"),
                 "--max-side", "64", "--workers", "0", "--no-progress", "--license",
                 "Public Domain", "--description", "chess"]) == 0
    with detfmt.open(tmp_path / "ds") as ds:
        card = read_card(ds.header.metadata)
    assert card["license"] == "Public Domain" and card["report"]["images"]["kept"] == 8
    assert any("Public Domain" in line for line in card_lines(
        {f"card.{k}": v for k, v in card.items() if isinstance(v, str)}))


def test_check_source_counts_and_writes_nothing(tmp_path, capsys):
    root = tmp_path / "src"
    images, labels = _yolo(root, {"good": "0 0.5 0.5 0.2 0.2\n", "dup": "0 0.5 0.5 0.2 0.2\n"
                                  "0 0.5 0.5 0.2 0.2\n", "bad": "0 1.5 0.5 0.2 0.2\n",
                                  "empty": ""})
    save_image(images / "nolabel.jpg", 48, 32, seed=1)  # same pixels as "dup": a duplicate
    (images / "corrupt.jpg").write_bytes(b"\xff\xd8\xff\xe0 not a jpeg")
    (labels / "orphan.txt").write_text("0 0.5 0.5 0.2 0.2\n")
    (root / "data.yaml").write_text("names: [p]\n")
    check = check_source("yolo", root)
    (split,) = check.splits
    assert (split.found, split.usable, split.missing, split.corrupt) == (6, 4, 0, 2)
    assert (split.empty, split.duplicate_images, split.duplicate_rows) == (3, 1, 1)
    assert split.orphan_labels == 1 and not check.ok and split.would_fail
    assert main(["convert", "yolo", str(root), str(tmp_path / "out"), "--check-source",
                 "--workers", "0"]) == 1
    out = capsys.readouterr().out
    assert "corrupt 2" in out and "duplicate images 1" in out and "hint:" in out
    assert not (tmp_path / "out").exists() and not (tmp_path / "out.report.json").exists()
    assert main(["convert", "yolo", str(root), "--dry-run", "--workers", "0"]) == 1


def test_shared_chess_fingerprint_covers_every_file():
    """The scan (the first pass of every conversion) hashes the JSON and every image."""
    from detfmt.convert._pipeline import ConvertOptions, scan_source
    from detfmt.convert.coco import coco_source, parse_coco

    root = shared_dataset("chess-coco") / "valid"
    source = coco_source(parse_coco(root / "_annotations.coco.json"), root)
    digest, count, size = scan_source(source, ConvertOptions()).fingerprint
    files = [root / "_annotations.coco.json", *root.glob("*.jpg")]
    assert count == len(files) == 59 and size == sum(f.stat().st_size for f in files)
    again = scan_source(coco_source(parse_coco(root / "_annotations.coco.json"), root),
                        ConvertOptions()).fingerprint
    assert again == (digest, count, size)


def test_check_source_on_shared_coco128_finds_its_quirks():
    root = shared_dataset("coco128-yolo")
    check = check_source("yolo", root, images=root / "images",
                         labels=root / "object_detection" / "labels",
                         names=root / "object_detection" / "config.yaml", workers=2)
    (split,) = check.splits
    assert (split.found, split.usable, split.corrupt, split.missing) == (128, 128, 0, 0)
    assert split.empty == 2 and split.orphan_labels == 2 and check.ok


def test_empty_source_json_is_refused_then_allowed(tmp_path):
    (tmp_path / "img").mkdir()
    js = write_coco(tmp_path / "a.json", [], [], [{"id": 1, "name": "x"}])
    with pytest.raises(ConversionError) as info:
        from_coco(js, tmp_path / "img", tmp_path / "ds")
    assert info.value.rule == "EMPTY_RESULT" and "allow_empty=True" in str(info.value)
