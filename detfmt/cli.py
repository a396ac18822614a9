"""The ``detfmt`` command: info, validate, cleanup, and the subcommands other modules register.

Exit codes: 0 success, 1 the dataset is invalid, 2 usage or I/O error.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from detfmt import errors, spec

#: Modules that add subcommands with a ``register(subparsers)`` function (imported lazily, and
#: skipped when their optional dependencies are missing).
PLUGINS = ("detfmt.convert.cli", "detfmt.shard.cli")


def _human(size: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return str(size)  # pragma: no cover


def dataset_info(path: str | Path) -> dict[str, Any]:
    """A summary of a dataset (what ``detfmt info`` prints), as plain data."""
    from detfmt.reader import Dataset

    dataset = Dataset(path)
    header = dataset.header
    n = len(dataset)
    sizes = dataset.sizes
    counts = np.asarray(dataset.counts, dtype=np.int64)
    per_class = np.zeros(header.num_classes, np.int64)
    step = 65536
    for start in range(0, n, step):
        rows = slice(start, min(n, start + step))
        mask = np.arange(header.max_boxes) < counts[rows, None]
        values = np.asarray(dataset.classes[rows])[mask]
        per_class += np.bincount(values[(values >= 0) & (values < header.num_classes)],
                                 minlength=header.num_classes)
    files = {name: info.size for name, info in header.files.items()}
    files[spec.HEADER_FILE] = (Path(path) / spec.HEADER_FILE).stat().st_size
    return {
        "path": str(path),
        "version": header.version,
        "num_samples": n,
        "codecs": dict(header.image.codecs),
        "fixed_shape": list(header.image.fixed_shape) if header.image.fixed_shape else None,
        "height": _stats(sizes[:, 0]) if n else None,
        "width": _stats(sizes[:, 1]) if n else None,
        "bytes": {"total": sum(files.values()), "files": files},
        "classes": [{"id": i, "name": c.name, "source_id": c.source_id, "boxes": int(per_class[i])}
                    for i, c in enumerate(header.classes)],
        "boxes": {
            "total": int(counts.sum()),
            "max_per_image": header.max_boxes,
            "mean_per_image": float(counts.mean()) if n else 0.0,
            "images_without_boxes": int((counts == 0).sum()),
        },
        "box_fields": [f.name for f in header.box_fields],
        "image_fields": list(header.image_fields),
        "metadata": dict(header.metadata),
    }


def _stats(values: np.ndarray) -> dict[str, float]:
    return {"min": int(values.min()), "median": float(np.median(values)),
            "max": int(values.max())}


def _print_info(info: dict[str, Any]) -> None:
    print(f"{info['path']}: detfmt {info['version']}, {info['num_samples']} samples, "
          f"{_human(info['bytes']['total'])} on disk")
    codecs = ", ".join(f"{name} {count}" for name, count in info["codecs"].items()) or "none"
    print(f"  codecs: {codecs}")
    if info["fixed_shape"]:
        print(f"  fixed shape: {info['fixed_shape']}")
    if info["height"]:
        h, w = info["height"], info["width"]
        print(f"  image height: min {h['min']}, median {h['median']:g}, max {h['max']}")
        print(f"  image width:  min {w['min']}, median {w['median']:g}, max {w['max']}")
    b = info["boxes"]
    print(f"  boxes: {b['total']} (mean {b['mean_per_image']:.2f}/image, max {b['max_per_image']},"
          f" {b['images_without_boxes']} images without boxes)")
    print(f"  classes ({len(info['classes'])}):")
    for c in info["classes"]:
        source = f" (source id {c['source_id']})" if c["source_id"] is not None else ""
        print(f"    {c['id']:>4} {c['name']}{source}: {c['boxes']} boxes")
    if info["box_fields"]:
        print(f"  per-box fields: {', '.join(info['box_fields'])}")
    print("  files:")
    for name, size in sorted(info["bytes"]["files"].items()):
        print(f"    {name:<24} {_human(size):>10}")


def _cmd_info(args: argparse.Namespace) -> int:
    info = dataset_info(args.path)
    if args.json:
        print(json.dumps(info, indent=2, ensure_ascii=False))
    else:
        _print_info(info)
    return 0


def _cmd_validate(args: argparse.Namespace) -> int:
    from detfmt.verify import verify

    report = verify(args.path, raise_on_error=False)
    if report.ok:
        print(f"{args.path}: valid ({report.num_samples} samples, every rule checked)")
        return 0
    for violation in report.violations:
        print(violation, file=sys.stderr)
    more = " (more not shown)" if report.truncated else ""
    print(f"{args.path}: INVALID, {len(report.violations)} violation(s){more}", file=sys.stderr)
    return 1


def _cmd_cleanup(args: argparse.Namespace) -> int:
    from detfmt.writer import cleanup

    print(cleanup(args.directory).summary())
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="detfmt", description="detfmt dataset tools")
    parser.add_argument("--version", action="version", version=_version())
    commands = parser.add_subparsers(dest="command", required=True)
    info = commands.add_parser("info", help="summarize a dataset")
    info.add_argument("path")
    info.add_argument("--json", action="store_true", help="print JSON")
    info.set_defaults(run=_cmd_info)
    check = commands.add_parser("validate", help="check every rule of SPEC.md (full verify)")
    check.add_argument("path")
    check.set_defaults(run=_cmd_validate)
    clean = commands.add_parser("cleanup", help="remove temporary directories of dead writers")
    clean.add_argument("directory", help="the directory holding the dataset(s)")
    clean.set_defaults(run=_cmd_cleanup)
    for name in PLUGINS:
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        module.register(commands)
    return parser


def _version() -> str:
    from detfmt import __version__

    return f"detfmt {__version__} (format {spec.FORMAT_VERSION})"


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.run(args) or 0)
    except errors.FormatError as error:
        print(f"detfmt: invalid dataset: {error}", file=sys.stderr)
        return 1
    except errors.DetfmtError as error:
        print(f"detfmt: {error}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # pragma: no cover - e.g. `detfmt info ds | head`
        return 0
    except KeyboardInterrupt:
        print("detfmt: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
