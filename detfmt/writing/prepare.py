"""Turning one input sample into what the writer stores: validated labels, resized pixels, payload.

This is the per-sample work the writer may run in worker processes, so it is a pure function of
(index, sample, rules) with picklable inputs and outputs. It is also the writer's hot loop for
small images: an already-sized array stored raw takes a path of a few plain-Python checks, and
only a sample that fails them goes through the full numpy checks that name the broken rule (both
accept exactly the same samples).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NoReturn

import numpy as np
import xxhash

from detfmt.errors import InvalidSampleError
from detfmt.format import codecs, spec
from detfmt.writing import image as _image
from detfmt.writing.options import WriteOptions

__all__ = ["Prepared", "Rules", "check_box_fields", "check_labels", "needs_worker", "prepare"]

#: Coordinates within this many pixels outside the image are float noise and are clamped silently.
EDGE_TOLERANCE = 1e-3
LETTERBOX_FILL = 114
PNG_LEVEL = 3
#: boxes per sample up to which labels are checked in plain Python (faster than numpy there)
SMALL_LABELS = 16

IMAGE_KEYS = frozenset({"image", "boxes", "classes", "file_name", "source_id", "orig_size",
                        "scale_offset"})
_EMPTY_BOXES = np.zeros((0, 4), np.float32)
_EMPTY_CLASSES = np.zeros(0, np.int32)
_IDENTITY = (1.0, 1.0, 0.0, 0.0)


@dataclasses.dataclass(frozen=True)
class Rules:
    """What `prepare` needs to know: the options and the class count (picklable)."""

    options: WriteOptions
    num_classes: int

    def __post_init__(self) -> None:
        fields = self.options.box_fields
        object.__setattr__(self, "codec_id", spec.CODEC_IDS[self.options.codec])
        object.__setattr__(self, "fields", tuple((n, np.dtype(d)) for n, d in fields))
        object.__setattr__(self, "keys", IMAGE_KEYS | {n for n, _ in fields})
        object.__setattr__(self, "pixel_limit", codecs.decode_pixel_limit(self.options.codec))
        object.__setattr__(self, "as_given", self.options.max_side is None
                           and self.options.fixed_size is None)

    codec_id: int = dataclasses.field(init=False)
    fields: tuple[tuple[str, np.dtype], ...] = dataclasses.field(init=False)
    keys: frozenset[str] = dataclasses.field(init=False)
    pixel_limit: int | None = dataclasses.field(init=False)
    as_given: bool = dataclasses.field(init=False)  # images are stored at their input size


@dataclasses.dataclass(slots=True)
class Prepared:
    """One sample ready to append: payload plus every per-sample array, in stored form."""

    payload: bytes | memoryview
    height: int
    width: int
    codec: int
    checksum: int  # XXH3-64 of the payload
    boxes: np.ndarray  # (K, 4) float32
    classes: np.ndarray  # (K,) int32
    fields: tuple[np.ndarray, ...]  # per-box fields, in the options' order
    orig_size: tuple[int, int]
    scale_offset: tuple[float, float, float, float]
    source_id: int
    name: bytes  # file_name, UTF-8
    clipped: int = 0


def as_mapping(sample: Any, index: int) -> Mapping[str, Any]:
    """Accept a mapping, or an object with image/boxes/classes attributes (e.g. a detfmt Sample)."""
    if isinstance(sample, Mapping):
        return sample
    if all(hasattr(sample, key) for key in ("image", "boxes", "classes")):
        result = {"image": sample.image, "boxes": sample.boxes, "classes": sample.classes}
        result.update(getattr(sample, "fields", {}) or {})
        return result
    raise InvalidSampleError(
        f"a sample must be a mapping with 'image', 'boxes' and 'classes', not "
        f"{type(sample).__name__}", rule="SAMPLE_INVALID", index=index)


def needs_worker(sample: Any, rules: Rules) -> bool:
    """Whether preparing ``sample`` decodes, resizes or encodes, the only work worth shipping
    to a worker process (an already-sized array stored raw would only be pickled twice)."""
    options = rules.options
    if options.codec != "raw" or options.fixed_size is not None:
        return True
    image = sample.get("image") if isinstance(sample, Mapping) else getattr(sample, "image", None)
    if not isinstance(image, np.ndarray):
        return isinstance(image, (str, os.PathLike, bytes, bytearray, memoryview))
    return options.max_side is not None and image.ndim >= 2 and max(image.shape[:2]) > \
        options.max_side


def prepare(index: int, sample: Any, rules: Rules) -> Prepared:
    """Validate, resize and encode one sample. Raises InvalidSampleError naming ``index``."""
    if type(sample) is not dict:
        sample = as_mapping(sample, index)
    if not sample.keys() <= rules.keys:
        _refuse_keys(sample, index, rules)
    try:
        source, raw_boxes, raw_classes = sample["image"], sample["boxes"], sample["classes"]
    except KeyError:
        _refuse_keys(sample, index, rules)
    options = rules.options
    image = _load_image(source, index, rules)
    h0, w0 = image.shape[0], image.shape[1]
    boxes, classes, clipped = check_labels(raw_boxes, raw_classes, h0, w0, index, rules)
    fields = _box_fields(sample, index, len(classes), rules) if rules.fields else ()
    transform = None
    if not rules.as_given:
        image, transform = _resize(image, options)
    height, width = image.shape[0], image.shape[1]
    if transform is not None and len(boxes):
        boxes = _transform_boxes(boxes, transform, height, width)
    if "orig_size" in sample or "scale_offset" in sample:
        orig_size, scale_offset = _compose_transform(sample, index, (h0, w0),
                                                     transform or _IDENTITY)
    else:
        orig_size, scale_offset = (h0, w0), transform or _IDENTITY
    if rules.codec_id == spec.CODEC_RAW:  # the caller's (C-contiguous) array itself
        payload: bytes | memoryview = memoryview(image).cast("B")
    else:
        payload = codecs.encode(image, options.codec, jpeg_quality=options.jpeg_quality,
                                 zstd_level=options.zstd_level, png_level=PNG_LEVEL)
    checksum = xxhash.xxh3_64_intdigest(payload)
    return Prepared(payload, height, width, rules.codec_id, checksum, boxes, classes, fields,
                    orig_size, scale_offset, _source_id(sample, index),
                    _file_name(sample, index), clipped)


def _refuse_keys(sample: Mapping[str, Any], index: int, rules: Rules) -> NoReturn:
    missing = {"image", "boxes", "classes"} - set(sample)
    if missing:
        raise InvalidSampleError(f"sample lacks {sorted(missing)}", rule="SAMPLE_INVALID",
                                 index=index)
    unknown = sorted(set(sample) - rules.keys, key=str)
    raise InvalidSampleError(
        f"unknown sample keys {unknown}; declare per-box fields with box_fields={{name: dtype}}",
        rule="SAMPLE_INVALID", index=index)


# --------------------------------------------------------------------------- image


def _load_image(source: Any, index: int, rules: Rules) -> np.ndarray:
    if isinstance(source, np.ndarray):
        if not (source.dtype == np.uint8 and source.ndim == 3 and source.shape[2] == 3
                and source.flags.c_contiguous and source.shape[0] and source.shape[1]):
            source = _image.to_rgb_array(source, index=index)
        _check_stored_size(source.shape[0], source.shape[1], rules, index)
        return source
    exif = rules.options.exif_transpose

    def check(height: int, width: int) -> None:
        _check_stored_size(height, width, rules, index)

    if isinstance(source, (bytes, bytearray, memoryview)):
        return _image.load_rgb(bytes(source), exif_transpose=exif, index=index, check=check)
    if isinstance(source, (str, os.PathLike)):
        return _image.load_rgb(Path(source), exif_transpose=exif, index=index, check=check)
    if _is_pil_image(source):
        if exif:
            from PIL import ImageOps

            source = ImageOps.exif_transpose(source)
        _check_stored_size(source.height, source.width, rules, index)
        return _image.pil_to_rgb(source)
    if hasattr(source, "__array__"):  # torch tensors and other array-likes
        array = _image.to_rgb_array(np.asarray(source), index=index)
        _check_stored_size(array.shape[0], array.shape[1], rules, index)
        return array
    raise InvalidSampleError(f"image must be an array, a PIL image, encoded bytes or a path, "
                             f"not {type(source).__name__}", rule="IMAGE_INVALID", index=index)


def _is_pil_image(value: Any) -> bool:
    module = type(value).__module__
    if not module.startswith("PIL."):
        return False
    from PIL import Image

    return isinstance(value, Image.Image)


def stored_size(height: int, width: int, options: WriteOptions) -> tuple[int, int]:
    """The stored (height, width) of an input image of this size."""
    if options.fixed_size is not None:
        return options.fixed_size
    return _image.scaled_size(height, width, options.max_side)


def _check_stored_size(height: int, width: int, rules: Rules, index: int) -> None:
    """Refuse, before decoding, an image the reader would refuse once stored."""
    if rules.as_given and rules.pixel_limit is None and height <= spec.MAX_SIDE and \
            width <= spec.MAX_SIDE:
        return
    sh, sw = stored_size(height, width, rules.options)
    if max(sh, sw) > spec.MAX_SIDE:
        raise InvalidSampleError(f"image of {height}x{width} exceeds the {spec.MAX_SIDE}-pixel "
                                 "limit of stored images; pass max_side", rule="IMAGE_INVALID",
                                 index=index)
    limit = rules.pixel_limit
    if limit is not None and sh * sw > limit:
        raise InvalidSampleError(
            f"a {rules.options.codec} image of {sh}x{sw} pixels exceeds the {limit} pixels its "
            "decoder accepts; use another codec or max_side", rule="IMAGE_INVALID", index=index)


def _resize(image: np.ndarray, options: WriteOptions
            ) -> tuple[np.ndarray, tuple[float, float, float, float] | None]:
    """The stored image and the (sx, sy, tx, ty) that maps input pixels to it (None: same)."""
    h, w = image.shape[0], image.shape[1]
    if options.fixed_size is not None:
        canvas_h, canvas_w = options.fixed_size
        ratio = min(canvas_h / h, canvas_w / w)
        nh, nw = max(1, min(canvas_h, round(h * ratio))), max(1, min(canvas_w, round(w * ratio)))
        top, left = (canvas_h - nh) // 2, (canvas_w - nw) // 2
        canvas = np.full((canvas_h, canvas_w, 3), LETTERBOX_FILL, np.uint8)
        canvas[top : top + nh, left : left + nw] = _image.resize_rgb(image, nh, nw)
        return canvas, (nw / w, nh / h, float(left), float(top))
    nh, nw = _image.scaled_size(h, w, options.max_side)
    if (nh, nw) == (h, w):
        return image, None
    return _image.resize_rgb(image, nh, nw), (nw / w, nh / h, 0.0, 0.0)


def _transform_boxes(boxes: np.ndarray, transform: tuple[float, ...], height: int, width: int
                     ) -> np.ndarray:
    sx, sy, tx, ty = transform
    stored = boxes.astype(np.float64) * np.array([sx, sy, sx, sy]) + np.array([tx, ty, tx, ty])
    limits = np.array([width, height, width, height], np.float64)
    return np.clip(stored, 0.0, limits).astype(np.float32)


# --------------------------------------------------------------------------- labels


def check_labels(raw_boxes: Any, raw_classes: Any, height: int, width: int, index: int,
                 rules: Rules) -> tuple[np.ndarray, np.ndarray, int]:
    """Boxes (K, 4) float32 inside the image, classes (K,) int32 and the number of boxes
    clipped; raises naming the rule a sample breaks."""
    try:
        boxes = np.asarray(raw_boxes, dtype=np.float64)
        classes = np.asarray(raw_classes)
    except (TypeError, ValueError) as error:
        raise InvalidSampleError(f"boxes/classes are not numeric arrays: {error}",
                                 rule="SAMPLE_INVALID", index=index) from error
    count = len(classes) if classes.ndim == 1 else -1
    if (0 < count <= SMALL_LABELS and boxes.shape == (count, 4) and classes.dtype.kind in "iu"
            and _plainly_valid(boxes.tolist(), classes.tolist(), height, width,
                               rules.num_classes)):
        return boxes.astype(np.float32), classes.astype(np.int32), 0
    if boxes.size == 0 and classes.size == 0:
        return _EMPTY_BOXES, _EMPTY_CLASSES, 0
    boxes, classes = _diagnose_labels(boxes, classes, index, rules.num_classes)
    boxes, clipped = _check_inside(boxes, height, width, index, rules.options.clip)
    return boxes.astype(np.float32), classes, clipped


def _plainly_valid(rows: list[list[float]], ids: list[int], height: int, width: int,
                   num_classes: int) -> bool:
    """Whether every rule holds with nothing to clamp: class ids in range, finite boxes with
    x1 <= x2 and y1 <= y2 inside [0, width] x [0, height] (NaN fails every comparison).

    A subset of what `_diagnose_labels` and `_check_inside` accept: anything else (float noise
    at an edge to clamp, or an error to name) goes through them.
    """
    for class_id in ids:
        if not 0 <= class_id < num_classes:
            return False
    for x1, y1, x2, y2 in rows:  # noqa: SIM110 - a loop is faster than all(generator)
        if not (0.0 <= x1 <= x2 <= width and 0.0 <= y1 <= y2 <= height):
            return False
    return True


def _diagnose_labels(boxes: np.ndarray, raw_classes: np.ndarray, index: int, num_classes: int
                     ) -> tuple[np.ndarray, np.ndarray]:
    if boxes.size == 0:
        boxes = boxes.reshape(0, 4)
    if boxes.ndim != 2 or boxes.shape[1] != 4:
        raise InvalidSampleError(f"boxes must have shape (K, 4), got {boxes.shape}",
                                 rule="SAMPLE_INVALID", index=index)
    raw_classes = raw_classes.reshape(-1) if raw_classes.size == 0 else raw_classes
    if raw_classes.shape != (len(boxes),):
        raise InvalidSampleError(f"classes must have shape ({len(boxes)},), got "
                                 f"{raw_classes.shape}", rule="SAMPLE_INVALID", index=index)
    if len(boxes) > spec.MAX_BOXES:
        raise InvalidSampleError(f"{len(boxes)} boxes exceed the limit of {spec.MAX_BOXES}",
                                 rule="SAMPLE_INVALID", index=index)
    integral = raw_classes.dtype.kind in "iub" or (
        raw_classes.dtype.kind == "f" and bool(np.all(np.mod(raw_classes, 1) == 0)))
    if not integral:
        raise InvalidSampleError(f"class ids must be integers, got {raw_classes.dtype} "
                                 f"{raw_classes[:5].tolist()}", rule="CLASS_RANGE", index=index)
    classes = raw_classes.astype(np.int64)
    bad = np.flatnonzero((classes < 0) | (classes >= num_classes))
    if bad.size:
        k = int(bad[0])
        raise InvalidSampleError(f"box {k} has class id {int(classes[k])}, outside "
                                 f"0..{num_classes - 1}", rule="CLASS_RANGE", index=index)
    finite = np.isfinite(boxes).all(axis=1)
    ordered = (boxes[:, 0] <= boxes[:, 2]) & (boxes[:, 1] <= boxes[:, 3])
    bad = np.flatnonzero(~(finite & ordered))
    if bad.size:
        k = int(bad[0])
        raise InvalidSampleError(f"box {k} is {boxes[k].tolist()}: boxes are finite xyxy with "
                                 "x1 <= x2 and y1 <= y2", rule="BOX_INVALID", index=index)
    return boxes, classes.astype(np.int32)


def _check_inside(boxes: np.ndarray, height: int, width: int, index: int, clip: bool
                  ) -> tuple[np.ndarray, int]:
    if not len(boxes):
        return boxes, 0
    limits = np.array([width, height, width, height], np.float64)
    outside = (boxes < -EDGE_TOLERANCE) | (boxes > limits + EDGE_TOLERANCE)
    rows = np.flatnonzero(outside.any(axis=1))
    if rows.size and not clip:
        k = int(rows[0])
        raise InvalidSampleError(
            f"box {k} {boxes[k].tolist()} lies outside the {width}x{height} image; fix the "
            "annotation or pass clip=True", rule="BOX_OUT_OF_IMAGE", index=index)
    return np.clip(boxes, 0.0, limits), int(rows.size)


def check_box_fields(fields: Mapping[str, Any], index: int, count: int, rules: Rules
                     ) -> tuple[np.ndarray, ...]:
    """The declared per-box fields of one sample as (K,) arrays of their dtypes, in the
    options' order (a missing field is zeros); raises naming the field that does not fit."""
    return _box_fields(fields, index, count, rules)


def _box_fields(sample: Mapping[str, Any], index: int, count: int, rules: Rules
                ) -> tuple[np.ndarray, ...]:
    fields = []
    for name, dtype in rules.fields:
        if name not in sample:
            fields.append(np.zeros(count, dtype))
            continue
        values = np.asarray(sample[name])
        if values.size == 0:
            values = values.reshape(0)
        if values.shape != (count,):
            raise InvalidSampleError(f"box field {name!r} must have shape ({count},), got "
                                     f"{values.shape}", rule="SAMPLE_INVALID", index=index)
        try:
            converted = values.astype(dtype)
        except (TypeError, ValueError) as error:
            raise InvalidSampleError(f"box field {name!r} values are not {dtype}: {error}",
                                     rule="SAMPLE_INVALID", index=index) from error
        if not np.array_equal(converted, values) and not (
            dtype.kind == "f" and np.allclose(converted, values, equal_nan=True)):
            raise InvalidSampleError(f"box field {name!r} values do not fit {dtype}",
                                     rule="SAMPLE_INVALID", index=index)
        fields.append(converted)
    return tuple(fields)


# --------------------------------------------------------------------------- per-image fields


def _compose_transform(sample: Mapping[str, Any], index: int, size: tuple[int, int],
                       transform: tuple[float, ...]) -> tuple[tuple[int, int], tuple[float, ...]]:
    """Combine a caller's earlier resize (orig_size/scale_offset) with the writer's own."""
    sx, sy, tx, ty = transform
    if "orig_size" not in sample:
        raise InvalidSampleError("scale_offset needs orig_size", rule="SAMPLE_INVALID",
                                 index=index)
    try:
        oh, ow = (int(v) for v in np.asarray(sample["orig_size"]).reshape(2))
        earlier = (np.asarray(sample["scale_offset"], np.float64).reshape(4)
                   if "scale_offset" in sample else
                   np.array([size[1] / ow, size[0] / oh, 0.0, 0.0]))
    except (TypeError, ValueError, ZeroDivisionError) as error:
        raise InvalidSampleError(f"invalid orig_size/scale_offset: {error}",
                                 rule="SAMPLE_INVALID", index=index) from error
    if oh < 1 or ow < 1 or oh >= 1 << 32 or ow >= 1 << 32 or not np.isfinite(earlier).all() \
            or (earlier[:2] <= 0).any():
        raise InvalidSampleError("orig_size must be positive (uint32) and scale_offset finite "
                                 "with positive scales", rule="SAMPLE_INVALID", index=index)
    s1x, s1y, t1x, t1y = (float(v) for v in earlier)
    return (oh, ow), (s1x * sx, s1y * sy, t1x * sx + tx, t1y * sy + ty)


def _source_id(sample: Mapping[str, Any], index: int) -> int:
    value = sample.get("source_id", -1)
    if type(value) is not int:
        try:
            value = int(value)
        except (TypeError, ValueError) as error:
            raise InvalidSampleError(f"source_id must be an integer, got {value!r}",
                                     rule="SAMPLE_INVALID", index=index) from error
    if not -(1 << 63) <= value < (1 << 63):
        raise InvalidSampleError("source_id does not fit int64", rule="SAMPLE_INVALID",
                                 index=index)
    return value


def _file_name(sample: Mapping[str, Any], index: int) -> bytes:
    value = sample.get("file_name")
    if value is None:
        image = sample.get("image")
        value = Path(image).name if isinstance(image, (str, os.PathLike)) else ""
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    return encode_file_name(value, index)


def encode_file_name(value: Any, index: int) -> bytes:
    """A sample's ``file_name`` as stored: a string, UTF-8, at most the format's limit."""
    if not isinstance(value, str):
        raise InvalidSampleError(f"file_name must be a string, got {type(value).__name__}",
                                 rule="SAMPLE_INVALID", index=index)
    try:
        encoded = value.encode("utf-8")
    except UnicodeEncodeError as error:
        raise InvalidSampleError(f"file_name is not valid Unicode: {error}",
                                 rule="SAMPLE_INVALID", index=index) from error
    if len(encoded) > spec.MAX_STRING_BYTES:
        raise InvalidSampleError("file_name is too long", rule="SAMPLE_INVALID", index=index)
    return encoded
