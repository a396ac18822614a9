"""Writing a split root: refuse a target that is something else, publish ``splits.json`` last.

The index itself (names, bytes) is `detfmt.format.splits`; converters and ``detfmt split``,
``filter``, ``remap`` and ``merge`` write their split roots through here.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from detfmt.errors import TargetExistsError
from detfmt.format.splits import SPLITS_FILE, encode_split_index
from detfmt.reading.opener import read_split_index

__all__ = ["check_split_root", "write_split_counts"]


def check_split_root(root: Path, names: list[str], overwrite: bool) -> None:
    """Refuse to write splits into ``root`` unless it is missing, empty, or a split root
    (replaced only with ``overwrite``)."""
    if not os.path.lexists(root):
        return
    if root.is_symlink() or not root.is_dir():
        raise TargetExistsError("target exists and is not a folder", path=root)
    existing = read_split_index(root)
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


def write_split_counts(root: Path, counts: Mapping[str, tuple[int, int]], source_format: str,
                       source: str) -> Path:
    """Write ``splits.json`` (atomically) for splits ``{name: (images, boxes)}`` in order, each
    stored at ``root/<name>``."""
    path = root / SPLITS_FILE
    temporary = root / f".{SPLITS_FILE}.{os.getpid()}.tmp"
    try:
        temporary.write_bytes(encode_split_index(counts, source_format, source))
        os.replace(temporary, path)
    finally:
        if temporary.exists():
            temporary.unlink()
    return path
