"""``detfmt split SRC OUT --val F [--test F] --seed S [--stratify]``: train/val(/test) datasets.

Writes ``OUT/train``, ``OUT/val`` (and ``OUT/test``) plus ``OUT/splits.json``: the layout the
converters write, so ``detfmt.open(OUT, split="val")`` opens one split (docs/converters.md).
Payloads are copied as stored; each split keeps the source's order.

Deterministic: which split a sample lands in depends only on the seed and the sample itself
(its payload checksum, file name and source id), never on the order samples are stored or
read in, so the same seed gives the same split of the same images on any copy of a dataset.

``stratify=True`` keeps every class's share of images in each split within one image of the
ideal (a class in n images gets n * fraction of them in a split, rounded either way) whenever
the images' class combinations allow it (`detfmt.workflows._stratify`: iterative stratification
then improving swaps); split sizes are exactly those asked for, and the report gives the largest
deviation reached.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import xxhash

from detfmt import errors
from detfmt.reading.protocol import DatasetLike
from detfmt.workflows._copy import Source, copy_samples, label_blocks, opened
from detfmt.workflows._splitroot import split_index
from detfmt.workflows._stratify import assign_stratified, deviation
from detfmt.workflows.lineage import derived_metadata, source_entry
from detfmt.writing.writer import WriteReport

__all__ = ["SplitReport", "split", "split_indices", "split_sizes"]


@dataclasses.dataclass
class SplitReport:
    """What `split` wrote: per split its path, samples and boxes, and the worst class share."""

    root: Path
    seed: int
    stratified: bool
    splits: dict[str, WriteReport]
    #: per split, the largest |images of a class in the split - ideal| over every class
    class_deviation: dict[str, float]

    def lines(self) -> list[str]:
        sizes = ", ".join(f"{name} {r.num_samples}" for name, r in self.splits.items())
        lines = [f"{self.root}: {sizes} samples (seed {self.seed}"
                 f"{', stratified' if self.stratified else ''})"]
        for name, report in self.splits.items():
            lines.append(f"  {name}: {report.num_samples} samples, {report.num_boxes} boxes; "
                         f"class shares within {self.class_deviation[name]:.2f} image(s) of "
                         "the ideal")
        return lines


def split_sizes(n: int, val: float, test: float | None = None) -> dict[str, int]:
    """Samples per split for ``n`` samples: a fraction (0 < F < 1) is rounded (at least 1
    sample), an integer >= 1 is a count; train takes the rest and must keep one."""
    if n < 2:
        raise errors.UsageError(f"the dataset has {n} sample(s): a split needs at least 2")
    sizes = {"val": _size(n, val, "val")}
    if test is not None:
        sizes["test"] = _size(n, test, "test")
    rest = n - sum(sizes.values())
    if rest < 1:
        raise errors.UsageError(f"val and test take {n - rest} of the {n} samples: nothing is "
                                "left for train; ask for smaller fractions")
    return {"train": rest, **sizes}


def _size(n: int, value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise errors.UsageError(f"{what} must be a fraction in (0, 1) or a count >= 1, got "
                                f"{value!r}")
    value = float(value)
    if 0 < value < 1:
        return max(1, round(value * n))
    if value >= 1 and value == int(value):
        return int(value)
    raise errors.UsageError(f"{what} must be a fraction in (0, 1) or a whole count >= 1, got "
                            f"{value!r}")


def sample_keys(ds: DatasetLike, seed: int) -> np.ndarray:
    """A seeded 64-bit key per sample from what identifies it (payload checksum, file name,
    source id): sorting by key is a random order that does not depend on storage order."""
    fields = ds.schema.image_fields
    source = np.asarray(ds.image_field("source_id")) if "source_id" in fields else None
    names = "file_name" in fields
    keys = np.empty(len(ds), np.uint64)
    prefix = int(seed).to_bytes(8, "little", signed=True)
    for i in range(len(ds)):
        digest = xxhash.xxh3_64(prefix)
        digest.update(int(ds.payload_checksum(i)).to_bytes(8, "little"))
        if source is not None:
            digest.update(int(source[i]).to_bytes(8, "little", signed=True))
        if names:
            digest.update(ds.string_field("file_name", i).encode("utf-8"))
        keys[i] = digest.intdigest()
    return keys


def split_indices(
    ds: DatasetLike,
    *,
    val: float,
    test: float | None = None,
    seed: int = 0,
    stratify: bool = False,
) -> dict[str, np.ndarray]:
    """The sample indices of each split ("train", "val" and, with ``test``, "test"), sorted.

    Args:
        val, test: a fraction of the samples (0 < F < 1, rounded, at least one) or a count.
        seed: any integer; the same seed gives the same split (see the module doc).
        stratify: keep each class's image share per split within one image of the ideal.
    """
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or \
            not -(1 << 63) <= int(seed) < 1 << 63:
        raise errors.UsageError(f"seed must be an int64, got {seed!r}")
    sizes = split_sizes(len(ds), val, test)
    keys = sample_keys(ds, int(seed))
    order = np.lexsort((np.arange(len(ds)), keys))  # ties (identical samples): storage order
    names = list(sizes)
    if not stratify:
        assignment = np.empty(len(ds), np.int64)
        start = 0
        for name in _deal_order(names):
            count = sizes[name]
            assignment[order[start : start + count]] = names.index(name)
            start += count
    else:
        targets = np.array([sizes[name] for name in names], np.int64)
        ranked = assign_stratified(_presence(ds, order), targets)
        assignment = np.empty(len(ds), np.int64)
        assignment[order] = ranked
    return {name: np.flatnonzero(assignment == s).astype(np.int64)
            for s, name in enumerate(names)}


def _deal_order(names: Sequence[str]) -> list[str]:
    """val and test are dealt first from the shuffled order, train takes the rest."""
    return [name for name in names if name != "train"] + ["train"]


def _presence(ds: DatasetLike, order: np.ndarray) -> np.ndarray:
    """(N, C) bool: which classes each sample holds, rows in key order."""
    n = len(ds)
    present = np.zeros((n, len(ds.class_names)), bool)
    for labels in label_blocks(ds, np.arange(n, dtype=np.int64)):
        rows = np.repeat(labels.indices[:, None], labels.mask.shape[1], axis=1)[labels.mask]
        present[rows, labels.classes[labels.mask]] = True
    return present[order]


def class_deviation(ds: DatasetLike, parts: Mapping[str, np.ndarray]) -> dict[str, float]:
    """Per split, the largest |images holding a class - the ideal share| over the classes."""
    assignment = np.empty(len(ds), np.int64)
    for s, indices in enumerate(parts.values()):
        assignment[indices] = s
    found = deviation(_presence(ds, np.arange(len(ds))), assignment, len(parts))
    return {name: float(value) for name, value in zip(parts, found, strict=True)}


def split(
    src: Source,
    out: str | os.PathLike[str],
    *,
    val: float,
    test: float | None = None,
    seed: int = 0,
    stratify: bool = False,
    overwrite: bool = False,
    progress: bool | None = None,
) -> SplitReport:
    """Split ``src`` into ``out/train``, ``out/val`` (and ``out/test``) with ``splits.json``.

    Args:
        src: a dataset path, URL or opened dataset (any kind).
        out: the split root to create (missing, empty, or a split root to replace with
            ``overwrite``).
        val, test, seed, stratify: see `split_indices`.

    Returns:
        a `SplitReport`. ``detfmt.open(out, split="val")`` opens a split; each is an ordinary
        dataset with ``card.split`` naming it and the step in its card's lineage.
    """
    from detfmt.writing.splitroot import check_split_root, write_split_counts

    root = Path(os.path.abspath(os.fspath(out)))
    index = split_index(src)
    if index is not None:
        first = next(iter(index), "train")
        raise errors.UsageError(f"{os.fspath(src)} is split already (splits {list(index)}): "
                                f"split one of them, e.g. {os.path.join(os.fspath(src), first)}")
    with opened(src) as ds:
        parts = split_indices(ds, val=val, test=test, seed=seed, stratify=stratify)
        check_split_root(root, list(parts), overwrite)
        root.mkdir(parents=True, exist_ok=True)
        args = {"val": val, "test": test, "seed": int(seed), "stratify": stratify}
        reports: dict[str, WriteReport] = {}
        for name, indices in parts.items():
            metadata = derived_metadata(ds.metadata, "split", {**args, "split": name},
                                        [source_entry(ds)], len(indices), {"card.split": name})
            reports[name] = copy_samples(ds, indices, root / name, classes=ds.schema.classes,
                                         metadata=metadata, overwrite=overwrite,
                                         progress=progress)
        write_split_counts(root, {name: (r.num_samples, r.num_boxes)
                                  for name, r in reports.items()}, "detfmt", ds.location)
        return SplitReport(root=root, seed=int(seed), stratified=stratify, splits=reports,
                           class_deviation=class_deviation(ds, parts))
