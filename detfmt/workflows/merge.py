"""``detfmt merge A B ... DST``: one dataset holding every sample of the sources, in order.

Classes are matched by name: the output's classes are the first source's, then each name a later
source adds, in the order it appears there; every source's class ids are mapped onto them (the
report shows each mapping). Payloads are copied as stored, so sources may use different codecs
and sizes. Per-box fields are the union of the sources' (a field one source lacks is 0 in its
boxes, -1 for COCO annotation ids; a field with two dtypes is refused); the header's
``max_side`` is the largest of the sources' when all have one. Metadata the sources agree on is
kept (a shared license survives), and the card's lineage lists every source.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from detfmt import errors
from detfmt.format.schema import ClassInfo
from detfmt.reading.duplicates import Duplicate, describe, find_duplicates
from detfmt.reading.protocol import DatasetLike
from detfmt.workflows._copy import Source, opened, stored_samples
from detfmt.workflows._splitroot import SplitsReport, for_each_split, located, split_index
from detfmt.workflows.lineage import derived_metadata, merged_metadata, source_entry
from detfmt.writing.writer import StoredSample, WriteReport, write_stored

__all__ = ["MergePlan", "MergeReport", "merge", "plan_merge"]


@dataclasses.dataclass
class MergePlan:
    """How sources combine: the output classes and, per source, its class id -> output id."""

    classes: list[ClassInfo]
    mappings: list[np.ndarray]
    box_fields: list[tuple[str, str]]
    max_side: int | None
    added_fields: list[list[str]]  # per source: fields it lacks (written as 0)

    def subset(self, positions: Sequence[int]) -> MergePlan:
        """The plan for some of the sources (the same output classes and fields)."""
        return MergePlan(self.classes, [self.mappings[k] for k in positions], self.box_fields,
                         self.max_side, [self.added_fields[k] for k in positions])

    def lines(self, locations: Sequence[str]) -> list[str]:
        names = [c.name for c in self.classes]
        lines = [f"classes ({len(names)}): {', '.join(names)}"]
        for where, mapping, added in zip(locations, self.mappings, self.added_fields,
                                         strict=True):
            moved = _runs(mapping)
            text = ", ".join(moved) if moved else "ids unchanged"
            lines.append(f"  {where}: {len(mapping)} classes, {text}")
            if added:
                lines.append(f"    fields {added} absent: written as 0")
        return lines


@dataclasses.dataclass
class MergeReport:
    """What `merge` wrote: samples per source, the class mapping, shared payloads."""

    path: Path
    sources: list[str]
    samples_per_source: list[int]
    plan: MergePlan
    identical_payloads: int  # samples whose payload equals an earlier sample's (same checksum)
    write: WriteReport
    #: each of those samples, named, with the earlier sample it repeats
    duplicates: list[Duplicate] = dataclasses.field(default_factory=list)

    @property
    def samples(self) -> int:
        return self.write.num_samples

    def lines(self) -> list[str]:
        parts = " + ".join(str(n) for n in self.samples_per_source)
        lines = [f"{self.path}: {self.samples} samples ({parts}), {self.write.num_boxes} boxes"]
        lines += self.plan.lines(self.sources)
        if self.identical_payloads:
            lines.append(f"  note: {self.identical_payloads} samples have the same image bytes "
                         "as an earlier sample (duplicates across or within sources):")
            lines += [f"    {line}" for line in describe(self.duplicates)]
        return lines


def plan_merge(datasets: Sequence[DatasetLike]) -> MergePlan:
    """Match the sources' classes by name and their per-box fields by name (see module doc)."""
    classes: list[ClassInfo] = []
    position: dict[str, int] = {}
    mappings = []
    for ds in datasets:
        mapping = np.empty(len(ds.schema.classes), np.int64)
        for i, info in enumerate(ds.schema.classes):
            if info.name not in position:
                position[info.name] = len(classes)
                classes.append(info)
            elif classes[position[info.name]].source_id != info.source_id:
                kept = classes[position[info.name]]  # the ids disagree: keep the name only
                classes[position[info.name]] = ClassInfo(name=kept.name, source_id=None)
            mapping[i] = position[info.name]
        mappings.append(mapping)
    classes = _unique_source_ids(classes)
    fields: dict[str, str] = {}
    for ds in datasets:
        for field in ds.schema.box_fields:
            if fields.setdefault(field.name, field.dtype) != field.dtype:
                raise errors.IncompatibleDatasetsError(
                    f"per-box field {field.name!r} is {fields[field.name]} in one source and "
                    f"{field.dtype} in {ds.location}: remove or convert it first",
                    path=ds.location)
    added = [[name for name in fields if name not in {f.name for f in ds.schema.box_fields}]
             for ds in datasets]
    sides = [ds.schema.max_side for ds in datasets]
    max_side = None if any(s is None for s in sides) else max(sides)  # type: ignore[type-var]
    return MergePlan(classes, mappings, list(fields.items()), max_side, added)


def merge(
    sources: Sequence[Source],
    dst: str | os.PathLike[str],
    *,
    overwrite: bool = False,
    progress: bool | None = None,
    allow_overlap: bool = False,
) -> MergeReport | SplitsReport[MergeReport]:
    """Write every sample of ``sources`` (in order) into a new dataset at ``dst``.

    Args:
        sources: two or more dataset paths, URLs or opened datasets (any kind, any codec); or
            two or more split roots, whose splits of the same name are merged into a split
            root at ``dst`` (one class list for every split).
        dst: the dataset directory to create.
        allow_overlap: split roots: merge even when one image is in two splits (refused by
            default: train and val must not share an image).

    Returns:
        a `MergeReport`: the class mapping of each source, samples per source, and how many
        samples repeat an earlier sample's image bytes.

    Raises:
        IncompatibleDatasetsError: a per-box field with two dtypes.
        UsageError: fewer than two sources, a source is the destination, or (split roots)
            the same image would land in two splits (rule ``SPLIT_OVERLAP``).
    """
    if isinstance(sources, (str, os.PathLike)) or len(sources) < 2:
        raise errors.UsageError("merge needs at least two sources")
    indexes = [split_index(source) for source in sources]
    if all(index is not None for index in indexes):
        return _merge_split_roots(sources, indexes, dst, overwrite, progress,  # type: ignore
                                  allow_overlap)
    if any(index is not None for index in indexes):
        raise errors.UsageError("some sources are split roots (splits.json) and some are not: "
                                "merge split roots together, or name one split (ROOT/train)")
    with contextlib.ExitStack() as stack:
        datasets = [stack.enter_context(opened(source)) for source in sources]
        return _merge(datasets, plan_merge(datasets), dst, overwrite, progress)


def _merge_split_roots(sources: Sequence[Source], indexes: list[dict[str, str]],
                       dst: str | os.PathLike[str], overwrite: bool, progress: bool | None,
                       allow_overlap: bool) -> SplitsReport[MergeReport]:
    """Splits of the same name merged together (a split only some sources have: from those),
    with one class plan for all splits, made from each source's first split."""
    names = list(dict.fromkeys(name for index in indexes for name in index))
    with contextlib.ExitStack() as stack:
        firsts = [stack.enter_context(opened(located(source, next(iter(index)))))
                  for source, index in zip(sources, indexes, strict=True)]
        plan = plan_merge(firsts)
        class_lists = [ds.class_names for ds in firsts]
    if not allow_overlap:
        _refuse_overlap(sources, indexes, names)

    def run(name: str, out: Path) -> MergeReport:
        present = [k for k, index in enumerate(indexes) if name in index]
        with contextlib.ExitStack() as stack:
            datasets = [stack.enter_context(opened(located(sources[k], name))) for k in present]
            for k, ds in zip(present, datasets, strict=True):
                if ds.class_names != class_lists[k]:
                    raise errors.IncompatibleDatasetsError(
                        f"split {name!r} has other classes than the source's other splits",
                        path=ds.location)
            return _merge(datasets, plan.subset(present), out, overwrite, progress,
                          {"card.split": name})

    return for_each_split(names, dst, overwrite, run, ", ".join(map(os.fspath, sources)),
                          lambda r: (r.samples, r.write.num_boxes))


def _refuse_overlap(sources: Sequence[Source], indexes: list[dict[str, str]],
                    names: list[str]) -> None:
    """Refuse a merge that would put one image into two splits (train/val leakage): the same
    payload (checksum) in splits of different names, from any sources."""
    owner: dict[int, str] = {}
    for name in names:
        for source, index in zip(sources, indexes, strict=True):
            if name not in index:
                continue
            with opened(located(source, name)) as ds:
                for i in range(len(ds)):
                    checksum = ds.payload_checksum(i)
                    first = owner.setdefault(checksum, name)
                    if first != name:
                        raise errors.UsageError(
                            f"the same image is in split {first!r} of one source and in split "
                            f"{name!r} of {ds.location} (sample {i}): merging would mix the "
                            "splits; pass allow_overlap=True to merge anyway",
                            rule="SPLIT_OVERLAP")


def _merge(datasets: list[DatasetLike], plan: MergePlan, dst: str | os.PathLike[str],
           overwrite: bool, progress: bool | None, updates: dict[str, str] | None = None
           ) -> MergeReport:
    target = os.path.abspath(os.fspath(dst))
    for ds in datasets:
        if os.path.abspath(ds.location) == target and not overwrite:
            raise errors.TargetExistsError("the destination is one of the sources",
                                           path=target)
    duplicates = find_duplicates(datasets)

    def records() -> Iterator[StoredSample]:
        for ds, mapping in zip(datasets, plan.mappings, strict=True):
            for record in stored_samples(ds, np.arange(len(ds)), class_map=mapping):
                yield _fill(record, plan.box_fields)

    metadata = derived_metadata(
        merged_metadata([ds.metadata for ds in datasets]), "merge", {},
        [source_entry(ds) for ds in datasets], sum(len(ds) for ds in datasets),
        {**_merged_supercategories(datasets), **(updates or {})})
    report = write_stored(records(), dst, classes=plan.classes, box_fields=plan.box_fields,
                          max_side=plan.max_side, metadata=metadata, overwrite=overwrite,
                          progress=progress)
    return MergeReport(path=report.path, sources=[ds.location for ds in datasets],
                       samples_per_source=[len(ds) for ds in datasets], plan=plan,
                       identical_payloads=len(duplicates), write=report,
                       duplicates=duplicates)


def _runs(mapping: np.ndarray) -> list[str]:
    """The ids that move, as runs: ``0..79->15..94`` for a block shifted as one."""
    parts, i = [], 0
    while i < len(mapping):
        j = i
        while j + 1 < len(mapping) and mapping[j + 1] - (j + 1) == mapping[i] - i:
            j += 1
        if mapping[i] != i:
            parts.append(f"{i}->{int(mapping[i])}" if i == j else
                         f"{i}..{j}->{int(mapping[i])}..{int(mapping[j])}")
        i = j + 1
    return parts


#: the value of a per-box field in the boxes of a source that lacks it (an annotation id of -1
#: says "none", as an image's source_id does; other fields are 0)
FILL_VALUES = {"ann_id": -1}


def _fill(record: StoredSample, fields: list[tuple[str, str]]) -> StoredSample:
    count = len(record.classes)
    for name, dtype in fields:
        if name not in record.box_fields:
            record.box_fields[name] = np.full(count, FILL_VALUES.get(name, 0), np.dtype(dtype))
    return record


def _unique_source_ids(classes: list[ClassInfo]) -> list[ClassInfo]:
    """Classes of different names from different sources may share a source id (both a
    category 0): the first keeps it, the others lose it (a dataset's source ids are unique)."""
    seen: set[int] = set()
    result = []
    for info in classes:
        if info.source_id is not None and info.source_id in seen:
            info = ClassInfo(name=info.name, source_id=None)
        elif info.source_id is not None:
            seen.add(info.source_id)
        result.append(info)
    return result


def _merged_supercategories(datasets: Sequence[DatasetLike]) -> dict[str, str]:
    from detfmt.convert.coco import SUPERCATEGORIES_KEY, read_supercategories

    merged: dict[str, str] = {}
    for ds in datasets:
        for name, value in read_supercategories(ds.metadata).items():
            merged.setdefault(name, value)
    if not merged:
        return {}
    return {SUPERCATEGORIES_KEY: json.dumps(merged, ensure_ascii=False, sort_keys=True)}
