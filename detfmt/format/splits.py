"""The split index ``splits.json`` of a split root (docs/converters.md): decode and encode.

    ROOT/
      splits.json   {"format": "detfmt-splits/1", "splits": {"train": {"path": "train", ...}}}
      train/        an ordinary detfmt dataset (1.0 directory or sharded root)
      val/

The index names the splits, their order and their sizes without opening each dataset. It is
written last, atomically, so a folder without it is not (yet) a split root. Paths in it are
plain folder names: a split never lies outside its root.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from detfmt import errors
from detfmt.format.jsonprofile import parse_json

__all__ = ["MAX_SPLITS_BYTES", "SPLITS_FILE", "SPLITS_FORMAT", "SPLIT_ALIASES", "SPLIT_NAME",
           "encode_split_index", "parse_split_index", "resolve_split_name"]

SPLITS_FILE = "splits.json"
SPLITS_FORMAT = "detfmt-splits/1"
MAX_SPLITS_BYTES = 1 << 20
#: a split name, and a split folder's name in the index: a plain folder name
SPLIT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}\Z")
#: split names the converters write under another name (``valid`` is stored as ``val``)
SPLIT_ALIASES = {"valid": "val", "validation": "val"}


def parse_split_index(data: bytes, where: str) -> dict[str, Any]:
    """The one parser of ``splits.json`` (every reader of it calls this): the JSON profile of
    SPEC §5.6, the format name, and a ``splits`` object whose paths are plain names (never a
    path out of the root). Raises `FormatError` (rule SPLITS_INVALID)."""
    index = parse_json(data, path=where, limit=MAX_SPLITS_BYTES, rule="SPLITS_INVALID")
    splits = index.get("splits")
    if index.get("format") != SPLITS_FORMAT or not isinstance(splits, dict) or not all(
            isinstance(entry, dict) and isinstance(entry.get("path"), str)
            and SPLIT_NAME.match(entry["path"]) for entry in splits.values()):
        raise errors.FormatError(f"not a {SPLITS_FORMAT} index (a 'splits' object whose paths "
                                 "are plain folder names)", rule="SPLITS_INVALID", path=where)
    return index


def encode_split_index(counts: Mapping[str, tuple[int, int]], source_format: str,
                       source: str) -> bytes:
    """The bytes of ``splits.json`` for splits ``{name: (images, boxes)}`` in order, each
    stored in the folder of its own name."""
    index = {
        "format": SPLITS_FORMAT,
        "source_format": source_format,
        "source": source,
        "splits": {name: {"path": name, "images": int(images), "boxes": int(boxes)}
                   for name, (images, boxes) in counts.items()},
    }
    return (json.dumps(index, indent=1, ensure_ascii=False) + "\n").encode("utf-8")


def resolve_split_name(names: Mapping[str, str] | list[str], split: str) -> str | None:
    """The index's name for ``split``: itself, or the name it is an alias of (either way:
    ``valid`` finds ``val`` and ``val`` finds ``valid``); None when there is none."""
    if split in names:
        return split
    wanted = SPLIT_ALIASES.get(split, split)
    for name in names:
        if SPLIT_ALIASES.get(name, name) == wanted:
            return name
    return None
