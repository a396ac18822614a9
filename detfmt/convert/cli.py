"""``detfmt convert coco|yolo|voc``, ``detfmt export coco`` and ``detfmt show`` (registered into
the main CLI by detfmt/cli.py's plugin list)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from detfmt.convert.errors import ConversionError

__all__ = ["register"]


def _options(args: argparse.Namespace) -> dict:
    return {
        "max_side": args.max_side or None,
        "codec": args.codec,
        "workers": args.workers,
        "on_error": args.on_error,
        "overwrite": args.overwrite,
        "progress": False if args.no_progress else None,
        "jpeg_quality": args.jpeg_quality,
        "verbose": True,
    }


def _finish(report) -> int:
    from detfmt.convert.report import report_path

    print(report.summary())
    print(f"  report saved to {report_path(report.destination)}")
    return 0


def _first_existing(root: Path, names: tuple[str, ...], what: str) -> Path:
    for name in names:
        if (root / name).is_dir():
            return root / name
    raise ConversionError(f"no {what} folder ({' or '.join(names)}) in {root}; pass it "
                          "explicitly", rule="USAGE", path=root)


def _cmd_coco(args: argparse.Namespace) -> int:
    from detfmt.convert.coco import from_coco

    images = Path(args.images) if args.images else Path(args.annotations).parent
    return _finish(from_coco(args.annotations, images, args.dst, **_options(args)))


def _yolo_names(root: Path, labels: Path) -> Path | None:
    for candidate in (root / "data.yaml", root / "dataset.yaml"):
        if candidate.is_file():
            return candidate
    yamls = sorted([*root.glob("*.yaml"), *root.glob("*.yml"), *root.glob("*/*.yaml")])
    if yamls:
        return yamls[0]
    return labels / "classes.txt" if (labels / "classes.txt").is_file() else None


def _cmd_yolo(args: argparse.Namespace) -> int:
    from detfmt.convert.yolo import from_yolo

    src = Path(args.src)
    root = src.parent if src.is_file() else src
    images = Path(args.images) if args.images else root / "images"
    labels = Path(args.labels) if args.labels else root / "labels"
    names = args.names or (src if src.is_file() else _yolo_names(root, labels))
    if names is None:
        raise ConversionError("no class names found: pass --names (data YAML or names file)",
                              rule="NAMES_MISSING", path=root)
    print(f"yolo: images {images}, labels {labels}, names {names}", file=sys.stderr)
    return _finish(from_yolo(images, labels, args.dst, names=names, **_options(args)))


def _cmd_voc(args: argparse.Namespace) -> int:
    from detfmt.convert.voc import from_voc

    src = Path(args.src)
    annotations = (Path(args.annotations) if args.annotations else
                   _first_existing(src, ("Annotations", "annotations"), "annotations"))
    images = (Path(args.images) if args.images else
              _first_existing(src, ("JPEGImages", "images"), "images"))
    classes = [c.strip() for c in args.classes.split(",")] if args.classes else None
    return _finish(from_voc(annotations, images, args.dst, classes=classes, **_options(args)))


def _cmd_export_coco(args: argparse.Namespace) -> int:
    from detfmt.convert.export import to_coco

    counts = to_coco(args.dataset, args.out)
    print(f"wrote {args.out}: {counts['images']} images, {counts['annotations']} annotations")
    return 0


def _cmd_show(args: argparse.Namespace) -> int:
    from detfmt.show import render_grid

    out = render_grid(args.dataset, args.out, args.index or None, cell=args.cell,
                      columns=args.columns)
    print(f"wrote {out}")
    return 0


def _add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dst", help="the detfmt dataset directory to create")
    parser.add_argument("--max-side", type=int, default=1024,
                        help="shrink images so the long side is at most this (0: keep size)")
    parser.add_argument("--codec", default="auto", choices=("auto", "raw", "zstd", "jpeg", "png"),
                        help="auto: raw if the raw dataset fits in half the RAM, else jpeg")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                        help="decode/resize/encode processes (default: all CPUs)")
    parser.add_argument("--on-error", default="error", choices=("error", "skip"),
                        help="a bad image or label file: stop, or skip it and list it")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing dataset")
    parser.add_argument("--jpeg-quality", type=int, default=90)
    parser.add_argument("--no-progress", action="store_true")


def register(commands: argparse._SubParsersAction) -> None:
    """Add ``convert``, ``export`` and ``show`` to the ``detfmt`` command."""
    convert = commands.add_parser("convert", help="convert COCO / YOLO / VOC into detfmt")
    formats = convert.add_subparsers(dest="source_format", required=True)
    coco = formats.add_parser("coco", help="COCO instances JSON + image folder")
    coco.add_argument("annotations", help="instances JSON file")
    coco.add_argument("--images", help="image folder (default: the JSON's folder)")
    _add_common(coco)
    coco.set_defaults(run=_cmd_coco)
    yolo = formats.add_parser("yolo", help="YOLO txt labels (images/ + labels/ trees)")
    yolo.add_argument("src", help="dataset root holding images/ and labels/, or its data YAML")
    yolo.add_argument("--images", help="image folder (default: SRC/images)")
    yolo.add_argument("--labels", help="label folder (default: SRC/labels)")
    yolo.add_argument("--names", help="data YAML or names file (default: a YAML in SRC)")
    _add_common(yolo)
    yolo.set_defaults(run=_cmd_yolo)
    voc = formats.add_parser("voc", help="Pascal VOC XML (one file per image)")
    voc.add_argument("src", help="dataset root holding Annotations/ and JPEGImages/")
    voc.add_argument("--annotations", help="XML folder (default: SRC/Annotations)")
    voc.add_argument("--images", help="image folder (default: SRC/JPEGImages or SRC/images)")
    voc.add_argument("--classes", help="comma-separated class names (default: collected)")
    _add_common(voc)
    voc.set_defaults(run=_cmd_voc)

    export = commands.add_parser("export", help="export a detfmt dataset to another format")
    targets = export.add_subparsers(dest="target_format", required=True)
    to_coco = targets.add_parser("coco", help="COCO instances JSON in original coordinates")
    to_coco.add_argument("dataset")
    to_coco.add_argument("out", help="output JSON file")
    to_coco.set_defaults(run=_cmd_export_coco)

    show = commands.add_parser("show", help="draw samples with their boxes into a PNG grid")
    show.add_argument("dataset")
    show.add_argument("--index", type=int, nargs="+", help="sample indices (default: 16 spread)")
    show.add_argument("--out", default="grid.png", help="output PNG (default: grid.png)")
    show.add_argument("--cell", type=int, default=320, help="cell size in pixels")
    show.add_argument("--columns", type=int, help="grid columns (default: square)")
    show.set_defaults(run=_cmd_show)
