"""Finding the splits of a source dataset: what ``detfmt convert FORMAT SRC OUT`` converts.

* **YOLO**: a data YAML (given, or found in SRC or one folder down) with ``path`` and
  ``train``/``val``/``test`` (each a folder, a list file of image paths, or a list of those);
  without one, ``images/<split>`` + ``labels/<split>`` folders; else one ``images/`` +
  ``labels/`` tree. Labels follow Ultralytics' rule (the last ``images`` folder of an image's
  path becomes ``labels``).
* **COCO**: a JSON file (one dataset); a folder in the standard layout
  (``annotations/instances_<split><year>.json`` beside ``<split><year>/`` or
  ``images/<split><year>/``); a Roboflow export (``<split>/_annotations.coco.json``); or
  ``split={"train": "a.json", ...}``.
* **VOC**: ``ImageSets/Main/{train,val,test}.txt`` (``trainval`` only when ``train`` and ``val``
  are absent), or every XML of ``Annotations/`` as one dataset.

Split names drop a trailing year (``train2017`` -> ``train``) and ``valid`` becomes ``val``, so
``detfmt.open(OUT, split="val")`` reads the same on every source. Every split of a dataset gets
the same class list (so ids agree). The files named inside a YAML list or an image-set list are
confined to the dataset root like every other name read from a source file.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from detfmt.convert._pipeline import Source
from detfmt.convert.errors import ConversionError
from detfmt.convert.inputs import MAX_CONFIG_BYTES, InputFolder, printable, read_source_text

__all__ = ["Discovery", "SplitSpec", "discover", "split_name"]

SPLIT_KEYS = ("train", "val", "test")
YAML_NAMES = ("data.yaml", "dataset.yaml", "data.yml", "dataset.yml")
#: ``split=`` argument: None (every split the source defines), names to select, or
#: {name: path} definitions (COCO annotation files, YOLO folders or lists, VOC id lists).
SplitSpec = str | Sequence[str] | Mapping[str, str | os.PathLike[str]] | None
_SPLIT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}\Z")


def split_name(raw: str) -> str:
    """The split name of a folder or annotation-file stem: ``train2017`` -> ``train``,
    ``valid`` -> ``val``; other names are kept."""
    name = re.sub(r"(?<=[A-Za-z])(19|20)\d\d\Z", "", raw)
    return "val" if name == "valid" else name


def _check_name(name: str) -> str:
    if not isinstance(name, str) or not _SPLIT_NAME.match(name) or name in (".", ".."):
        raise ConversionError(f"split name {name!r} must be letters, digits, '_', '-' or '.' "
                              "(it becomes a folder name)", rule="USAGE")
    return name


@dataclasses.dataclass
class Discovery:
    """What `discover` found: one `Source` per split (``split`` None: the source has no
    splits), whether the output uses the split layout (OUT/<split>/), and layout hints."""

    sources: list[Source]
    split_layout: bool
    hints: list[str] = dataclasses.field(default_factory=list)


def _normalise_spec(split: SplitSpec) -> tuple[list[str] | None, dict[str, str] | None]:
    if split is None:
        return None, None
    if isinstance(split, str):
        return [_check_name(split)], None
    if isinstance(split, Mapping):
        if not split:
            raise ConversionError("split= is an empty mapping", rule="USAGE")
        return None, {_check_name(k): os.fspath(v) for k, v in split.items()}
    names = [_check_name(s) for s in split]
    if not names or len(set(names)) != len(names):
        raise ConversionError(f"split= must name distinct splits, got {names}", rule="USAGE")
    return names, None


def _select(found: dict[str, Any], names: list[str] | None, where: str) -> dict[str, Any]:
    if names is None:
        return found
    missing = [n for n in names if n not in found]
    if missing:
        have = ", ".join(found) or "none"
        raise ConversionError(f"split {missing[0]!r} is not defined by {where} (splits: {have})",
                              rule="SPLIT_MISSING", path=where)
    return {n: found[n] for n in names}


def _layout(names: list[str] | None, definitions: dict | None, found_splits: bool) -> bool:
    """Several splits go to OUT/<split>; one split asked for by name goes to OUT itself."""
    if definitions is not None:
        return len(definitions) > 1
    if names is not None:
        return len(names) > 1
    return found_splits


# ------------------------------------------------------------------------------------- YOLO


def _find_yaml(root: Path) -> Path | None:
    for name in YAML_NAMES:
        if (root / name).is_file():
            return root / name
    candidates = sorted([*root.glob("*.yaml"), *root.glob("*.yml"), *root.glob("*/*.yaml"),
                         *root.glob("*/*.yml")])
    for candidate in candidates:
        try:
            text = read_source_text(candidate, rule="YAML_INVALID", limit=MAX_CONFIG_BYTES)
        except ConversionError:
            continue
        if re.search(r"^(names|train|val)\s*:", text, re.MULTILINE):
            return candidate
    return None


def _yaml_root(data: dict[str, Any], yaml_path: Path, hints: list[str]) -> Path:
    base = yaml_path.parent
    raw = data.get("path")
    if raw in (None, ""):
        return base
    if not isinstance(raw, str):
        raise ConversionError("path: must be text", rule="YAML_INVALID", path=yaml_path)
    root = Path(raw) if os.path.isabs(raw) else base / raw
    if root.is_dir():
        return root
    hints.append(f"path: {raw!r} of {yaml_path} is not a folder here; the YAML's own folder is "
                 "used as the dataset root")
    return base


def _entries(value: Any, key: str, yaml_path: Path) -> list[str]:
    if isinstance(value, str):
        return [value] if value.strip() else []
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return [v for v in value if v.strip()]
    raise ConversionError(f"{key}: must be a folder, a list file or a list of those",
                          rule="YAML_INVALID", path=yaml_path)


def _labels_folder(images: Path) -> Path | None:
    """The label folder of an image folder: its last ``images`` component becomes ``labels``;
    None when it has none (labels then lie beside the images)."""
    parts = list(images.parts)
    for i in range(len(parts) - 1, -1, -1):
        if parts[i] == "images":
            parts[i] = "labels"
            return Path(*parts)
    return None


def _yolo_entry_path(root: Path, entry: str) -> Path:
    """A ``train:``/``val:`` entry: relative to the dataset root (Ultralytics), or, failing
    that, Roboflow's ``../train/images`` relative to the root, or a path from the cwd."""
    path = Path(entry) if os.path.isabs(entry) else root / entry
    if not os.path.exists(path):
        for alternative in ([root / entry[3:]] if entry.startswith("../") else []) + [
                Path(entry)]:
            if os.path.exists(alternative):
                return alternative
    return path


def _yolo_list(list_file: Path, root: InputFolder) -> list:
    from detfmt.convert.yolo import YoloImage, label_for_image

    text = read_source_text(list_file, rule="LIST_INVALID", limit=MAX_CONFIG_BYTES)
    found = []
    for line in text.splitlines():
        entry = line.strip()
        if not entry or entry.startswith("#"):
            continue
        path = Path(entry) if os.path.isabs(entry) else list_file.parent / entry
        path = Path(os.path.normpath(path))
        file_name = printable(_relative_or_name(path, root.given))
        try:
            read_path = root.resolve(path, "IMAGE_MISSING")
        except ConversionError as error:
            found.append(YoloImage(path, None, file_name, None, error))
            continue
        image = YoloImage(path, None, file_name, read_path, None)
        label = label_for_image(path)
        if os.path.lexists(label):
            image.label = label
            try:
                image.label_read = root.resolve(label, "LABEL_MISSING")
            except ConversionError as error:
                image.label_error = error
        found.append(image)
    return found


def _relative_or_name(path: Path, base: Path) -> str:
    try:
        return Path(os.path.abspath(path)).relative_to(os.path.abspath(base)).as_posix()
    except ValueError:
        return path.as_posix()


def _yolo_split(entries: list[str], root: Path, where: Path, key: str, hints: list[str]
                ) -> tuple[list, list[Path]]:
    from detfmt.convert.yolo import list_tree

    images_all: list = []
    orphans_all: list[Path] = []
    root_folder = InputFolder(root, missing_rule="IMAGE_MISSING", what="dataset root")
    for entry in entries:
        path = _yolo_entry_path(root, entry)
        if os.path.isdir(path):
            images = InputFolder(path, missing_rule="IMAGE_MISSING", what=f"{key} image folder")
            labels_path = _labels_folder(path)
            labels = None
            if labels_path is not None and labels_path.is_dir():
                labels = InputFolder(labels_path, missing_rule="LABEL_MISSING",
                                     what=f"{key} label folder")
            elif labels_path is not None:
                hints.append(f"{key}: no label folder at {labels_path} (the last 'images' "
                             f"folder of {path} becomes 'labels')")
            found, orphans = list_tree(images, labels, beside=labels_path is None,
                                       file_name_base=root)
            images_all += found
            orphans_all += orphans
        elif os.path.isfile(path):
            images_all += _yolo_list(path, root_folder)
        else:
            raise ConversionError(f"{key}: {entry!r} is neither a folder nor a list file "
                                  f"(looked for {path}); convert the other splits with split=NAME",
                                  rule="SPLIT_MISSING", path=where)
    return images_all, orphans_all


def _discover_yolo(src: Path, split: SplitSpec, images: Path | None, labels: Path | None,
                   names: Any) -> Discovery:
    from detfmt.convert.names import load_data_yaml, names_from_yaml
    from detfmt.convert.yolo import list_tree, yolo_source

    selected, definitions = _normalise_spec(split)
    hints: list[str] = []
    yaml_path = src if src.is_file() else None
    if yaml_path is None and not src.is_dir():
        raise ConversionError("no such file or folder", rule="SOURCE_MISSING", path=src)
    if yaml_path is None and images is None and labels is None:
        yaml_path = _find_yaml(src)
    data: dict[str, Any] = load_data_yaml(yaml_path) if yaml_path is not None else {}
    root = _yaml_root(data, yaml_path, hints) if yaml_path is not None else src
    files = [yaml_path] if yaml_path is not None else []
    if names is None and "names" in data:
        names = names_from_yaml(data, os.fspath(yaml_path))
    if names is None:
        candidates = [p for p in (labels, root / "labels") if p is not None]
        names_file = next((p / "classes.txt" for p in candidates
                           if (p / "classes.txt").is_file()), None)
        if names_file is None:
            raise ConversionError("no class names found: pass names (a data YAML with names:, "
                                  "or a names file)", rule="NAMES_MISSING", path=src)
        names, files = names_file, [*files, names_file]
    elif isinstance(names, (str, os.PathLike)):
        files.append(Path(names))

    def source(entries, orphans, split_value, where):
        return yolo_source(entries, orphans, names, source=where, root=root, files=files,
                           split=split_value)

    if definitions is not None:
        plans = {name: [path] for name, path in definitions.items()}
        where = os.fspath(yaml_path or src)
    elif images is not None or labels is not None:
        images_dir = images or root / "images"
        label_folder = InputFolder(labels or root / "labels", missing_rule="LABEL_MISSING",
                                   what="label folder")
        image_folder = InputFolder(images_dir, missing_rule="IMAGE_MISSING", what="image folder")
        entries, orphans = list_tree(image_folder, label_folder)
        if selected is not None:
            raise ConversionError("a split name selects a split of a data YAML or of "
                                  "images/<split> folders; with explicit image and label "
                                  "folders define the splits as split={name: path}",
                                  rule="USAGE")
        return Discovery([source(entries, orphans, None, os.fspath(images_dir))], False, hints)
    elif any(data.get(key) for key in SPLIT_KEYS):
        plans = {key: _entries(data[key], key, yaml_path) for key in SPLIT_KEYS if data.get(key)}
        plans = {split_name(k): v for k, v in plans.items() if v}
        where = os.fspath(yaml_path)
    else:
        folders = _split_folders(root / "images")
        if folders and (root / "labels").is_dir():
            plans = {name: [os.fspath(path.relative_to(root))] for name, path in folders.items()}
            where = os.fspath(root)
        else:
            image_folder = InputFolder(root / "images", missing_rule="IMAGE_MISSING",
                                       what="image folder")
            label_folder = InputFolder(root / "labels", missing_rule="LABEL_MISSING",
                                       what="label folder")
            if selected is not None:
                raise ConversionError(f"{root} has no splits (no data YAML with train/val, no "
                                      "images/<split> folders)", rule="SPLIT_MISSING", path=root)
            entries, orphans = list_tree(image_folder, label_folder)
            return Discovery([source(entries, orphans, None, os.fspath(root))], False, hints)
    plans = _select(plans, selected, where)
    sources = []
    for name, entries in plans.items():
        found, orphans = _yolo_split(entries, root, Path(where), name, hints)
        sources.append(source(found, orphans, name, where))
    return Discovery(sources, _layout(selected, definitions, True), hints)


def _split_folders(images: Path) -> dict[str, Path]:
    """``images/train``, ``images/val2017``, ... as {split name: folder}."""
    if not images.is_dir():
        return {}
    found: dict[str, Path] = {}
    for child in sorted(images.iterdir()):
        name = split_name(child.name)
        if child.is_dir() and name in ("train", "val", "test") and name not in found:
            found[name] = child
    return found


# ------------------------------------------------------------------------------------- COCO


def _coco_images_for(json_path: Path, root: Path, images: Path | None) -> Path:
    if images is not None:
        return images
    stem = json_path.stem
    tail = stem.split("instances_", 1)[1] if "instances_" in stem else stem
    for candidate in (root / tail, root / "images" / tail, json_path.parent.parent / tail):
        if candidate.is_dir():
            return candidate
    return json_path.parent


def _coco_definition(path: str, src: Path) -> Path:
    given = Path(path)
    if given.is_file() or given.is_absolute() or not src.is_dir():
        return given
    for base in (src, src / "annotations"):
        if (base / given).is_file():
            return base / given
    return given


def _discover_coco(src: Path, split: SplitSpec, images: Path | None) -> Discovery:
    from detfmt.convert.coco import CocoIndex, coco_source, read_coco

    selected, definitions = _normalise_spec(split)
    hints: list[str] = []
    root = src if src.is_dir() else src.parent
    if definitions is not None:
        plans = {name: _coco_definition(path, src) for name, path in definitions.items()}
        found_splits = True
    elif src.is_file():
        if selected is not None:
            raise ConversionError(f"{src} is one annotation file; define splits as "
                                  "split={name: path}", rule="SPLIT_MISSING", path=src)
        plans = {"": src}
        found_splits = False
    elif src.is_dir():
        plans = _coco_layout(src)
        found_splits = bool(plans) and "" not in plans
        if not plans:
            raise ConversionError(
                "no COCO annotations found: expected annotations/instances_<split>.json (the "
                "standard layout), <split>/_annotations.coco.json (Roboflow) or a JSON file in "
                "the folder", rule="SOURCE_MISSING", path=src)
        if found_splits:
            plans = _select(plans, selected, os.fspath(src))
        elif selected is not None:
            raise ConversionError(f"{src} has one annotation file, no splits",
                                  rule="SPLIT_MISSING", path=src)
    else:
        raise ConversionError("no such file or folder", rule="SOURCE_MISSING", path=src)
    parsed = {name: read_coco(path) for name, path in plans.items()}
    categories = _union_categories(parsed, plans)
    sources = []
    for name, path in plans.items():
        index = CocoIndex(parsed[name], path, categories)
        folder = _coco_images_for(path, root, images)
        sources.append(coco_source(index, folder, root=root, split=name or None))
    return Discovery(sources, _layout(selected, definitions, found_splits), hints)


def _coco_layout(src: Path) -> dict[str, Path]:
    standard = sorted((src / "annotations").glob("instances_*.json"))
    if standard:
        return _named({p.stem.split("instances_", 1)[1]: p for p in standard}, src)
    roboflow = sorted(src.glob("*/_annotations.coco.json"))
    if roboflow:
        return _named({p.parent.name: p for p in roboflow}, src)
    singles = sorted(src.glob("*.json"))
    if len(singles) == 1:
        return {"": singles[0]}
    return {}


def _named(raw: dict[str, Path], where: Path) -> dict[str, Path]:
    named: dict[str, Path] = {}
    for raw_name, path in raw.items():
        name = split_name(raw_name)
        if name in named:  # train2014 and train2017 side by side: keep the full names
            return {_check_name(k): v for k, v in raw.items()}
        named[name] = path
    return {_check_name(k): v for k, v in named.items()}


def _union_categories(parsed: dict[str, Any], paths: dict[str, Path]) -> list[tuple[str, int]]:
    by_id: dict[int, str] = {}
    for name, coco in parsed.items():
        for category in coco.categories:
            known = by_id.setdefault(category.id, category.name)
            if known != category.name:
                raise ConversionError(
                    f"category id {category.id} is {known!r} in one split and "
                    f"{category.name!r} in {name!r}", rule="SPLIT_CLASSES_DIFFER",
                    path=paths[name])
    return [(by_id[cid], cid) for cid in sorted(by_id)]


# -------------------------------------------------------------------------------------- VOC


def _first_folder(root: Path, names: tuple[str, ...], what: str, rule: str) -> Path:
    for name in names:
        if (root / name).is_dir():
            return root / name
    below = sorted(p.parent for name in names for p in root.glob(f"*/{name}") if p.is_dir())
    hint = f" (the dataset may be {below[0]}, e.g. VOCdevkit/VOC2007)" if below else ""
    raise ConversionError(f"no {what} folder ({' or '.join(names)}) in {root}{hint}; pass it "
                          "explicitly", rule=rule, path=root)


def _voc_ids(list_file: Path) -> list[str]:
    text = read_source_text(list_file, rule="LIST_INVALID", limit=MAX_CONFIG_BYTES)
    return [line.split()[0] for line in text.splitlines() if line.strip()]


def _voc_sets(src: Path) -> dict[str, Path]:
    folder = src / "ImageSets" / "Main"
    present = {name: folder / f"{name}.txt" for name in ("train", "val", "test", "trainval")
               if (folder / f"{name}.txt").is_file()}
    if "train" in present and "val" in present:
        present.pop("trainval", None)  # the union of train and val: never a split of its own
    return present


def _discover_voc(src: Path, split: SplitSpec, annotations: Path | None, images: Path | None,
                  classes: Sequence[str] | None) -> Discovery:
    from detfmt.convert.voc import collect_classes, list_xmls, voc_source

    selected, definitions = _normalise_spec(split)
    if not src.is_dir():
        raise ConversionError("not a folder", rule="SOURCE_MISSING", path=src)
    annotations = annotations or _first_folder(src, ("Annotations", "annotations"),
                                               "annotations", "LABEL_MISSING")
    images = images or _first_folder(src, ("JPEGImages", "images"), "images", "IMAGE_MISSING")
    folder = InputFolder(annotations, missing_rule="LABEL_MISSING", what="annotation folder")
    if definitions is not None:
        sets = {name: Path(path) for name, path in definitions.items()}
        found_splits = True
    else:
        sets = _voc_sets(src)
        found_splits = bool(sets)
        if found_splits:
            sets = _select(sets, selected, os.fspath(src / "ImageSets" / "Main"))
        elif selected is not None:
            raise ConversionError("no image-set lists (ImageSets/Main/<split>.txt)",
                                  rule="SPLIT_MISSING", path=src)
    if sets:
        xmls = {name: list_xmls(folder, _voc_ids(path)) for name, path in sets.items()}
    else:
        xmls = {"": list_xmls(folder)}
    if classes is None:
        names: set[str] = set()
        for listed in xmls.values():
            names |= collect_classes(listed)
        classes = sorted(names)
    sources = [voc_source(listed, images, list(classes), source=os.fspath(src), root=src,
                          split=name or None) for name, listed in xmls.items()]
    return Discovery(sources, _layout(selected, definitions, found_splits), [])


def discover(source_format: str, src: str | os.PathLike[str], *, split: SplitSpec = None,
             images: str | os.PathLike[str] | None = None,
             labels: str | os.PathLike[str] | None = None, names: Any = None,
             annotations: str | os.PathLike[str] | None = None,
             classes: Sequence[str] | None = None) -> Discovery:
    """Find the splits of ``src`` (rules in the module docstring)."""
    src = Path(src)
    as_path = (lambda p: Path(p) if p is not None else None)  # noqa: E731
    if source_format == "yolo":
        return _discover_yolo(src, split, as_path(images), as_path(labels), names)
    if source_format == "coco":
        return _discover_coco(src, split, as_path(images))
    if source_format == "voc":
        return _discover_voc(src, split, as_path(annotations), as_path(images), classes)
    raise ConversionError(f"unknown source format {source_format!r} (coco, yolo, voc)",
                          rule="USAGE")
