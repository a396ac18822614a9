"""Converters into and out of detfmt: COCO JSON, YOLO txt, Pascal VOC XML.

    from detfmt import convert
    reports = convert.convert("yolo", "data.yaml", "out")   # out/train, out/val (splits kept)
    check = convert.check_source("coco", "coco2017/")        # counts and hints, writes nothing
    report = convert.from_coco("instances.json", "images/", "out.detfmt", max_side=1024)
    report = convert.from_yolo("images/", "labels/", "out.detfmt", names="data.yaml")
    report = convert.from_voc("Annotations/", "JPEGImages/", "out.detfmt")
    convert.to_coco("out.detfmt", "roundtrip.json")

Every ``from_*`` streams the source through `detfmt.write` and returns a `ConversionReport`
that accounts for every image and box (also saved as ``<dst>.report.json``, and stored in the
dataset's card with ``card=DatasetCard(...)``). Rules and policies: docs/converters.md.
"""

from detfmt.convert._pipeline import ConvertOptions
from detfmt.convert.api import SourceCheck, SplitCheck, check_source, convert
from detfmt.convert.card import DatasetCard, read_card
from detfmt.convert.coco import from_coco, parse_coco
from detfmt.convert.errors import ConversionError
from detfmt.convert.export import to_coco
from detfmt.convert.report import ConversionReport, Issue
from detfmt.convert.voc import from_voc
from detfmt.convert.yolo import from_yolo

__all__ = [
    "ConversionError",
    "ConversionReport",
    "ConvertOptions",
    "DatasetCard",
    "Issue",
    "SourceCheck",
    "SplitCheck",
    "check_source",
    "convert",
    "from_coco",
    "from_voc",
    "from_yolo",
    "parse_coco",
    "read_card",
    "to_coco",
]
