"""Turning one input sample into what the writer stores: validated labels, resized pixels, payload.

This is the per-sample work the writer may run in worker processes, so it is a pure function of
(index, sample, options) with picklable inputs and outputs.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import xxhash

from detfmt import _codecs, _image, spec
from detfmt.errors import InvalidSampleError

#: Coordinates within this many pixels outside the image are float noise and are clamped silently.
EDGE_TOLERANCE = 1e-3
LETTERBOX_FILL = 114

IMAGE_KEYS = frozenset({"image", "boxes", "classes", "file_name", "source_id", "orig_size",
                        "scale_offset"})


@dataclass(frozen=True)
class Options:
    """The writer options that shape each sample (picklable, sent to workers)."""

    codec: str = "raw"
    num_classes: int = 0
    max_side: int | None = None
    fixed_size: tuple[int, int] | None = None
    clip: bool = False
    box_fields: tuple[tuple[str, str], ...] = ()
    jpeg_quality: int = 90
    zstd_level: int = 3
    png_level: int = 3
    exif_transpose: bool = True


@dataclass
class Prepared:
    """One sample ready to append: payload plus every per-sample array, in stored form."""

    payload: bytes | memoryview
    height: int
    width: int
    codec: int
    checksum: int
    boxes: np.ndarray  # (K, 4) float32
    classes: np.ndarray  # (K,) int32
    box_fields: dict[str, np.ndarray]
    orig_size: tuple[int, int]
    scale_offset: tuple[float, float, float, float]
    source_id: int
    file_name: str
    clipped: int = 0
    extras: dict[str, Any] = field(default_factory=dict)


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


def prepare(index: int, sample: Any, options: Options) -> Prepared:
    """Validate, resize and encode one sample. Raises InvalidSampleError naming ``index``."""
    sample = as_mapping(sample, index)
    missing = {"image", "boxes", "classes"} - set(sample)
    if missing:
        raise InvalidSampleError(f"sample lacks {sorted(missing)}", rule="SAMPLE_INVALID",
                                 index=index)
    field_names = {name for name, _ in options.box_fields}
    unknown = set(sample) - IMAGE_KEYS - field_names
    if unknown:
        raise InvalidSampleError(
            f"unknown sample keys {sorted(unknown)}; declare per-box fields with "
            f"box_fields={{name: dtype}}", rule="SAMPLE_INVALID", index=index)
    image = _load_image(sample["image"], index, options)
    name = _file_name(sample, index)
    h0, w0 = image.shape[0], image.shape[1]
    boxes, classes = _labels(sample, index, options.num_classes)
    fields = _box_fields(sample, index, len(boxes), options)
    boxes, clipped = _check_inside(boxes, h0, w0, index, options.clip)
    image, (sx, sy, tx, ty) = _resize(image, options)
    height, width = image.shape[0], image.shape[1]
    stored = boxes * np.array([sx, sy, sx, sy]) + np.array([tx, ty, tx, ty])
    stored = np.clip(stored, 0.0, np.array([width, height, width, height], np.float64))
    orig_size, scale_offset = _compose_transform(sample, index, (h0, w0), (sx, sy, tx, ty))
    payload = _codecs.encode(image, options.codec, jpeg_quality=options.jpeg_quality,
                             zstd_level=options.zstd_level, png_level=options.png_level)
    return Prepared(
        payload=payload, height=height, width=width, codec=spec.CODEC_IDS[options.codec],
        checksum=xxhash.xxh3_64_intdigest(payload), boxes=stored.astype(np.float32),
        classes=classes, box_fields=fields, orig_size=orig_size, scale_offset=scale_offset,
        source_id=_source_id(sample, index), file_name=name, clipped=clipped,
    )


def _load_image(source: Any, index: int, options: Options) -> np.ndarray:
    if isinstance(source, np.ndarray):
        return _image.to_rgb_array(source, index=index)
    if isinstance(source, (bytes, bytearray, memoryview)):
        return _image.load_rgb(bytes(source), exif_transpose=options.exif_transpose, index=index)
    if isinstance(source, (str, os.PathLike)):
        return _image.load_rgb(Path(source), exif_transpose=options.exif_transpose, index=index)
    if hasattr(source, "__array__"):  # torch tensors, PIL images
        return _image.to_rgb_array(np.asarray(source), index=index)
    raise InvalidSampleError(f"image must be an array, encoded bytes or a path, not "
                             f"{type(source).__name__}", rule="IMAGE_INVALID", index=index)


def _labels(sample: Mapping[str, Any], index: int, num_classes: int
            ) -> tuple[np.ndarray, np.ndarray]:
    try:
        boxes = np.asarray(sample["boxes"], dtype=np.float64)
        raw_classes = np.asarray(sample["classes"])
    except (TypeError, ValueError) as error:
        raise InvalidSampleError(f"boxes/classes are not numeric arrays: {error}",
                                 rule="SAMPLE_INVALID", index=index) from error
    if boxes.size == 0:
        boxes = boxes.reshape(0, 4)
        if raw_classes.size == 0:
            return boxes, np.zeros(0, np.int32)
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


def _box_fields(sample: Mapping[str, Any], index: int, count: int, options: Options
                ) -> dict[str, np.ndarray]:
    fields = {}
    for name, dtype in options.box_fields:
        if name not in sample:
            fields[name] = np.zeros(count, np.dtype(dtype))
            continue
        values = np.asarray(sample[name])
        if values.size == 0:
            values = values.reshape(0)
        if values.shape != (count,):
            raise InvalidSampleError(f"box field {name!r} must have shape ({count},), got "
                                     f"{values.shape}", rule="SAMPLE_INVALID", index=index)
        converted = values.astype(np.dtype(dtype))
        if not np.array_equal(converted, values) and not (
            np.dtype(dtype).kind == "f" and np.allclose(converted, values, equal_nan=True)):
            raise InvalidSampleError(f"box field {name!r} values do not fit {dtype}",
                                     rule="SAMPLE_INVALID", index=index)
        fields[name] = converted
    return fields


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


def _resize(image: np.ndarray, options: Options) -> tuple[np.ndarray, tuple[float, ...]]:
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
    if max(nh, nw) > spec.MAX_SIDE:
        raise InvalidSampleError(f"image of {h}x{w} exceeds the {spec.MAX_SIDE}-pixel limit; "
                                 "pass max_side", rule="IMAGE_INVALID")
    return _image.resize_rgb(image, nh, nw), (nw / w, nh / h, 0.0, 0.0)


def _compose_transform(sample: Mapping[str, Any], index: int, size: tuple[int, int],
                       transform: tuple[float, ...]) -> tuple[tuple[int, int], tuple[float, ...]]:
    """Combine a caller's earlier resize (orig_size/scale_offset) with the writer's own."""
    sx, sy, tx, ty = transform
    if "orig_size" not in sample:
        if "scale_offset" in sample:
            raise InvalidSampleError("scale_offset needs orig_size", rule="SAMPLE_INVALID",
                                     index=index)
        return size, (sx, sy, tx, ty)
    try:
        oh, ow = (int(v) for v in np.asarray(sample["orig_size"]).reshape(2))
        earlier = (np.asarray(sample["scale_offset"], np.float64).reshape(4)
                   if "scale_offset" in sample else
                   np.array([size[1] / ow, size[0] / oh, 0.0, 0.0]))
    except (TypeError, ValueError, ZeroDivisionError) as error:
        raise InvalidSampleError(f"invalid orig_size/scale_offset: {error}",
                                 rule="SAMPLE_INVALID", index=index) from error
    if oh < 1 or ow < 1 or not np.isfinite(earlier).all() or (earlier[:2] <= 0).any():
        raise InvalidSampleError("orig_size must be positive and scale_offset finite with "
                                 "positive scales", rule="SAMPLE_INVALID", index=index)
    s1x, s1y, t1x, t1y = (float(v) for v in earlier)
    return (oh, ow), (s1x * sx, s1y * sy, t1x * sx + tx, t1y * sy + ty)


def _source_id(sample: Mapping[str, Any], index: int) -> int:
    value = sample.get("source_id", -1)
    try:
        result = int(value)
    except (TypeError, ValueError) as error:
        raise InvalidSampleError(f"source_id must be an integer, got {value!r}",
                                 rule="SAMPLE_INVALID", index=index) from error
    if not -(1 << 63) <= result < (1 << 63):
        raise InvalidSampleError("source_id does not fit int64", rule="SAMPLE_INVALID",
                                 index=index)
    return result


def _file_name(sample: Mapping[str, Any], index: int) -> str:
    value = sample.get("file_name")
    if value is None:
        image = sample.get("image")
        return Path(image).name if isinstance(image, (str, os.PathLike)) else ""
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
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
    return value
