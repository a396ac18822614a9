"""``detfmt remap``: merge, rename and drop classes; payloads copied as stored.

``mapping`` sends source class names to new names: several classes sent to one name merge
into it, a class sent to a new name is renamed, a class not named keeps its name. ``drop``
removes classes: their boxes go (``drop_images=True``: the images holding them go instead).
The output's classes are the target names in the order they first appear when the source's
classes are read in id order, or the class list asked for (``order``, or ``classes_from``
another dataset, e.g. the sharded root to append to); a class keeps its source id (e.g. the COCO
category id) when it stems from exactly one source class.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np

from detfmt import errors
from detfmt.format.schema import ClassInfo
from detfmt.workflows._copy import (
    Source,
    check_not_empty,
    copy_samples,
    label_blocks,
    opened,
    resolve_class,
)
from detfmt.workflows._splitroot import SplitsReport, for_each_split, located, split_index
from detfmt.workflows.lineage import derived_metadata, source_entry
from detfmt.writing.writer import WriteReport

__all__ = ["RemapReport", "parse_mapping", "plan_remap", "remap"]


@dataclasses.dataclass
class RemapReport:
    """What `remap` did: each source class's new name (None: dropped) and the counts."""

    path: Path
    mapping: dict[str, str | None]
    classes: list[str]
    source_samples: int
    samples: int
    source_boxes: int
    boxes: int
    write: WriteReport

    def lines(self) -> list[str]:
        lines = [f"{self.path}: {self.samples} of {self.source_samples} samples, {self.boxes} of "
                 f"{self.source_boxes} boxes; {len(self.classes)} classes"]
        for old, new in self.mapping.items():
            if new != old:
                lines.append(f"  {old} -> {new if new is not None else '(dropped)'}")
        return lines


def plan_remap(names: list[str], mapping: Mapping[str, str], drop: Iterable[str], where: str
               ) -> tuple[np.ndarray, list[str], dict[str, str | None]]:
    """(class map: source id -> new id or -1, the new class names, source name -> new name)."""
    if not isinstance(mapping, Mapping):
        raise errors.UsageError(f"mapping must map class names to new names, got "
                                f"{type(mapping).__name__}")
    if isinstance(drop, (str, bytes)):
        drop = [drop]
    index = {name: i for i, name in enumerate(names)}
    targets: dict[int, str | None] = {}
    for old, new in mapping.items():
        if not isinstance(new, str) or not new:
            raise errors.UsageError(f"class {old!r} must map to a non-empty name, got {new!r}")
        targets[resolve_class(old, index, where)] = new
    for old in drop:
        i = resolve_class(old, index, where)
        if i in targets:
            raise errors.UsageError(f"class {names[i]!r} is both mapped and dropped")
        targets[i] = None
    new_names: list[str] = []
    class_map = np.full(len(names), -1, np.int64)
    renamed: dict[str, str | None] = {}
    for i, name in enumerate(names):
        target = targets.get(i, name)
        renamed[name] = target
        if target is None:
            continue
        if target not in new_names:
            new_names.append(target)
        class_map[i] = new_names.index(target)
    if not new_names:
        raise errors.UsageError("every class is dropped: nothing would remain")
    return class_map, new_names, renamed


def remap(
    src: Source,
    dst: str | os.PathLike[str],
    mapping: Mapping[str, str] | None = None,
    *,
    drop: Iterable[str] = (),
    drop_images: bool = False,
    order: Sequence[str] | None = None,
    classes_from: Source | None = None,
    allow_empty: bool = False,
    overwrite: bool = False,
    progress: bool | None = None,
) -> RemapReport | SplitsReport[RemapReport]:
    """Write ``src`` with its classes merged, renamed or dropped into a new dataset at ``dst``
    (a split root: every split, into a split root at ``dst``).

    Args:
        src: a dataset path, URL or opened dataset (any kind).
        mapping: {source class name (or id): new name}; classes not named keep theirs.
        drop: classes (names or ids) whose boxes are removed.
        drop_images: remove the images holding a dropped class instead of only their boxes.
        order: the output's class list, in this order: every class that remains must be in it;
            names no box has are kept as classes without boxes.
        classes_from: a dataset (path, URL, opened) whose class list (names and source ids) the
            output takes, as ``order`` does: what ``detfmt append`` needs to add this dataset
            to that root.
        allow_empty: write even when no sample remains.

    Returns:
        a `RemapReport` with the mapping applied. Payloads and every other field are copied as
        stored (`detfmt.writing.writer.write_stored`).
    """
    drop = [drop] if isinstance(drop, (str, bytes)) else list(drop)
    names = split_index(src)
    if names is not None:  # every split, into a split root (one class list for all)
        return for_each_split(
            list(names), dst, overwrite, lambda name, out: remap(
                located(src, name), out, mapping, drop=drop, drop_images=drop_images,
                order=order, classes_from=classes_from, allow_empty=allow_empty,
                overwrite=overwrite, progress=progress),
            os.fspath(src), lambda r: (r.samples, r.boxes))  # type: ignore[arg-type]
    with opened(src) as ds:
        class_map, new_names, renamed = plan_remap(ds.class_names, dict(mapping or {}), drop,
                                                   ds.location)
        reference = _reference_classes(order, classes_from)
        indices = np.arange(len(ds), dtype=np.int64)
        if drop_images and (class_map < 0).any():
            keep = np.ones(len(ds), bool)
            for labels in label_blocks(ds, indices):
                safe = np.maximum(labels.classes, 0)
                dropped = labels.mask & (class_map[safe] < 0)
                keep[labels.indices[dropped.any(axis=1)]] = False
            indices = np.flatnonzero(keep).astype(np.int64)
        check_not_empty(len(indices), "the remap", allow_empty, "drop fewer classes")
        classes = _new_classes(ds.schema.classes, class_map, new_names)
        if reference is not None:
            class_map, classes = _reordered(class_map, classes, reference)
            new_names = [c.name for c in classes]
        args = {"map": {k: v for k, v in renamed.items() if v is not None and v != k},
                "drop": [k for k, v in renamed.items() if v is None],
                "drop_images": drop_images,
                "order": new_names if reference is not None else None}
        metadata = derived_metadata(ds.metadata, "remap", args, [source_entry(ds)],
                                    len(indices), _supercategories(ds.metadata, renamed))
        report = copy_samples(ds, indices, dst, classes=classes, metadata=metadata,
                              class_map=class_map, overwrite=overwrite, progress=progress)
        return RemapReport(path=report.path, mapping=renamed, classes=new_names,
                           source_samples=len(ds), samples=report.num_samples,
                           source_boxes=int(np.sum(ds.counts)), boxes=report.num_boxes,
                           write=report)


def _reference_classes(order: Sequence[str] | None, classes_from: Source | None
                       ) -> list[ClassInfo] | None:
    """The class list asked for: another dataset's (names and source ids), or names."""
    if order is not None and classes_from is not None:
        raise errors.UsageError("pass order or classes_from, not both")
    if classes_from is not None:
        with opened(classes_from) as other:
            return list(other.schema.classes)
    if order is None:
        return None
    if isinstance(order, (str, bytes)):
        raise errors.UsageError(f"order must be a list of class names, not the string "
                                f"{order!r}")
    names = [str(name) for name in order]
    if len(set(names)) != len(names) or not names:
        raise errors.UsageError(f"order must name distinct classes, got {names}")
    return [ClassInfo(name=name) for name in names]


def _reordered(class_map: np.ndarray, classes: list[ClassInfo], reference: list[ClassInfo]
               ) -> tuple[np.ndarray, list[ClassInfo]]:
    """Move the remapped classes onto ``reference``'s positions (names matched); a reference
    entry without its own source id takes the remapped class's."""
    position = {info.name: k for k, info in enumerate(reference)}
    missing = [info.name for info in classes if info.name not in position]
    if missing:
        raise errors.UsageError(f"classes {missing} are not in the class list asked for "
                                f"({[c.name for c in reference][:20]}): map or drop them")
    moved = np.array([position[info.name] for info in classes], np.int64)
    result = list(reference)
    for info in classes:
        k = position[info.name]
        if result[k].source_id is None and info.source_id is not None and not any(
                c.source_id == info.source_id for c in result):
            result[k] = ClassInfo(name=info.name, source_id=info.source_id)
    return np.where(class_map >= 0, moved[np.maximum(class_map, 0)], -1), result


def _new_classes(old: list[ClassInfo], class_map: np.ndarray, names: list[str]
                 ) -> list[ClassInfo]:
    classes = []
    for new_id, name in enumerate(names):
        origins = [old[i] for i in np.flatnonzero(class_map == new_id)]
        source_id = origins[0].source_id if len(origins) == 1 else None
        classes.append(ClassInfo(name=name, source_id=source_id))
    return classes


def _supercategories(metadata: Mapping[str, str], renamed: Mapping[str, str | None]
                     ) -> dict[str, str]:
    """COCO supercategories (``coco.supercategories``) follow their classes' new names."""
    from detfmt.convert.coco import SUPERCATEGORIES_KEY, read_supercategories

    old = read_supercategories(metadata)
    if not old:
        return {}
    new: dict[str, str] = {}
    for name, supercategory in old.items():
        target = renamed.get(name, name)
        if target is not None:
            new.setdefault(target, supercategory)
    return {SUPERCATEGORIES_KEY: json.dumps(new, ensure_ascii=False, sort_keys=True)}


def parse_mapping(texts: Iterable[str]) -> dict[str, str]:
    """``["a=b,c=b", "d=e"]`` (the CLI's ``--map``) as {"a": "b", "c": "b", "d": "e"}."""
    mapping: dict[str, str] = {}
    for text in texts:
        for item in text.split(","):
            if not item.strip():
                continue
            old, sep, new = item.partition("=")
            if not sep or not old.strip() or not new.strip():
                raise errors.UsageError(f"--map takes OLD=NEW pairs separated by commas, got "
                                        f"{item!r}")
            if old.strip() in mapping:
                raise errors.UsageError(f"--map names class {old.strip()!r} twice")
            mapping[old.strip()] = new.strip()
    return mapping
