"""COCO instances JSON -> detfmt.

Parsed with msgspec typed Structs that name only the fields a detector needs, so the (often huge)
``segmentation`` polygons are skipped by the C parser instead of becoming Python objects: on a
500k-annotation file this is several times faster than ``json.load`` in a fraction of the memory
(tools/bench_coco_json.py). Annotations are then packed into numpy arrays grouped by image.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Annotated, Any

import msgspec
import numpy as np

from detfmt.convert._pipeline import ConvertOptions, Source, SourceImage, convert_source
from detfmt.convert.errors import ConversionError
from detfmt.convert.inputs import InputFolder, printable, read_source_bytes
from detfmt.convert.report import ConversionReport

__all__ = ["ANNOTATION_ID_FIELD", "SUPERCATEGORIES_KEY", "CocoAnnotation", "CocoCategory",
           "CocoFile", "CocoImage", "CocoIndex", "coco_source", "from_coco", "parse_coco",
           "read_supercategories"]

# Ids are stored as int64 (source_id) and sizes compared with image sizes: anything beyond is a
# malformed file (JSON_INVALID naming the value), never an OverflowError later.
Id = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]
Size = Annotated[int, msgspec.Meta(ge=0, le=2**31 - 1)]
Flag = Annotated[int, msgspec.Meta(ge=0, le=1)]

#: the per-box field that keeps each box's COCO annotation id (when every annotation has one
#: that fits int32, the widest integer a per-box field holds; else ids are not kept)
ANNOTATION_ID_FIELD = "ann_id"
#: header metadata: JSON {class name: supercategory} of the categories that have one
SUPERCATEGORIES_KEY = "coco.supercategories"
_INT32_MAX = 2**31 - 1


class CocoCategory(msgspec.Struct, gc=False):
    id: Id
    name: str
    supercategory: str | None = None


class CocoImage(msgspec.Struct, gc=False):
    id: Id
    file_name: str
    width: Size | None = None
    height: Size | None = None


class CocoAnnotation(msgspec.Struct, gc=False):
    image_id: Id
    category_id: Id
    bbox: tuple[float, float, float, float]
    iscrowd: Flag | bool = 0
    id: Id | None = None


class CocoFile(msgspec.Struct, gc=False):
    """The parts of an instances file we read; every other key is skipped unparsed."""

    images: list[CocoImage]
    annotations: list[CocoAnnotation] = []
    categories: list[CocoCategory] = []


_DECODER = msgspec.json.Decoder(CocoFile, strict=False)  # lax: 640.0 or "640" -> 640


def decode_coco(data: bytes, path: str | os.PathLike[str] = "<bytes>") -> CocoFile:
    """Decode instances JSON bytes into a `CocoFile`.

    Standard JSON goes through msgspec. Python's ``json`` module writes ``NaN``/``Infinity`` for
    non-finite floats; msgspec rejects those tokens, so such a file is re-parsed with the stdlib
    (slow, but it lets the box policy count the NaN boxes instead of rejecting the file).
    """
    try:
        return _DECODER.decode(data)
    except msgspec.ValidationError as error:
        raise ConversionError(f"not a COCO instances file: {error}", rule="JSON_INVALID",
                              path=path) from error
    except msgspec.DecodeError as error:
        if not any(token in data for token in (b"NaN", b"Infinity")):
            raise ConversionError(f"malformed JSON: {error}", rule="JSON_INVALID",
                                  path=path) from error
    try:
        loose = json.loads(data)
        return msgspec.convert(loose, CocoFile, strict=False)
    except (ValueError, msgspec.ValidationError) as error:
        raise ConversionError(f"malformed JSON: {error}", rule="JSON_INVALID",
                              path=path) from error


class CocoIndex:
    """A parsed instances file: categories, images and annotations grouped per image.

    ``categories``: (name, original id) in contiguous-id order (sorted by original id).
    ``boxes`` (A, 4) float64 xyxy, ``category`` (A,) int32 contiguous id or -1 when the id is not
    in ``categories``, ``iscrowd`` (A,) uint8, ``ann_id`` (A,) int64 (-1 if absent) — sorted by
    image; ``starts[i]:starts[i+1]`` are the annotations of ``images[i]``. ``orphans`` counts
    annotations whose image_id is not an image of the file; ``orphan_ids`` lists a few of them.
    """

    def __init__(self, parsed: CocoFile, path: str | os.PathLike[str],
                 categories: list[tuple[str, int]] | None = None) -> None:
        self.path = os.fspath(path)
        own = sorted(parsed.categories, key=lambda c: c.id)
        ids = [c.id for c in own]
        if len(set(ids)) != len(ids):
            raise ConversionError("duplicate category id in categories", rule="DUPLICATE_ID",
                                  path=path)
        #: (name, original id) in contiguous order: this file's own categories, or a shared
        #: list (the union over the splits of one dataset, so every split has the same ids).
        self.categories: list[tuple[str, int]] = (
            categories if categories is not None else [(c.name, c.id) for c in own])
        #: {category name: supercategory} of this file's categories that name one
        self.supercategories: dict[str, str] = {c.name: c.supercategory for c in own
                                                if c.supercategory}
        ids = [cid for _, cid in self.categories]
        self.images: list[CocoImage] = parsed.images
        image_row: dict[int, int] = {}
        for row, image in enumerate(self.images):
            if image_row.setdefault(image.id, row) != row:
                raise ConversionError(f"duplicate image id {image.id}", rule="DUPLICATE_ID",
                                      path=path)
        category_row = {cid: row for row, cid in enumerate(ids)}
        anns = parsed.annotations
        count = len(anns)
        rows = np.fromiter((image_row.get(a.image_id, -1) for a in anns), np.int64, count)
        category = np.fromiter((category_row.get(a.category_id, -1) for a in anns), np.int32,
                               count)
        xywh = np.array([a.bbox for a in anns], dtype=np.float64).reshape(count, 4)
        iscrowd = np.fromiter((a.iscrowd for a in anns), np.uint8, count)
        ann_id = np.fromiter((-1 if a.id is None else a.id for a in anns), np.int64, count)
        self.unknown_category_ids = {anns[i].category_id for i in np.flatnonzero(category < 0)}
        orphan = rows < 0
        self.orphans = int(orphan.sum())
        self.orphan_ids = sorted({anns[i].image_id for i in np.flatnonzero(orphan)[:20]})
        keep = ~orphan
        rows, category, xywh = rows[keep], category[keep], xywh[keep]
        iscrowd, ann_id = iscrowd[keep], ann_id[keep]
        order = np.argsort(rows, kind="stable")
        self.rows = rows[order]
        self.category = category[order]
        xywh = xywh[order]
        self.boxes = np.concatenate([xywh[:, :2], xywh[:, :2] + xywh[:, 2:]], axis=1)
        self.iscrowd = iscrowd[order]
        self.ann_id = ann_id[order]
        self.starts = np.searchsorted(self.rows, np.arange(len(self.images) + 1))

    def __len__(self) -> int:
        return len(self.images)

    def annotations_of(self, row: int) -> slice:
        return slice(int(self.starts[row]), int(self.starts[row + 1]))


def read_coco(annotations_json: str | os.PathLike[str]) -> CocoFile:
    """Read and decode an instances file (a regular file; see `decode_coco`)."""
    return decode_coco(read_source_bytes(annotations_json, rule="JSON_INVALID"), annotations_json)


def parse_coco(annotations_json: str | os.PathLike[str]) -> CocoIndex:
    """Read and index a COCO instances JSON file.

    Raises:
        ConversionError: ``JSON_INVALID`` (unreadable, malformed or not instances-shaped, with the
            JSON path of the offending value), ``DUPLICATE_ID``.
    """
    data = read_source_bytes(annotations_json, rule="JSON_INVALID")
    parsed = decode_coco(data, annotations_json)
    del data
    return CocoIndex(parsed, annotations_json)


def _locate(images: InputFolder, file_name: str, annotations: str, report: ConversionReport
            ) -> tuple[Path, Path | None, ConversionError | None]:
    """(path as named, resolved file or None, why not) of an image named in the JSON."""
    try:
        path = images.child(file_name)
    except ConversionError as error:
        return Path(printable(file_name) or "<empty>"), None, ConversionError(
            f"image file_name refused: {error.message}", rule=error.rule, path=annotations)
    try:
        return path, images.resolve(path), None
    except ConversionError as error:
        if error.rule != "IMAGE_MISSING" or "/" not in file_name:
            return path, None, error
    fallback = images.given / Path(file_name).name  # "train2017/x.jpg" beside the JSON
    try:
        real = images.resolve(fallback)
    except ConversionError:
        return path, None, ConversionError("image file not found", rule="IMAGE_MISSING",
                                           path=path)
    report.note("file_name_basename", fallback, f"{file_name!r} not found")
    return fallback, real, None


def _records(index: CocoIndex, images: InputFolder, report: ConversionReport, keep_ids: bool
             ) -> Iterator[SourceImage]:
    names = {cid: name for name, cid in index.categories}
    for row, image in enumerate(index.images):
        span = index.annotations_of(row)
        category = index.category[span]
        path, read_path, error = _locate(images, image.file_name, index.path, report)
        if error is None and (category < 0).any():
            unknown = sorted(index.unknown_category_ids)[:5]
            error = ConversionError(
                f"annotation with category_id not in categories (unknown ids {unknown}; "
                f"known: {sorted(names)[:10]}...)", rule="UNKNOWN_CLASS", path=index.path)
        declared = None
        if image.width and image.height:
            declared = (int(image.width), int(image.height))
        fields = {"iscrowd": index.iscrowd[span]}
        if keep_ids:
            fields[ANNOTATION_ID_FIELD] = index.ann_id[span].astype(np.int32)
        yield SourceImage(
            path=path,
            file_name=image.file_name,
            boxes=index.boxes[span],
            classes=category,
            fields=fields,
            source_id=image.id,
            declared_size=declared,
            error=error,
            read_path=read_path,
        )


def coco_source(index: CocoIndex, images_dir: str | os.PathLike[str], *,
                root: Path | None = None, split: str | None = None,
                symlinks: str = "follow") -> Source:
    """The `Source` of a parsed instances file whose images lie in ``images_dir``."""
    images = InputFolder(images_dir, missing_rule="IMAGE_MISSING", what="image folder",
                         symlinks=symlinks)
    annotations = Path(index.path)

    def prelude(report: ConversionReport) -> None:
        if index.orphans:
            report.boxes_source += index.orphans
            report.drop_boxes("annotation_orphan", annotations, index.orphans,
                              f"image_id not among the images, e.g. {index.orphan_ids[:5]}")

    if root is None:
        root = Path(os.path.commonpath([os.path.abspath(annotations.parent),
                                        os.path.abspath(images.given)]))
    keep_ids = _ids_fit(index.ann_id)
    box_fields = {"iscrowd": "|u1", **({ANNOTATION_ID_FIELD: "<i4"} if keep_ids else {})}
    names = {name for name, _ in index.categories}
    supercategories = {name: value for name, value in index.supercategories.items()
                       if name in names}
    metadata = ({SUPERCATEGORIES_KEY: json.dumps(supercategories, ensure_ascii=False,
                                                 sort_keys=True)} if supercategories else {})
    return Source(
        source_format="coco",
        source=index.path,
        classes=index.categories,
        count=len(index),
        records=lambda report: _records(index, images, report, keep_ids),
        prelude=prelude,
        files=[annotations],
        root=root,
        metadata=metadata,
        box_fields=box_fields,
        split=split,
    )


def _ids_fit(ann_id: np.ndarray) -> bool:
    """Every annotation has a distinct id that a per-box int32 field holds."""
    return bool(len(ann_id)) and bool(((ann_id >= 0) & (ann_id <= _INT32_MAX)).all()) and \
        len(np.unique(ann_id)) == len(ann_id)


def read_supercategories(metadata: Mapping[str, str]) -> dict[str, str]:
    """{class name: supercategory} stored by the COCO converter ({} when absent or unreadable)."""
    try:
        value = json.loads(metadata.get(SUPERCATEGORIES_KEY, "{}"))
    except ValueError:
        return {}
    if not isinstance(value, dict):
        return {}
    return {str(k): v for k, v in value.items() if isinstance(v, str)}


def from_coco(
    annotations_json: str | os.PathLike[str],
    images_dir: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    **options: Any,
) -> ConversionReport:
    """Convert a COCO instances JSON and its image folder into a detfmt dataset at ``dst``.

    Categories become contiguous ids 0..C-1 in order of their original id (names and original
    ids kept in the header); ``iscrowd`` is kept as the per-box field ``iscrowd``, annotation ids
    as ``ann_id`` (when every annotation has a distinct one that fits int32) and supercategories
    in the header metadata (``coco.supercategories``); images without annotations are kept
    with zero boxes; each image's COCO id is kept as ``source_id``. Only regular files inside
    ``images_dir`` are read: an absolute or ``..`` ``file_name`` is refused (``PATH_UNSAFE``).
    Options: see `ConvertOptions` (``max_side``, ``codec``, ``workers``, ``on_error``,
    ``allow_empty``, ``card``...). Returns the `ConversionReport` (also saved as
    ``<dst>.report.json``). For several annotation files (splits), see `detfmt.convert.convert`.
    """
    opts = ConvertOptions(**options)
    index = parse_coco(annotations_json)
    return convert_source(coco_source(index, images_dir, symlinks=opts.symlinks), dst, opts)
