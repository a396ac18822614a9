"""Write options: one checked description of how samples become stored bytes.

`detfmt.write`, the shard builder, the converters and Ray's datasink all take the same
`WriteOptions`, so every option is checked once, in one place, before the first sample is read.
Constructing one checks it (a `UsageError` names the option); `WriteOptions.check_classes`
also checks a class list and the header-size limit the classes and metadata imply.

This module is light (numpy and msgspec only): validating options never imports the image stack.
"""

from __future__ import annotations

import dataclasses
import difflib
import numbers
import re
from collections.abc import Iterable, Mapping
from typing import Any, Literal

import msgspec
import numpy as np

from detfmt.errors import UsageError
from detfmt.format import members as _members
from detfmt.format import spec
from detfmt.format.schema import ClassInfo, Header

__all__ = ["Codec", "Labels", "OnError", "WriteOptions", "check_header_budget", "normalize_classes"]

Codec = Literal["raw", "zstd", "jpeg", "png"]
OnError = Literal["error", "skip"]
Labels = Literal["auto", "padded", "ragged"]

#: names a per-box field may not take: the sample keys the writer already gives a meaning
RESERVED_FIELD_NAMES = frozenset({"image", "boxes", "classes", *spec.IMAGE_FIELDS})
ZSTD_LEVELS = range(1, 23)
_FIELD_NAME = re.compile(spec.BOX_FIELD_NAME_PATTERN)


@dataclasses.dataclass(frozen=True)
class WriteOptions:
    """How samples are stored. Every field is checked when the object is made.

    Attributes:
        codec: ``raw`` (fastest to read), ``zstd`` (lossless, smaller), ``jpeg`` or ``png``.
        max_side: shrink images (aspect kept) so the long side is at most this; boxes follow.
        fixed_size: letterbox every image into (height, width) (an int means a square).
        clip: clip boxes that stick out of the image instead of refusing the sample.
        box_fields: optional per-box fields, name -> dtype (uint8, int32 or float32); a mapping
            or (name, dtype) pairs; stored as (name, numpy descr) pairs in the given order.
        jpeg_quality: 1..100, for ``codec="jpeg"``.
        zstd_level: 1..22, for ``codec="zstd"``.
        exif_transpose: apply the EXIF orientation of encoded inputs (annotations usually refer
            to the displayed image).
        metadata: free-form string pairs stored in the header.
        on_error: ``"error"`` stops at the first invalid sample; ``"skip"`` leaves it out and
            counts it in the report.
        labels: the label layout (SPEC §10): ``"padded"`` (N, M) arrays, readable by every 1.x
            reader; ``"ragged"`` the valid boxes back to back (format 1.2, feature
            ragged_labels); ``"auto"`` ragged when padding would take more than twice the bytes
            of the valid boxes (one crowded image among sparse ones), padded otherwise (W-19).
    """

    codec: Codec = "raw"
    max_side: int | None = None
    fixed_size: tuple[int, int] | None = None
    clip: bool = False
    box_fields: tuple[tuple[str, str], ...] = ()
    jpeg_quality: int = 90
    zstd_level: int = 3
    exif_transpose: bool = True
    metadata: Mapping[str, str] = dataclasses.field(default_factory=dict)
    on_error: OnError = "error"
    labels: Labels = "auto"

    def __post_init__(self) -> None:
        set_ = object.__setattr__  # frozen: normalise once, here
        set_(self, "fixed_size", _fixed_size(self.fixed_size))
        set_(self, "box_fields", _box_fields(self.box_fields))
        set_(self, "metadata", _metadata(self.metadata))
        set_(self, "max_side", _side_or_none("max_side", self.max_side))
        self.validate()

    @classmethod
    def from_kwargs(cls, **options: Any) -> WriteOptions:
        """Build from keyword arguments, naming an unknown one (and the closest known name)."""
        known = {f.name for f in dataclasses.fields(cls)}
        for name in options:
            if name not in known:
                close = difflib.get_close_matches(name, sorted(known), n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise UsageError(f"unknown write option {name!r}{hint} (known: {sorted(known)})")
        return cls(**options)

    def replace(self, **changes: Any) -> WriteOptions:
        """A copy with some options changed (checked again)."""
        return dataclasses.replace(self, **changes)

    def validate(self) -> None:
        """Check every option; raises `UsageError` naming the first wrong one."""
        if self.codec not in spec.CODEC_IDS:
            raise UsageError(f"codec must be one of {sorted(spec.CODEC_IDS)}, got {self.codec!r}")
        _bool("clip", self.clip)
        _bool("exif_transpose", self.exif_transpose)
        if not _is_int(self.jpeg_quality) or not 1 <= self.jpeg_quality <= 100:
            raise UsageError(f"jpeg_quality must be an int in 1..100, got {self.jpeg_quality!r}")
        if not _is_int(self.zstd_level) or self.zstd_level not in ZSTD_LEVELS:
            raise UsageError(f"zstd_level must be an int in 1..22, got {self.zstd_level!r}")
        if self.on_error not in ("error", "skip"):
            raise UsageError(f"on_error must be 'error' or 'skip', got {self.on_error!r}")
        if self.labels not in ("auto", "padded", "ragged"):
            raise UsageError(f"labels must be 'auto', 'padded' or 'ragged', got {self.labels!r}")
        names = [name for name, _ in self.box_fields]
        if len(set(names)) != len(names):
            raise UsageError(f"box field names must be unique, got {names}")
        for name, descr in self.box_fields:
            _check_field(name, descr)
        _check_metadata(self.metadata)

    def ragged(self, num_samples: int, max_boxes: int, num_boxes: int) -> bool:
        """Whether labels of these sizes are written in the ragged layout (W-19)."""
        if self.labels == "auto":
            return num_samples * max_boxes - num_boxes > 2 * num_boxes
        return self.labels == "ragged"

    def check_classes(self, classes: Any) -> list[ClassInfo]:
        """Normalise ``classes`` and check that the header these classes, box fields and
        metadata imply fits the reader's header-size limit for any number of samples.

        Raises:
            UsageError: a bad class list, or a header that could exceed the limit.
        """
        infos = normalize_classes(classes)
        check_header_budget(infos, self)
        return infos


# --------------------------------------------------------------------------- header budget


def check_header_budget(classes: list[ClassInfo], options: WriteOptions) -> int:
    """Check, before any sample is read, that the header is valid for the reader and fits its
    size limit whatever N, M and the file sizes turn out to be; return that upper bound.

    The worst case takes every number at its limit (N = 2^40, M = 65536, 20-digit sizes), so
    nothing learned from the samples can push the real header over the limit.
    """
    n, m = spec.MAX_SAMPLES, spec.MAX_BOXES
    totals = [None] if options.labels == "padded" else [spec.MAX_TOTAL_BOXES]
    if options.labels == "auto":
        totals.append(None)
    files = {name: _members.MAX_NUMBER for name in _members.member_names(options.box_fields)
             if name != spec.HEADER_FILE}
    fixed = (spec.MAX_SIDE, spec.MAX_SIDE, spec.CHANNELS) if options.codec == "raw" else None
    size = 0
    for total in totals:  # each layout the options allow
        arrays = _members.array_specs(n, m, options.box_fields, num_boxes=total)
        header = _members.build_header(classes=classes, options=options, n=n, m=m,
                                       codecs={options.codec: n}, fixed_shape=fixed,
                                       files=_members.placeholder_files(files), arrays=arrays,
                                       num_boxes=total)
        size = max(size, _checked_size(header))
    if size > spec.MAX_HEADER_BYTES:
        raise UsageError(f"the header could take {size} bytes, over the reader's "
                         f"{spec.MAX_HEADER_BYTES}-byte limit: too many classes or too much "
                         "metadata")
    return size


def _checked_size(header: Header) -> int:
    """The encoded size of a header the reader accepts (else a UsageError)."""
    return len(_members.encode_header(header))


# --------------------------------------------------------------------------- classes


def normalize_classes(classes: Any) -> list[ClassInfo]:
    """Turn what users pass as ``classes`` into ClassInfo objects indexed by contiguous id.

    Accepted: a sequence (or 1-D numpy array) of names, `ClassInfo` objects or
    ``{"name": ..., "source_id": ...}`` mappings; a mapping ``{id: name}`` (YOLO's ``names``) or
    ``{name: id}`` whose ids are exactly 0..C-1. Refused with a `UsageError`: a bare string (it
    would become one class per character), ids that are not 0..C-1, duplicate names or source
    ids, anything else.
    """
    if isinstance(classes, (str, bytes)):
        raise UsageError(f"classes must be a list of class names, not the string {classes!r} "
                         f"(did you mean [{classes!r}]?)")
    if isinstance(classes, Mapping):
        items = _classes_from_mapping(classes)
    elif isinstance(classes, np.ndarray):
        if classes.ndim != 1 or classes.dtype.kind not in "USO":
            raise UsageError(f"a numpy array of classes must be 1-D strings, got dtype "
                             f"{classes.dtype} and shape {classes.shape}")
        items = classes.tolist()
    elif isinstance(classes, Iterable):
        items = list(classes)
    else:
        raise UsageError(f"classes must be a list of class names, got {type(classes).__name__}")
    infos = [_class_info(position, item) for position, item in enumerate(items)]
    try:
        infos = msgspec.convert([msgspec.to_builtins(info) for info in infos], list[ClassInfo])
    except msgspec.ValidationError as error:
        raise UsageError(f"invalid classes: {error}") from error
    if len(infos) > spec.MAX_CLASSES:
        raise UsageError(f"{len(infos)} classes exceed the limit of {spec.MAX_CLASSES}")
    names = [info.name for info in infos]
    if len(set(names)) != len(names):
        duplicates = sorted({name for name in names if names.count(name) > 1})
        raise UsageError(f"class names must be unique; repeated: {duplicates[:5]}")
    ids = [info.source_id for info in infos if info.source_id is not None]
    if len(set(ids)) != len(ids):
        raise UsageError("class source_ids must be unique")
    return infos


def _classes_from_mapping(classes: Mapping[Any, Any]) -> list[Any]:
    keys = list(classes)
    if all(_is_int(k) for k in keys):
        by_id = {int(k): v for k, v in classes.items()}
    elif all(isinstance(k, str) for k in keys) and all(_is_int(v) for v in classes.values()):
        by_id = {int(v): k for k, v in classes.items()}
        if len(by_id) != len(keys):
            raise UsageError("a {name: id} class map gives two names the same id")
    else:
        raise UsageError("a class mapping must be {id: name} or {name: id} with integer ids "
                         "0..C-1")
    if sorted(by_id) != list(range(len(by_id))):
        shown = sorted(by_id)[:8]
        raise UsageError(f"class ids must be exactly 0..{len(by_id) - 1} (contiguous), got "
                         f"{shown}{'...' if len(by_id) > 8 else ''}; map your ids to 0..C-1 "
                         "(and keep the original ones as ClassInfo.source_id)")
    return [by_id[i] for i in range(len(by_id))]


def _class_info(position: int, item: Any) -> ClassInfo:
    if isinstance(item, ClassInfo):
        return item
    if isinstance(item, str):
        return ClassInfo(name=str(item))  # str(): numpy's str_ is a subclass msgspec refuses
    if isinstance(item, (bytes, np.bytes_)):
        try:
            return ClassInfo(name=bytes(item).decode("utf-8"))
        except UnicodeDecodeError as error:
            raise UsageError(f"classes[{position}] is not UTF-8: {item!r}") from error
    if isinstance(item, Mapping) and "name" in item:
        unknown = set(item) - {"name", "source_id"}
        if unknown:
            raise UsageError(f"classes[{position}] has unknown keys {sorted(unknown)}")
        source_id = item.get("source_id")
        if source_id is not None and not _is_int(source_id):
            raise UsageError(f"classes[{position}]: source_id must be an int, got {source_id!r}")
        return ClassInfo(name=str(item["name"]),
                         source_id=None if source_id is None else int(source_id))
    raise UsageError(f"classes[{position}] must be a name, a ClassInfo or a mapping with "
                     f"'name', got {item!r}")


# --------------------------------------------------------------------------- field checks


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))


def _bool(name: str, value: Any) -> None:
    if not isinstance(value, (bool, np.bool_)):
        raise UsageError(f"{name} must be True or False, got {value!r}")


def _side_or_none(name: str, value: Any) -> int | None:
    if value is None:
        return None
    if not _is_int(value) or not 1 <= int(value) <= spec.MAX_SIDE:
        raise UsageError(f"{name} must be an int in 1..{spec.MAX_SIDE} or None, got {value!r}")
    return int(value)


def _fixed_size(value: Any) -> tuple[int, int] | None:
    if value is None:
        return None
    if _is_int(value):
        value = (value, value)
    try:
        pair = tuple(value)
    except TypeError:
        pair = ()
    if len(pair) != 2 or not all(_is_int(v) and 1 <= int(v) <= spec.MAX_SIDE for v in pair):
        raise UsageError(f"fixed_size must be (height, width) with sides in 1..{spec.MAX_SIDE}, "
                         f"got {value!r}")
    return int(pair[0]), int(pair[1])


def _box_fields(value: Any) -> tuple[tuple[str, str], ...]:
    if value is None:
        return ()
    pairs = list(value.items()) if isinstance(value, Mapping) else list(value)
    result = []
    for pair in pairs:
        try:
            name, dtype = pair
        except (TypeError, ValueError) as error:
            raise UsageError(f"box_fields must map names to dtypes, got {pair!r}") from error
        try:
            descr = np.lib.format.dtype_to_descr(np.dtype(dtype))
        except TypeError as error:
            raise UsageError(f"box field {name!r}: {dtype!r} is not a dtype") from error
        result.append((name, descr))
    return tuple(result)


def _check_field(name: Any, descr: Any) -> None:
    if not isinstance(name, str) or not _FIELD_NAME.match(name):
        raise UsageError(f"box field name {name!r} must match {spec.BOX_FIELD_NAME_PATTERN}")
    if name in RESERVED_FIELD_NAMES:
        raise UsageError(f"box field name {name!r} is reserved")
    if descr not in spec.BOX_FIELD_DTYPES:
        raise UsageError(f"box field {name!r}: dtype must be uint8, int32 or float32, got "
                         f"{descr!r}")


def _metadata(value: Any) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise UsageError(f"metadata must be a mapping of strings, got {type(value).__name__}")
    return dict(value)


def _check_metadata(metadata: Mapping[str, str]) -> None:
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
        raise UsageError("metadata must map strings to strings")
    if len(metadata) > spec.MAX_METADATA_ITEMS:
        raise UsageError(f"metadata has {len(metadata)} members, over the limit of "
                         f"{spec.MAX_METADATA_ITEMS}")
    chars = sum(len(k) + len(v) for k, v in metadata.items())
    if chars > spec.MAX_METADATA_BYTES:
        raise UsageError(f"metadata holds {chars} characters, over the limit of "
                         f"{spec.MAX_METADATA_BYTES}")
