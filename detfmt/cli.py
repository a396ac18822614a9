"""The ``detfmt`` command: info, validate, cleanup, and the subcommands other modules register.

Exit codes: 0 success, 1 the dataset is invalid, 2 usage or I/O error, 130 interrupted (Ctrl-C:
one line, no traceback). Every (sub)command refuses prefix abbreviations of options, shows its
defaults in ``--help`` and suggests the closest option or command when one is mistyped.
"""

from __future__ import annotations

import argparse
import difflib
import functools
import importlib
import json
import os
import re
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

import numpy as np

from detfmt import errors
from detfmt.format import spec
from detfmt.reading.protocol import DatasetLike

#: Modules that add subcommands with a ``register(subparsers)`` function (imported lazily, and
#: skipped when their optional dependencies are missing).
PLUGINS = ("detfmt.convert.cli", "detfmt.shard.cli", "detfmt.workflows.cli", "detfmt.view.cli")


def _human(size: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return str(size)  # pragma: no cover


def dataset_info(path: str | Path | DatasetLike) -> dict[str, Any]:
    """A summary of a dataset of any kind (what ``detfmt info`` prints), as plain data."""
    from detfmt.reading.opener import open_dataset

    ds = open_dataset(path) if isinstance(path, (str, Path)) else path
    try:
        return _summary(ds)
    finally:
        if ds is not path:
            ds.close()


def _summary(ds: DatasetLike) -> dict[str, Any]:
    schema = ds.schema
    n = len(ds)
    sizes = ds.sizes
    counts = np.asarray(ds.counts, dtype=np.int64)
    per_class = np.zeros(schema.num_classes, np.int64)
    step = 65536
    for start in range(0, n, step):  # through the reader's checks, a block at a time
        labels = ds.labels(np.arange(start, min(n, start + step)))
        per_class += np.bincount(labels.classes[labels.mask], minlength=schema.num_classes)
    files = ds.disk_usage()
    return {
        "path": ds.location,
        "version": ds.format_version,
        "num_samples": n,
        "codecs": ds.codec_counts(),
        "fixed_shape": list(schema.fixed_shape) if schema.fixed_shape else None,
        "height": _stats(sizes[:, 0]) if n else None,
        "width": _stats(sizes[:, 1]) if n else None,
        "bytes": {"total": sum(files.values()), "files": files},
        "classes": [{"id": i, "name": c.name, "source_id": c.source_id, "boxes": int(per_class[i])}
                    for i, c in enumerate(schema.classes)],
        "boxes": {
            "total": int(counts.sum()),
            "max_per_image": int(counts.max()) if n else 0,
            "mean_per_image": float(counts.mean()) if n else 0.0,
            "images_without_boxes": int((counts == 0).sum()),
        },
        "box_fields": [f.name for f in schema.box_fields],
        "image_fields": list(schema.image_fields),
        "metadata": ds.metadata,
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
    files = info["bytes"]["files"]
    print(f"  files ({len(files)}):")
    for name, size in sorted(files.items())[:24]:
        print(f"    {name:<32} {_human(size):>10}")
    if len(files) > 24:
        print(f"    ... {len(files) - 24} more")
    from detfmt.convert.card import card_lines  # the dataset card: license, source, report

    for line in card_lines(info["metadata"]):
        print(line)


def _cmd_info(args: argparse.Namespace) -> int:
    from detfmt.reading.opener import dataset_parts

    parts = dataset_parts(args.path)
    infos = {name: dataset_info(location) for name, location in parts.items()}
    if args.json:
        print(json.dumps(infos.get("", infos), indent=2, ensure_ascii=False))
        return 0
    for name, info in infos.items():
        if name:
            print(f"== split {name}")
        _print_info(info)
    return 0


def _note_slow_jpeg_check(location: str) -> None:
    """Say before a long wait why it is long: without numba, the JPEG entropy walk of SPEC §9.3
    J4 runs in Python (docs/reliability.md)."""
    from detfmt.format.jpeg_entropy_native import sequential_kernel
    from detfmt.reading.opener import open_dataset

    try:
        ds = open_dataset(location)
    except errors.DetfmtError:
        return  # verify reports it
    try:
        jpegs = ds.codec_counts().get("jpeg", 0)
    except errors.DetfmtError:
        return
    finally:
        ds.close()
    if jpegs >= 100 and sequential_kernel() is None:
        print(f"note: {jpegs} JPEG samples: their entropy-coded data is checked in Python "
              "without numba (about 100x the time of the native walk); pip install "
              "'detfmt[fast]' for the native one", file=sys.stderr)


def _cmd_validate(args: argparse.Namespace) -> int:
    from detfmt.reading.opener import dataset_parts
    from detfmt.reading.verify import verify

    invalid = 0
    for name, location in dataset_parts(args.path).items():
        where = f"{args.path} (split {name})" if name else args.path
        _note_slow_jpeg_check(location)
        report = verify(location, raise_on_error=False)
        if report.ok:
            print(f"{where}: valid ({report.num_samples} samples, every rule checked)")
            continue
        invalid += 1
        for violation in report.violations:
            print(violation, file=sys.stderr)
        more = " (more not shown)" if report.truncated else ""
        print(f"{where}: INVALID, {len(report.violations)} violation(s){more}",
              file=sys.stderr)
    return 1 if invalid else 0


def _cmd_cleanup(args: argparse.Namespace) -> int:
    from detfmt.writing.writer import cleanup

    print(cleanup(args.directory).summary())
    return 0


class _Formatter(argparse.HelpFormatter):
    """Help that shows every option's default (unless its text already states one)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if ("default" in text.lower() or default in (None, False, argparse.SUPPRESS)
                or isinstance(action, (argparse._HelpAction, argparse._VersionAction))
                or not (action.option_strings or action.nargs in ("?", "*"))):
            return text
        return f"{text} (default: %(default)s)".strip()


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser for every detfmt (sub)command: no prefix abbreviations, defaults in
    the help, a suggestion for a mistyped option or subcommand. Subparsers are built with the
    same class (argparse uses the parent's class), so every subcommand behaves alike."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["allow_abbrev"] = False
        kwargs.setdefault("formatter_class", _Formatter)
        super().__init__(*args, **kwargs)

    def parse_known_args(self, args=None, namespace=None):  # type: ignore[override]
        namespace, extras = super().parse_known_args(args, namespace)
        if extras and self._subparsers is None:  # a leaf command: it knows its own options
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return namespace, extras

    def _option_strings(self) -> list[str]:
        return [option for action in self._actions for option in action.option_strings]

    def error(self, message: str) -> NoReturn:  # type: ignore[override]
        """One line, like every other failure: the message, a hint, the id USAGE."""
        self.exit(2, f"{self.prog}: error: {message}{self._suggestion(message)} "
                     f"(see {self.prog} --help) [USAGE]\n")

    def _suggestion(self, message: str) -> str:
        choice = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
        if choice:
            options = re.findall(r"'([^']*)'", choice.group(2))
            close = difflib.get_close_matches(choice.group(1), options, n=1, cutoff=0.5)
            return f"; did you mean {close[0]!r}?" if close else ""
        unknown = re.search(r"unrecognized arguments: (.*)", message)
        if unknown:
            hints = []
            for token in unknown.group(1).split():
                if not token.startswith("-"):
                    continue
                option = token.split("=", 1)[0]
                candidates = [o for o in self._option_strings() if o.startswith(option)]
                candidates = candidates or difflib.get_close_matches(
                    option, self._option_strings(), n=1, cutoff=0.6)
                if candidates:
                    hints.append(f"{option}: did you mean {' or '.join(candidates[:3])}?")
            return "".join(f"; {hint}" for hint in hints)
        return ""


def _leaves(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in dict.fromkeys(action.choices.values()):
                found += _leaves(child)
    return found or [parser]


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="detfmt", description="detfmt dataset tools")
    parser.add_argument("--version", action="version", version=_version())
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    info = commands.add_parser("info", help="summarize a dataset (with its card)")
    info.add_argument("path", help="the dataset (a split root: every split)")
    info.add_argument("--json", action="store_true", help="print JSON")
    info.set_defaults(run=_cmd_info)
    check = commands.add_parser("validate", help="check every rule of SPEC.md (full verify)")
    check.add_argument("path", help="the dataset (a split root: every split)")
    check.set_defaults(run=_cmd_validate)
    clean = commands.add_parser("cleanup", help="remove temporary directories of dead writers")
    clean.add_argument("directory", help="the directory holding the dataset(s)")
    clean.set_defaults(run=_cmd_cleanup)
    phrases: dict[str, str] = {}
    for name in PLUGINS:
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        module.register(commands)
        phrases.update(getattr(module, "CLI_PHRASES", {}))
    for leaf in _leaves(parser):
        # ``args.spell(text)``: a message in the spelling of the command that ran
        leaf.set_defaults(parser=leaf, spell=functools.partial(cli_spelling, parser=leaf,
                                                               phrases=phrases))
    return parser


def cli_spelling(text: str, parser: argparse.ArgumentParser | None,
                 phrases: dict[str, str] | None = None) -> str:
    """Rewrite the Python spelling of a remedy in an error message as the CLI option that
    does the same (``on_error='skip'`` -> ``--on-error skip``, ``pass overwrite=True`` ->
    ``pass --overwrite``), using the options of the command that ran; ``phrases`` are the
    plugins' own spellings (their ``CLI_PHRASES``)."""
    if parser is None:
        return text
    own = {option for action in parser._actions for option in action.option_strings}
    for phrase, spelled in (phrases or {}).items():
        if spelled.split()[0] in own:  # only options this command has
            text = text.replace(phrase, spelled)
    if "split=NAME" in text and "--split" not in own:  # commands that take a path only
        text = text.replace("open one with split=NAME, or give the split's own folder",
                            "give one split's folder (ROOT/NAME)")
    for action in parser._actions:
        if not action.option_strings or action.dest in ("help", "version"):
            continue
        flag = max(action.option_strings, key=len)
        dest = re.escape(action.dest)
        if isinstance(action, argparse._StoreTrueAction):
            text = re.sub(rf"\b{dest}=True\b", flag, text)
            continue
        text = re.sub(rf"\b{dest}=(?:'([^']*)'|\"([^\"]*)\"|([\w.-]+))",
                      lambda m, flag=flag: f"{flag} {m.group(1) or m.group(2) or m.group(3)}",
                      text)
        text = re.sub(rf"\bpass {dest}\b(?!=)", f"pass {flag}", text)
        if "_" in action.dest:
            text = re.sub(rf"(?<![-\w]){dest}\b", flag, text)
    return text


def _version() -> str:
    from detfmt.version import __version__

    newest = max((spec.FORMAT_VERSION, spec.FORMAT_VERSION_SHARDED, spec.FORMAT_VERSION_RAGGED),
                 key=lambda v: tuple(int(part) for part in v.split(".")))
    return f"detfmt {__version__} (writes format {newest}; reads format {spec.MAJOR_VERSION}.x)"


def _interrupt_in_parent_only() -> None:
    """Ctrl-C reaches every process of the terminal's group. Worker processes forked from this
    one inherit this handler and ignore it (their parent stops them), so the user sees one
    line, not a traceback per worker; the parent raises KeyboardInterrupt as usual."""
    parent = os.getpid()

    def handler(signum: int, frame: Any) -> None:
        if os.getpid() == parent:
            raise KeyboardInterrupt

    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, handler)


def _os_error_line(error: OSError) -> str:
    names = [str(name) for name in (error.filename, error.filename2) if name is not None]
    where = f"{' -> '.join(names)}: " if names else ""
    return f"{where}{error.strerror or error}"


def main(argv: Sequence[str] | None = None) -> int:
    try:
        _interrupt_in_parent_only()
        parser = build_parser()
        args = parser.parse_args(argv)
        try:
            return int(args.run(args) or 0)
        except errors.FormatError as error:
            print(f"detfmt: invalid dataset: {cli_spelling(str(error), args.parser)}",
                  file=sys.stderr)
            return 1
        except errors.DetfmtError as error:
            print(f"detfmt: {cli_spelling(str(error), args.parser)}", file=sys.stderr)
            saved = getattr(error, "report_path", None)
            if saved:
                print(f"  report saved to {saved}", file=sys.stderr)
            return 2
        except BrokenPipeError:  # pragma: no cover - e.g. `detfmt info ds | head`
            return 0
        except OSError as error:  # what no command turned into a typed error: still one line
            print(f"detfmt: {_os_error_line(error)} [IO_ERROR]", file=sys.stderr)
            return 2
        except Exception as error:  # a bug: one line too, the traceback on request
            if os.environ.get("DETFMT_TRACEBACK"):
                raise
            text = " ".join(str(error).split())[:300]
            print(f"detfmt: internal error: {type(error).__name__}: {text} (a bug: please "
                  "report it; DETFMT_TRACEBACK=1 shows where) [INTERNAL]", file=sys.stderr)
            return 3
    except KeyboardInterrupt:
        print("detfmt: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
