"""Finding the splits of a source dataset: what ``detfmt convert FORMAT SRC OUT`` converts.

* **YOLO**: a data YAML (given, or found in SRC or one folder down; searched whatever else is
  given) with ``path`` and ``train``/``val``/``test`` (each a folder, a list file of image
  paths, or a list of those); without one, ``images/<split>`` (or ``<split>/images``) folders;
  else one image tree. Labels follow Ultralytics' rule (the last ``images`` folder of an
  image's path becomes ``labels``), else lie beside the images; ``labels=`` replaces the label
  folder of every split.
* **COCO**: a JSON file (one dataset); a folder with ``annotations/instances_*.json``, Roboflow's
  ``<split>/_annotations.coco.json``, or any instances JSON (``annotations/custom_train.json``):
  the split is the split word of the file's stem or folder. Each JSON's images are found by
  content (`detfmt.convert.locate`); ``split={"train": (json, images)}`` names them.
* **VOC**: ``ImageSets/Main/{train,val,test}.txt`` (``trainval`` only when ``train`` and ``val``
  are absent), or every XML as one dataset; the XML folder is ``Annotations/``, else the folder
  with the most XML files, the image folder ``JPEGImages/``/``images/``, else found by content.

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
from detfmt.convert.inputs import (
    MAX_CONFIG_BYTES,
    InputFolder,
    printable,
    read_source_bytes,
    read_source_text,
)
from detfmt.convert.locate import MAX_DEPTH, SAMPLE, candidate_folders, folder_holding
from detfmt.format.splits import SPLIT_ALIASES, SPLIT_NAME, SPLITS_FILE

__all__ = ["Discovery", "SplitSpec", "discover", "split_name"]

SPLIT_KEYS = ("train", "val", "test")
YAML_NAMES = ("data.yaml", "dataset.yaml", "data.yml", "dataset.yml")
#: ``split=`` argument: None (every split the source defines), names to select, or
#: {name: path} definitions (COCO annotation files, YOLO folders or lists, VOC id lists).
SplitSpec = str | Sequence[str] | Mapping[str, str | os.PathLike[str]] | None


def split_name(raw: str) -> str:
    """The split name of a folder or annotation-file stem: ``train2017`` -> ``train``,
    ``valid`` -> ``val``; other names are kept."""
    name = re.sub(r"(?<=[A-Za-z])(19|20)\d\d\Z", "", raw)
    return SPLIT_ALIASES.get(name, name)


def _check_name(name: str) -> str:
    if not isinstance(name, str) or not SPLIT_NAME.match(name) or name in (".", ".."):
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


def _normalise_spec(split: SplitSpec) -> tuple[list[str] | None,
                                               dict[str, tuple[str, str | None]] | None]:
    """(names selected, {name: (path, second path or None)} defined) of a ``split=``."""
    if split is None:
        return None, None
    if isinstance(split, str):
        return [_check_name(split)], None
    if isinstance(split, Mapping):
        if not split:
            raise ConversionError("split= is an empty mapping", rule="USAGE")
        return None, {_check_name(k): _definition(k, v) for k, v in split.items()}
    names = [_check_name(s) for s in split]
    if not names or len(set(names)) != len(names):
        raise ConversionError(f"split= must name distinct splits, got {names}", rule="USAGE")
    return names, None


def _definition(name: str, value: Any) -> tuple[str, str | None]:
    """A split definition: a path, or (path, folder): COCO (json, images), YOLO (images,
    labels)."""
    if isinstance(value, (tuple, list)):
        if len(value) != 2 or not all(isinstance(v, (str, os.PathLike)) for v in value):
            raise ConversionError(f"split {name!r}: a definition is a path or a pair of paths, "
                                  f"got {value!r}", rule="USAGE")
        return os.fspath(value[0]), os.fspath(value[1])
    return os.fspath(value), None


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


def _yolo_list(list_file: Path, root: InputFolder, labels: InputFolder | None = None) -> list:
    """The images of a list file, each with its label: Ultralytics' ``images`` -> ``labels``
    rule, or under ``labels`` (a ``--labels`` folder: ``_given_labels`` of the image's
    folder)."""
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
        if labels is not None:
            label = _given_labels(path.parent, labels.given) / f"{path.stem}.txt"
        if os.path.lexists(label):
            image.label = label
            try:
                image.label_read = (labels or root).resolve(label, "LABEL_MISSING")
            except ConversionError as error:
                image.label_error = error
        found.append(image)
    return found


def _relative_or_name(path: Path, base: Path) -> str:
    try:
        return Path(os.path.abspath(path)).relative_to(os.path.abspath(base)).as_posix()
    except ValueError:
        return path.as_posix()


def _given_labels(images: Path, labels: Path) -> Path:
    """The label folder of the image folder ``images`` under a ``--labels`` folder: the part of
    ``images`` after its last ``images`` component (``images/train`` -> ``LABELS/train``), or
    its own name, when that folder exists under ``labels``; else ``labels`` itself."""
    parts = images.parts
    if "images" in parts:
        tail = parts[len(parts) - 1 - parts[::-1].index("images") + 1:]
        if tail and (labels.joinpath(*tail)).is_dir():
            return labels.joinpath(*tail)
    if (labels / images.name).is_dir():
        return labels / images.name
    return labels


def _yolo_tree(path: Path, key: str, labels: Path | None, root: Path, hints: list[str],
               symlinks: str) -> tuple[list, list[Path]]:
    """The images of one image folder with their labels: from ``labels`` (a label folder
    given), else Ultralytics' ``images`` -> ``labels`` folder, else beside the images."""
    from detfmt.convert.yolo import list_tree

    where = f"{key} " if key else ""
    images = InputFolder(path, missing_rule="IMAGE_MISSING", what=f"{where}image folder",
                         symlinks=symlinks)
    labels_path = labels if labels is not None else _labels_folder(path)
    folder = None
    if labels_path is not None and labels_path.is_dir():
        folder = InputFolder(labels_path, missing_rule="LABEL_MISSING",
                             what=f"{where}label folder", symlinks=symlinks)
    elif labels is not None:
        raise ConversionError("label folder not found", rule="LABEL_MISSING", path=labels)
    elif labels_path is not None:
        hints.append(f"{where}no label folder at {labels_path} (the last 'images' folder of "
                     f"{path} becomes 'labels'); labels were looked for beside the images")
    return list_tree(images, folder, beside=folder is None, file_name_base=root)


def _yolo_split(entries: list[str], root: Path, where: Path, key: str, hints: list[str],
                labels: Path | None, symlinks: str, exact: bool = False
                ) -> tuple[list, list[Path]]:
    """The images of one split; ``labels``: a ``--labels`` folder (its sub-folder for each
    image folder, see `_given_labels`), or with ``exact`` the split's own label folder."""
    images_all: list = []
    orphans_all: list[Path] = []
    root_folder = InputFolder(root, missing_rule="IMAGE_MISSING", what="dataset root",
                              symlinks=symlinks)
    for entry in entries:
        path = _yolo_entry_path(root, entry)
        if os.path.isdir(path):
            own = labels if exact or labels is None else _given_labels(path, labels)
            found, orphans = _yolo_tree(path, key, own, root, hints, symlinks)
            images_all += found
            orphans_all += orphans
        elif os.path.isfile(path):
            folder = None
            if labels is not None:
                folder = InputFolder(labels, missing_rule="LABEL_MISSING",
                                     what=f"{key} label folder", symlinks=symlinks)
            images_all += _yolo_list(path, root_folder, folder)
        else:
            raise ConversionError(f"{key}: {entry!r} is neither a folder nor a list file "
                                  f"(looked for {path}); convert the other splits with split=NAME",
                                  rule="SPLIT_MISSING", path=where)
    return images_all, orphans_all


def _yolo_names(names: Any, data: dict[str, Any], yaml_path: Path | None, src: Path,
                folders: list[Path | None]) -> tuple[Any, list[Path]]:
    """The class names (``names`` given, the YAML's ``names:``, else a ``classes.txt`` in the
    label folder, the dataset root or the image folder, as LabelImg writes it) and the files
    they came from."""
    from detfmt.convert.names import names_from_yaml

    files = [yaml_path] if yaml_path is not None else []
    if names is None and "names" in data:
        names = names_from_yaml(data, os.fspath(yaml_path))
    if names is None:
        names_file = next((p / "classes.txt" for p in folders
                           if p is not None and (p / "classes.txt").is_file()), None)
        if names_file is None:
            raise ConversionError("no class names found: pass names (a data YAML with names:, "
                                  "or a names file)", rule="NAMES_MISSING", path=src)
        return names_file, [*files, names_file]
    if isinstance(names, (str, os.PathLike)):
        files.append(Path(names))
    return names, files


def _discover_yolo(src: Path, split: SplitSpec, images: Path | None, labels: Path | None,
                   names: Any, symlinks: str = "follow") -> Discovery:
    """YOLO splits: ``split=`` definitions; else one image tree when ``images`` is given; else
    the data YAML's splits; else ``images/<split>`` (or ``<split>/[images]``) folders; else one
    tree. The data YAML is searched whatever is given (its names and root are used), and
    ``labels`` replaces the label folder of every split."""
    from detfmt.convert.names import load_data_yaml
    from detfmt.convert.yolo import yolo_source

    selected, definitions = _normalise_spec(split)
    hints: list[str] = []
    yaml_path = src if src.is_file() else None
    if yaml_path is None and not src.is_dir():
        raise ConversionError("no such file or folder", rule="SOURCE_MISSING", path=src)
    if yaml_path is None:
        yaml_path = _find_yaml(src)
    data: dict[str, Any] = load_data_yaml(yaml_path) if yaml_path is not None else {}
    root = _yaml_root(data, yaml_path, hints) if yaml_path is not None else src
    names, files = _yolo_names(names, data, yaml_path, src,
                               [labels, root / "labels", root, images, root / "images"])

    def source(entries, orphans, split_value, where):
        return yolo_source(entries, orphans, names, source=where, root=root, files=files,
                           split=split_value)

    own_labels: dict[str, Path | None] = {}
    if definitions is not None:
        plans = {name: [path] for name, (path, _) in definitions.items()}
        own_labels = {name: Path(extra) if extra else None
                      for name, (_, extra) in definitions.items()}
        where = os.fspath(yaml_path or src)
    elif images is not None:
        if selected is not None:
            raise ConversionError("a split name selects a split of a data YAML or of "
                                  "images/<split> folders; with an explicit image folder define "
                                  "the splits as split={name: path}", rule="USAGE")
        if labels is None and _labels_folder(images) is None and (root / "labels").is_dir():
            labels = root / "labels"
        entries, orphans = _yolo_tree(images, "", labels, images, hints, symlinks)
        return Discovery([source(entries, orphans, None, os.fspath(images))], False, hints)
    elif any(data.get(key) for key in SPLIT_KEYS):
        plans = {key: _entries(data[key], key, yaml_path) for key in SPLIT_KEYS if data.get(key)}
        plans = {split_name(k): v for k, v in plans.items() if v}
        where = os.fspath(yaml_path)
    else:
        folders = (_split_folders(root / "images") if (root / "images").is_dir()
                   else _split_folders(root, inner="images"))
        if folders:
            plans = {name: [os.fspath(path.relative_to(root))] for name, path in folders.items()}
            where = os.fspath(root)
        else:
            if selected is not None:
                raise ConversionError(f"{root} has no splits (no data YAML with train/val, no "
                                      "images/<split> folders)", rule="SPLIT_MISSING", path=root)
            tree = root / "images" if (root / "images").is_dir() else root
            if labels is None and tree == root and (root / "labels").is_dir():
                labels = root / "labels"
            entries, orphans = _yolo_tree(tree, "", labels, root, hints, symlinks)
            return Discovery([source(entries, orphans, None, os.fspath(root))], False, hints)
    plans = _select(plans, selected, where)
    sources = []
    for name, entries in plans.items():
        exact = own_labels.get(name) is not None
        found, orphans = _yolo_split(entries, root, Path(where), name, hints,
                                     own_labels.get(name) or labels, symlinks, exact)
        sources.append(source(found, orphans, name, where))
    return Discovery(sources, _layout(selected, definitions, True), hints)


def _split_folders(folder: Path, inner: str | None = None) -> dict[str, Path]:
    """``images/train``, ``images/val2017``, ... as {split name: folder}; with ``inner``,
    ``train/images`` is taken for ``train`` when present (Roboflow's folders)."""
    if not folder.is_dir():
        return {}
    found: dict[str, Path] = {}
    for child in sorted(folder.iterdir()):
        name = split_name(child.name)
        if child.is_dir() and name in ("train", "val", "test") and name not in found:
            found[name] = child / inner if inner and (child / inner).is_dir() else child
    return found


# ------------------------------------------------------------------------------------- COCO

#: Words of a file or folder name that say which split it holds.
SPLIT_TOKENS = {"train": "train", "training": "train", "val": "val", "valid": "val",
                "validation": "val", "test": "test", "testing": "test"}
_ROBOFLOW_JSON = "_annotations.coco.json"


def split_token(text: str) -> str | None:
    """The split a name says it holds (``custom_train`` -> ``train``, ``instances_val2017``
    -> ``val``, ``valid`` -> ``val``), or None when it names none or several."""
    words = re.split(r"[^a-z]+", text.lower())
    kinds = {SPLIT_TOKENS[word] for word in words if word in SPLIT_TOKENS}
    return kinds.pop() if len(kinds) == 1 else None


def _coco_definition(path: str, src: Path) -> Path:
    given = Path(path)
    if given.is_file() or given.is_absolute() or not src.is_dir():
        return given
    for base in (src, src / "annotations"):
        if (base / given).is_file():
            return base / given
    return given


def _looks_coco(path: Path) -> bool:
    """Whether a JSON file found in a folder is an instances file (has ``images``); files that
    are not (a splits index, a config) are passed over, broken instances files are not."""
    import msgspec

    try:
        data = read_source_bytes(path, rule="JSON_INVALID")
        keys = msgspec.json.decode(data, type=dict[str, msgspec.Raw])
    except (ConversionError, msgspec.DecodeError, msgspec.ValidationError):
        return path.name == _ROBOFLOW_JSON or "instances" in path.name
    return "images" in keys


def _json_split(path: Path, src: Path) -> str | None:
    """The split of an annotation file: a split word of its stem, else of its folder (not the
    source itself nor ``annotations/``)."""
    stem = path.name[:-len(".json")] if path.name.endswith(".json") else path.stem
    found = split_token(stem) if path.name != _ROBOFLOW_JSON else None
    if found is None and path.parent != src and path.parent.name != "annotations":
        found = split_token(path.parent.name)
    return found


def _coco_jsons(src: Path) -> list[Path]:
    """The instances files of a COCO folder: the standard ``instances_*.json`` when present
    (COCO's own folder also holds captions and keypoints files), else Roboflow's
    ``_annotations.coco.json`` files, else every COCO-shaped JSON in the folder,
    ``annotations/`` and one folder down."""
    standard = sorted([*(src / "annotations").glob("instances_*.json"),
                       *src.glob("instances_*.json")])
    if standard:
        return standard
    roboflow = sorted([*src.glob(_ROBOFLOW_JSON), *src.glob(f"*/{_ROBOFLOW_JSON}")])
    if roboflow:
        return roboflow
    found = sorted({*src.glob("*.json"), *src.glob("*/*.json")})
    return [path for path in found if path.name != SPLITS_FILE and _looks_coco(path)]


def _coco_layout(src: Path) -> dict[str, Path]:
    """{split: instances file} of a COCO folder ({"": file} for one file without a split)."""
    files = _coco_jsons(src)
    if len(files) == 1 and _json_split(files[0], src) is None:
        return {"": files[0]}
    named: dict[str, Path] = {}
    raw: dict[str, Path] = {}
    for path in files:
        stem = path.name[:-len(".json")]
        tail = stem.split("instances_", 1)[1] if "instances_" in stem else stem
        if path.name == _ROBOFLOW_JSON or tail == "annotations":
            tail = path.parent.name
        tail = re.sub(r"[^A-Za-z0-9_.-]+", "_", tail).strip("_.-") or "split"
        raw[tail] = path
        named.setdefault(_json_split(path, src) or split_name(tail), path)
    if len(named) == len(files):
        return {_check_name(k): v for k, v in named.items()}
    if len(raw) == len(files):  # train2014 and train2017 side by side: keep the full names
        return {_check_name(k): v for k, v in raw.items()}
    listed = ", ".join(os.fspath(p) for p in files)
    raise ConversionError(f"annotation files that name the same split: {listed}; define the "
                          "splits with split={name: path}", rule="SOURCE_AMBIGUOUS", path=src)


def _file_names(coco: Any) -> list[str]:
    return [image.file_name for image in coco.images]


def _coco_images_for(json_path: Path, root: Path, split: str, coco: Any,
                     candidates: list[Path]) -> Path:
    """The folder holding the images of an instances file: found by content (the folder under
    the source that holds its ``file_name``s); else the old guesses by name, else the JSON's
    own folder (where the image-missing count then says what is wrong)."""
    def named_after_split(folder: Path) -> bool:
        return any(split_token(part) == split or split_name(part) == split
                   for part in folder.parts[len(root.parts):])

    found = folder_holding(
        _file_names(coco), candidates, prefer=named_after_split if split else None,
        what=f"the images of {json_path}", where=json_path,
        remedy="name the folder with split={name: (json, images folder)}")
    if found is not None:
        return found
    stem = json_path.stem
    tail = stem.split("instances_", 1)[1] if "instances_" in stem else stem
    for candidate in (root / tail, root / "images" / tail, json_path.parent.parent / tail):
        if candidate.is_dir():
            return candidate
    return json_path.parent


def _discover_coco(src: Path, split: SplitSpec, images: Path | None,
                   symlinks: str = "follow") -> Discovery:
    from detfmt.convert.coco import CocoIndex, coco_source, read_coco

    selected, definitions = _normalise_spec(split)
    hints: list[str] = []
    root = src if src.is_dir() else src.parent
    if not src.is_dir() and root.name == "annotations":  # annotations/x.json beside train/
        root = root.parent
    folders: dict[str, Path | None] = {}
    if definitions is not None:
        plans = {name: _coco_definition(path, src) for name, (path, _) in definitions.items()}
        folders = {name: Path(extra) if extra else None
                   for name, (_, extra) in definitions.items()}
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
                "no COCO annotations found: expected a JSON file with 'images' (e.g. "
                "annotations/instances_<split>.json, annotations/<name>_<split>.json or "
                "Roboflow's <split>/_annotations.coco.json); pass the JSON file as SRC or define"
                " the splits with split={name: (json, images folder)}", rule="SOURCE_MISSING",
                path=src)
        if found_splits:
            plans = _select(plans, selected, os.fspath(src))
        elif selected is not None:
            raise ConversionError(f"{src} has one annotation file, no splits",
                                  rule="SPLIT_MISSING", path=src)
    else:
        raise ConversionError("no such file or folder", rule="SOURCE_MISSING", path=src)
    parsed = {name: read_coco(path) for name, path in plans.items()}
    categories = _union_categories(parsed, plans)
    candidates = candidate_folders(root) if images is None else []
    sources = []
    for name, path in plans.items():
        index = CocoIndex(parsed[name], path, categories)
        folder = folders.get(name) or images or _coco_images_for(
            path, root, name, parsed[name], candidates)
        sources.append(coco_source(index, folder, root=root, split=name or None,
                                   symlinks=symlinks))
    return Discovery(sources, _layout(selected, definitions, found_splits), hints)


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


def _first_folder(root: Path, names: tuple[str, ...]) -> Path | None:
    return next((root / name for name in names if (root / name).is_dir()), None)


def _count_xml(folder: Path) -> int:
    try:
        with os.scandir(folder) as entries:
            return sum(1 for e in entries if e.name.lower().endswith(".xml") and e.is_file())
    except OSError:
        return 0


def _voc_annotations(src: Path, candidates: list[Path]) -> Path:
    """The folder holding the XML files: ``Annotations``/``annotations`` when present, else the
    folder under SRC with the most ``*.xml`` files (``annots/``, ``xml/``, ``labels/``...)."""
    named = _first_folder(src, ("Annotations", "annotations"))
    if named is not None:
        return named
    counts = [(folder, _count_xml(folder)) for folder in candidates]
    best = max((count for _, count in counts), default=0)
    if best == 0:
        below = sorted(p.parent for p in src.glob("*/*/Annotations") if p.is_dir())
        hint = f" (the dataset may be {below[0]}, e.g. VOCdevkit/VOC2007)" if below else ""
        raise ConversionError(f"no folder with VOC XML files in {src} (searched {MAX_DEPTH} "
                              f"levels down){hint}; pass annotations=DIR", rule="LABEL_MISSING",
                              path=src)
    tied = [folder for folder, count in counts if count == best]
    if len({os.path.realpath(folder) for folder in tied}) > 1:
        raise ConversionError(f"{len(tied)} folders hold {best} XML files each "
                              f"({', '.join(map(os.fspath, tied[:8]))}); pass annotations=DIR",
                              rule="SOURCE_AMBIGUOUS", path=src)
    return tied[0]


def _voc_root(src: Path, candidates: list[Path]) -> Path:
    """SRC itself, or the one VOC root below it (``VOCdevkit/`` given for
    ``VOCdevkit/VOC2012/``: the folder holding ``Annotations/``), so its image sets still
    become splits; two such roots (VOC2007 and VOC2012) are ``SOURCE_AMBIGUOUS``."""
    if _first_folder(src, ("Annotations", "annotations")) is not None:
        return src
    roots = [folder.parent for folder in candidates
             if folder.name in ("Annotations", "annotations") and folder.parent != src]
    if len(roots) > 1:
        raise ConversionError(f"{len(roots)} VOC datasets below {src} "
                              f"({', '.join(map(os.fspath, roots[:8]))}); convert one of them",
                              rule="SOURCE_AMBIGUOUS", path=src)
    return roots[0] if roots else src


def _voc_images(src: Path, xmls: list, candidates: list[Path]) -> Path:
    """The folder holding the images: ``JPEGImages``/``images`` when present, else the folder
    under SRC holding the files the XMLs name (``<filename>``, else the XML's stem + .jpg)."""
    from detfmt.convert.voc import image_names

    named = _first_folder(src, ("JPEGImages", "images"))
    if named is not None:
        return named
    found = folder_holding(image_names(_sample_xmls(xmls)), candidates,
                           what=f"the images of {src}", where=src, remedy="pass images=DIR")
    if found is None:
        raise ConversionError(f"no folder under {src} holds the images its XML files name "
                              "(<filename>); pass images=DIR", rule="IMAGE_MISSING", path=src)
    return found


def _sample_xmls(xmls: list) -> list[Path]:
    paths = [resolved for _, resolved in xmls if isinstance(resolved, Path)]
    step = max(1, len(paths) // SAMPLE)
    return paths[::step][:SAMPLE]


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
                  classes: Sequence[str] | None, symlinks: str = "follow") -> Discovery:
    from detfmt.convert.voc import collect_classes, list_xmls, voc_source

    selected, definitions = _normalise_spec(split)
    if not src.is_dir():
        raise ConversionError("not a folder", rule="SOURCE_MISSING", path=src)
    candidates = candidate_folders(src) if annotations is None or images is None else []
    if annotations is None:
        src = _voc_root(src, candidates)
        candidates = [c for c in candidates if c == src or src in c.parents]
    annotations = annotations or _voc_annotations(src, candidates)
    folder = InputFolder(annotations, missing_rule="LABEL_MISSING", what="annotation folder",
                         symlinks=symlinks)
    if definitions is not None:
        if any(extra for _, extra in definitions.values()):
            raise ConversionError("a VOC split is defined by an image-set list (NAME=LIST); "
                                  "give the image folder with images=DIR", rule="USAGE")
        sets = {name: Path(path) for name, (path, _) in definitions.items()}
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
    images = images or _voc_images(src, [x for listed in xmls.values() for x in listed],
                                   candidates)
    if classes is None:
        names: set[str] = set()
        for listed in xmls.values():
            names |= collect_classes(listed)
        classes = sorted(names)
    sources = [voc_source(listed, images, list(classes), source=os.fspath(src), root=src,
                          split=name or None, symlinks=symlinks)
               for name, listed in xmls.items()]
    return Discovery(sources, _layout(selected, definitions, found_splits), [])


def discover(source_format: str, src: str | os.PathLike[str], *, split: SplitSpec = None,
             images: str | os.PathLike[str] | None = None,
             labels: str | os.PathLike[str] | None = None, names: Any = None,
             annotations: str | os.PathLike[str] | None = None,
             classes: Sequence[str] | None = None, symlinks: str = "follow") -> Discovery:
    """Find the splits of ``src`` (rules in the module docstring); ``symlinks`` is the
    `ConvertOptions` mode of the folders found."""
    src = Path(src)
    as_path = (lambda p: Path(p) if p is not None else None)  # noqa: E731
    if source_format == "yolo":
        return _discover_yolo(src, split, as_path(images), as_path(labels), names, symlinks)
    if source_format == "coco":
        return _discover_coco(src, split, as_path(images), symlinks)
    if source_format == "voc":
        return _discover_voc(src, split, as_path(annotations), as_path(images), classes,
                             symlinks)
    raise ConversionError(f"unknown source format {source_format!r} (coco, yolo, voc)",
                          rule="USAGE")
