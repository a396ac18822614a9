"""A second detfmt reader (1.0 datasets and 1.1 sharded roots), written from SPEC.md alone
(it does not import detfmt).

It exists to keep SPEC.md, the goldens and the reference implementation honest: the conformance
suite must pass against both readers. It is deliberately simple (whole files read into memory,
scalar loops), so use it on small datasets only. It speaks the runner protocol:

    python -m conformance --reader "python -m conformance.spec_reader"
"""

from __future__ import annotations

import base64
import hashlib
import io
import itertools
import json
import os
import re
import stat
import struct
import sys
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


# --------------------------------------------------------------------------- files (§4, R-11)


def read_member(root: str, name: str) -> bytes | None:
    """The bytes of a regular file, None if absent; symlinks and non-files are PATH_UNSAFE."""
    try:
        fd = os.open(os.path.join(root, name), os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    except OSError as error:
        raise Reject("PATH_UNSAFE") from error
    try:
        info = os.fstat(fd)
        require(stat.S_ISREG(info.st_mode), "PATH_UNSAFE")
        if name == "header.json":
            require(info.st_size <= MIB, "HEADER_TOO_LARGE")
        chunks, left = [], info.st_size
        while left > 0:
            chunk = os.read(fd, left)
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


# --------------------------------------------------------------------------- header (§5, §14)


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        require(key not in out, "HEADER_JSON")
        out[key] = value
    return out


def _no_constant(name: str) -> None:
    raise Reject("HEADER_JSON")


def parse_header(root: str) -> dict[str, Any]:
    require(os.path.exists(root), "HEADER_MISSING")
    require(os.path.isdir(root), "NOT_DETFMT")
    return parse_header_bytes(read_member(root, "header.json"))


def parse_header_bytes(data: bytes | None) -> dict[str, Any]:
    """§5 and §14 on the bytes of header.json (a file, or a member of a shard, §19.4)."""
    require(data is not None, "HEADER_MISSING")
    assert data is not None
    require(len(data) <= MIB, "HEADER_TOO_LARGE")
    require(data and not data.startswith(b"\xef\xbb\xbf"), "HEADER_ENCODING")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise Reject("HEADER_ENCODING") from error
    try:
        header = json.loads(text, object_pairs_hook=_pairs, parse_constant=_no_constant)
    except ValueError as error:
        raise Reject("HEADER_JSON") from error
    require(isinstance(header, dict), "HEADER_JSON")
    require(header.get("format") == "detfmt", "NOT_DETFMT")
    version = header.get("version")
    require(isinstance(version, str) and re.fullmatch(r"[0-9]{1,4}\.[0-9]{1,4}", version),
            "HEADER_SCHEMA")
    require(int(version.split(".")[0]) == 1, "VERSION_UNSUPPORTED")
    features = header.get("required_features", [])
    require(isinstance(features, list) and all(isinstance(f, str) for f in features),
            "HEADER_SCHEMA")
    require(not features, "FEATURE_UNSUPPORTED")  # 1.0 implements no feature
    check_schema(header)
    check_cross_members(header)
    return header


def _check_classes(classes: object) -> None:
    require(isinstance(classes, list) and len(classes) <= 65536, "HEADER_SCHEMA")
    assert isinstance(classes, list)
    for item in classes:
        require(isinstance(item, dict) and isinstance(item.get("name"), str)
                and 1 <= len(item["name"]) <= 256, "HEADER_SCHEMA")
        source = item.get("source_id")
        require(source is None or (is_int(source) and -(1 << 63) <= source < 1 << 63),
                "HEADER_SCHEMA")


def _check_image(image: object) -> None:
    require(isinstance(image, dict), "HEADER_SCHEMA")
    assert isinstance(image, dict)
    channels = image.get("channels", 3)
    require(is_int(channels) and channels == 3 and image.get("color", "RGB") == "RGB",
            "HEADER_SCHEMA")
    fixed = image.get("fixed_shape")
    require(fixed is None or (isinstance(fixed, list) and len(fixed) == 3
                              and all(is_int(v) for v in fixed) and 1 <= fixed[0] <= 16384
                              and 1 <= fixed[1] <= 16384 and fixed[2] == 3), "HEADER_SCHEMA")
    side = image.get("max_side")
    require(side is None or (is_int(side) and 1 <= side <= 16384), "HEADER_SCHEMA")
    codecs = image.get("codecs", {})
    require(isinstance(codecs, dict) and all(is_int(v) and v >= 0 for v in codecs.values()),
            "HEADER_SCHEMA")


def check_schema(header: dict[str, Any]) -> None:
    """§5.1-§5.5: members, types and ranges (R-8)."""
    for key in ("num_samples", "max_boxes", "classes", "image", "files", "arrays"):
        require(key in header, "HEADER_SCHEMA")
    require(is_int(header["num_samples"]) and 0 <= header["num_samples"] <= 1 << 40,
            "HEADER_SCHEMA")
    require(is_int(header["max_boxes"]) and 0 <= header["max_boxes"] <= 65536, "HEADER_SCHEMA")
    _check_classes(header["classes"])
    _check_image(header["image"])
    require(isinstance(header["files"], dict) and isinstance(header["arrays"], dict),
            "HEADER_SCHEMA")
    for info in header["files"].values():
        require(isinstance(info, dict) and is_int(info.get("size")) and info["size"] >= 0
                and isinstance(info.get("xxh3_64"), str)
                and re.fullmatch("[0-9a-f]{16}", info["xxh3_64"]), "HEADER_SCHEMA")
    for info in header["arrays"].values():
        require(isinstance(info, dict) and "dtype" in info and isinstance(info.get("shape"), list)
                and all(is_int(v) and v >= 0 for v in info["shape"]), "HEADER_SCHEMA")
    require(isinstance(header.get("extensions", {}), dict), "HEADER_SCHEMA")
    fields = header.get("box_fields", [])
    require(isinstance(fields, list), "HEADER_SCHEMA")
    for field in fields:
        require(isinstance(field, dict) and isinstance(field.get("name"), str)
                and re.fullmatch(r"[a-z][a-z0-9_]{0,31}", field["name"])
                and field.get("dtype") in ("|u1", "<i4", "<f4"), "HEADER_SCHEMA")
    image_fields = header.get("image_fields", [])
    require(isinstance(image_fields, list) and all(f in IMAGE_FIELDS for f in image_fields),
            "HEADER_SCHEMA")
    writer = header.get("writer", "")
    require(isinstance(writer, str) and len(writer) <= 256, "HEADER_SCHEMA")
    metadata = header.get("metadata", {})
    require(isinstance(metadata, dict) and all(isinstance(v, str) for v in metadata.values()),
            "HEADER_SCHEMA")


def check_cross_members(header: dict[str, Any]) -> None:
    """§12 step 1, after the schema: uniqueness, limits, codec names, files and arrays lists."""
    names = [item["name"] for item in header["classes"]]
    require(len(set(names)) == len(names), "HEADER_SCHEMA")
    ids = [item["source_id"] for item in header["classes"] if item.get("source_id") is not None]
    require(len(set(ids)) == len(ids), "HEADER_SCHEMA")
    fields = [field["name"] for field in header.get("box_fields", [])]
    require(len(set(fields)) == len(fields), "HEADER_SCHEMA")
    image_fields = header.get("image_fields", [])
    require(len(set(image_fields)) == len(image_fields), "HEADER_SCHEMA")
    metadata = header.get("metadata", {})
    require(len(metadata) <= 1024
            and sum(len(k) + len(v) for k, v in metadata.items()) <= 65536, "LIMIT_EXCEEDED")
    codecs = header["image"].get("codecs", {})
    require(set(codecs) <= set(CODECS.values()), "CODEC_UNKNOWN")
    require(not codecs or sum(codecs.values()) == header["num_samples"], "HEADER_SCHEMA")
    arrays = implied_arrays(header)
    strings = {"file_name.bin"} if "file_name" in image_fields else set()
    require(set(header["files"]) == set(arrays) | {"images.bin"} | strings, "HEADER_SCHEMA")
    require(set(header["arrays"]) == set(arrays), "HEADER_SCHEMA")
    for name, (dtype, shape) in arrays.items():
        wanted = [list(pair) for pair in INDEX] if dtype == "index" else dtype
        require(header["arrays"][name]["dtype"] == wanted, "NPY_DTYPE")
        require(tuple(header["arrays"][name]["shape"]) == shape, "COUNT_MISMATCH")


def implied_arrays(header: dict[str, Any]) -> dict[str, tuple[str, tuple[int, ...]]]:
    n, m = header["num_samples"], header["max_boxes"]
    arrays = {"index.npy": ("index", (n,)), "boxes.npy": ("<f4", (n, m, 4)),
              "classes.npy": ("<i4", (n, m)), "counts.npy": ("<i4", (n,))}
    for field in header.get("box_fields", []):
        arrays[f"box_{field['name']}.npy"] = (field["dtype"], (n, m))
    for name in header.get("image_fields", []):
        if name == "file_name":
            arrays["file_name.offsets.npy"] = ("<u8", (n + 1,))
        else:
            dtype, tail = IMAGE_ARRAYS[name]
            arrays[f"{name}.npy"] = (dtype, (n, *tail))
    return arrays


# --------------------------------------------------------------------------- .npy (§6)

_TOKEN = re.compile(r" *(?:(?P<str>'[^'\\]*'|\"[^\"\\]*\")|(?P<int>[0-9]+)|(?P<bool>True|False)"
                    r"|(?P<punct>[{}()\[\],:]))")


def _tokens(text: str) -> list[tuple[str, Any]]:
    text = text.rstrip(" ")
    text = text[:-1] if text.endswith("\n") else text
    text = text.rstrip(" ")
    out, position = [], 0
    while position < len(text):
        match = _TOKEN.match(text, position)
        require(match, "NPY_HEADER")
        assert match is not None
        position = match.end()
        if match["str"] is not None:
            out.append(("str", match["str"][1:-1]))
        elif match["int"] is not None:
            out.append(("int", int(match["int"])))
        elif match["bool"] is not None:
            out.append(("bool", match["bool"] == "True"))
        else:
            out.append(("punct", match["punct"]))
    return out


def _value(tokens: list[tuple[str, Any]], i: int) -> tuple[Any, int]:
    kind, value = tokens[i]
    if kind != "punct":
        return value, i + 1
    require(value in "([", "NPY_HEADER")
    close = ")" if value == "(" else "]"
    items, i = [], i + 1
    while tokens[i] != ("punct", close):
        item, i = _value(tokens, i)
        items.append(item)
        if tokens[i] == ("punct", ","):
            i += 1
        else:
            require(tokens[i] == ("punct", close), "NPY_HEADER")
    return (tuple(items) if close == ")" else items), i + 1


def _dictionary(text: str) -> dict[str, Any]:
    tokens = _tokens(text)
    try:
        require(tokens[0] == ("punct", "{"), "NPY_HEADER")
        fields: dict[str, Any] = {}
        i = 1
        while tokens[i] != ("punct", "}"):
            require(tokens[i][0] == "str" and tokens[i + 1] == ("punct", ":"), "NPY_HEADER")
            key = tokens[i][1]
            value, i = _value(tokens, i + 2)
            require(key not in fields, "NPY_HEADER")
            fields[key] = value
            if tokens[i] == ("punct", ","):
                i += 1
        require(i + 1 == len(tokens), "NPY_HEADER")
    except IndexError as error:
        raise Reject("NPY_HEADER") from error
    return fields


def parse_npy(data: bytes, dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    """R-15 .. R-20 in SPEC order, then the array (a copy-free view of ``data``)."""
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
    require(set(fields) == {"descr", "fortran_order", "shape"}, "NPY_HEADER")
    require(isinstance(fields["shape"], tuple) and all(is_int(v) for v in fields["shape"]),
            "NPY_HEADER")
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


# --------------------------------------------------------------------------- index (§7, §8)


def check_index(index: np.ndarray, header: dict[str, Any], size: int) -> None:
    n = len(index)
    if n == 0:
        require(size == 0, "BLOB_SIZE")
        return
    offsets = [int(v) for v in index["offset"]]
    lengths = [int(v) for v in index["nbytes"]]
    end = align64(offsets[-1] + lengths[-1])
    require(offsets[-1] <= size and lengths[-1] <= size and end <= size, "OFFSETS_BOUNDS")
    require(end == size, "BLOB_SIZE")
    fixed = header["image"].get("fixed_shape")
    require(not fixed or size == n * align64(fixed[0] * fixed[1] * 3), "FIXED_SHAPE")
    require(all(o <= size and b <= size for o, b in zip(offsets, lengths, strict=True)),
            "OFFSETS_BOUNDS")
    require(offsets[0] == 0, "OFFSETS_BOUNDS")
    links = range(1, n)
    if any(offsets[i] != align64(offsets[i - 1] + lengths[i - 1]) for i in links):
        require(all(o % 64 == 0 for o in offsets), "OFFSET_ALIGNMENT")
        require(all(offsets[i] >= offsets[i - 1] + lengths[i - 1] for i in links),
                "OFFSETS_NON_MONOTONIC")
        raise Reject("OFFSETS_BOUNDS")
    for record in index:
        require(1 <= record["height"] <= 16384 and 1 <= record["width"] <= 16384,
                "LIMIT_EXCEEDED")
    for record in index:
        require(record["channels"] == 3 and record["flags"] == 0 and record["reserved"] == 0,
                "INDEX_FIELD")
    for record in index:
        require(int(record["codec"]) in CODECS, "CODEC_UNKNOWN")
    for record in index:
        decoded = int(record["height"]) * int(record["width"]) * 3
        require(int(record["decoded_nbytes"]) == decoded, "SAMPLE_SIZE")
    for record in index:
        raw = int(record["codec"]) == 0
        require(int(record["nbytes"]) == int(record["decoded_nbytes"]) if raw
                else int(record["nbytes"]) > 0, "SAMPLE_SIZE")
    for record in index:
        require(not fixed or (int(record["codec"]) == 0 and record["height"] == fixed[0]
                              and record["width"] == fixed[1]), "FIXED_SHAPE")


def check_strings(offsets: np.ndarray, size: int) -> None:
    values = [int(v) for v in offsets]
    require(values[0] == 0 and values[-1] == size, "OFFSETS_BOUNDS")
    require(all(b >= a for a, b in itertools.pairwise(values)),
            "OFFSETS_NON_MONOTONIC")
    require(all(b - a <= 4096 for a, b in itertools.pairwise(values)),
            "LIMIT_EXCEEDED")


# --------------------------------------------------------------------------- codecs (§9)


def decode(record: np.void, payload: bytes) -> bytes:
    height, width, codec = int(record["height"]), int(record["width"]), int(record["codec"])
    expected = height * width * 3
    if codec == 0:
        return payload
    if codec == 1:
        return decode_zstd(payload, expected)
    if codec == 3:
        require(len(payload) >= 29 and payload[12:16] == b"IHDR" and payload[24] == 8
                and payload[25] == 2, "IMAGE_DECODE")
    try:
        image = Image.open(io.BytesIO(payload), formats=["JPEG" if codec == 2 else "PNG"])
        image.load()
    except (OSError, SyntaxError, ValueError) as error:
        raise Reject("IMAGE_DECODE") from error
    require(image.size == (width, height), "IMAGE_DECODE")
    return np.asarray(image.convert("RGB")).tobytes()


def decode_zstd(payload: bytes, expected: int) -> bytes:
    try:
        frame = zstandard.get_frame_parameters(payload)
    except zstandard.ZstdError as error:
        raise Reject("ZSTD_CORRUPT") from error
    require(frame.content_size == expected, "ZSTD_SIZE")
    require(frame.window_size <= 1 << 27, "ZSTD_WINDOW")
    decompressor = zstandard.ZstdDecompressor().decompressobj()
    try:
        data = decompressor.decompress(payload)
    except zstandard.ZstdError as error:
        raise Reject("ZSTD_CORRUPT") from error
    require(decompressor.eof and len(data) == expected, "ZSTD_CORRUPT")
    require(not decompressor.unused_data, "ZSTD_TRAILING")
    return data


# --------------------------------------------------------------------------- the whole dataset


def open_dataset(root: str) -> tuple[dict[str, Any], dict[str, bytes], dict[str, np.ndarray]]:
    """The open checks (§12 steps 1-5)."""
    header = parse_header(root)
    files, arrays = open_members(header, lambda name: read_member(root, name))
    return header, files, arrays


def open_members(header: dict[str, Any], get: Callable[[str], bytes | None],
                 ) -> tuple[dict[str, bytes], dict[str, np.ndarray]]:
    """§12 steps 2-5 on the member files that ``get`` returns by name (None: absent)."""
    files: dict[str, bytes] = {}
    for name in sorted(header["files"]):
        data = get(name)
        require(data is not None, "FILE_MISSING")
        assert data is not None
        require(len(data) == header["files"][name]["size"],
                "BLOB_SIZE" if name == "images.bin" else "FILE_SIZE")
        files[name] = data
    arrays = {name: parse_npy(files[name], dtype, shape)
              for name, (dtype, shape) in implied_arrays(header).items()}
    check_index(arrays["index.npy"], header, len(files["images.bin"]))
    counts = arrays["counts.npy"]
    require(((counts >= 0) & (counts <= header["max_boxes"])).all(), "COUNT_RANGE")
    if "file_name" in header.get("image_fields", []):
        check_strings(arrays["file_name.offsets.npy"], len(files["file_name.bin"]))
    return files, arrays


def check_labels(header: dict[str, Any], arrays: dict[str, np.ndarray], i: int) -> None:
    record = arrays["index.npy"][i]
    width, height = float(record["width"]), float(record["height"])
    count, m = int(arrays["counts.npy"][i]), header["max_boxes"]
    boxes, classes = arrays["boxes.npy"][i], arrays["classes.npy"][i]
    for x1, y1, x2, y2 in boxes[:count].astype(float):
        require(np.isfinite([x1, y1, x2, y2]).all() and x1 <= x2 and y1 <= y2, "BOX_INVALID")
    for x1, y1, x2, y2 in boxes[:count].astype(float):
        require(x1 >= 0 and y1 >= 0 and x2 <= width and y2 <= height, "BOX_OUT_OF_IMAGE")
    require(all(0 <= c < len(header["classes"]) for c in classes[:count]), "CLASS_RANGE")
    require(boxes[count:m].tobytes() == bytes(16 * (m - count))
            and (classes[count:m] == -1).all(), "MASK_INCONSISTENT")
    for field in header.get("box_fields", []):
        values = arrays[f"box_{field['name']}.npy"][i, count:m]
        require(values.tobytes() == bytes(values.nbytes), "MASK_INCONSISTENT")


def image_fields(header: dict[str, Any], files: dict[str, bytes],
                 arrays: dict[str, np.ndarray], i: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in header.get("image_fields", []):
        if name == "file_name":
            offsets = arrays["file_name.offsets.npy"]
            try:
                out[name] = files["file_name.bin"][int(offsets[i]):int(offsets[i + 1])].decode()
            except UnicodeDecodeError as error:
                raise Reject("IMAGE_FIELD") from error
            continue
        value = arrays[f"{name}.npy"][i]
        if name == "orig_size":
            require((value >= 1).all(), "IMAGE_FIELD")
        if name == "scale_offset":
            require(np.isfinite(value).all() and (value[:2] > 0).all(), "IMAGE_FIELD")
        out[name] = value.tolist()
    return out


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def dump(root: str) -> dict[str, Any]:
    """Open, verify everything, and return the canonical dump (conformance/README.md)."""
    if os.path.isdir(root) and os.path.lexists(os.path.join(root, "manifest.json")):
        return dump_sharded(root)  # §19: a root holding manifest.json is a sharded root
    header, files, arrays = open_dataset(root)
    return {"header": header, "samples": verify_samples(header, files, arrays)}


def verify_samples(header: dict[str, Any], files: dict[str, bytes],
                   arrays: dict[str, np.ndarray]) -> list[dict[str, Any]]:
    """§12 steps 6-7 (every check of verification) and the dump of each sample."""
    for name, info in header["files"].items():
        require(xxhash.xxh3_64_hexdigest(files[name]) == info["xxh3_64"], "FILE_CHECKSUM")
    index, blob = arrays["index.npy"], files["images.bin"]
    declared = {k: v for k, v in header["image"].get("codecs", {}).items() if v}
    if declared:
        actual: dict[str, int] = {}
        for record in index:
            name = CODECS[int(record["codec"])]
            actual[name] = actual.get(name, 0) + 1
        require(declared == actual, "HEADER_SCHEMA")
    pixels = []
    for record in index:
        start, length = int(record["offset"]), int(record["nbytes"])
        payload = blob[start:start + length]
        require(xxhash.xxh3_64_intdigest(payload) == int(record["checksum"]), "CHECKSUM")
        require(not any(blob[start + length:align64(start + length)]), "PADDING_NONZERO")
        pixels.append(decode(record, payload))
    samples = []
    for i, record in enumerate(index):
        check_labels(header, arrays, i)
        count = int(arrays["counts.npy"][i])
        samples.append({
            "height": int(record["height"]), "width": int(record["width"]), "channels": 3,
            "codec": CODECS[int(record["codec"])], "count": count,
            "pixels": base64.b64encode(pixels[i]).decode("ascii"),
            "boxes_sha256": sha256(arrays["boxes.npy"][i, :count].tobytes()),
            "classes_sha256": sha256(arrays["classes.npy"][i, :count].tobytes()),
            "box_fields": {f["name"]: sha256(arrays[f"box_{f['name']}.npy"][i, :count].tobytes())
                           for f in header.get("box_fields", [])},
            "image_fields": image_fields(header, files, arrays, i),
        })
    return samples


# --------------------------------------------------------------------------- sharded roots (§19)

MANIFEST_LIMIT = 64 * MIB
HEX16 = re.compile(r"[0-9a-f]{16}")
HEX32 = re.compile(r"[0-9a-f]{32}")
#: §19.3: key -> (required, check); optional keys may be absent.
MANIFEST_KEYS: dict[str, tuple[bool, Callable[[Any], bool]]] = {
    "format": (True, lambda v: isinstance(v, str)),
    "version": (True, lambda v: isinstance(v, str)),
    "required_features": (True, lambda v: isinstance(v, list)
                          and all(isinstance(f, str) for f in v)),
    "extensions": (False, lambda v: isinstance(v, dict)),
    "write_id": (True, lambda v: isinstance(v, str)),  # its syntax: after S-4 (§19 order)
    "num_samples": (True, lambda v: is_int(v) and v >= 0),
    "schema": (True, lambda v: isinstance(v, dict)),
    "shards": (True, lambda v: isinstance(v, list)),
    "writer": (False, lambda v: isinstance(v, str)),
    "metadata": (False, lambda v: isinstance(v, dict)
                 and all(isinstance(x, str) for x in v.values())),
}
SCHEMA_KEYS: dict[str, tuple[bool, Callable[[Any], bool]]] = {
    "codec": (True, lambda v: v in ("raw", "zstd", "jpeg", "png", "mixed")),
    "classes": (True, lambda v: isinstance(v, list) and all(
        _object(c, {"name": (True, lambda n: isinstance(n, str)),
                    "source_id": (False, lambda s: s is None or is_int(s))}) for c in v)),
    "box_fields": (False, lambda v: isinstance(v, list) and all(
        _object(f, {"name": (True, lambda n: isinstance(n, str)),
                    "dtype": (True, lambda d: d in ("|u1", "<i4", "<f4"))}) for f in v)),
    "image_fields": (False, lambda v: isinstance(v, list) and all(isinstance(f, str) for f in v)),
    "fixed_shape": (False, lambda v: v is None or (isinstance(v, list)
                                                   and all(is_int(x) for x in v))),
    "max_side": (False, lambda v: v is None or is_int(v)),
}
SHARD_KEYS: dict[str, tuple[bool, Callable[[Any], bool]]] = {
    "path": (True, lambda v: isinstance(v, str)),
    "key": (True, lambda v: isinstance(v, str)),
    "num_samples": (True, lambda v: is_int(v) and v >= 0),
    "first_index": (True, lambda v: is_int(v) and v >= 0),
    "bytes": (True, lambda v: is_int(v) and v > 0),
    "xxh3_64": (True, lambda v: isinstance(v, str)),
    "max_boxes": (True, lambda v: is_int(v) and v >= 0),
}


def _object(value: Any, keys: dict[str, tuple[bool, Callable[[Any], bool]]]) -> bool:
    """A JSON object with no unknown key, every required key, and valid values."""
    return (isinstance(value, dict) and set(value) <= set(keys)
            and all(name in value for name, (needed, _) in keys.items() if needed)
            and all(check(value[name]) for name, (_, check) in keys.items() if name in value))


def _unique_pairs(rule: str) -> Callable[[list[tuple[str, Any]]], dict[str, Any]]:
    def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in pairs:
            require(key not in out, rule)
            out[key] = value
        return out
    return hook


def _json(data: bytes, rule: str) -> Any:
    try:
        return json.loads(data.decode("utf-8"), object_pairs_hook=_unique_pairs(rule),
                          parse_constant=lambda _: require(False, rule))
    except (UnicodeDecodeError, ValueError, RecursionError) as error:
        raise Reject(rule) from error


def read_regular(path: str, limit: int | None = None, limit_rule: str = "") -> bytes | None:
    """A regular file's bytes (None if absent); symlinks and non-files are PATH_UNSAFE."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    except OSError as error:
        raise Reject("PATH_UNSAFE") from error
    with os.fdopen(fd, "rb") as file:
        info = os.fstat(fd)
        require(stat.S_ISREG(info.st_mode), "PATH_UNSAFE")
        require(limit is None or info.st_size <= limit, limit_rule)
        return file.read()


def parse_manifest(root: str) -> dict[str, Any]:
    """S-3 .. S-6."""
    data = read_regular(os.path.join(root, "manifest.json"), MANIFEST_LIMIT, "MANIFEST_SCHEMA")
    require(data is not None, "HEADER_MISSING")
    assert data is not None
    manifest = _json(data, "MANIFEST_SCHEMA")
    require(isinstance(manifest, dict), "MANIFEST_SCHEMA")
    require(manifest.get("format") == "detfmt", "NOT_DETFMT")
    require(_object(manifest, MANIFEST_KEYS) and _object(manifest["schema"], SCHEMA_KEYS)
            and all(_object(entry, SHARD_KEYS) for entry in manifest["shards"]),
            "MANIFEST_SCHEMA")
    require(manifest["version"] == "1.1", "VERSION_UNSUPPORTED")  # the one minor with shards
    require(set(manifest["required_features"]) <= {"sharded"}, "FEATURE_UNSUPPORTED")
    require("sharded" in manifest["required_features"]
            and HEX32.fullmatch(manifest["write_id"]) is not None
            and all(HEX16.fullmatch(entry["xxh3_64"]) for entry in manifest["shards"]),
            "MANIFEST_SCHEMA")
    paths: set[str] = set()
    for entry in manifest["shards"]:
        path = entry["path"]
        require(path and "\\" not in path and not path.startswith("/")
                and all(part not in ("", ".", "..") for part in path.split("/"))
                and path not in paths, "PATH_UNSAFE")
        paths.add(path)
    first = 0
    for entry in manifest["shards"]:
        require(entry["first_index"] == first, "SHARD_INDEXING")
        first += entry["num_samples"]
    require(manifest["num_samples"] == first, "SHARD_INDEXING")
    return manifest


def unpack(data: bytes) -> dict[str, bytes]:
    """S-9 and S-10: the members of a shard file, by name."""
    require(len(data) >= 16 and data[:8] == b"DETFMTPK", "PACK_MAGIC")
    version, length = struct.unpack("<II", data[8:16])
    require(version == 1, "VERSION_UNSUPPORTED")
    require(length <= MIB and 16 + length <= len(data), "PACK_LAYOUT")
    toc = _json(data[16:16 + length], "PACK_LAYOUT")
    require(isinstance(toc, dict) and set(toc) == {"members"} and isinstance(toc["members"], list),
            "PACK_LAYOUT")
    members: dict[str, bytes] = {}
    end = 16 + length
    for member in toc["members"]:
        require(isinstance(member, dict) and set(member) == {"name", "offset", "size"}
                and isinstance(member["name"], str) and is_int(member["offset"])
                and is_int(member["size"]) and member["size"] >= 0, "PACK_LAYOUT")
        name, offset, size = member["name"], member["offset"], member["size"]
        require(name and "/" not in name and name not in members, "PACK_LAYOUT")
        require(offset == align64(end) and offset + size <= len(data), "PACK_LAYOUT")
        require(not any(data[end:offset]), "PACK_LAYOUT")  # the gap before it is zero
        members[name] = data[offset:offset + size]
        end = offset + size
    require("header.json" in members and end == len(data), "PACK_LAYOUT")
    return members


def check_consistent(schema: dict[str, Any], entry: dict[str, Any],
                     header: dict[str, Any]) -> None:
    """S-8: the shard's 1.0 header agrees with the manifest schema and its shard entry."""
    def classes(items: list[dict[str, Any]]) -> list[tuple[str, Any]]:
        return [(item["name"], item.get("source_id")) for item in items]

    def fields(items: list[dict[str, Any]]) -> list[tuple[str, str]]:
        return [(item["name"], item["dtype"]) for item in items]

    image = header["image"]
    used = {name for name, count in image.get("codecs", {}).items() if count}
    require(classes(header["classes"]) == classes(schema["classes"])
            and fields(header.get("box_fields", [])) == fields(schema.get("box_fields", []))
            and header.get("image_fields", []) == schema.get("image_fields", [])
            and schema.get("fixed_shape") in (None, image.get("fixed_shape"))
            and image.get("max_side") == schema.get("max_side")
            and (schema["codec"] == "mixed" or used <= {schema["codec"]})
            and header["num_samples"] == entry["num_samples"]
            and header["max_boxes"] == entry["max_boxes"], "SCHEMA_MISMATCH")


def dump_sharded(root: str) -> dict[str, Any]:
    """Open and verify a sharded root (§19) shard by shard; dump its samples in global order."""
    require(not os.path.lexists(os.path.join(root, "header.json")), "ROOT_LAYOUT")  # S-1
    manifest = parse_manifest(root)
    samples: list[dict[str, Any]] = []
    for entry in manifest["shards"]:  # S-2: the manifest alone names the shards
        data = read_regular(os.path.join(root, *entry["path"].split("/")))
        require(data is not None, "FILE_MISSING")
        assert data is not None
        require(len(data) == entry["bytes"], "SHARD_SIZE")
        require(xxhash.xxh3_64_hexdigest(data) == entry["xxh3_64"], "SHARD_CHECKSUM")
        members = unpack(data)
        header = parse_header_bytes(members["header.json"])
        files, arrays = open_members(header, members.get)
        require(set(members) == {"header.json", *header["files"]}, "PACK_LAYOUT")
        check_consistent(manifest["schema"], entry, header)
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
