"""``detfmt.open``: one entry point for every kind of dataset.

It decides what a path or URL holds (SPEC §19: a root with ``manifest.json``, or any URL, is a
sharded root; any other directory a 1.0 dataset, R-1) and returns the matching `DatasetLike`,
so neither reader needs to know about the other.
"""

from __future__ import annotations

import os
import re
from typing import Any

from detfmt import errors
from detfmt.format import spec
from detfmt.reading.protocol import DatasetLike
from detfmt.storage import is_remote

__all__ = ["is_sharded_root", "open_dataset", "split_location"]

_SPLIT = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}\Z")


def is_sharded_root(path: str | os.PathLike[str]) -> bool:
    """True for a URL (remote roots are sharded) or a directory holding manifest.json (S-1)."""
    text = os.fspath(path)
    if is_remote(text):
        return True
    local = text[len("file://") :] if text.startswith("file://") else text
    return os.path.lexists(os.path.join(local, spec.MANIFEST_FILE))  # any entry (§19.2)


SPLITS_FILE = "splits.json"  # a converted dataset with several splits (docs/converters.md)
SPLITS_FORMAT = "detfmt-splits/1"
MAX_SPLITS_BYTES = 1 << 20


def parse_split_index(data: bytes, where: str) -> dict[str, Any]:
    """The one parser of ``splits.json`` (every reader of it calls this): the JSON profile of
    SPEC §5.6, the format name, and a ``splits`` object whose paths are plain names (never a
    path out of the root). Raises `FormatError` (rule SPLITS_INVALID)."""
    from detfmt.format.jsonprofile import parse_json

    index = parse_json(data, path=where, limit=MAX_SPLITS_BYTES, rule="SPLITS_INVALID")
    splits = index.get("splits")
    if index.get("format") != SPLITS_FORMAT or not isinstance(splits, dict) or not all(
            isinstance(entry, dict) and isinstance(entry.get("path"), str)
            and _SPLIT.match(entry["path"]) for entry in splits.values()):
        raise errors.FormatError(f"not a {SPLITS_FORMAT} index (a 'splits' object whose paths "
                                 "are plain folder names)", rule="SPLITS_INVALID", path=where)
    return index


def read_split_index(path: str | os.PathLike[str]) -> dict[str, str] | None:
    """Split name -> relative path of a split root's ``splits.json``, or None when ``path``
    holds none (it is then not a split root)."""
    from detfmt.storage import open_storage

    storage = open_storage(path)
    where = storage.where(SPLITS_FILE)
    try:
        data = storage.read(SPLITS_FILE, MAX_SPLITS_BYTES + 1)
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return None
    except OSError as error:
        raise errors.UsageError(f"cannot read the split index ({error})", path=where) from error
    index = parse_split_index(data, where)
    return {str(name): entry["path"] for name, entry in index["splits"].items()}


def split_location(path: str | os.PathLike[str], split: str) -> str:
    """Where split ``split`` (``"train"``, ``"val"``...) of a converted dataset lives: the path
    its ``splits.json`` gives, else ``<path>/<split>``."""
    if not isinstance(split, str) or not _SPLIT.match(split) or split in (".", ".."):
        raise errors.UsageError(f"split must be a plain name such as 'train' or 'val', got "
                                f"{split!r}")
    text = os.fspath(path).rstrip("/")
    index = read_split_index(text)
    if index is not None:
        if split not in index:
            raise errors.UsageError(f"no split {split!r}; this dataset has {sorted(index)}",
                                    path=text)
        split = index[split]
    if is_remote(text):
        return f"{text}/{split}"
    return os.path.join(text, split)


def open_dataset(path: str | os.PathLike[str], *, split: str | None = None,
                 max_header_bytes: int = spec.MAX_HEADER_BYTES, **sharded_options: Any
                 ) -> DatasetLike:
    """Open a detfmt dataset for reading (cheap structural checks; ``verify`` checks all).

    Args:
        path: a 1.0 dataset directory, a sharded root (a directory with manifest.json), or the
            URL of a sharded root (``s3://bucket/ds``, ``http://host/ds``, any fsspec URL).
        split: open the split of that name (``path/<split>``), as the converters lay out
            several splits of one source.
        max_header_bytes: 1.0 datasets: the header.json size limit (R-2).
        sharded_options: sharded roots: ``storage_options``, ``cache_dir``, ``cache_limit``,
            ``max_open`` (see `detfmt.ShardedDataset`).

    Returns:
        a `detfmt.Dataset` or a `detfmt.ShardedDataset`; both are `DatasetLike`.
    """
    if split is not None:
        path = split_location(path, split)
    if is_sharded_root(path):
        from detfmt.reading.sharded import ShardedDataset

        return ShardedDataset(path, **sharded_options)
    if sharded_options:
        raise errors.UsageError(f"options {sorted(sharded_options)} apply to sharded datasets "
                                f"only, and {os.fspath(path)!r} is not one")
    if split is None and not os.path.lexists(os.path.join(os.fspath(path), spec.HEADER_FILE)):
        index = read_split_index(path)
        if index is not None:
            raise errors.UsageError(f"this folder holds several datasets (splits "
                                    f"{sorted(index)}): open one with split=NAME, or give "
                                    "the split's own folder", path=path)
    from detfmt.reading.dataset import Dataset

    return Dataset(path, max_header_bytes=max_header_bytes)
