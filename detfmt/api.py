"""``detfmt.open``: one entry point for every kind of dataset.

It decides what a path or URL holds (SPEC §19: a root with ``manifest.json``, or any URL, is a
sharded root; any other directory a 1.0 dataset, R-1) and returns the matching `DatasetLike`,
so neither reader needs to know about the other.
"""

from __future__ import annotations

import os
import re
from typing import Any

from detfmt import errors, spec
from detfmt.protocol import DatasetLike
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


def split_location(path: str | os.PathLike[str], split: str) -> str:
    """Where split ``split`` (``"train"``, ``"val"``...) of a converted dataset lives: a
    dataset at ``<path>/<split>`` (the converters' layout, docs/converters.md)."""
    if not isinstance(split, str) or not _SPLIT.match(split) or split in (".", ".."):
        raise errors.UsageError(f"split must be a plain name such as 'train' or 'val', got "
                                f"{split!r}")
    text = os.fspath(path).rstrip("/")
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
        from detfmt.shard.sharded import ShardedDataset

        return ShardedDataset(path, **sharded_options)
    if sharded_options:
        raise errors.UsageError(f"options {sorted(sharded_options)} apply to sharded datasets "
                                f"only, and {os.fspath(path)!r} is not one")
    from detfmt.reader import Dataset

    return Dataset(path, max_header_bytes=max_header_bytes)
