"""Workflows over a split root (``OUT/train``, ``OUT/val`` and ``OUT/splits.json``, as the
converters and ``detfmt split`` write it): filter and remap apply to every split, merge joins
the splits of the same name, and the result is a split root again, so train and val stay apart
and keep one class list."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, Generic, TypeVar

from detfmt import errors
from detfmt.format.splits import SPLITS_FILE
from detfmt.workflows._copy import Source

__all__ = ["SplitsReport", "for_each_split", "located", "refuse_per_split", "split_index"]

Report = TypeVar("Report")


@dataclasses.dataclass
class SplitsReport(Generic[Report]):
    """The report of a workflow run on every split of a split root, by split name."""

    root: Path
    splits: dict[str, Report]

    def lines(self) -> list[str]:
        lines = []
        for name, report in self.splits.items():
            lines.append(f"== split {name}")
            lines += report.lines()  # type: ignore[attr-defined]
        lines.append(f"splits {', '.join(self.splits)} written under {self.root} (index: "
                     f"{self.root / SPLITS_FILE})")
        return lines


def split_index(source: Source) -> dict[str, str] | None:
    """{split name: path} of a split root given by path or URL; None for anything else."""
    if not isinstance(source, (str, os.PathLike)):
        return None
    from detfmt.reading.opener import read_split_index

    return read_split_index(source)


def for_each_split(
    names: list[str],
    dst: str | os.PathLike[str],
    overwrite: bool,
    run: Callable[[str, Path], Any],
    source: str,
    counts: Callable[[Any], tuple[int, int]],
) -> SplitsReport:
    """Run ``run(name, dst / name)`` for every split name, then write ``dst/splits.json``
    (``counts(report)`` gives its images and boxes). ``dst`` must be missing, empty or a split
    root (replaced with ``overwrite``), as for the converters."""
    from detfmt.writing.splitroot import check_split_root, write_split_counts

    root = Path(os.path.abspath(os.fspath(dst)))
    check_split_root(root, names, overwrite)
    root.mkdir(parents=True, exist_ok=True)
    reports = {name: run(name, root / name) for name in names}
    write_split_counts(root, {name: counts(report) for name, report in reports.items()},
                       "detfmt", source)
    return SplitsReport(root, reports)


def refuse_per_split(option: str, given: Any) -> None:
    """Options that name samples of one dataset make no sense on a whole split root."""
    if given is not None:
        raise errors.UsageError(f"{option} names samples of one dataset; give one split "
                                "(ROOT/train) rather than the split root")


def located(source: Source, name: str) -> str:
    from detfmt.reading.opener import split_location

    return split_location(source, name)  # type: ignore[arg-type]
