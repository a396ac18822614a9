"""Samples whose stored image bytes repeat an earlier sample's: what ``append`` refuses and
``merge`` names, so the same images are never added twice silently.

Two samples are the same when their payloads have the same XXH3-64 checksum and size (both in
the index every writer stores: nothing is read or decoded to compare them).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from detfmt.reading.protocol import DatasetLike

__all__ = ["Duplicate", "describe", "find_duplicates", "payload_keys"]


@dataclasses.dataclass(frozen=True)
class Duplicate:
    """Sample ``index`` of ``location`` has the same image bytes as sample ``first_index`` of
    ``first_location`` (earlier in the order the datasets were given)."""

    location: str
    index: int
    name: str
    first_location: str
    first_index: int
    first_name: str

    def __str__(self) -> str:
        return (f"{self.location} sample {self.index} ({self.name}) = {self.first_location} "
                f"sample {self.first_index} ({self.first_name})")


def payload_keys(ds: DatasetLike) -> tuple[np.ndarray, np.ndarray]:
    """(checksum, size) of every stored payload, as two (N,) uint64 arrays, from the index
    (a 1.0 dataset's, or each shard's of a sharded root) without reading a payload."""
    from detfmt.reading.dataset import Dataset
    from detfmt.reading.sharded import ShardedDataset

    if isinstance(ds, Dataset):
        return (np.array(ds.index["checksum"], np.uint64), np.array(ds.index["nbytes"], np.uint64))
    if isinstance(ds, ShardedDataset):  # a shard at a time (copies: none is kept open)
        keys = [payload_keys(ds.shard(k)) for k in range(len(ds.shards))
                if ds.shards[k].num_samples]
        if not keys:
            return np.zeros(0, np.uint64), np.zeros(0, np.uint64)
        return np.concatenate([c for c, _ in keys]), np.concatenate([s for _, s in keys])
    # any other DatasetLike, one sample at a time
    checksums = np.array([ds.payload_checksum(i) for i in range(len(ds))], np.uint64)
    sizes = np.array([len(ds.payload(i)) for i in range(len(ds))], np.uint64)
    return checksums, sizes


def find_duplicates(datasets: Sequence[DatasetLike], *, first_new: int = 0,
                    within: bool = True) -> list[Duplicate]:
    """The samples of ``datasets[first_new:]`` whose payload equals an earlier sample's, each
    with the first sample it repeats (in the order given). ``within=False`` counts only
    repeats of a sample of an earlier dataset (not of one in the same dataset)."""
    keys = [payload_keys(ds) for ds in datasets]
    if not keys or not sum(len(c) for c, _ in keys):
        return []
    checksums = np.concatenate([c for c, _ in keys])
    sizes = np.concatenate([s for _, s in keys])
    owner = np.concatenate([np.full(len(c), k, np.int64) for k, (c, _) in enumerate(keys)])
    local = np.concatenate([np.arange(len(c), dtype=np.int64) for c, _ in keys])
    order = np.lexsort((np.arange(len(checksums)), sizes, checksums))  # position breaks ties
    c, s = checksums[order], sizes[order]
    new_run = np.ones(len(order), bool)
    new_run[1:] = (c[1:] != c[:-1]) | (s[1:] != s[:-1])
    first = order[np.maximum.accumulate(np.where(new_run, np.arange(len(order)), 0))]
    repeat = ~new_run & (owner[order] >= first_new)
    if not within:
        repeat &= owner[first] < owner[order]
    found = []
    for e, f in sorted(zip(order[repeat].tolist(), first[repeat].tolist(), strict=True)):
        a, b = datasets[owner[e]], datasets[owner[f]]  # in the order given
        found.append(Duplicate(a.location, int(local[e]), _name(a, int(local[e])),
                               b.location, int(local[f]), _name(b, int(local[f]))))
    return found


def _name(ds: DatasetLike, i: int) -> str:
    if "file_name" in ds.schema.image_fields:
        name = ds.string_field("file_name", i)
        if name:
            return name
    return f"#{i}"


def describe(duplicates: Sequence[Duplicate], shown: int = 5) -> list[str]:
    """The first ``shown`` duplicates (and how many more), one string each."""
    lines = [str(d) for d in duplicates[:shown]]
    if len(duplicates) > shown:
        lines.append(f"... {len(duplicates) - shown} more")
    return lines
