"""Finding a source's folders by what they hold, not by what they are called.

Real datasets name their folders freely (``train2017/``, ``images/train/``, ``annots/``,
``xml/``, Roboflow's ``train/`` beside its JSON). The converters therefore look, under the
source folder (at most ``MAX_DEPTH`` levels down, hidden folders skipped), for the folder that
holds the files an annotation file names, and refuse to guess between equally good folders
(``SOURCE_AMBIGUOUS``, listing them).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path

from detfmt.convert.errors import ConversionError
from detfmt.convert.inputs import name_problem

__all__ = ["MAX_DEPTH", "SAMPLE", "candidate_folders", "folder_holding", "sample"]

MAX_DEPTH = 2
SAMPLE = 64  # names checked per annotation file: enough to tell folders apart, cheap to stat


def candidate_folders(root: Path, depth: int = MAX_DEPTH) -> list[Path]:
    """``root`` and every folder below it down to ``depth`` levels (hidden ones skipped),
    sorted, each real folder once (a symlinked folder counts as its first name)."""
    found: list[Path] = []
    seen: set[str] = set()
    level = [root]
    for _ in range(depth + 1):
        below: list[Path] = []
        for folder in level:
            real = os.path.realpath(folder)
            if real in seen:
                continue
            seen.add(real)
            found.append(folder)
            try:
                with os.scandir(folder) as entries:
                    below += sorted(Path(e.path) for e in entries
                                    if not e.name.startswith(".") and _is_dir(e))
            except OSError:
                continue
        level = below
    return found


def _is_dir(entry: os.DirEntry) -> bool:
    try:
        return entry.is_dir(follow_symlinks=True)
    except OSError:
        return False


def sample(names: Sequence[str], count: int = SAMPLE) -> list[str]:
    """Up to ``count`` usable names spread evenly over ``names``."""
    usable = [n for n in names if isinstance(n, str) and name_problem(n) is None]
    if len(usable) <= count:
        return usable
    step = len(usable) / count
    return [usable[int(i * step)] for i in range(count)]


def _hits(folder: Path, names: Sequence[str]) -> tuple[int, int]:
    """(names found under their full relative name, names found by base name) in ``folder``."""
    exact = base = 0
    for name in names:
        if os.path.isfile(folder / name):
            exact += 1
        elif "/" in name.replace("\\", "/") and os.path.isfile(folder / Path(name).name):
            base += 1
    return exact, base


def folder_holding(
    names: Sequence[str],
    candidates: Sequence[Path],
    *,
    prefer: Callable[[Path], bool] | None = None,
    what: str,
    where: str | os.PathLike[str],
    remedy: str,
) -> Path | None:
    """The one folder of ``candidates`` that holds the most of ``names``.

    Ties are broken by names found under their full relative name (over their base name), then
    by ``prefer`` (e.g. the folder named after the split), then by being the same real folder.
    Returns None when no candidate holds any of the names.

    Raises:
        ConversionError: ``SOURCE_AMBIGUOUS`` naming the equally good folders and ``remedy``.
    """
    picked = sample(names)
    if not picked:
        return None
    scored = [(folder, _hits(folder, picked)) for folder in candidates]
    best = max((sum(hits) for _, hits in scored), default=0)
    if best == 0:
        return None
    tied = [(folder, hits) for folder, hits in scored if sum(hits) == best]
    exact = max(hits[0] for _, hits in tied)
    tied_folders = [folder for folder, hits in tied if hits[0] == exact]
    if prefer is not None and len(tied_folders) > 1:
        preferred = [folder for folder in tied_folders if prefer(folder)]
        tied_folders = preferred or tied_folders
    if len({os.path.realpath(folder) for folder in tied_folders}) > 1:
        listed = ", ".join(os.fspath(folder) for folder in tied_folders[:8])
        raise ConversionError(
            f"{what}: {len(tied_folders)} folders hold its files equally well ({listed}); "
            f"{remedy}", rule="SOURCE_AMBIGUOUS", path=where)
    return tied_folders[0]
