"""A second detfmt reader (1.0 datasets, ragged labels of 1.2, 1.1/1.2 sharded roots), written
from SPEC.md alone (it does not import detfmt).

It exists to keep SPEC.md, the goldens and the reference implementation honest: the conformance
suite must pass against both readers. It follows SPEC.md's numbered procedures step by step
(§12 for a dataset, §19.4 for a sharded root, §9 for the codecs, §5.6 for JSON) and is
deliberately simple: whole files read into memory, scalar loops, its own zstd frame walk and its
own PNG decoder (libzstd decodes zstd blocks, libjpeg-turbo through Pillow decodes JPEG scans).
Use it on small datasets only. It speaks the runner protocol:

    python -m conformance --reader "python -m conformance.spec_reader"
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import math
import os
import re
import stat
import struct
import sys
import zlib
from collections.abc import Callable
from typing import Any

import numpy as np
import xxhash
import zstandard
from PIL import Image

MIB = 1 << 20
INDEX = [("offset", "<u8"), ("nbytes", "<u8"), ("decoded_nbytes", "<u8"), ("checksum", "<u8"),
         ("height", "<u4"), ("width", "<u4"), ("channels", "|u1"), ("codec", "|u1"),
         ("flags", "<u2"), ("reserved", "<u4")]
CODECS = {0: "raw", 1: "zstd", 2: "jpeg", 3: "png"}
IMAGE_ARRAYS = {"orig_size": ("<u4", (2,)), "scale_offset": ("<f8", (4,)),
                "source_id": ("<i8", ())}
IMAGE_FIELDS = ("orig_size", "scale_offset", "source_id", "file_name")
HEADER_FEATURES = {"ragged_labels"}  # §14: features of header.json this reader implements
MANIFEST_FEATURES = {"sharded", "ragged_labels"}
MANIFEST_MINORS = {1, 2}
VERSION = re.compile(r"[0-9]{1,4}\.[0-9]{1,4}")


class Reject(Exception):
    """The dataset violates the rule ``rule`` (a SPEC.md rule id)."""

    def __init__(self, rule: str) -> None:
        super().__init__(rule)
        self.rule = rule


def require(condition: object, rule: str) -> None:
    if not condition:
        raise Reject(rule)


def align64(value: int) -> int:
    return -(-value // 64) * 64


def is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# --------------------------------------------------------------------------- JSON profile (§5.6)


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError("duplicate member name")
        out[key] = value
    return out


def _int(token: str) -> int:
    if len(token) > 64:
        raise ValueError("number token over 64 characters")
    return int(token)


def _float(token: str) -> float:
    value = float(token)
    if len(token) > 64 or not math.isfinite(value):
        raise ValueError("number token over 64 characters or not finite")
    return value


def _constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def _tree_ok(value: Any) -> bool:
    """At most 64 nested arrays and objects; no string holds a lone surrogate."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            if depth > 64:
                return False
            children = item.items() if isinstance(item, dict) else enumerate(item)
            for key, child in children:
                if isinstance(key, str) and not _scalar_values_ok(key):
                    return False
                stack.append((child, depth + 1))
        elif isinstance(item, str) and not _scalar_values_ok(item):
            return False
    return True


def _scalar_values_ok(text: str) -> bool:
    return not any(0xD800 <= ord(c) <= 0xDFFF for c in text)


def parse_json(data: bytes, rule: str, encoding_rule: str | None = None) -> dict[str, Any]:
    """§5.6: UTF-8 without BOM, RFC 8259, unique names, depth 64, tokens of 64 characters."""
    require(data and not data.startswith(b"\xef\xbb\xbf"), encoding_rule or rule)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise Reject(encoding_rule or rule) from error
    try:
        value = json.loads(text, object_pairs_hook=_pairs, parse_int=_int, parse_float=_float,
                           parse_constant=_constant)
    except (ValueError, RecursionError) as error:
        raise Reject(rule) from error
    require(isinstance(value, dict) and _tree_ok(value), rule)
    return value


# --------------------------------------------------------------------------- files (§4, R-11)


def read_regular(path: str, limit: int | None = None, limit_rule: str = "") -> bytes | None:
    """A regular file's bytes (None if absent); symbolic links and other types are PATH_UNSAFE."""
    try:
        info = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    require(stat.S_ISREG(info.st_mode), "PATH_UNSAFE")
    require(limit is None or info.st_size <= limit, limit_rule)
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as file:
        return file.read()


# --------------------------------------------------------------------------- header (§12 step 1)


def header_from_bytes(data: bytes) -> dict[str, Any]:
    """§12 step 1 from R-2 on, on the bytes of header.json (a file, or a member of a shard)."""
    require(len(data) <= MIB, "HEADER_TOO_LARGE")
    header = parse_json(data, "HEADER_JSON", "HEADER_ENCODING")
    require(header.get("format") == "detfmt", "NOT_DETFMT")
    version = header.get("version")
    require(isinstance(version, str) and VERSION.fullmatch(version), "HEADER_SCHEMA")
    require(int(version.split(".")[0]) == 1, "VERSION_UNSUPPORTED")
    features = header.get("required_features", [])
    require(isinstance(features, list) and all(isinstance(f, str) for f in features),
            "HEADER_SCHEMA")
    require(set(features) <= HEADER_FEATURES, "FEATURE_UNSUPPORTED")
    check_schema(header)
    check_cross_members(header)
    return header


def ragged(header: dict[str, Any]) -> bool:
    return "ragged_labels" in header.get("required_features", [])


def _int_in(value: Any, low: int, high: int) -> bool:
    return is_int(value) and low <= value <= high


def _non_negative(value: Any) -> bool:
    return is_int(value) and value >= 0


def _object(value: Any) -> bool:
    return isinstance(value, dict)


def check_schema(header: dict[str, Any]) -> None:
    """§5 tables: types, ranges, mandatory members (unknown members are ignored, R-9)."""
    ok = (_int_in(header.get("num_samples"), 0, 1 << 40)
          and _int_in(header.get("max_boxes"), 0, 65536)
          and isinstance(header.get("classes"), list) and len(header["classes"]) <= 65536
          and _object(header.get("image")) and _object(header.get("files"))
          and _object(header.get("arrays")))
    require(ok, "HEADER_SCHEMA")
    for item in header["classes"]:
        require(_object(item) and isinstance(item.get("name"), str)
                and 1 <= len(item["name"]) <= 256, "HEADER_SCHEMA")
        source = item.get("source_id")
        require(source is None or _int_in(source, -(1 << 63), (1 << 63) - 1), "HEADER_SCHEMA")
    image = header["image"]
    fixed = image.get("fixed_shape")
    require(image.get("channels", 3) == 3 and is_int(image.get("channels", 3))
            and image.get("color", "RGB") == "RGB"
            and (fixed is None or (isinstance(fixed, list) and len(fixed) == 3
                                   and _int_in(fixed[0], 1, 16384)
                                   and _int_in(fixed[1], 1, 16384) and fixed[2] == 3
                                   and is_int(fixed[2])))
            and (image.get("max_side") is None or _int_in(image.get("max_side"), 1, 16384))
            and _object(image.get("codecs", {}))
            and all(_non_negative(v) for v in image.get("codecs", {}).values()),
            "HEADER_SCHEMA")
    for info in header["files"].values():
        require(_object(info) and _non_negative(info.get("size"))
                and isinstance(info.get("xxh3_64"), str)
                and re.fullmatch(r"[0-9a-f]{16}", info["xxh3_64"]), "HEADER_SCHEMA")
    for info in header["arrays"].values():
        dtype = info.get("dtype") if _object(info) else None
        require(_object(info) and isinstance(info.get("shape"), list)
                and all(_non_negative(v) for v in info["shape"])
                and (isinstance(dtype, str) or (isinstance(dtype, list) and all(
                    isinstance(pair, list) and len(pair) == 2
                    and all(isinstance(x, str) for x in pair) for pair in dtype))),
                "HEADER_SCHEMA")
    require(_object(header.get("extensions", {})), "HEADER_SCHEMA")
    box_fields = header.get("box_fields", [])
    require(isinstance(box_fields, list), "HEADER_SCHEMA")
    for field in box_fields:
        require(_object(field) and isinstance(field.get("name"), str)
                and re.fullmatch(r"[a-z][a-z0-9_]{0,31}", field["name"])
                and field.get("dtype") in ("|u1", "<i4", "<f4"), "HEADER_SCHEMA")
    image_fields = header.get("image_fields", [])
    require(isinstance(image_fields, list) and all(f in IMAGE_FIELDS for f in image_fields),
            "HEADER_SCHEMA")
    writer = header.get("writer", "")
    require(isinstance(writer, str) and len(writer) <= 256, "HEADER_SCHEMA")
    metadata = header.get("metadata", {})
    require(_object(metadata) and all(isinstance(v, str) for v in metadata.values()),
            "HEADER_SCHEMA")
    if ragged(header):  # §10.2: num_boxes is required with ragged_labels (ignored without)
        require(_int_in(header.get("num_boxes"), 0, 1 << 56), "HEADER_SCHEMA")


def check_cross_members(header: dict[str, Any]) -> None:
    """§12 step 1, items a to k."""
    def unique(values: list[Any]) -> bool:
        return len(values) == len(set(values))

    require(unique([c["name"] for c in header["classes"]])
            and unique([c["source_id"] for c in header["classes"]
                        if c.get("source_id") is not None])
            and unique([f["name"] for f in header.get("box_fields", [])])
            and unique(header.get("image_fields", []))
            and unique(header.get("required_features", [])), "HEADER_SCHEMA")
    metadata = header.get("metadata", {})
    require(len(metadata) <= 1024
            and sum(len(k) + len(v) for k, v in metadata.items()) <= 65536, "LIMIT_EXCEEDED")
    codecs = header["image"].get("codecs", {})
    require(set(codecs) <= set(CODECS.values()), "CODEC_UNKNOWN")
    require(not codecs or sum(codecs.values()) == header["num_samples"], "HEADER_SCHEMA")
    arrays = implied_arrays(header)
    require(set(header["files"]) == member_files(header), "HEADER_SCHEMA")
    require(set(header["arrays"]) == set(arrays), "HEADER_SCHEMA")
    for name, (dtype, shape) in arrays.items():
        wanted = [list(pair) for pair in INDEX] if dtype == "index" else dtype
        require(header["arrays"][name]["dtype"] == wanted, "NPY_DTYPE")
        require(tuple(header["arrays"][name]["shape"]) == shape, "COUNT_MISMATCH")


def implied_arrays(header: dict[str, Any]) -> dict[str, tuple[str, tuple[int, ...]]]:
    """Every .npy member with its dtype and shape, in byte-wise name order (§4, §10)."""
    n, m = header["num_samples"], header["max_boxes"]
    slots = (header["num_boxes"],) if ragged(header) else (n, m)
    arrays = {"index.npy": ("index", (n,)), "boxes.npy": ("<f4", (*slots, 4)),
              "classes.npy": ("<i4", slots), "counts.npy": ("<i4", (n,))}
    for field in header.get("box_fields", []):
        arrays[f"box_{field['name']}.npy"] = (field["dtype"], slots)
    for name in header.get("image_fields", []):
        if name == "file_name":
            arrays["file_name.offsets.npy"] = ("<u8", (n + 1,))
        else:
            dtype, tail = IMAGE_ARRAYS[name]
            arrays[f"{name}.npy"] = (dtype, (n, *tail))
    return dict(sorted(arrays.items()))


def member_files(header: dict[str, Any]) -> set[str]:
    extra = {"file_name.bin"} if "file_name" in header.get("image_fields", []) else set()
    return {*implied_arrays(header), "images.bin", *extra}


# --------------------------------------------------------------------------- .npy (§6)

class _Grammar:
    """§6's array-header grammar, exactly, by recursive descent (no superset is accepted)."""

    def __init__(self, text: str) -> None:
        self.text, self.at = text, 0

    def peek(self) -> str:
        return self.text[self.at:self.at + 1]

    def ws(self) -> None:
        while self.peek() == " ":
            self.at += 1

    def literal(self, word: str) -> bool:
        if self.text.startswith(word, self.at):
            self.at += len(word)
            return True
        return False

    def expect(self, word: str) -> None:
        require(self.literal(word), "NPY_HEADER")

    def string(self) -> str:
        quote = self.peek()
        require(quote in ("'", '"') and quote != "", "NPY_HEADER")
        end = self.text.find(quote, self.at + 1)
        require(end > 0, "NPY_HEADER")
        value = self.text[self.at + 1:end]
        require("\\" not in value, "NPY_HEADER")
        self.at = end + 1
        return value

    def integer(self) -> int:
        start = self.at
        while self.peek() and self.peek() in "0123456789":
            self.at += 1
        require(self.at > start, "NPY_HEADER")
        return int(self.text[start:self.at])

    def pair(self) -> tuple[str, str]:
        self.expect("(")
        self.ws()
        first = self.string()
        self.ws()
        self.expect(",")
        self.ws()
        second = self.string()
        self.ws()
        self.expect(")")
        return first, second

    def descr(self) -> Any:
        if not self.literal("["):
            return self.string()
        self.ws()
        pairs = [self.pair()]
        self.ws()
        while self.literal(","):
            self.ws()
            if self.peek() == "]":
                break
            pairs.append(self.pair())
            self.ws()
        self.expect("]")
        return [list(pair) for pair in pairs]

    def shape(self) -> tuple[int, ...]:
        self.expect("(")
        self.ws()
        if self.literal(")"):
            return ()
        dims = [self.integer()]
        self.ws()
        self.expect(",")  # a one-element tuple needs its comma
        self.ws()
        while self.peek() != ")":
            dims.append(self.integer())
            self.ws()
            if not self.literal(","):
                break
            self.ws()
        self.expect(")")
        return tuple(dims)

    def boolean(self) -> bool:
        if self.literal("False"):
            return False
        self.expect("True")
        return True

    def dictionary(self) -> dict[str, Any]:
        values = {"descr": self.descr, "fortran_order": self.boolean, "shape": self.shape}
        fields: dict[str, Any] = {}
        self.ws()
        self.expect("{")
        for k in range(3):
            self.ws()
            if k:
                self.expect(",")
                self.ws()
            key = self.string()
            require(key in values and key not in fields, "NPY_HEADER")
            self.ws()
            self.expect(":")
            self.ws()
            fields[key] = values[key]()  # each key takes its own kind of value
        self.ws()
        if self.literal(","):
            self.ws()
        self.expect("}")
        self.ws()
        self.literal("\n")
        require(self.at == len(self.text), "NPY_HEADER")
        return fields


def _dictionary(text: str) -> dict[str, Any]:
    return _Grammar(text).dictionary()


def parse_npy(data: bytes, dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    """§6: R-15, R-16, R-17, shape (R-20 or R-18), R-19; then the array."""
    require(len(data) >= 10 and data[:6] == b"\x93NUMPY", "NPY_HEADER")
    version = (data[6], data[7])
    if version == (1, 0):
        length, start = struct.unpack("<H", data[8:10])[0], 10
    else:
        require(version in ((2, 0), (3, 0)) and len(data) >= 12, "NPY_HEADER")
        length, start = struct.unpack("<I", data[8:12])[0], 12
    require(length <= 4096 and start + length <= len(data), "NPY_HEADER")
    try:
        text = data[start:start + length].decode("utf-8" if version[0] == 3 else "latin-1")
    except UnicodeDecodeError as error:
        raise Reject("NPY_HEADER") from error
    fields = _dictionary(text)
    require(fields["fortran_order"] is False, "NPY_ORDER")
    wanted: Any = [tuple(pair) for pair in INDEX] if dtype == "index" else dtype
    descr = fields["descr"]
    got = [tuple(pair) for pair in descr] if isinstance(descr, list) else descr
    require(got == wanted, "NPY_DTYPE")
    if fields["shape"] != shape:
        raise Reject("COUNT_MISMATCH" if fields["shape"][:1] != shape[:1] else "NPY_SHAPE")
    numpy_dtype = np.dtype(wanted)
    count = int(np.prod(shape)) if shape else 1
    require(start + length + count * numpy_dtype.itemsize == len(data), "NPY_SIZE")
    return np.frombuffer(data, numpy_dtype, count, start + length).reshape(shape)


# --------------------------------------------------------------------------- open (§12 steps 2-4)


def open_members(header: dict[str, Any], get: Callable[[str], bytes | None],
                 ) -> tuple[dict[str, bytes], dict[str, np.ndarray]]:
    """§12 steps 2 to 4 on the member files that ``get`` returns by name (None: absent)."""
    files: dict[str, bytes] = {}
    for name in sorted(header["files"]):  # step 2
        data = get(name)
        require(data is not None, "FILE_MISSING")
        assert data is not None
        require(len(data) == header["files"][name]["size"],
                "BLOB_SIZE" if name == "images.bin" else "FILE_SIZE")
        files[name] = data
    arrays = {name: parse_npy(files[name], dtype, shape)  # step 3
              for name, (dtype, shape) in implied_arrays(header).items()}
    check_tails(header, files, arrays)  # step 4a, 4b
    check_records(header, arrays, len(files["images.bin"]))  # step 4c
    if ragged(header):  # step 4d
        require(sum(int(k) for k in arrays["counts.npy"]) == header["num_boxes"], "COUNT_SUM")
    return files, arrays


def check_tails(header: dict[str, Any], files: dict[str, bytes],
                arrays: dict[str, np.ndarray]) -> None:
    index, size, n = arrays["index.npy"], len(files["images.bin"]), header["num_samples"]
    if n == 0:
        require(size == 0, "BLOB_SIZE")
    else:
        offset, length = int(index[n - 1]["offset"]), int(index[n - 1]["nbytes"])
        end = align64(offset + length)
        require(offset <= size and length <= size and end <= size, "OFFSETS_BOUNDS")
        require(end == size, "BLOB_SIZE")
        fixed = header["image"].get("fixed_shape")
        require(not fixed or size == n * align64(fixed[0] * fixed[1] * 3), "FIXED_SHAPE")
    if "file_name" in header.get("image_fields", []):
        offsets = arrays["file_name.offsets.npy"]
        require(int(offsets[0]) == 0 and int(offsets[-1]) == len(files["file_name.bin"]),
                "OFFSETS_BOUNDS")


def check_records(header: dict[str, Any], arrays: dict[str, np.ndarray], size: int) -> None:
    """§8 and §12 step 4c: record by record, each record's rules in order, then its count."""
    index, counts = arrays["index.npy"], arrays["counts.npy"]
    fixed = header["image"].get("fixed_shape")
    previous_end = 0
    for i, record in enumerate(index):
        offset, length = int(record["offset"]), int(record["nbytes"])
        require(offset <= size and length <= size, "OFFSETS_BOUNDS")
        if i == 0:
            require(offset == 0, "OFFSETS_BOUNDS")
        elif offset != align64(previous_end):
            require(offset % 64 == 0, "OFFSET_ALIGNMENT")
            require(offset >= previous_end, "OFFSETS_NON_MONOTONIC")
            raise Reject("OFFSETS_BOUNDS")  # a gap
        previous_end = offset + length
        height, width, codec = int(record["height"]), int(record["width"]), int(record["codec"])
        require(1 <= height <= 16384 and 1 <= width <= 16384, "LIMIT_EXCEEDED")
        require(record["channels"] == 3 and record["flags"] == 0 and record["reserved"] == 0,
                "INDEX_FIELD")
        require(codec in CODECS, "CODEC_UNKNOWN")
        decoded = height * width * 3
        require(int(record["decoded_nbytes"]) == decoded
                and (length == decoded if codec == 0 else length > 0), "SAMPLE_SIZE")
        require(not fixed or (codec == 0 and height == fixed[0] and width == fixed[1]),
                "FIXED_SHAPE")
        require(0 <= int(counts[i]) <= header["max_boxes"], "COUNT_RANGE")


# --------------------------------------------------------------------------- verify (steps 6-9)


def verify_samples(header: dict[str, Any], files: dict[str, bytes],
                   arrays: dict[str, np.ndarray]) -> list[dict[str, Any]]:
    """§12 steps 6 to 9 (everything verification checks), then the dump of each sample."""
    index, blob = arrays["index.npy"], files["images.bin"]
    for name in sorted(header["files"]):  # step 6
        require(xxhash.xxh3_64_hexdigest(files[name]) == header["files"][name]["xxh3_64"],
                "FILE_CHECKSUM")
    declared = {k: v for k, v in header["image"].get("codecs", {}).items() if v}
    if header["image"].get("codecs"):
        actual: dict[str, int] = {}
        for record in index:
            actual[CODECS[int(record["codec"])]] = actual.get(CODECS[int(record["codec"])], 0) + 1
        require(declared == actual, "HEADER_SCHEMA")
    rows = label_rows(header, arrays)
    for i in range(len(index)):  # step 7
        check_labels(header, arrays, i, rows[i])
    fields = check_image_fields(header, files, arrays)  # step 8
    pixels = []
    for record in index:  # step 9
        start, length = int(record["offset"]), int(record["nbytes"])
        payload = blob[start:start + length]
        require(xxhash.xxh3_64_intdigest(payload) == int(record["checksum"]), "CHECKSUM")
        require(not any(blob[start + length:align64(start + length)]), "PADDING_NONZERO")
        pixels.append(decode(record, payload))
    samples = []
    for i, record in enumerate(index):
        boxes, classes, box_fields = labels_of(header, arrays, i, rows[i])
        samples.append({
            "height": int(record["height"]), "width": int(record["width"]), "channels": 3,
            "codec": CODECS[int(record["codec"])], "count": len(classes),
            "pixels": base64.b64encode(pixels[i]).decode("ascii"),
            "boxes_sha256": sha256(boxes.tobytes()), "classes_sha256": sha256(classes.tobytes()),
            "box_fields": {name: sha256(values.tobytes()) for name, values in box_fields.items()},
            "image_fields": fields[i],
        })
    return samples


def label_rows(header: dict[str, Any], arrays: dict[str, np.ndarray]) -> list[int]:
    """The first row of each sample's labels: its index (padded), or the sum of the counts
    before it (ragged, §10.2)."""
    counts = [int(k) for k in arrays["counts.npy"]]
    if not ragged(header):
        return list(range(len(counts)))
    rows, total = [], 0
    for count in counts:
        rows.append(total)
        total += count
    return rows


def labels_of(header: dict[str, Any], arrays: dict[str, np.ndarray], i: int, row: int
              ) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """The K boxes, classes and per-box field values of sample i."""
    count = int(arrays["counts.npy"][i])
    names = [f["name"] for f in header.get("box_fields", [])]
    if ragged(header):
        part = slice(row, row + count)
        return (arrays["boxes.npy"][part], arrays["classes.npy"][part],
                {name: arrays[f"box_{name}.npy"][part] for name in names})
    return (arrays["boxes.npy"][i, :count], arrays["classes.npy"][i, :count],
            {name: arrays[f"box_{name}.npy"][i, :count] for name in names})


def check_labels(header: dict[str, Any], arrays: dict[str, np.ndarray], i: int, row: int
                 ) -> None:
    """§10, §12 step 7 for sample i: R-37, R-38, R-39, R-40 (padded layout only)."""
    record = arrays["index.npy"][i]
    width, height = float(record["width"]), float(record["height"])
    boxes, classes, _ = labels_of(header, arrays, i, row)
    for x1, y1, x2, y2 in boxes.astype(float):
        require(np.isfinite([x1, y1, x2, y2]).all() and x1 <= x2 and y1 <= y2, "BOX_INVALID")
    for x1, y1, x2, y2 in boxes.astype(float):
        require(x1 >= 0 and y1 >= 0 and x2 <= width and y2 <= height, "BOX_OUT_OF_IMAGE")
    require(all(0 <= c < len(header["classes"]) for c in classes), "CLASS_RANGE")
    if ragged(header):
        return
    count, m = int(arrays["counts.npy"][i]), header["max_boxes"]
    padding_ok = (arrays["boxes.npy"][i, count:m].tobytes() == bytes(16 * (m - count))
                  and (arrays["classes.npy"][i, count:m] == -1).all())
    for field in header.get("box_fields", []):
        values = arrays[f"box_{field['name']}.npy"][i, count:m]
        padding_ok = padding_ok and values.tobytes() == bytes(values.nbytes)
    require(padding_ok, "MASK_INCONSISTENT")


def check_image_fields(header: dict[str, Any], files: dict[str, bytes],
                       arrays: dict[str, np.ndarray]) -> list[dict[str, Any]]:
    """§11.2, §12 step 8: orig_size, scale_offset, file_name offsets, file_name UTF-8 (each over
    every sample before the next); returns each sample's image fields for the dump."""
    listed = header.get("image_fields", [])
    n = header["num_samples"]
    if "orig_size" in listed:
        for value in arrays["orig_size.npy"]:
            require((value >= 1).all(), "IMAGE_FIELD")
    if "scale_offset" in listed:
        for value in arrays["scale_offset.npy"]:
            require(np.isfinite(value).all() and (value[:2] > 0).all(), "IMAGE_FIELD")
    names: list[str] = []
    if "file_name" in listed:
        offsets, text = [int(v) for v in arrays["file_name.offsets.npy"]], files["file_name.bin"]
        for i in range(n):
            require(offsets[i] <= offsets[i + 1] <= len(text), "OFFSETS_NON_MONOTONIC")
            require(offsets[i + 1] - offsets[i] <= 4096, "LIMIT_EXCEEDED")
        for i in range(n):
            try:
                names.append(text[offsets[i]:offsets[i + 1]].decode("utf-8"))
            except UnicodeDecodeError as error:
                raise Reject("IMAGE_FIELD") from error
    out = []
    for i in range(n):
        fields: dict[str, Any] = {}
        for name in listed:
            fields[name] = names[i] if name == "file_name" else arrays[f"{name}.npy"][i].tolist()
        out.append(fields)
    return out


# --------------------------------------------------------------------------- codecs (§9)


def decode(record: np.void, payload: bytes) -> bytes:
    height, width, codec = int(record["height"]), int(record["width"]), int(record["codec"])
    if codec == 0:
        return payload
    if codec == 1:
        return decode_zstd(payload, height * width * 3)
    if codec == 3:
        return decode_png(payload, height, width)
    return decode_jpeg(payload, height, width)


def decode_zstd(payload: bytes, expected: int) -> bytes:
    """§9.2, steps Z1 to Z8."""
    require(len(payload) >= 5 and payload[:4] == b"\x28\xb5\x2f\xfd", "ZSTD_CORRUPT")  # Z1
    descriptor = payload[4]
    require(not descriptor & 0x08, "ZSTD_CORRUPT")  # Z2: reserved bit
    fcs_flag, single, checksum, did_flag = (descriptor >> 6, (descriptor >> 5) & 1,
                                            (descriptor >> 2) & 1, descriptor & 3)
    did_size = (0, 1, 2, 4)[did_flag]
    fcs_size = (1 if single else 0, 2, 4, 8)[fcs_flag]
    position = 5 + (0 if single else 1)
    require(len(payload) >= position + did_size + fcs_size, "ZSTD_CORRUPT")
    window = 0
    if not single:
        exponent, mantissa = payload[5] >> 3, payload[5] & 7
        base = 1 << (10 + exponent)
        window = base + (base >> 3) * mantissa
    dictionary = int.from_bytes(payload[position:position + did_size], "little")
    position += did_size
    declared = None
    if fcs_size:
        declared = int.from_bytes(payload[position:position + fcs_size], "little")
        declared += 256 if fcs_size == 2 else 0
    position += fcs_size
    require(declared is not None and declared == expected, "ZSTD_SIZE")  # Z3
    if single:
        window = declared
    require(window <= 1 << 27, "ZSTD_WINDOW")  # Z4
    require(dictionary == 0, "ZSTD_CORRUPT")  # Z5
    block_limit = min(window, 1 << 17)
    while True:  # Z6
        require(position + 3 <= len(payload), "ZSTD_CORRUPT")
        block = int.from_bytes(payload[position:position + 3], "little")
        last, kind, size = block & 1, (block >> 1) & 3, block >> 3
        require(kind != 3 and size <= block_limit, "ZSTD_CORRUPT")
        position += 3 + (1 if kind == 1 else size)
        require(position <= len(payload), "ZSTD_CORRUPT")
        if last:
            break
    position += 4 * checksum
    require(position <= len(payload), "ZSTD_CORRUPT")
    require(position == len(payload), "ZSTD_TRAILING")  # Z7
    decompressor = zstandard.ZstdDecompressor(max_window_size=1 << 27).decompressobj()
    try:  # Z8
        data = decompressor.decompress(payload)
    except zstandard.ZstdError as error:
        raise Reject("ZSTD_CORRUPT") from error
    require(decompressor.eof and len(data) == expected, "ZSTD_CORRUPT")
    return data


ADAM7 = ((0, 0, 8, 8), (0, 4, 8, 8), (4, 0, 8, 4), (0, 2, 4, 4), (2, 0, 4, 2), (0, 1, 2, 2),
         (1, 0, 2, 1))


def decode_png(payload: bytes, height: int, width: int) -> bytes:
    """§9.4, steps P1 to P4: chunks and CRCs, IHDR, one zlib stream of exactly the filtered
    image, filter types 0..4; then the pixels (this reader's own unfiltering)."""
    require(payload[:8] == b"\x89PNG\r\n\x1a\n", "IMAGE_DECODE")  # P1
    position, chunks = 8, []
    while True:  # P2
        require(position + 12 <= len(payload), "IMAGE_DECODE")
        length = struct.unpack(">I", payload[position:position + 4])[0]
        kind = payload[position + 4:position + 8]
        require(length < 1 << 31 and position + 12 + length <= len(payload)
                and re.fullmatch(rb"[A-Za-z]{4}", kind), "IMAGE_DECODE")
        data = payload[position + 8:position + 8 + length]
        crc = struct.unpack(">I", payload[position + 8 + length:position + 12 + length])[0]
        require(zlib.crc32(kind + data) == crc, "IMAGE_DECODE")
        chunks.append((kind, data))
        position += 12 + length
        if kind == b"IEND":
            break
    require(position == len(payload), "IMAGE_DECODE")
    kinds = [kind for kind, _ in chunks]
    require(kinds[0] == b"IHDR" and len(chunks[0][1]) == 13 and kinds.count(b"IHDR") == 1
            and kinds.count(b"IEND") == 1 and len(chunks[-1][1]) == 0, "IMAGE_DECODE")
    w, h, depth, color, compression, filtering, interlace = struct.unpack(">IIBBBBB", chunks[0][1])
    require((w, h, depth, color, compression, filtering) == (width, height, 8, 2, 0, 0)
            and interlace in (0, 1), "IMAGE_DECODE")
    idat = [k for k, kind in enumerate(kinds) if kind == b"IDAT"]
    require(idat and idat == list(range(idat[0], idat[-1] + 1)), "IMAGE_DECODE")
    for k, kind in enumerate(kinds[1:-1], start=1):
        if kind == b"PLTE":
            require(k < idat[0] and kinds.count(b"PLTE") == 1 and len(chunks[k][1]) % 3 == 0
                    and 3 <= len(chunks[k][1]) <= 768, "IMAGE_DECODE")
        else:
            require(kind == b"IDAT" or kind[0] & 0x20, "IMAGE_DECODE")  # ancillary: ignored
    passes = [(r0, c0, dr, dc) for r0, c0, dr, dc in ADAM7 if r0 < height and c0 < width] \
        if interlace else [(0, 0, 1, 1)]
    shapes = [(len(range(r0, height, dr)), len(range(c0, width, dc))) for r0, c0, dr, dc in passes]
    expected = sum(rows * (1 + 3 * cols) for rows, cols in shapes)
    stream = zlib.decompressobj()
    try:  # P3
        raw = stream.decompress(b"".join(chunks[k][1] for k in idat), expected + 1)
    except zlib.error as error:
        raise Reject("IMAGE_DECODE") from error
    require(len(raw) == expected and stream.eof and not stream.unused_data
            and not stream.unconsumed_tail, "IMAGE_DECODE")
    image = np.zeros((height, width, 3), np.uint8)
    position = 0
    for (r0, c0, dr, dc), (rows, cols) in zip(passes, shapes, strict=True):  # P4
        size = rows * (1 + 3 * cols)
        image[r0::dr, c0::dc] = _unfilter(raw[position:position + size], rows, cols)
        position += size
    return image.tobytes()


def _unfilter(data: bytes, rows: int, cols: int) -> np.ndarray:
    stride = 3 * cols
    out = bytearray(rows * stride)
    previous = bytearray(stride)
    for r in range(rows):
        kind = data[r * (stride + 1)]
        require(kind <= 4, "IMAGE_DECODE")
        line = bytearray(data[r * (stride + 1) + 1:(r + 1) * (stride + 1)])
        for x in range(stride):
            a = line[x - 3] if x >= 3 else 0
            b = previous[x]
            c = previous[x - 3] if x >= 3 else 0
            if kind == 1:
                line[x] = (line[x] + a) & 0xFF
            elif kind == 2:
                line[x] = (line[x] + b) & 0xFF
            elif kind == 3:
                line[x] = (line[x] + (a + b) // 2) & 0xFF
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
        out[r * stride:(r + 1) * stride] = line
        previous = line
    return np.frombuffer(bytes(out), np.uint8).reshape(rows, cols, 3)


SOF_ALLOWED = {0xC0, 0xC1, 0xC2}
SEGMENTS_ALLOWED = {0xC4, 0xDB, 0xDD, 0xFE, *range(0xE0, 0xF0)}
MAX_SCANS = 256  # §9.3 J2, R-50


def check_jpeg(payload: bytes, height: int, width: int) -> None:
    """§9.3, steps J1 to J3: the marker walk, the frame, the colour space."""
    require(payload[:2] == b"\xff\xd8", "IMAGE_DECODE")  # J1
    position, frame, scans, jfif, adobe = 2, None, 0, False, None
    while True:  # J2
        require(position < len(payload) and payload[position] == 0xFF, "IMAGE_DECODE")
        while position < len(payload) and payload[position] == 0xFF:
            position += 1  # fill bytes
        require(position < len(payload), "IMAGE_DECODE")
        marker = payload[position]
        position += 1
        if marker == 0xD9:  # EOI
            require(frame is not None and scans and position == len(payload), "IMAGE_DECODE")
            break
        require(marker in SOF_ALLOWED or marker in SEGMENTS_ALLOWED or marker == 0xDA,
                "IMAGE_DECODE")
        require(position + 2 <= len(payload), "IMAGE_DECODE")
        length = struct.unpack(">H", payload[position:position + 2])[0]
        require(length >= 2 and position + length <= len(payload), "IMAGE_DECODE")
        body = payload[position + 2:position + length]
        position += length
        if marker in SOF_ALLOWED:
            require(frame is None and scans == 0 and len(body) == 6 + 3 * 3 and body[5] == 3,
                    "IMAGE_DECODE")
            frame = body
        elif marker == 0xE0 and body[:5] == b"JFIF\x00":
            jfif = True
        elif marker == 0xEE and body[:5] == b"Adobe" and len(body) >= 12:
            adobe = body[11]
        elif marker == 0xDA:  # SOS: the entropy-coded data runs to the next marker
            require(frame is not None, "IMAGE_DECODE")
            scans += 1
            require(scans <= MAX_SCANS, "IMAGE_DECODE")  # R-50, before decoding
            while True:
                position = payload.find(b"\xff", position)
                require(position >= 0 and position + 1 < len(payload), "IMAGE_DECODE")
                following = payload[position + 1]
                if following == 0x00 or 0xD0 <= following <= 0xD7:
                    position += 2
                    continue
                break
    assert frame is not None
    precision, frame_height, frame_width = frame[0], *struct.unpack(">HH", frame[1:5])
    sampling = [frame[7 + 3 * k] for k in range(3)]
    require(precision == 8 and (frame_height, frame_width) == (height, width)
            and sampling[0] in (0x11, 0x21, 0x22) and sampling[1:] == [0x11, 0x11],
            "IMAGE_DECODE")
    ids = bytes(frame[6 + 3 * k] for k in range(3))
    require(adobe in (None, 1) and (jfif or adobe is not None or ids != b"RGB"),
            "IMAGE_DECODE")  # J3


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def jpeg_entropy(payload: bytes) -> None:
    """§9.3 J4's entropy rules: walk every scan's Huffman codes (T.81 Annex F and G)."""
    huffman: dict[int, dict[tuple[int, int], int]] = {}  # Tc<<4|Th -> (length, code) -> symbol
    restart, frame, sof = 0, None, 0
    seen: dict[int, list[int]] = {}
    known: dict[int, list[bytearray]] = {}
    at = 2
    while True:
        while payload[at + 1] == 0xFF:
            at += 1
        marker = payload[at + 1]
        if marker == 0xD9:
            return
        size = struct.unpack(">H", payload[at + 2:at + 4])[0]
        body, at = payload[at + 4:at + 2 + size], at + 2 + size
        if marker == 0xC4:
            i = 0
            while i < len(body):
                require(i + 17 <= len(body), "IMAGE_DECODE")
                lengths, table, code, j = body[i + 1:i + 17], {}, 0, i + 17
                for n, many in enumerate(lengths, 1):
                    for _ in range(many):
                        require(j < len(body) and code < (1 << n), "IMAGE_DECODE")
                        table[(n, code)] = body[j]
                        code, j = code + 1, j + 1
                    code <<= 1
                huffman[body[i]] = table
                i = j
        elif marker == 0xDD:
            require(len(body) == 2, "IMAGE_DECODE")
            restart = struct.unpack(">H", body)[0]
        elif marker in SOF_ALLOWED:
            sof = marker
            lines, samples = struct.unpack(">HH", body[1:5])
            comps = {body[6 + 3 * k]: (body[7 + 3 * k] >> 4, body[7 + 3 * k] & 15)
                     for k in range(body[5])}
            hmax, vmax = max(h for h, _ in comps.values()), max(v for _, v in comps.values())
            frame = (lines, samples, comps, hmax, vmax)
            for c, (h, v) in comps.items():
                seen[c] = [-1] * 64
                wide = _ceil(_ceil(samples * h, hmax), 8)
                high = _ceil(_ceil(lines * v, vmax), 8)
                known[c] = [bytearray(64) for _ in range(wide * high)]
        elif marker == 0xDA:
            stop = at
            while not (payload[stop] == 0xFF and payload[stop + 1] not in (0, *range(0xD0, 0xD8))):
                stop += 1
            jpeg_scan(body, payload[at:stop], frame, sof == 0xC2, restart, huffman, seen, known)
            at = stop


def jpeg_scan(body: bytes, coded: bytes, frame: Any, progressive: bool, restart: int,
              huffman: dict, seen: dict, known: dict) -> None:
    lines, samples, comps, hmax, vmax = frame
    require(len(body) > 0, "IMAGE_DECODE")
    ns = body[0]
    require(1 <= ns <= 4 and len(body) == 4 + 2 * ns, "IMAGE_DECODE")
    parts = [(body[1 + 2 * k], body[2 + 2 * k] >> 4, body[2 + 2 * k] & 15) for k in range(ns)]
    ss, se, ah, al = body[-3], body[-2], body[-1] >> 4, body[-1] & 15
    require(all(c in comps for c, _, _ in parts) and len({c for c, _, _ in parts}) == ns,
            "IMAGE_DECODE")
    if not progressive:
        require((ss, se, ah, al) == (0, 63, 0, 0), "IMAGE_DECODE")
    else:
        require((ss == 0) == (se == 0) and ss <= se <= 63 and (ss == 0 or ns == 1) and al <= 13
                and (ah == 0 or al == ah - 1), "IMAGE_DECODE")
        for c, _, _ in parts:
            require(ss == 0 or seen[c][0] >= 0, "IMAGE_DECODE")  # DC before AC
            for k in range(ss, se + 1):
                require(ah == max(seen[c][k], 0), "IMAGE_DECODE")
                seen[c][k] = al
    tables = {}
    for c, td, ta in parts:
        dc, ac = huffman.get(td), huffman.get(0x10 | ta)
        if not progressive:
            require(dc is not None and ac is not None, "IMAGE_DECODE")
        elif ss == 0:
            require(ah > 0 or dc is not None, "IMAGE_DECODE")
        else:
            require(ac is not None, "IMAGE_DECODE")
        tables[c] = (dc, ac)
    if ns == 1:  # non-interleaved: the component's own blocks
        c = parts[0][0]
        h, v = comps[c]
        wide = _ceil(_ceil(samples * h, hmax), 8)
        units = [[(c, b)] for b in range(wide * _ceil(_ceil(lines * v, vmax), 8))]
    else:  # interleaved (sequential, or a DC scan): MCUs of h x v blocks per component
        units = [[(c, -1) for c, _, _ in parts for _ in range(comps[c][0] * comps[c][1])]
                 for _ in range(_ceil(samples, 8 * hmax) * _ceil(lines, 8 * vmax))]
    pieces, numbers, start = [], [], 0
    for found in re.finditer(rb"\xff[\xd0-\xd7]", coded):
        pieces.append(coded[start:found.start()])
        numbers.append(found.group()[1] & 7)
        start = found.end()
    pieces.append(coded[start:])
    per = restart or len(units)
    require(numbers == [k & 7 for k in range(_ceil(len(units), per) - 1)], "IMAGE_DECODE")
    for n, piece in enumerate(pieces):
        reader = BitReader(piece.replace(b"\xff\x00", b"\xff"))
        eob = 0
        for unit in units[n * per:(n + 1) * per]:
            for c, b in unit:
                dc, ac = tables[c]
                if not progressive:
                    reader.bits(reader.huff(dc))
                    k = 1
                    while k < 64:
                        rs = reader.huff(ac)
                        if rs & 15:
                            k += rs >> 4
                            require(k < 64, "IMAGE_DECODE")
                            reader.bits(rs & 15)
                        elif rs != 0xF0:
                            break
                        else:
                            k += 15
                            require(k < 64, "IMAGE_DECODE")
                        k += 1
                elif ss == 0:
                    reader.bits(1 if ah else reader.huff(dc))
                elif ah == 0:
                    eob = ac_first(reader, ac, ss, se, eob, known[c][b])
                else:
                    eob = ac_refine(reader, ac, ss, se, eob, known[c][b])
        require(reader.left() < 8, "IMAGE_DECODE")  # no whole byte before the marker


class BitReader:
    def __init__(self, data: bytes) -> None:
        self.data, self.total, self.at = data, 8 * len(data), 0

    def bit(self) -> int:
        require(self.at < self.total, "IMAGE_DECODE")  # the data ran out
        at, self.at = self.at, self.at + 1
        return (self.data[at >> 3] >> (7 - (at & 7))) & 1

    def bits(self, n: int) -> int:
        out = 0
        for _ in range(n):
            out = out << 1 | self.bit()
        return out

    def huff(self, table: dict[tuple[int, int], int]) -> int:
        code = 0
        for n in range(1, 17):
            code = code << 1 | self.bit()
            if (n, code) in table:
                return table[(n, code)]
        raise Reject("IMAGE_DECODE")  # no such code

    def left(self) -> int:
        return self.total - self.at


def ac_first(reader: BitReader, ac: dict, ss: int, se: int, eob: int, nz: bytearray) -> int:
    if eob:
        return eob - 1
    k = ss
    while k <= se:
        rs = reader.huff(ac)
        r, s = rs >> 4, rs & 15
        if s:
            k += r
            require(k <= se, "IMAGE_DECODE")
            reader.bits(s)
            nz[k] = 1
        elif r == 15:
            k += 15
            require(k <= se, "IMAGE_DECODE")
        else:
            return (1 << r) + reader.bits(r) - 1
        k += 1
    return 0


def ac_refine(reader: BitReader, ac: dict, ss: int, se: int, eob: int, nz: bytearray) -> int:
    k = ss
    if eob == 0:
        while k <= se:
            rs = reader.huff(ac)
            r, s = rs >> 4, rs & 15
            if s:
                require(s == 1, "IMAGE_DECODE")
                reader.bit()
            elif r != 15:
                eob = (1 << r) + reader.bits(r)
                break
            while k <= se:
                if nz[k]:
                    reader.bit()  # correction bit
                elif r == 0:
                    break
                else:
                    r -= 1
                k += 1
            if s:
                require(k <= se, "IMAGE_DECODE")
                nz[k] = 1
            k += 1
    if eob:
        for j in range(k, se + 1):
            if nz[j]:
                reader.bit()
        eob -= 1
    return eob


def decode_jpeg(payload: bytes, height: int, width: int) -> bytes:
    check_jpeg(payload, height, width)
    try:  # J4: libjpeg-turbo (islow IDCT, fancy upsampling), YCbCr to RGB
        image = Image.open(io.BytesIO(payload), formats=["JPEG"])
        image.load()
    except (OSError, SyntaxError, ValueError) as error:
        raise Reject("IMAGE_DECODE") from error
    require(image.size == (width, height) and image.mode == "RGB", "IMAGE_DECODE")
    jpeg_entropy(payload)  # J4: Pillow recovers from corrupt entropy-coded data silently
    return np.asarray(image).tobytes()


# --------------------------------------------------------------------------- a dataset (§12)


def dump(root: str) -> dict[str, Any]:
    """Open, verify everything, and return the canonical dump (conformance/README.md)."""
    if os.path.isdir(root) and os.path.lexists(os.path.join(root, "manifest.json")):
        return dump_sharded(root)  # §19.2: a root with an entry manifest.json is sharded
    require(os.path.lexists(root), "HEADER_MISSING")  # §12 step 1
    require(os.path.isdir(root), "NOT_DETFMT")
    data = read_regular(os.path.join(root, "header.json"), MIB, "HEADER_TOO_LARGE")
    require(data is not None, "HEADER_MISSING")
    assert data is not None
    header = header_from_bytes(data)
    files, arrays = open_members(header, lambda name: read_regular(os.path.join(root, name)))
    return {"header": header, "samples": verify_samples(header, files, arrays)}


# --------------------------------------------------------------------------- sharded roots (§19)

MANIFEST_LIMIT = 64 * MIB
HEX16 = re.compile(r"[0-9a-f]{16}")
HEX32 = re.compile(r"[0-9a-f]{32}")
PATH_COMPONENT = re.compile(r"[A-Za-z0-9_.-]{1,255}")
#: §19.3: key -> (required, check); optional keys may be absent.
Keys = dict[str, tuple[bool, Callable[[Any], bool]]]
MANIFEST_KEYS: Keys = {
    "format": (True, lambda v: True),
    "version": (True, lambda v: True),
    "required_features": (True, lambda v: True),
    "extensions": (False, lambda v: isinstance(v, dict)),
    "write_id": (True, lambda v: isinstance(v, str) and HEX32.fullmatch(v) is not None),
    "num_samples": (True, lambda v: _int_in(v, 0, (1 << 63) - 1)),
    "schema": (True, lambda v: _keys(v, SCHEMA_KEYS)),
    "shards": (True, lambda v: isinstance(v, list) and all(_keys(e, SHARD_KEYS) for e in v)),
    "writer": (False, lambda v: isinstance(v, str)),
    "metadata": (False, lambda v: isinstance(v, dict)
                 and all(isinstance(x, str) for x in v.values())),
}
SCHEMA_KEYS: Keys = {
    "codec": (True, lambda v: v in ("raw", "zstd", "jpeg", "png", "mixed")),
    "classes": (True, lambda v: isinstance(v, list) and all(
        _keys(c, {"name": (True, lambda n: isinstance(n, str)),
                  "source_id": (False, lambda s: s is None or is_int(s))}) for c in v)),
    "box_fields": (False, lambda v: isinstance(v, list) and all(
        _keys(f, {"name": (True, lambda n: isinstance(n, str)),
                  "dtype": (True, lambda d: d in ("|u1", "<i4", "<f4"))}) for f in v)),
    "image_fields": (False, lambda v: isinstance(v, list) and all(isinstance(f, str) for f in v)),
    "fixed_shape": (False, lambda v: v is None or (isinstance(v, list)
                                                   and all(is_int(x) for x in v))),
    "max_side": (False, lambda v: v is None or is_int(v)),
}
SHARD_KEYS: Keys = {
    "path": (True, lambda v: isinstance(v, str)),
    "key": (True, lambda v: isinstance(v, str)),
    "num_samples": (True, lambda v: _int_in(v, 0, (1 << 63) - 1)),
    "first_index": (True, lambda v: _int_in(v, 0, (1 << 63) - 1)),
    "bytes": (True, lambda v: _int_in(v, 1, (1 << 63) - 1)),
    "xxh3_64": (True, lambda v: isinstance(v, str) and HEX16.fullmatch(v) is not None),
    "max_boxes": (True, lambda v: _int_in(v, 0, 65536)),
}


def _keys(value: Any, keys: Keys) -> bool:
    """A JSON object with no unknown key, every required key, and valid values."""
    return (isinstance(value, dict) and set(value) <= set(keys)
            and all(name in value for name, (needed, _) in keys.items() if needed)
            and all(check(value[name]) for name, (_, check) in keys.items() if name in value))


def parse_manifest(root: str) -> dict[str, Any]:
    """§19.4 steps 2 to 8."""
    data = read_regular(os.path.join(root, "manifest.json"), MANIFEST_LIMIT, "MANIFEST_SCHEMA")
    assert data is not None  # the caller saw the entry
    manifest = parse_json(data, "MANIFEST_SCHEMA")  # step 2
    require(manifest.get("format") == "detfmt", "NOT_DETFMT")  # step 3
    version = manifest.get("version")  # step 4
    require(isinstance(version, str) and VERSION.fullmatch(version), "MANIFEST_SCHEMA")
    major, minor = (int(part) for part in version.split("."))
    require(major == 1 and minor in MANIFEST_MINORS, "VERSION_UNSUPPORTED")
    features = manifest.get("required_features")  # step 5
    require(isinstance(features, list) and all(isinstance(f, str) for f in features),
            "MANIFEST_SCHEMA")
    require(set(features) <= MANIFEST_FEATURES, "FEATURE_UNSUPPORTED")
    require(_keys(manifest, MANIFEST_KEYS) and "sharded" in features  # step 6
            and len(set(features)) == len(features), "MANIFEST_SCHEMA")
    seen: set[str] = set()
    for entry in manifest["shards"]:  # step 7
        path = entry["path"]
        parts = path.split("/")
        require(len(path) <= 4096 and all(PATH_COMPONENT.fullmatch(p) and p not in (".", "..")
                                          for p in parts)
                and path.lower() not in seen, "PATH_UNSAFE")
        seen.add(path.lower())
    first = 0
    for entry in manifest["shards"]:  # step 8
        require(entry["first_index"] == first and entry["num_samples"] * 48 <= entry["bytes"],
                "SHARD_INDEXING")
        first += entry["num_samples"]
    require(manifest["num_samples"] == first, "SHARD_INDEXING")
    return manifest


def shard_bytes(root: str, path: str) -> bytes:
    """§19.4 step 9 for one shard: each component a directory (not a link), the file regular."""
    current = root
    parts = path.split("/")
    for k, part in enumerate(parts):
        current = os.path.join(current, part)
        try:
            info = os.lstat(current)
        except (FileNotFoundError, NotADirectoryError) as error:
            raise Reject("FILE_MISSING") from error
        last = k == len(parts) - 1
        require(not stat.S_ISLNK(info.st_mode), "PATH_UNSAFE")
        if not last:
            require(stat.S_ISDIR(info.st_mode), "FILE_MISSING")
        else:
            require(stat.S_ISREG(info.st_mode), "PATH_UNSAFE")
    with open(current, "rb") as file:
        return file.read()


def unpack(data: bytes) -> dict[str, bytes]:
    """§19.4 step 10 b to f: the prefix, the table of contents, the layout, the gaps."""
    require(len(data) >= 16 and data[:8] == b"DETFMTPK", "PACK_MAGIC")
    version, length = struct.unpack("<II", data[8:16])
    require(version == 1, "VERSION_UNSUPPORTED")
    require(length <= MIB and 16 + length <= len(data), "PACK_LAYOUT")
    text = data[16:16 + length]
    toc = parse_json(text.rstrip(b" "), "PACK_LAYOUT")
    require(text.rstrip(b" ").endswith(b"}"), "PACK_LAYOUT")  # only spaces after the value
    require(set(toc) == {"members"} and isinstance(toc["members"], list), "PACK_LAYOUT")
    members: dict[str, bytes] = {}
    end = 16 + length
    for member in toc["members"]:
        require(isinstance(member, dict) and set(member) == {"name", "offset", "size"}
                and isinstance(member["name"], str) and is_int(member["offset"])
                and is_int(member["size"]) and member["size"] >= 0, "PACK_LAYOUT")
        name, offset, size = member["name"], member["offset"], member["size"]
        require(name and "/" not in name and name not in members, "PACK_LAYOUT")
        require(offset == align64(end) and offset + size <= len(data), "PACK_LAYOUT")
        members[name] = data[offset:offset + size]
        end = offset + size
    require("header.json" in members and end == len(data), "PACK_LAYOUT")
    end = 16 + length
    for member in toc["members"]:
        require(not any(data[end:member["offset"]]), "PACK_LAYOUT")  # zero gaps
        end = member["offset"] + member["size"]
    return members


def check_consistent(manifest: dict[str, Any], entry: dict[str, Any],
                     header: dict[str, Any]) -> None:
    """S-8: the shard's 1.0 header agrees with the manifest's schema and its shard entry."""
    schema = manifest["schema"]

    def classes(items: list[dict[str, Any]]) -> list[tuple[str, Any]]:
        return [(item["name"], item.get("source_id")) for item in items]

    def fields(items: list[dict[str, Any]]) -> list[tuple[str, str]]:
        return [(item["name"], item["dtype"]) for item in items]

    image = header["image"]
    used = {name: count for name, count in image.get("codecs", {}).items() if count}
    codec_ok = (schema["codec"] == "mixed" or header["num_samples"] == 0
                or used == {schema["codec"]: header["num_samples"]})
    require(classes(header["classes"]) == classes(schema["classes"])
            and fields(header.get("box_fields", [])) == fields(schema.get("box_fields", []))
            and header.get("image_fields", []) == schema.get("image_fields", [])
            and schema.get("fixed_shape") in (None, image.get("fixed_shape"))
            and image.get("max_side") == schema.get("max_side")
            and codec_ok
            and header["num_samples"] == entry["num_samples"]
            and header["max_boxes"] == entry["max_boxes"]
            and set(header.get("required_features", [])) <= set(manifest["required_features"]),
            "SCHEMA_MISMATCH")


def dump_sharded(root: str) -> dict[str, Any]:
    """§19.4: open and verify a sharded root; dump its samples in global order."""
    require(not os.path.lexists(os.path.join(root, "header.json")), "ROOT_LAYOUT")  # step 1
    manifest = parse_manifest(root)  # steps 2 to 8
    shards = []
    for entry in manifest["shards"]:  # step 9
        data = shard_bytes(root, entry["path"])
        require(len(data) == entry["bytes"], "SHARD_SIZE")
        shards.append(data)
    samples: list[dict[str, Any]] = []
    for entry, data in zip(manifest["shards"], shards, strict=True):  # step 10
        require(xxhash.xxh3_64_hexdigest(data) == entry["xxh3_64"], "SHARD_CHECKSUM")
        members = unpack(data)
        header = header_from_bytes(members["header.json"])
        files, arrays = open_members(header, members.get)
        require(set(members) == {"header.json", *header["files"]}, "PACK_LAYOUT")
        check_consistent(manifest, entry, header)
        samples += verify_samples(header, files, arrays)
    return {"manifest": manifest, "samples": samples}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m conformance.spec_reader DATASET", file=sys.stderr)
        return 2
    try:
        result = dump(args[0])
    except Reject as error:
        print(json.dumps({"error": error.rule}))
        return 1
    print(json.dumps(result, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
