"""``detfmt.open``: one entry point for every kind of dataset.

It decides what a path or URL holds (SPEC §19: a root with ``manifest.json``, or any URL, is a
sharded root; any other directory a 1.0 dataset, R-1) and returns the matching `DatasetLike`,
so neither reader needs to know about the other.
"""

from __future__ import annotations

import os
from typing import Any

from detfmt import errors
from detfmt.format import spec
from detfmt.format.splits import (
    MAX_SPLITS_BYTES,
    SPLIT_NAME,
    SPLITS_FILE,
    parse_split_index,
    resolve_split_name,
)
from detfmt.reading.protocol import DatasetLike
from detfmt.storage import is_remote

__all__ = ["dataset_parts", "is_sharded_root", "open_dataset", "split_location", "split_locations",
           "split_output"]



def is_sharded_root(path: str | os.PathLike[str]) -> bool:
    """True for a URL (remote roots are sharded) or a directory holding manifest.json (S-1)."""
    text = os.fspath(path)
    if is_remote(text):
        return True
    local = text[len("file://") :] if text.startswith("file://") else text
    return os.path.lexists(os.path.join(local, spec.MANIFEST_FILE))  # any entry (§19.2)


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
    """Where split ``split`` (``"train"``, ``"val"``...) of a split root lives: the path its
    ``splits.json`` gives (``valid`` finds ``val``, as the converters name it).

    Raises:
        UsageError: ``split`` is not a plain name, or the root has no such split.
        DatasetNotFoundError: ``path`` holds no ``splits.json`` (rule ``SPLITS_MISSING``): a
            folder of datasets without it (an interrupted convert) is not a split root.
        UnsafePathError: the split folder is a symbolic link (``PATH_UNSAFE``): a split root
            serves only the folders inside it.
    """
    _check_split_name(split)
    text = os.fspath(path).rstrip("/")
    index = read_split_index(text)
    if index is None:
        raise errors.DatasetNotFoundError(_no_index_reason(text, split), rule="SPLITS_MISSING",
                                          path=text)
    name = resolve_split_name(index, split)
    if name is None:
        raise errors.UsageError(f"no split {split!r}; this dataset has {sorted(index)}",
                                path=text)
    return _located(text, name, index[name])


def _check_split_name(name: object, where: str | None = None) -> None:
    """A split name is a plain name (`SPLIT_NAME`: it starts with a letter or digit, so never
    ``.`` or ``..``): names become paths and output file names (``grid_val.png``)."""
    if not isinstance(name, str) or not SPLIT_NAME.match(name):
        raise errors.UsageError(f"split names must be plain names such as 'train' or 'val', "
                                f"got {name!r}", path=where)


def _located(root: str, name: str, folder: str) -> str:
    """Split ``name``'s location from its index entry ``folder`` (checked inside the root)."""
    if is_remote(root):
        return f"{root}/{folder}"
    location = os.path.join(root, folder)
    _check_inside(root, location, name)
    return location


def _local(text: str) -> str:
    return text[len("file://") :] if text.startswith("file://") else text


def _no_index_reason(text: str, split: str) -> str:
    local = _local(text)
    if is_remote(text):
        return f"no {SPLITS_FILE} here: not a split root, so there is no split {split!r}"
    if not os.path.isdir(local):
        return f"no such folder: cannot open split {split!r}"
    if os.path.lexists(os.path.join(local, spec.HEADER_FILE)) or is_sharded_root(text):
        return (f"this is one dataset, not a split root (no {SPLITS_FILE}): open it without "
                "split=")
    return (f"no {SPLITS_FILE}: not a split root (a convert or split writes it last, so this "
            f"one was interrupted or the folder was made by hand); re-run it, or open the "
            f"dataset folder {os.path.join(text, split)!r} itself")


def _check_inside(root: str, location: str, name: str) -> None:
    """A split folder must be a real folder inside the root, never a link to elsewhere."""
    local = _local(location)
    real_root = os.path.realpath(_local(root))
    real = os.path.realpath(local)
    if os.path.islink(local) or os.path.dirname(real) != real_root:
        raise errors.UnsafePathError(
            f"split {name!r} resolves to {real}, outside the split root {real_root} (a "
            "symbolic link): a split root serves only the folders inside it",
            rule="PATH_UNSAFE", path=location)


def split_locations(path: str | os.PathLike[str]) -> dict[str, str] | None:
    """{split name: location} of every split of a split root, in index order; None when
    ``path`` is one dataset (or no split root): what commands that take a dataset do per
    split."""
    text = os.fspath(path)
    local = _local(text)
    if not is_remote(text) and (os.path.lexists(os.path.join(local, spec.MANIFEST_FILE))
                                or os.path.lexists(os.path.join(local, spec.HEADER_FILE))):
        return None
    index = read_split_index(text)
    if index is None:
        return None
    text = text.rstrip("/")
    for name in index:
        _check_split_name(name, text)
    return {name: _located(text, name, folder) for name, folder in index.items()}


def dataset_parts(path: str | os.PathLike[str]) -> dict[str, str]:
    """What a command given ``path`` works on: {split name: location} for every split of a
    split root, else {"": path} (one dataset)."""
    return split_locations(path) or {"": os.fspath(path)}


def split_output(path: str, name: str) -> str:
    """The output a command writes for split ``name`` of a split root: ``grid.png`` ->
    ``grid_val.png`` ("" keeps ``path``: one dataset, one output)."""
    if not name:
        return path
    stem, dot, suffix = path.rpartition(".")
    return f"{stem}_{name}.{suffix}" if dot and "/" not in suffix else f"{path}_{name}"


def open_dataset(path: str | os.PathLike[str], *, split: str | None = None,
                 max_header_bytes: int = spec.MAX_HEADER_BYTES, **sharded_options: Any
                 ) -> DatasetLike:
    """Open a detfmt dataset for reading (cheap structural checks; ``verify`` checks all).

    Args:
        path: a 1.0 dataset directory, a sharded root (a directory with manifest.json), or the
            URL of a sharded root (``s3://bucket/ds``, ``http://host/ds``, any fsspec URL).
        split: open the split of that name of a split root (``path`` holds ``splits.json``
            and one dataset per split, as the converters and ``detfmt split`` write it);
            ``"valid"`` opens ``val``.
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
