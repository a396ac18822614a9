"""``detfmt split | filter | remap | merge | stats`` and ``detfmt export yolo | voc``
(registered into the main CLI by detfmt/cli.py's plugin list)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

__all__ = ["register"]


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not (0 < value < 1 or (1 <= value < 2**53 and value == int(value))):
        raise argparse.ArgumentTypeError(f"must be a fraction in (0, 1) or a whole count >= 1, "
                                         f"got {text}")
    return int(value) if value >= 1 else value


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None


def _non_negative(text: str) -> int:
    value = _integer(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def _names(values: list[str] | None) -> list[str] | None:
    """``--classes a,b --classes c`` as [a, b, c] (None when not given)."""
    if values is None:
        return None
    return [name.strip() for value in values for name in value.split(",") if name.strip()]


def _progress(args: argparse.Namespace) -> bool | None:
    return False if args.no_progress else None


def _print(lines: list[str]) -> None:
    for line in lines:
        print(line)


def _cmd_split(args: argparse.Namespace) -> int:
    from detfmt.workflows.split import split

    report = split(args.src, args.out, val=args.val, test=args.test, seed=args.seed,
                   stratify=args.stratify, overwrite=args.overwrite, progress=_progress(args))
    _print(report.lines())
    print(f"open one with detfmt.open({str(report.root)!r}, split=\"val\")")
    return 0


def _cmd_filter(args: argparse.Namespace) -> int:
    from detfmt.workflows.select import filter_dataset, read_indices

    classes = _names(args.classes)
    if args.drop_boxes and classes is None:
        args.parser.error("--drop-boxes applies to a class filter: pass --classes too")
    report = filter_dataset(
        args.src, args.dst, classes=classes, min_boxes=args.min_boxes,
        indices=read_indices(args.indices) if args.indices else None,
        file_names=args.file_names, drop="boxes" if args.drop_boxes else "images",
        allow_empty=args.allow_empty, overwrite=args.overwrite, progress=_progress(args))
    _print(report.lines())
    return 0


def _cmd_remap(args: argparse.Namespace) -> int:
    from detfmt.workflows.remap import parse_mapping, remap

    mapping = parse_mapping(args.map or [])
    drop = _names(args.drop) or []
    if not mapping and not drop and not args.order and not args.classes_from:
        args.parser.error("nothing to do: pass --map OLD=NEW, --drop NAME, --order or "
                          "--classes-from")
    order = _names(args.order)
    report = remap(args.src, args.dst, mapping, drop=drop, drop_images=args.drop_images,
                   order=order, classes_from=args.classes_from, allow_empty=args.allow_empty,
                   overwrite=args.overwrite, progress=_progress(args))
    _print(report.lines())
    return 0


def _cmd_merge(args: argparse.Namespace) -> int:
    from detfmt.workflows.merge import merge

    if len(args.paths) < 3:
        args.parser.error("merge takes at least two sources and the destination: "
                          "detfmt merge A B DST")
    report = merge(args.paths[:-1], args.paths[-1], overwrite=args.overwrite,
                   progress=_progress(args), allow_overlap=args.allow_overlap)
    _print(report.lines())
    return 0


def _cmd_stats(args: argparse.Namespace) -> int:
    from detfmt.reading.opener import read_split_index, split_location, split_output
    from detfmt.workflows.stats import format_stats, stats

    index = read_split_index(args.dataset)
    if index is not None:  # a split root: every split
        parts: dict[str, Any] = {name: stats(split_location(args.dataset, name))
                                 for name in index}
    else:
        parts = {"": stats(args.dataset)}
    if args.plot:
        from detfmt.workflows.plot import plot_stats

        for name in parts:
            target = split_output(args.plot, name)
            plot_stats(split_location(args.dataset, name) if name else args.dataset, target)
            print(f"wrote {target}", file=sys.stderr if args.json else sys.stdout)
    if args.json:
        print(json.dumps(parts.get("", parts), indent=1, ensure_ascii=False))
        return 0
    for name, data in parts.items():
        if name:
            print(f"== split {name}")
        _print(format_stats(data, max_classes=args.max_classes))
    return 0


def _cmd_export_yolo(args: argparse.Namespace) -> int:
    from detfmt.workflows.export_yolo import export_yolo

    report = export_yolo(args.dataset, args.out, image_format=args.image_format,
                         keep_crowd=args.keep_crowd, overwrite=args.overwrite)
    _print(report.lines())
    return 0


def _cmd_export_voc(args: argparse.Namespace) -> int:
    from detfmt.workflows.export_voc import export_voc

    report = export_voc(args.dataset, args.out, image_format=args.image_format,
                        overwrite=args.overwrite)
    _print(report.lines())
    return 0


def _output_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--overwrite", action="store_true",
                        help="replace an existing output dataset (atomically)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def _export_subparsers(commands: argparse._SubParsersAction) -> argparse._SubParsersAction:
    """The ``export`` command's FORMAT subcommands (created when no other plugin made them)."""
    export = commands.choices.get("export")
    if export is None:
        export = commands.add_parser("export", help="export a detfmt dataset to another format")
        return export.add_subparsers(dest="target_format", required=True, metavar="FORMAT")
    for action in export._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action
    raise RuntimeError("the export command has no FORMAT subcommands")  # pragma: no cover


def register(commands: argparse._SubParsersAction) -> None:
    """Add ``split``, ``filter``, ``remap``, ``merge``, ``stats`` and ``export yolo|voc``."""
    split = commands.add_parser(
        "split", help="split a dataset into OUT/train, OUT/val (and OUT/test)",
        description="Deterministic split: the same seed gives the same split of the same "
        "images, whatever order they are stored in. Payloads are copied as stored. "
        "detfmt.open(OUT, split='val') opens one split.")
    split.add_argument("src", metavar="SRC", help="the dataset to split")
    split.add_argument("out", metavar="OUT", help="the folder to create (one dataset per split "
                       "and splits.json)")
    split.add_argument("--val", type=_fraction, required=True,
                       help="validation share: a fraction (0.2) or a number of images")
    split.add_argument("--test", type=_fraction, help="test share, as --val (default: no test "
                       "split)")
    split.add_argument("--seed", type=_integer, default=0, help="the split's seed (default: 0)")
    split.add_argument("--stratify", action="store_true",
                       help="keep each class's share of images in every split within one image "
                       "of the ideal")
    _output_options(split)
    split.set_defaults(run=_cmd_split)

    filter_ = commands.add_parser(
        "filter", help="keep the samples (and classes) you want; payloads copied as stored",
        description="Criteria combine: a sample must pass every one given. With --classes, an "
        "image holding a box of another class is dropped (--drop-images, the default: a "
        "missing box teaches background), or only those boxes are (--drop-boxes).")
    filter_.add_argument("src", metavar="SRC", help="the dataset to filter")
    filter_.add_argument("dst", metavar="DST", help="the dataset to create")
    filter_.add_argument("--classes", action="append", metavar="A,B",
                         help="keep these classes (names or ids, comma-separated; repeatable); "
                         "the output has only these classes")
    filter_.add_argument("--min-boxes", type=_non_negative, metavar="K",
                         help="keep images with at least K boxes (counted after --drop-boxes)")
    filter_.add_argument("--indices", metavar="FILE",
                         help="keep only the sample indices listed in FILE (one per line, or "
                         "separated by spaces or commas)")
    filter_.add_argument("--file-names", action="append", metavar="GLOB",
                         help="keep images whose stored file name (or its last part) matches "
                         "GLOB (repeatable: any of them)")
    drop = filter_.add_mutually_exclusive_group()
    drop.add_argument("--drop-images", action="store_true",
                      help="with --classes: drop every image holding another class (default)")
    drop.add_argument("--drop-boxes", action="store_true",
                      help="with --classes: keep every image, drop the other classes' boxes")
    filter_.add_argument("--allow-empty", action="store_true",
                         help="write even when no sample passes (refused otherwise)")
    _output_options(filter_)
    filter_.set_defaults(run=_cmd_filter)

    remap = commands.add_parser(
        "remap", help="merge, rename and drop classes; payloads copied as stored",
        description="--map a=b,c=b sends classes a and c to b (merging them; a new name "
        "renames); --drop d removes class d's boxes (--drop-images: the images holding it).")
    remap.add_argument("src", metavar="SRC", help="the dataset to remap")
    remap.add_argument("dst", metavar="DST", help="the dataset to create")
    remap.add_argument("--map", action="append", metavar="OLD=NEW[,OLD=NEW]",
                       help="send class OLD to NEW (repeatable); unnamed classes keep their name")
    remap.add_argument("--drop", action="append", metavar="NAME[,NAME]",
                       help="remove these classes (repeatable)")
    remap.add_argument("--drop-images", action="store_true",
                       help="remove the images holding a dropped class, not only its boxes")
    classes = remap.add_mutually_exclusive_group()
    classes.add_argument("--order", action="append", metavar="A,B,C",
                         help="the output's class list in this order (every remaining class, "
                         "plus any names without boxes) (default: first appearance)")
    classes.add_argument("--classes-from", metavar="DS",
                         help="take the class list (names and source ids) of dataset DS, e.g. "
                         "the sharded root you will append to")
    remap.add_argument("--allow-empty", action="store_true",
                       help="write even when no sample remains (refused otherwise)")
    _output_options(remap)
    remap.set_defaults(run=_cmd_remap)

    merge = commands.add_parser(
        "merge", help="merge datasets into one (classes matched by name)",
        description="The union of the sources' classes, matched by name (the mapping of each "
        "source is printed); every sample of every source, payloads copied as stored. Split "
        "roots merge split by split (train with train, val with val).")
    merge.add_argument("paths", nargs="+", metavar="PATH",
                       help="two or more source datasets, then the dataset to create: A B ... "
                       "DST")
    merge.add_argument("--allow-overlap", action="store_true",
                       help="split roots: merge even when one image lands in two splits "
                       "(refused otherwise)")
    _output_options(merge)
    merge.set_defaults(run=_cmd_merge)

    stats = commands.add_parser(
        "stats", help="class, box and image-size statistics (and a plot)",
        description="Images and boxes per class, boxes per image, box size percentiles in "
        "stored and original pixels, COCO small/medium/large, image sizes. A split root gives "
        "each split's statistics.")
    stats.add_argument("dataset", metavar="DS", help="the dataset (or split root)")
    stats.add_argument("--json", action="store_true", help="print JSON")
    stats.add_argument("--plot", metavar="FILE.png",
                       help="draw class histogram, boxes per image and box centre and size "
                       "heatmaps (needs matplotlib: pip install 'detfmt[plot]'); a split root "
                       "gives FILE_<split>.png per split")
    stats.add_argument("--max-classes", type=_non_negative, default=100,
                       help="classes listed in the text output (most boxes first)")
    stats.set_defaults(run=_cmd_stats)

    targets = _export_subparsers(commands)
    yolo = targets.add_parser(
        "yolo", help="Ultralytics YOLO: images/, labels/ and data.yaml (splits kept)",
        description="A split root exports every split (images/<split>, labels/<split>); JPEG "
        "and PNG images are written as stored, raw and zstd ones encoded once.")
    yolo.add_argument("dataset", metavar="DS", help="the dataset or split root")
    yolo.add_argument("out", metavar="OUT", help="the folder to create")
    yolo.add_argument("--image-format", choices=("png", "jpg"), default="png",
                      help="how raw and zstd images are encoded")
    yolo.add_argument("--keep-crowd", action="store_true",
                      help="export crowd boxes (iscrowd 1) too (left out otherwise, as "
                      "Ultralytics' COCO conversion does)")
    yolo.add_argument("--overwrite", action="store_true", help="replace an earlier export")
    yolo.set_defaults(run=_cmd_export_yolo)
    voc = targets.add_parser(
        "voc", help="Pascal VOC: JPEGImages/, Annotations/, ImageSets/Main/<split>.txt",
        description="A split root exports every split (one ImageSets/Main list each); JPEG "
        "and PNG images are written as stored, raw and zstd ones encoded once.")
    voc.add_argument("dataset", metavar="DS", help="the dataset or split root")
    voc.add_argument("out", metavar="OUT", help="the folder to create")
    voc.add_argument("--image-format", choices=("png", "jpg"), default="png",
                     help="how raw and zstd images are encoded")
    voc.add_argument("--overwrite", action="store_true", help="replace an earlier export")
    voc.set_defaults(run=_cmd_export_voc)
