"""The split layout: one detfmt dataset per split under one folder (docs/converters.md).

    OUT/
      splits.json            {"format": "detfmt-splits/1", "splits": {"train": {...}, ...}}
      train/                 an ordinary detfmt dataset (header.json, ...)
      train.report.json      its conversion report
      val/
      val.report.json

``splits.json`` is written last, atomically: a folder without it is not (yet) a split root.
Readers open ``OUT/<name>`` for ``split=name``; the index gives the names, their order and
their sizes without opening each dataset.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from detfmt.convert.report import ConversionReport
from detfmt.errors import TargetExistsError
from detfmt.reading.opener import MAX_SPLITS_BYTES, SPLITS_FILE, SPLITS_FORMAT, parse_split_index

__all__ = ["SPLITS_FILE", "SPLITS_FORMAT", "check_split_root", "read_splits", "write_split_counts",
           "write_splits_index"]

def read_splits(root: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The parsed ``splits.json`` of a split root, or None when ``root`` is not one.

    Raises:
        FormatError: ``SPLITS_INVALID`` when the index exists but is malformed.
    """
    path = Path(root) / SPLITS_FILE
    if not path.is_file():
        return None
    from detfmt.convert.inputs import read_source_bytes

    data = read_source_bytes(path, rule="SPLITS_INVALID", limit=MAX_SPLITS_BYTES)
    return parse_split_index(data, str(path))


def check_split_root(root: Path, names: list[str], overwrite: bool) -> None:
    """Refuse to write splits into ``root`` unless it is missing, empty, or a split root
    (replaced only with ``overwrite``)."""
    if not os.path.lexists(root):
        return
    if root.is_symlink() or not root.is_dir():
        raise TargetExistsError("target exists and is not a folder", path=root)
    existing = read_splits(root)
    if existing is None:
        foreign = [entry.name for entry in root.iterdir() if not _ours(entry.name, names)]
        if foreign:
            raise TargetExistsError(f"target folder holds {foreign[0]!r} and is not a split "
                                    f"root (no {SPLITS_FILE}); choose another folder",
                                    path=root)
        return
    if not overwrite:
        raise TargetExistsError("target is a split root already; pass overwrite=True to "
                                "replace its splits", path=root)


def _ours(name: str, splits: list[str]) -> bool:
    """What an interrupted or refused split conversion may leave: reports, writer locks and
    temporaries, and the split datasets themselves (the writer replaces only datasets)."""
    return name in splits or name.endswith(".report.json") or name.startswith(".")


def write_splits_index(root: Path, reports: Mapping[str, ConversionReport],
                       source_format: str, source: str) -> Path:
    """Write ``splits.json`` (atomically) listing the written splits in order."""
    return write_split_counts(root, {name: (report.images_kept, report.boxes_kept)
                                     for name, report in reports.items()}, source_format, source)


def write_split_counts(root: Path, counts: Mapping[str, tuple[int, int]], source_format: str,
                       source: str) -> Path:
    """Write ``splits.json`` (atomically) for splits ``{name: (images, boxes)}`` in order, each
    stored at ``root/<name>`` (what `detfmt split` writes too)."""
    index = {
        "format": SPLITS_FORMAT,
        "source_format": source_format,
        "source": source,
        "splits": {name: {"path": name, "images": int(images), "boxes": int(boxes)}
                   for name, (images, boxes) in counts.items()},
    }
    path = root / SPLITS_FILE
    temporary = root / f".{SPLITS_FILE}.{os.getpid()}.tmp"
    try:
        temporary.write_text(json.dumps(index, indent=1, ensure_ascii=False) + "\n",
                             encoding="utf-8")
        os.replace(temporary, path)
    finally:
        if temporary.exists():
            temporary.unlink()
    return path
