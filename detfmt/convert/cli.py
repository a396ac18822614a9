"""``detfmt convert coco|yolo|voc``, ``detfmt export coco`` and ``detfmt show`` (registered into
the main CLI by detfmt/cli.py's plugin list)."""

from __future__ import annotations

import argparse
import os
from typing import Any

from detfmt.convert.errors import ConversionError
from detfmt.format.splits import SPLITS_FILE

__all__ = ["register"]

#: Library phrases that have their own CLI spelling (`detfmt.cli.cli_spelling` collects them
#: from every plugin and rewrites the rest).
CLI_PHRASES = {
    "split={name: (json, images folder)}": "--split NAME=ANN.json:IMAGES_DIR",
    "follow them with symlinks='follow'": "--no-follow-symlinks refuses them; leave it out to "
    "follow them",
    "split={name: path}": "--split NAME=PATH",
    "split=NAME": "--split NAME",
    "card description": "--description",
    "card license": "--license",
    "card source": "--source-url",
}


def _positive(text: str) -> int:
    value = _integer(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _non_negative(text: str) -> int:
    value = _integer(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def _max_side(text: str) -> int:
    value = _non_negative(text)
    if value > 16384:
        raise argparse.ArgumentTypeError(f"must be at most 16384 (0: keep the size), got {value}")
    return value


def _quality(text: str) -> int:
    value = _integer(text)
    if not 1 <= value <= 100:
        raise argparse.ArgumentTypeError(f"must be in 1..100, got {value}")
    return value


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None


def _split_spec(values: list[str] | None) -> Any:
    if not values:
        return None
    defined = ["=" in value for value in values]
    if any(defined) and not all(defined):
        raise ConversionError("--split takes either names (--split val) or definitions "
                              "(--split val=FILE), not both", rule="USAGE")
    if all(defined):
        spec: dict[str, Any] = {}
        for value in values:
            name, path = value.split("=", 1)
            if name in spec:
                raise ConversionError(f"--split {name} is defined twice", rule="USAGE")
            spec[name] = _definition(path)
        return spec
    return values


def _definition(path: str) -> str | tuple[str, str]:
    """``PATH`` or ``PATH:FOLDER`` (COCO: annotation file and its image folder; YOLO: image
    folder and its label folder); a path that exists as written is never split at a colon."""
    if ":" not in path or os.path.exists(path):
        return path
    first, second = path.rsplit(":", 1)
    if not first or not second:
        raise ConversionError(f"--split NAME={path}: expected PATH or PATH:FOLDER",
                              rule="USAGE")
    return first, second


def _options(args: argparse.Namespace) -> dict[str, Any]:
    card = {key: value for key, value in (("license", args.license),
                                          ("description", args.description),
                                          ("source", args.source_url)) if value is not None}
    return {
        "max_side": args.max_side or None,
        "codec": args.codec,
        "workers": args.workers,
        "on_error": args.on_error,
        "overwrite": args.overwrite,
        "progress": False if args.no_progress else None,
        "jpeg_quality": args.jpeg_quality,
        "verbose": True,
        "allow_empty": args.allow_empty,
        "card": card or None,
        "fingerprint": not args.no_fingerprint,
        "symlinks": "refuse" if args.no_follow_symlinks else "follow",
    }


def _sources(args: argparse.Namespace) -> dict[str, Any]:
    """The discovery arguments of one subcommand."""
    classes = None
    if getattr(args, "classes", None):
        classes = [c.strip() for c in args.classes.split(",") if c.strip()]
    return {
        "split": _split_spec(args.split),
        "images": args.images,
        "labels": getattr(args, "labels", None),
        "names": getattr(args, "names", None),
        "annotations": getattr(args, "annotations", None),
        "classes": classes,
    }


def _cmd_convert(args: argparse.Namespace) -> int:
    from detfmt.convert.api import check_source, convert
    from detfmt.convert.report import report_path

    if args.check_source:
        check = check_source(args.source_format, args.src, workers=args.workers,
                             max_side=args.max_side or None, allow_empty=args.allow_empty,
                             symlinks="refuse" if args.no_follow_symlinks else "follow",
                             **_sources(args))
        for line in check.lines():
            print(args.spell(line))
        print("nothing written (--check-source)")
        return 0 if check.ok else 1
    if args.dst is None:
        args.parser.error("the following arguments are required: DST (or pass --check-source)")
    reports = convert(args.source_format, args.src, args.dst, allow_overlap=args.allow_overlap,
                      **_sources(args), **_options(args))
    for report in reports.values():
        print(report.summary())
        print(f"  report saved to {report_path(report.destination)}")
    if len(reports) > 1 or os.path.isfile(os.path.join(args.dst, SPLITS_FILE)):
        print(f"splits {', '.join(reports)} written under {args.dst} (index: "
              f"{os.path.join(args.dst, SPLITS_FILE)})")
    return 0


def _cmd_export_coco(args: argparse.Namespace) -> int:
    from detfmt.convert.export import to_coco
    from detfmt.reading.opener import dataset_parts, split_output

    for name, location in dataset_parts(args.dataset).items():
        out = split_output(args.out, name)
        counts = to_coco(location, out)
        print(f"wrote {out}: {counts['images']} images, {counts['annotations']} annotations")
    return 0


def _cmd_show(args: argparse.Namespace) -> int:
    from detfmt.reading.opener import dataset_parts, split_output
    from detfmt.workflows.show import render_grid

    for name, location in dataset_parts(args.dataset).items():
        out = render_grid(location, split_output(args.out, name), args.index or None,
                          cell=args.cell, columns=args.columns)
        print(f"wrote {out}")
    return 0


def _add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dst", metavar="DST", nargs="?",
                        help="the detfmt dataset to create; with splits, the folder that gets "
                        "one dataset per split (DST/train, DST/val, ...)")
    parser.add_argument("--split", action="append", metavar="NAME[=PATH[:FOLDER]]",
                        help="convert only split NAME, written directly at DST (repeat for "
                        "several: DST/NAME each); NAME=PATH defines a split (an annotation "
                        "file, an image folder or list, an image-set list); COCO "
                        "NAME=ANN.json:IMAGES_DIR also names its image folder, YOLO "
                        "NAME=IMAGES_DIR:LABELS_DIR its label folder (default: every split the "
                        "source defines)")
    parser.add_argument("--max-side", type=_max_side, default=1024,
                        help="shrink images so the long side is at most this (0: keep size)")
    parser.add_argument("--codec", default="auto", choices=("auto", "raw", "zstd", "jpeg", "png"),
                        help="auto: raw if the raw dataset fits in half the RAM, else jpeg; "
                        "the estimated size of each codec is printed before writing (jpeg: "
                        "about the size of a JPEG source, raw 5-10x more)")
    parser.add_argument("--workers", type=_non_negative, default=os.cpu_count() or 1,
                        help="decode/resize/encode processes (default: all CPUs, "
                        f"{os.cpu_count() or 1} here)")
    parser.add_argument("--on-error", default="error", choices=("error", "skip"),
                        help="a bad image or label file: stop (every problem counted first), or "
                        "skip it and list it in the report")
    parser.add_argument("--allow-empty", action="store_true",
                        help="write a dataset that keeps no image or no box (refused otherwise)")
    parser.add_argument("--allow-overlap", action="store_true",
                        help="write splits that share image files (refused otherwise)")
    parser.add_argument("--check-source", "--dry-run", action="store_true",
                        help="scan the source and print found, missing, empty, corrupt and "
                        "duplicate counts with layout hints; write nothing (exit 1 when a "
                        "conversion would stop)")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace an existing dataset (or the splits of a split folder)")
    parser.add_argument("--jpeg-quality", type=_quality, default=90,
                        help="JPEG quality when the codec is jpeg")
    parser.add_argument("--license", help="dataset card: the license of the data")
    parser.add_argument("--description", help="dataset card: what the data is")
    parser.add_argument("--source-url", help="dataset card: where the data comes from "
                        "(default: the source path given)")
    parser.add_argument("--no-fingerprint", action="store_true",
                        help="do not hash the source files for the dataset card")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--no-follow-symlinks", action="store_true",
                        help="refuse symlinked files or folders that lead out of the source "
                        "folders (for untrusted archives; by default symlinks are followed, as "
                        "DVC, git-annex and symlink exports need; names inside annotation files "
                        "are confined either way)")


def register(commands: argparse._SubParsersAction) -> None:
    """Add ``convert``, ``export`` and ``show`` to the ``detfmt`` command."""
    convert = commands.add_parser(
        "convert", help="convert COCO / YOLO / VOC into detfmt (splits kept)",
        description="Convert a COCO, YOLO or Pascal VOC source into detfmt. A source with "
        "splits (a data YAML with train/val/test, the COCO standard or Roboflow layout, VOC "
        "ImageSets/Main lists) gives one dataset per split under DST.")
    formats = convert.add_subparsers(dest="source_format", required=True, metavar="FORMAT")
    coco = formats.add_parser(
        "coco", help="COCO instances JSON + image folder",
        description="SRC is an instances JSON, or a folder holding them: the COCO standard "
        "layout (annotations/instances_<split>.json), a Roboflow export "
        "(<split>/_annotations.coco.json) or any JSON names (annotations/custom_train.json: "
        "the split is the train/val/valid/test word of the name). Each JSON's images are found "
        "by content: the folder under SRC (2 levels down at most) holding its file_names.")
    coco.add_argument("src", metavar="SRC", help="instances JSON file or COCO dataset folder")
    coco.add_argument("--images", help="image folder of every JSON (default: the folder "
                      "holding its file_names; one split: --split NAME=ANN.json:IMAGES_DIR)")
    _add_common(coco)
    coco.set_defaults(run=_cmd_convert)
    yolo = formats.add_parser(
        "yolo", help="YOLO txt labels (data YAML, or images/ + labels/ trees)",
        description="SRC is a data YAML (path, train, val, test, names) or a dataset folder "
        "(a data YAML in it or one level down, images/<split> + labels/<split>, or one "
        "images/ + labels/ tree).")
    yolo.add_argument("src", metavar="SRC", help="data YAML or dataset folder")
    yolo.add_argument("--images", help="image folder (default: from the YAML, or SRC/images)")
    yolo.add_argument("--labels", help="label folder of every split (DIR/<split folder> "
                      "when it exists, else DIR; default: the images folder with 'images' "
                      "replaced by 'labels', else beside the images)")
    yolo.add_argument("--names", help="data YAML or names file (default: the data YAML, or "
                      "labels/classes.txt)")
    _add_common(yolo)
    yolo.set_defaults(run=_cmd_convert)
    voc = formats.add_parser(
        "voc", help="Pascal VOC XML (one file per image)",
        description="SRC holds Annotations/ and JPEGImages/ (or any folders: the one with the "
        "XML files and the one holding the images they name are found); "
        "ImageSets/Main/{train,val,test}.txt become splits, without them SRC is one dataset.")
    voc.add_argument("src", metavar="SRC", help="dataset folder holding the XML files and "
                     "the images")
    voc.add_argument("--annotations", help="XML folder (default: SRC/Annotations, else the "
                     "folder under SRC with the most XML files)")
    voc.add_argument("--images", help="image folder (default: SRC/JPEGImages or SRC/images, "
                     "else the folder holding the images the XMLs name)")
    voc.add_argument("--classes", help="comma-separated class names (default: every name found,"
                     " sorted)")
    _add_common(voc)
    voc.set_defaults(run=_cmd_convert)

    export = commands.add_parser("export", help="export a detfmt dataset to another format")
    targets = export.add_subparsers(dest="target_format", required=True, metavar="FORMAT")
    to_coco = targets.add_parser("coco", help="COCO instances JSON in original coordinates")
    to_coco.add_argument("dataset", help="the detfmt dataset (a split root: every split)")
    to_coco.add_argument("out", help="output JSON file (a split root: OUT_<split>.json each)")
    to_coco.set_defaults(run=_cmd_export_coco)

    show = commands.add_parser("show", help="draw samples with their boxes into a PNG grid")
    show.add_argument("dataset", help="the detfmt dataset (a split root: every split)")
    show.add_argument("--index", type=int, nargs="+", help="sample indices (default: 16 spread)")
    show.add_argument("--out", default="grid.png", help="output PNG (a split root: "
                      "OUT_<split>.png each)")
    show.add_argument("--cell", type=_positive, default=320, help="cell size in pixels")
    show.add_argument("--columns", type=_positive, help="grid columns (default: square)")
    show.set_defaults(run=_cmd_show)
