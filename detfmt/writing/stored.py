"""Samples whose image is already a stored payload: what copies between datasets append.

Filter, remap, merge and split copy each image's payload byte for byte (no decode, no
re-encode), with its labels and every per-box and per-image field. `StoredSample` carries one
such sample; `prepare_stored` checks it like `detfmt.writing.prepare.prepare` checks a decoded
sample
and turns it into the `Prepared` record the dataset builder appends, so a copy goes through the
same builder, sink, publish and self-check as any write.

A payload is never trusted blindly: given its stored ``checksum`` (what a source dataset's index
holds) it must hash to it, which catches a source damaged since it was written; its codec
structure (SPEC §9: zstd frame header and declared size, JPEG markers and frame size, PNG chunks)
must match the declared height and width, so a copy never publishes an image that cannot decode.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import xxhash

from detfmt.errors import DecodeError, IntegrityError, InvalidSampleError
from detfmt.format import codecs, spec
from detfmt.format.jpeg_entropy import check_entropy
from detfmt.writing.prepare import Prepared, Rules, check_box_fields, check_labels, encode_file_name

__all__ = ["StoredSample", "prepare_stored"]

_IDENTITY = (1.0, 1.0, 0.0, 0.0)


@dataclasses.dataclass
class StoredSample:
    """One sample whose image is a stored payload (see `detfmt.writing.writer.write_stored`).

    Attributes:
        payload: the image bytes as stored under ``codec`` (raw: the H*W*3 RGB pixels).
        codec: ``"raw"``, ``"zstd"``, ``"jpeg"`` or ``"png"``.
        height, width: the stored image's size.
        boxes: (K, 4) xyxy in stored pixels; classes: (K,) ids into the output classes.
        box_fields: per-box fields by name, each (K,); every field the output declares.
        orig_size: (height, width) of the original image (default: the stored size).
        scale_offset: (sx, sy, tx, ty) with stored = original * s + t (default: identity).
        source_id: the source's image id (-1: unknown).
        file_name: the source's file name ("" when unknown).
        checksum: the XXH3-64 the source stored for ``payload`` (checked); None: computed.
    """

    payload: bytes | bytearray | memoryview | np.ndarray
    codec: str
    height: int
    width: int
    boxes: Any
    classes: Any
    box_fields: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    orig_size: tuple[int, int] | None = None
    scale_offset: tuple[float, float, float, float] | None = None
    source_id: int = -1
    file_name: str = ""
    checksum: int | None = None


def prepare_stored(index: int, item: StoredSample, rules: Rules, where: str) -> Prepared:
    """Check one stored sample and return what the builder appends.

    Raises:
        InvalidSampleError: the sample breaks a rule (``rule`` says which; skippable).
        IntegrityError: the payload does not hash to the given checksum (the source is damaged:
            never skipped).
    """
    if not isinstance(item, StoredSample):
        raise InvalidSampleError(f"expected a StoredSample, got {type(item).__name__}",
                                 rule="SAMPLE_INVALID", index=index)
    codec = spec.CODEC_IDS.get(item.codec) if isinstance(item.codec, str) else None
    if codec is None:
        raise InvalidSampleError(f"codec must be one of {sorted(spec.CODEC_IDS)}, got "
                                 f"{item.codec!r}", rule="IMAGE_INVALID", index=index)
    height, width = _side(item.height, "height", index), _side(item.width, "width", index)
    limit = rules.options.max_side
    if limit is not None and max(height, width) > limit:
        raise InvalidSampleError(f"a stored {height}x{width} image exceeds max_side {limit}; "
                                 "copies keep images as stored", rule="IMAGE_INVALID",
                                 index=index)
    payload = _payload(item.payload, index)
    checksum = xxhash.xxh3_64_intdigest(payload)
    if item.checksum is not None and int(item.checksum) != checksum:
        raise IntegrityError(f"the payload hashes to {checksum:016x}, its stored checksum is "
                             f"{int(item.checksum):016x}: the source is damaged",
                             rule="CHECKSUM", path=where, index=index)
    _check_codec(payload, codec, height, width, index)
    boxes, classes, clipped = check_labels(item.boxes, item.classes, height, width, index, rules)
    fields = _fields(item, index, len(classes), rules)
    return Prepared(payload, height, width, codec, checksum, boxes, classes, fields,
                    _orig_size(item.orig_size, (height, width), index),
                    _scale_offset(item.scale_offset, index), _source_id(item.source_id, index),
                    encode_file_name(item.file_name, index), clipped)


def _side(value: Any, what: str, index: int) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) \
            or not 1 <= int(value) <= spec.MAX_SIDE:
        raise InvalidSampleError(f"{what} must be an int in 1..{spec.MAX_SIDE}, got {value!r}",
                                 rule="IMAGE_INVALID", index=index)
    return int(value)


def _payload(value: Any, index: int) -> memoryview:
    if isinstance(value, np.ndarray):
        if value.dtype != np.uint8:
            raise InvalidSampleError(f"payload must be bytes or a uint8 array, got "
                                     f"{value.dtype}", rule="IMAGE_INVALID", index=index)
        value = np.ascontiguousarray(value).reshape(-1)
    if not isinstance(value, (bytes, bytearray, memoryview, np.ndarray)):
        raise InvalidSampleError(f"payload must be bytes, got {type(value).__name__}",
                                 rule="IMAGE_INVALID", index=index)
    view = memoryview(value)
    if not view.c_contiguous:
        view = memoryview(view.tobytes())
    view = view.cast("B")
    if not len(view):
        raise InvalidSampleError("the payload is empty", rule="IMAGE_INVALID", index=index)
    return view


def _check_codec(payload: memoryview, codec: int, height: int, width: int, index: int) -> None:
    """The payload's structure matches its codec and size (SPEC §9), without decoding."""
    expected = height * width * spec.CHANNELS
    try:
        if codec == spec.CODEC_RAW:
            if len(payload) != expected:
                raise DecodeError(f"a raw {height}x{width} payload has {expected} bytes, got "
                                  f"{len(payload)}", rule="IMAGE_DECODE")
        elif codec == spec.CODEC_ZSTD:
            frame = codecs.zstd_frame_header(payload, path="payload", index=index,
                                              expected=expected)
            if frame.size != len(payload):
                raise DecodeError("bytes follow the zstd frame", rule="ZSTD_TRAILING")
        elif codec == spec.CODEC_JPEG:
            codecs.check_jpeg(payload, height, width, path="payload", index=index)
            # J4 (1.2.1): a source written before it may hold entropy data verification refuses
            check_entropy(payload, path="payload", index=index)
        else:
            codecs.check_png(payload, height, width, path="payload", index=index)
    except DecodeError as error:
        raise InvalidSampleError(f"the {spec.CODEC_NAMES[codec]} payload does not match its "
                                 f"{height}x{width} size: {error.message}", rule="IMAGE_INVALID",
                                 index=index) from error


def _fields(item: StoredSample, index: int, count: int, rules: Rules) -> tuple[np.ndarray, ...]:
    given = item.box_fields
    if not isinstance(given, Mapping):
        raise InvalidSampleError("box_fields must map field names to (K,) arrays",
                                 rule="SAMPLE_INVALID", index=index)
    declared = {name for name, _ in rules.fields}
    unknown = sorted(set(given) - declared, key=str)
    if unknown:
        raise InvalidSampleError(f"box fields {unknown} are not declared (declared: "
                                 f"{sorted(declared)})", rule="SAMPLE_INVALID", index=index)
    if not rules.fields:
        return ()
    return check_box_fields(given, index, count, rules)


def _orig_size(value: Any, stored: tuple[int, int], index: int) -> tuple[int, int]:
    if value is None:
        return stored
    if type(value) is tuple and len(value) == 2 and type(value[0]) is int and \
            type(value[1]) is int and 1 <= value[0] < 1 << 32 and 1 <= value[1] < 1 << 32:
        return value  # the common case (a copy): plain ints in range
    try:
        oh, ow = (int(v) for v in np.asarray(value).reshape(2))
    except (TypeError, ValueError) as error:
        raise InvalidSampleError(f"orig_size must be (height, width), got {value!r}",
                                 rule="SAMPLE_INVALID", index=index) from error
    if not (1 <= oh < 1 << 32 and 1 <= ow < 1 << 32):
        raise InvalidSampleError(f"orig_size must be positive uint32, got {(oh, ow)}",
                                 rule="SAMPLE_INVALID", index=index)
    return oh, ow


def _scale_offset(value: Any, index: int) -> tuple[float, float, float, float]:
    if value is None:
        return _IDENTITY
    if type(value) is tuple and len(value) == 4 and all(type(v) is float for v in value) and \
            all(map(math.isfinite, value)) and value[0] > 0 and value[1] > 0:
        return value  # the common case (a copy): plain finite floats, positive scales
    try:
        array = np.asarray(value, np.float64).reshape(4)
    except (TypeError, ValueError) as error:
        raise InvalidSampleError(f"scale_offset must be (sx, sy, tx, ty), got {value!r}",
                                 rule="SAMPLE_INVALID", index=index) from error
    if not np.isfinite(array).all() or (array[:2] <= 0).any():
        raise InvalidSampleError("scale_offset must be finite with positive scales",
                                 rule="SAMPLE_INVALID", index=index)
    sx, sy, tx, ty = (float(v) for v in array)
    return sx, sy, tx, ty


def _source_id(value: Any, index: int) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) \
            or not -(1 << 63) <= int(value) < 1 << 63:
        raise InvalidSampleError(f"source_id must be an int64, got {value!r}",
                                 rule="SAMPLE_INVALID", index=index)
    return int(value)
