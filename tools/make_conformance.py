"""Generate the detfmt conformance suite: 1.0 under conformance/v1, 1.1 (sharded) under v1_1.

Deterministic and byte-exact.

This is an independent writer built from SPEC.md alone: it does not import detfmt, so the
suite checks the reference implementation instead of echoing it. Payloads come from
``conformance_payloads`` (hand-built zstd/PNG, frozen JPEG), so the output does not depend on the
installed Pillow or libzstd.

    python tools/make_conformance.py            # write conformance/v1, v1_1 and cases.json
    python tools/make_conformance.py --check    # exit 1 if the committed files differ

Released cases are frozen: change a case only together with a SPEC change log entry.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import itertools
import json
import shutil
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import xxhash

sys.path.insert(0, str(Path(__file__).resolve().parent))
import conformance_payloads as payloads

ROOT = Path(__file__).resolve().parents[1] / "conformance"
ALIGN = 64
CODECS = {"raw": 0, "zstd": 1, "jpeg": 2, "png": 3}
INDEX_DTYPE = np.dtype([
    ("offset", "<u8"), ("nbytes", "<u8"), ("decoded_nbytes", "<u8"), ("checksum", "<u8"),
    ("height", "<u4"), ("width", "<u4"), ("channels", "u1"), ("codec", "u1"), ("flags", "<u2"),
    ("reserved", "<u4"),
])
INDEX_DESCR = [[name, INDEX_DTYPE.fields[name][0].str] for name in INDEX_DTYPE.names]
IMAGE_FIELD_ARRAYS = {"orig_size": ("<u4", (2,)), "scale_offset": ("<f8", (4,)),
                      "source_id": ("<i8", ())}
#: JPEG tolerance against the reference pixels, the reference decode of SPEC.md §9.3 for every case.
JPEG_MAX_MEAN_ABS_ERROR = 2.0
JPEG_MAX_ABS_ERROR = 12
WRITER = "detfmt-conformance-generator 1"


def align(value: int) -> int:
    return -(-value // ALIGN) * ALIGN


def pattern(height: int, width: int, seed: int) -> np.ndarray:
    """Deterministic, high-entropy test pixels (any byte error changes the hash)."""
    y, x, c = np.mgrid[0:height, 0:width, 0:3]
    return ((((y * width + x) * 3 + c) * 67 + seed * 29 + (y * x) % 7) % 256).astype(np.uint8)


@dataclass
class Sample:
    image: np.ndarray
    codec: str = "raw"
    boxes: Sequence[Sequence[float]] = ()
    classes: Sequence[int] = ()
    box_fields: dict[str, Sequence[float]] = field(default_factory=dict)
    orig_size: tuple[int, int] | None = None
    scale_offset: tuple[float, float, float, float] | None = None
    source_id: int | None = None
    file_name: str | None = None
    payload: bytes | None = None  # explicit encoded payload (handcrafted / frozen)


@dataclass
class Dataset:
    """A dataset as bytes in memory: member files plus the header object."""

    files: dict[str, bytes]
    header: dict
    samples: list[Sample]
    header_raw: bytes | None = None  # replaces the encoded header (header cases)
    extra: dict[str, bytes | None] = field(default_factory=dict)  # written after sealing
    as_file: bytes | None = None  # the "dataset" is this regular file (not a directory)
    links: dict[str, str] = field(default_factory=dict)  # symbolic links the runner makes

    def seal(self) -> Dataset:
        """Recompute header.files (size, xxh3-64) from the member bytes."""
        self.header["files"] = {
            name: {"size": len(data), "xxh3_64": xxhash.xxh3_64_hexdigest(data)}
            for name, data in sorted(self.files.items())
        }
        return self

    def header_bytes(self) -> bytes:
        if self.header_raw is not None:
            return self.header_raw
        return json.dumps(self.header, ensure_ascii=False, indent=2).encode() + b"\n"

    def write(self, directory: Path) -> None:
        if self.as_file is not None:
            directory.parent.mkdir(parents=True, exist_ok=True)
            directory.write_bytes(self.as_file)
            return
        directory.mkdir(parents=True)
        members = {"header.json": self.header_bytes(), **self.files, **self.extra}
        for name, data in sorted(members.items()):
            if data is None:
                continue
            target = directory / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)


def encode(sample: Sample) -> bytes:
    if sample.payload is not None:
        return sample.payload
    if sample.codec == "raw":
        return sample.image.tobytes()
    if sample.codec == "zstd":
        return payloads.zstd_frame(sample.image.tobytes())
    if sample.codec == "png":
        return payloads.png(sample.image)
    raise ValueError(f"no deterministic encoder for {sample.codec}; pass a payload")


def build(samples: list[Sample], classes: Sequence[tuple[str, int | None]], *,
          max_boxes: int | None = None, fixed_shape: tuple[int, int, int] | None = None,
          box_fields: Sequence[tuple[str, str]] = (), image_fields: Sequence[str] = (),
          max_side: int | None = None, version: str | None = None,
          extensions: dict | None = None, metadata: dict | None = None,
          ragged: bool = False) -> Dataset:
    """Lay out a valid dataset exactly as SPEC.md prescribes (with ``ragged``, the labels of
    format 1.2, SPEC §10.2: flat (T, ...) arrays behind the required feature ragged_labels)."""
    n = len(samples)
    m = max(
        (len(s.boxes) for s in samples), default=0) if max_boxes is None else max_boxes
    if version is None:
        version = "1.2" if ragged else "1.0"
    index = np.zeros(n, INDEX_DTYPE)
    blob = bytearray()
    for i, sample in enumerate(samples):
        data = encode(sample)
        height, width = sample.image.shape[:2]
        index[i] = (len(blob), len(data), height * width * 3, xxhash.xxh3_64_intdigest(data),
                    height, width, 3, CODECS[sample.codec], 0, 0)
        blob += data + bytes(align(len(data)) - len(data))
    counts = np.array([len(sample.boxes) for sample in samples], "<i4").reshape(n)
    total = int(counts.sum())
    if ragged:  # rows of all samples back to back, sample i at rows [sum(counts[:i]), +K_i)
        boxes = np.array([box for s in samples for box in s.boxes], "<f4").reshape(total, 4)
        labels = np.array([c for s in samples for c in s.classes], "<i4").reshape(total)
        slots: tuple[int, ...] = (total,)
    else:
        boxes = np.zeros((n, m, 4), "<f4")
        labels = np.full((n, m), -1, "<i4")
        for i, sample in enumerate(samples):
            k = len(sample.boxes)
            if k:
                boxes[i, :k] = np.asarray(sample.boxes, np.float32)
                labels[i, :k] = sample.classes
        slots = (n, m)
    files = {"images.bin": bytes(blob), "index.npy": payloads.npy(index),
             "boxes.npy": payloads.npy(boxes), "classes.npy": payloads.npy(labels),
             "counts.npy": payloads.npy(counts)}
    arrays = {"index.npy": {"dtype": INDEX_DESCR, "shape": [n]},
              "boxes.npy": {"dtype": "<f4", "shape": [*slots, 4]},
              "classes.npy": {"dtype": "<i4", "shape": list(slots)},
              "counts.npy": {"dtype": "<i4", "shape": [n]}}
    for name, dtype in box_fields:
        if ragged:
            values = np.array([v for s in samples if s.boxes for v in s.box_fields[name]],
                              dtype).reshape(total)
        else:
            values = np.zeros((n, m), dtype)
            for i, sample in enumerate(samples):
                k = len(sample.boxes)
                if k:
                    values[i, :k] = sample.box_fields[name]
        files[f"box_{name}.npy"] = payloads.npy(values)
        arrays[f"box_{name}.npy"] = {"dtype": dtype, "shape": list(slots)}
    for name in image_fields:
        if name == "file_name":
            encoded = [(s.file_name or "").encode() for s in samples]
            offsets = np.zeros(n + 1, "<u8")
            offsets[1:] = np.cumsum([len(e) for e in encoded]) if n else []
            files["file_name.bin"] = b"".join(encoded)
            files["file_name.offsets.npy"] = payloads.npy(offsets)
            arrays["file_name.offsets.npy"] = {"dtype": "<u8", "shape": [n + 1]}
            continue
        dtype, tail = IMAGE_FIELD_ARRAYS[name]
        values = np.zeros((n, *tail), dtype)
        for i, sample in enumerate(samples):
            values[i] = getattr(sample, name)
        files[f"{name}.npy"] = payloads.npy(values)
        arrays[f"{name}.npy"] = {"dtype": dtype, "shape": [n, *tail]}
    codec_counts: dict[str, int] = {}
    for sample in samples:
        codec_counts[sample.codec] = codec_counts.get(sample.codec, 0) + 1
    header = {
        "format": "detfmt",
        "version": version,
        "num_samples": n,
        "max_boxes": m,
        **({"num_boxes": total} if ragged else {}),
        "classes": [{"name": name, "source_id": source} for name, source in classes],
        "image": {"channels": 3, "color": "RGB",
                  "fixed_shape": list(fixed_shape) if fixed_shape else None,
                  "max_side": max_side, "codecs": dict(sorted(codec_counts.items()))},
        "files": {},
        "arrays": dict(sorted(arrays.items())),
        "required_features": ["ragged_labels"] if ragged else [],
        "extensions": extensions or {},
        "box_fields": [{"name": name, "dtype": dtype} for name, dtype in box_fields],
        "image_fields": list(image_fields),
        "writer": WRITER,
        "metadata": metadata or {},
    }
    return Dataset(files, header, samples).seal()


# --------------------------------------------------------------------------- expected output


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def expected(dataset: Dataset) -> dict:
    """The expected canonical dump (conformance/README.md), with JPEG pixels as a tolerance."""
    header = json.loads(dataset.header_bytes())
    return {"header": header, "samples": sample_records(dataset.samples, header)}


def sample_records(samples: list[Sample], header: dict) -> list[dict]:
    """The expected dump of each sample; ``header`` (or a manifest schema) names the fields."""
    out = []
    for sample in samples:
        k = len(sample.boxes)
        record: dict = {
            "height": int(sample.image.shape[0]),
            "width": int(sample.image.shape[1]),
            "channels": 3,
            "codec": sample.codec,
            "count": k,
        }
        if sample.codec == "jpeg":  # the reference decode (SPEC.md §9.3, §17)
            decoded = payloads.FROZEN_JPEG_DECODED.get(sha256(sample.payload or b""))
            reference = decoded if decoded is not None else sample.image.tobytes()
            record["pixels_tolerance"] = {
                "reference": base64.b64encode(reference).decode(),
                "max_mean_abs_error": JPEG_MAX_MEAN_ABS_ERROR,
                "max_abs_error": JPEG_MAX_ABS_ERROR,
            }
        else:
            record["pixels_sha256"] = sha256(sample.image.tobytes())
        record["boxes_sha256"] = sha256(np.asarray(sample.boxes, "<f4").reshape(k, 4).tobytes())
        record["classes_sha256"] = sha256(np.asarray(sample.classes, "<i4").reshape(k).tobytes())
        fields = {}
        for spec_field in header.get("box_fields", []):
            values = np.asarray(sample.box_fields.get(spec_field["name"], []), spec_field["dtype"])
            fields[spec_field["name"]] = sha256(values.reshape(k).tobytes())
        record["box_fields"] = fields
        image_fields: dict = {}
        for name in header.get("image_fields", []):
            value = getattr(sample, name)
            image_fields[name] = list(value) if isinstance(value, tuple) else value
        record["image_fields"] = image_fields
        out.append(record)
    return out


# --------------------------------------------------------------------------- valid cases

CLASSES = [("cat", 17), ("dog", 18), ("person", 1)]


def case_raw_variable() -> Dataset:
    return build([
        Sample(pattern(4, 6, 1), boxes=[[0.5, 0.25, 5.5, 3.75], [1, 1, 2, 2]], classes=[0, 2]),
        Sample(pattern(5, 3, 2), boxes=[[0, 0, 3, 5]], classes=[1]),
        Sample(pattern(2, 9, 3), boxes=[[8, 0, 9, 2], [0, 0, 1, 1], [2.5, 0.5, 6, 1.5]],
               classes=[2, 2, 0]),
    ], CLASSES)


def case_zstd() -> Dataset:
    a, b = pattern(4, 6, 4), np.zeros((10, 10, 3), np.uint8)
    b[5:] = pattern(5, 10, 5)
    c = pattern(3, 5, 6)
    return build([
        Sample(a, "zstd", boxes=[[0, 0, 6, 4]], classes=[0]),
        Sample(b, "zstd", payload=payloads.zstd_frame(b.tobytes(), blocks=[("rle", 150),
               ("raw", 150)], checksum=True), boxes=[[1, 5, 9, 10]], classes=[1]),
        Sample(payloads.zstd_source(), "zstd", payload=payloads.FROZEN_ZSTD,
               boxes=[[0, 0, 24, 16], [4, 4, 8, 8]], classes=[2, 0]),
        Sample(c, "zstd", payload=payloads.zstd_frame(c.tobytes(), window_log=10)),
    ], CLASSES)


def case_png() -> Dataset:
    return build([
        Sample(pattern(7, 9, 7), "png", boxes=[[0, 0, 9, 7]], classes=[0]),
        Sample(pattern(1, 1, 8), "png"),
        Sample(pattern(6, 2, 9), "png", boxes=[[0, 1, 2, 5]], classes=[1]),
    ], CLASSES)


def case_jpeg() -> Dataset:
    return build([
        Sample(payloads.jpeg_source(16, 24), "jpeg", payload=payloads.FROZEN_JPEG[16, 24],
               boxes=[[2, 3, 20, 15]], classes=[0]),
        Sample(payloads.jpeg_source(5, 7), "jpeg", payload=payloads.FROZEN_JPEG[5, 7],
               boxes=[[0, 0, 7, 5], [1, 1, 3, 3]], classes=[1, 2]),
    ], CLASSES)


def case_mixed_codecs() -> Dataset:
    return build([
        Sample(pattern(3, 4, 10), "raw", boxes=[[0, 0, 1, 1]], classes=[0]),
        Sample(pattern(4, 3, 11), "zstd", boxes=[[1, 1, 3, 4]], classes=[1]),
        Sample(payloads.jpeg_source(5, 7), "jpeg", payload=payloads.FROZEN_JPEG[5, 7]),
        Sample(pattern(2, 2, 12), "png", boxes=[[0, 0, 2, 2]], classes=[2]),
    ], CLASSES)


def case_fixed_shape() -> Dataset:
    return build([
        Sample(pattern(5, 7, 13 + i), boxes=[[i, 0, i + 1, 5]], classes=[i % 3]) for i in range(4)
    ], CLASSES, fixed_shape=(5, 7, 3), max_side=7)


def case_zero_boxes() -> Dataset:
    return build([
        Sample(pattern(3, 3, 20)),
        Sample(pattern(4, 2, 21), boxes=[[0, 0, 2, 4], [0, 1, 1, 2]], classes=[0, 1]),
        Sample(pattern(2, 5, 22)),
    ], CLASSES)


def case_no_boxes() -> Dataset:
    return build([Sample(pattern(3, 4, 23)), Sample(pattern(2, 2, 24))], CLASSES)


def case_full_max_boxes() -> Dataset:
    full = [[x, y, x + 1, y + 1] for x, y in ((0, 0), (1, 1), (2, 0), (3, 2), (0, 3))]
    return build([
        Sample(pattern(4, 4, 25), boxes=full, classes=[0, 1, 2, 0, 1]),
        Sample(pattern(4, 4, 26), boxes=[[0, 0, 4, 4]], classes=[2]),
    ], CLASSES, max_boxes=5)


def case_box_fields() -> Dataset:
    return build([
        Sample(pattern(4, 5, 27), boxes=[[0, 0, 2, 2], [1, 1, 5, 4]], classes=[0, 1],
               box_fields={"iscrowd": [0, 1], "track_id": [-7, 2**31 - 1],
                           "score": [0.25, 1.0]}),
        Sample(pattern(3, 3, 28)),
        Sample(pattern(2, 4, 29), boxes=[[0, 0, 4, 2]], classes=[2],
               box_fields={"iscrowd": [1], "track_id": [5], "score": [-0.5]}),
    ], CLASSES, max_boxes=3,
        box_fields=[("iscrowd", "|u1"), ("track_id", "<i4"), ("score", "<f4")])


def case_image_fields() -> Dataset:
    return build([
        Sample(pattern(4, 6, 30), boxes=[[0, 0, 3, 2]], classes=[0], orig_size=(8, 12),
               scale_offset=(0.5, 0.5, 0.0, 0.0), source_id=139, file_name="000000000139.jpg"),
        Sample(pattern(3, 3, 31), orig_size=(3, 3), scale_offset=(1.0, 1.0, 0.0, 0.0),
               source_id=-1, file_name=""),
        Sample(pattern(2, 5, 32), orig_size=(5, 10), scale_offset=(0.5, 0.4, -0.25, 0.0),
               source_id=2**40 + 3, file_name="dossier/été/猫 ü.png"),
    ], CLASSES, image_fields=["orig_size", "scale_offset", "source_id", "file_name"])


def case_unicode_classes() -> Dataset:
    classes = [("猫", 1), ("Ünïcødé", 7), ("🚗 car", 90), ('quote " and \\ slash', None),
               ("x", 2**40)]
    return build([
        Sample(pattern(3, 4, 33), boxes=[[0, 0, 1, 1], [1, 1, 2, 2], [2, 0, 4, 3]],
               classes=[0, 2, 4]),
        Sample(pattern(2, 2, 34), boxes=[[0, 0, 2, 2]], classes=[3]),
    ], classes, metadata={"source": "conformance", "ключ": "значение"})


def case_one_pixel() -> Dataset:
    return build([Sample(pattern(1, 1, 35), boxes=[[0, 0, 1, 1]], classes=[0])], CLASSES)


def case_empty() -> Dataset:
    return build([], CLASSES)


def case_box_edges() -> Dataset:
    return build([
        Sample(pattern(4, 6, 36), boxes=[[0, 0, 6, 4], [6, 4, 6, 4], [2, 1, 2, 3],
                                         [0.125, 0.375, 5.875, 3.625]], classes=[0, 1, 2, 0]),
    ], CLASSES)


def case_extensions_ignored() -> Dataset:
    return build([Sample(pattern(2, 3, 37), boxes=[[0, 0, 3, 2]], classes=[0])], CLASSES,
                 extensions={"org.example.note": {"text": "ignored", "values": [1, 2]}},
                 metadata={"k": "v"})


def case_newer_minor() -> Dataset:
    """A later 1.x minor: unknown members of header objects are ignored."""
    dataset = build([Sample(pattern(2, 3, 38), boxes=[[0, 0, 1, 1]], classes=[1])], CLASSES,
                    version="1.9")
    dataset.header["added_in_1_9"] = {"anything": [1, "two", None]}
    dataset.header["image"]["added_in_1_9"] = True
    dataset.header["classes"][0]["added_in_1_9"] = 0.5
    return dataset


def case_npy_header_forms() -> Dataset:
    """Readers accept .npy versions 2.0/3.0 and any key order, quoting and spacing (R-npy)."""
    dataset = case_raw_variable()
    counts = np.frombuffer(dataset.files["counts.npy"][-12:], "<i4")
    labels = np.frombuffer(dataset.files["classes.npy"][-3 * 3 * 4:], "<i4").reshape(3, 3)
    boxes = np.frombuffer(dataset.files["boxes.npy"][-3 * 3 * 16:], "<f4").reshape(3, 3, 4)
    dataset.files["counts.npy"] = payloads.npy(counts, version=2)
    dataset.files["classes.npy"] = payloads.npy(labels, version=3)
    text = '{"shape": (3,3,4),"fortran_order":False, "descr":"<f4"}'
    header = text + " " * (-(10 + len(text) + 1) % 64) + "\n"
    dataset.files["boxes.npy"] = (b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little")
                                  + header.encode() + boxes.tobytes())
    return dataset.seal()


def case_foreign_entries() -> Dataset:
    """Entries the header does not name are ignored: temp dirs, notes, an unlisted box field."""
    dataset = build([Sample(pattern(2, 2, 39), boxes=[[0, 0, 2, 2]], classes=[2])], CLASSES)
    dataset.extra["notes.txt"] = b"not part of the dataset\n"
    dataset.extra[".detfmt-tmp-old-1234-abcd/header.json"] = b"{"
    dataset.extra["box_unlisted.npy"] = b"\x93NUMPY garbage"
    return dataset


VALID: dict[str, tuple[Callable[[], Dataset], str]] = {
    "raw_variable": (case_raw_variable, "raw codec, variable image sizes, payload padding"),
    "zstd": (case_zstd, "zstd frames: raw, RLE and compressed blocks, content checksum, "
             "non-single-segment frame"),
    "png": (case_png, "8-bit RGB PNG with all five filter types, stored deflate blocks"),
    "jpeg": (case_jpeg, "baseline JPEG (pixels checked with a tolerance)"),
    "mixed_codecs": (case_mixed_codecs, "one sample per codec in one dataset"),
    "fixed_shape": (case_fixed_shape, "image.fixed_shape: raw (N, 5, 7, 3) with 128-byte stride"),
    "zero_boxes": (case_zero_boxes, "images without boxes next to images with boxes"),
    "no_boxes": (case_no_boxes, "max_boxes 0: boxes (N, 0, 4), classes (N, 0)"),
    "full_max_boxes": (case_full_max_boxes, "a sample with count == max_boxes"),
    "box_fields": (case_box_fields, "per-box fields of dtype |u1, <i4 and <f4"),
    "image_fields": (case_image_fields, "orig_size, scale_offset, source_id, file_name (UTF-8)"),
    "unicode_classes": (case_unicode_classes, "non-ASCII class names, null and large source ids"),
    "one_pixel": (case_one_pixel, "a 1x1 image with a box covering it"),
    "empty": (case_empty, "N = 0: empty images.bin, (0,) arrays"),
    "box_edges": (case_box_edges, "boxes on the image border, zero-area boxes"),
    "extensions_ignored": (case_extensions_ignored, "unknown extensions are ignored"),
    "newer_minor": (case_newer_minor, "version 1.9 with unknown header members is read by a 1.0 "
                    "reader"),
    "foreign_entries": (case_foreign_entries, "files and directories the header does not name"),
    "npy_header_forms": (case_npy_header_forms, ".npy versions 2.0 and 3.0, other key order "
                         "and quoting"),
}


# --------------------------------------------------------------------------- mutation helpers


def load(dataset: Dataset, name: str) -> np.ndarray:
    import io

    return np.load(io.BytesIO(dataset.files[name])).copy()


def store(dataset: Dataset, name: str, array: np.ndarray) -> None:
    dataset.files[name] = payloads.npy(array)


def edit_index(dataset: Dataset, i: int, **changes: int) -> Dataset:
    index = load(dataset, "index.npy")
    for key, value in changes.items():
        index[i][key] = value
    store(dataset, "index.npy", index)
    return dataset.seal()


def stored_payloads(dataset: Dataset) -> list[bytes]:
    index, blob = load(dataset, "index.npy"), dataset.files["images.bin"]
    return [blob[int(r["offset"]):int(r["offset"]) + int(r["nbytes"])] for r in index]


def relayout(dataset: Dataset, data: list[bytes], *, shift: dict[int, int] | None = None,
             checksums: bool = True) -> Dataset:
    """Rewrite images.bin and the index for new payloads (optionally starting some late)."""
    index = load(dataset, "index.npy")
    blob = bytearray()
    for i, payload in enumerate(data):
        blob += bytes((shift or {}).get(i, 0))
        index[i]["offset"] = len(blob)
        index[i]["nbytes"] = len(payload)
        if checksums:
            index[i]["checksum"] = xxhash.xxh3_64_intdigest(payload)
        blob += payload + bytes(align(len(blob) + len(payload)) - len(blob) - len(payload))
    dataset.files["images.bin"] = bytes(blob)
    store(dataset, "index.npy", index)
    return dataset.seal()


def replace_payload(dataset: Dataset, i: int, payload: bytes) -> Dataset:
    data = stored_payloads(dataset)
    data[i] = payload
    return relayout(dataset, data)


def edit_header(dataset: Dataset, edit: Callable[[dict], object]) -> Dataset:
    edit(dataset.header)
    return dataset


def raw_header(dataset: Dataset, transform: Callable[[bytes], bytes]) -> Dataset:
    dataset.header_raw = transform(dataset.header_bytes())
    return dataset


def edit_array(dataset: Dataset, name: str, edit: Callable[[np.ndarray], object]) -> Dataset:
    array = load(dataset, name)
    edit(array)
    store(dataset, name, array)
    return dataset.seal()


def set_item(array: np.ndarray, key: tuple, value: float) -> None:
    array[key] = value


def npy_bytes_edit(dataset: Dataset, name: str, transform: Callable[[bytes], bytes]) -> Dataset:
    dataset.files[name] = transform(dataset.files[name])
    return dataset.seal()


def blob_edit(dataset: Dataset, transform: Callable[[bytearray], object]) -> Dataset:
    blob = bytearray(dataset.files["images.bin"])
    transform(blob)
    dataset.files["images.bin"] = bytes(blob)
    return dataset.seal()


def base_mixed() -> Dataset:
    """The base of most invalid cases: raw, zstd and PNG samples with boxes and padding."""
    return build([
        Sample(pattern(4, 6, 40), "raw", boxes=[[0, 0, 2, 2], [1, 1, 6, 4]], classes=[0, 1]),
        Sample(pattern(3, 5, 41), "zstd", boxes=[[0, 0, 5, 3]], classes=[2]),
        Sample(pattern(2, 3, 42), "png"),
    ], CLASSES)


def base_raw() -> Dataset:
    return build([
        Sample(pattern(4, 6, 43), boxes=[[0, 0, 2, 2], [1, 1, 6, 4]], classes=[0, 1]),
        Sample(pattern(3, 5, 44), boxes=[[0, 0, 5, 3]], classes=[2]),
        Sample(pattern(2, 3, 45)),
    ], CLASSES)


def one(codec: str, payload: bytes | None = None, image: np.ndarray | None = None) -> Dataset:
    image = pattern(3, 4, 46) if image is None else image
    return build([Sample(image, codec, boxes=[[0, 0, 4, 3]], classes=[0], payload=payload)],
                 CLASSES)


# --------------------------------------------------------------------------- invalid cases

Z = pattern(3, 4, 46)  # the image of one("zstd")


def _pickle_classes(dataset: Dataset) -> Dataset:
    import pickle

    n, m = load(dataset, "classes.npy").shape
    body = pickle.dumps([0] * (n * m), protocol=2)
    body += bytes(n * m * 8 - len(body))
    text = f"{{'descr': '|O', 'fortran_order': False, 'shape': ({n}, {m}), }}"
    text += " " * (-(10 + len(text) + 1) % 64) + "\n"
    dataset.files["classes.npy"] = (b"\x93NUMPY\x01\x00" + len(text).to_bytes(2, "little")
                                    + text.encode() + body)
    return dataset.seal()


def _with_array(name: str, array_fn: Callable[[np.ndarray], np.ndarray], **npy_kw) -> Callable:
    def edit(dataset: Dataset) -> Dataset:
        dataset.files[name] = payloads.npy(array_fn(load(dataset, name)), **npy_kw)
        return dataset.seal()
    return edit


def _file_size(dataset: Dataset) -> Dataset:
    dataset.header["files"]["boxes.npy"]["size"] += 1
    return dataset


def _file_checksum(dataset: Dataset) -> Dataset:
    entry = dataset.header["files"]["classes.npy"]
    entry["xxh3_64"] = f"{int(entry['xxh3_64'], 16) ^ 1:016x}"
    return dataset


def _checksum(dataset: Dataset) -> Dataset:
    data = stored_payloads(dataset)
    data[0] = bytes([data[0][0] ^ 0x01]) + data[0][1:]
    return relayout(dataset, data, checksums=False)


def _counts_short(dataset: Dataset) -> Dataset:
    store(dataset, "counts.npy", load(dataset, "counts.npy")[:-1])
    dataset.header["arrays"]["counts.npy"]["shape"] = [dataset.header["num_samples"] - 1]
    return dataset.seal()


def _header_too_large_note(dataset: Dataset) -> Dataset:
    return dataset  # grown to 1 MiB + 1 at run time (see cases.json "grow")


def _big_side() -> Dataset:
    height = 16385
    frame = payloads.zstd_frame(bytes(height * 3), blocks=[("rle", height * 3)])
    return build([Sample(np.zeros((height, 1, 3), np.uint8), "zstd", payload=frame)], CLASSES)


def _flip_last(data: bytes) -> bytes:
    return data[:-1] + bytes([data[-1] ^ 0xFF])


def _codec_unknown(dataset: Dataset) -> Dataset:
    dataset.header["image"]["codecs"] = {}
    return edit_index(dataset, 1, codec=7)


def _offset_misaligned(dataset: Dataset) -> Dataset:
    return relayout(dataset, stored_payloads(dataset), shift={1: 8})


def _offsets_gap(dataset: Dataset) -> Dataset:
    return relayout(dataset, stored_payloads(dataset), shift={1: 64})


def _offsets_overlap(dataset: Dataset) -> Dataset:
    index = load(dataset, "index.npy")
    index[2]["offset"] = index[1]["offset"]
    index[2]["nbytes"] = index[1]["nbytes"]
    index[2]["checksum"] = index[1]["checksum"]
    index[2]["codec"], index[2]["height"], index[2]["width"] = (
        index[1]["codec"], index[1]["height"], index[1]["width"])
    index[2]["decoded_nbytes"] = index[1]["decoded_nbytes"]
    store(dataset, "index.npy", index)
    blob = dataset.files["images.bin"]
    dataset.files["images.bin"] = blob[:align(int(index[1]["offset"] + index[1]["nbytes"]))]
    dataset.header["image"]["codecs"] = {}
    return dataset.seal()


def _offsets_swapped() -> Dataset:
    """Payloads 1 and 2 (64 bytes each, padded) trade places; each record still points at its own
    payload and the last payload stays last, so only the order is wrong."""
    dataset = build([Sample(pattern(4, 6, 50)), Sample(pattern(3, 5, 51)),
                     Sample(pattern(2, 3, 52)), Sample(pattern(2, 2, 53))], CLASSES)
    index = load(dataset, "index.npy")
    data = stored_payloads(dataset)
    blob = bytearray()
    for i in (0, 2, 1, 3):
        index[i]["offset"] = len(blob)
        blob += data[i] + bytes(align(len(data[i])) - len(data[i]))
    dataset.files["images.bin"] = bytes(blob)
    store(dataset, "index.npy", index)
    return dataset.seal()


def _first_offset(dataset: Dataset) -> Dataset:
    return relayout(dataset, stored_payloads(dataset), shift={0: 64})


def _offset_huge(dataset: Dataset) -> Dataset:
    return edit_index(dataset, 2, offset=(1 << 64) - 64)


def _truncate_blob(dataset: Dataset) -> Dataset:
    return blob_edit(dataset, lambda blob: blob.__delitem__(slice(len(blob) - 70, None)))


def _padding_nonzero(dataset: Dataset) -> Dataset:
    index = load(dataset, "index.npy")
    end = int(index[0]["offset"] + index[0]["nbytes"])
    return blob_edit(dataset, lambda blob: blob.__setitem__(end + 3, 0x20))


def _raw_longer(dataset: Dataset) -> Dataset:
    data = stored_payloads(dataset)
    data[1] = data[1] + b"\x00"
    return relayout(dataset, data)


def _fixed_shape(dataset: Dataset) -> Dataset:
    dataset.header["image"]["fixed_shape"] = [4, 6, 3]
    return dataset


def _class_duplicate(dataset: Dataset) -> Dataset:
    dataset.header["classes"][1]["name"] = "cat"
    return dataset


def _duplicate_key(data: bytes) -> bytes:
    return data.rstrip()[:-1].rstrip() + b',\n  "writer": "again"\n}\n'


def _string_offsets(dataset: Dataset) -> Dataset:
    return edit_array(dataset, "file_name.offsets.npy",
                      lambda a: set_item(a, (1,), int(a[2]) + 1))


def _string_utf8(dataset: Dataset) -> Dataset:
    data = dataset.files["file_name.bin"]
    dataset.files["file_name.bin"] = b"\xff" + data[1:]
    return dataset.seal()


INVALID: list[tuple[str, str, str, Callable[[], Dataset]]] = [
    # header.json
    ("header_missing", "HEADER_MISSING", "no header.json",
     lambda: _omit(base_raw(), "header.json")),
    ("header_empty", "HEADER_ENCODING", "header.json is empty",
     lambda: raw_header(base_raw(), lambda _: b"")),
    ("header_bom", "HEADER_ENCODING", "header.json starts with a UTF-8 BOM",
     lambda: raw_header(base_raw(), lambda data: b"\xef\xbb\xbf" + data)),
    ("header_not_utf8", "HEADER_ENCODING", "header.json holds a Latin-1 byte",
     lambda: raw_header(base_raw(), lambda data: data.replace(b'"metadata": {}',
                                                              b'"metadata": {"k": "\xe9"}'))),
    ("header_too_large", "HEADER_TOO_LARGE", "header.json grown to 1 MiB + 1 byte of spaces",
     lambda: _header_too_large_note(base_raw())),
    ("header_truncated_json", "HEADER_JSON", "header.json cut in the middle",
     lambda: raw_header(base_raw(), lambda data: data[: len(data) // 2])),
    ("header_duplicate_key", "HEADER_JSON", "a key appears twice in the top-level object",
     lambda: raw_header(base_raw(), _duplicate_key)),
    ("header_nan", "HEADER_JSON", "NaN literal (not JSON) inside extensions",
     lambda: raw_header(base_raw(), lambda data: data.replace(b'"extensions": {}',
                                                              b'"extensions": {"x": NaN}'))),
    ("header_not_object", "HEADER_JSON", "header.json is a JSON array",
     lambda: raw_header(base_raw(), lambda data: b"[" + data + b"]")),
    ("header_missing_field", "HEADER_SCHEMA", "num_samples is missing",
     lambda: edit_header(base_raw(), lambda h: h.pop("num_samples"))),
    ("header_wrong_type", "HEADER_SCHEMA", "num_samples is the string \"3\"",
     lambda: edit_header(base_raw(), lambda h: h.__setitem__("num_samples", "3"))),
    ("header_bad_version", "HEADER_SCHEMA", "version \"1\" is not MAJOR.MINOR",
     lambda: edit_header(base_raw(), lambda h: h.__setitem__("version", "1"))),
    ("header_version_unicode_digit", "HEADER_SCHEMA", "version \"\u00b9.0\" (a superscript digit)",
     lambda: edit_header(base_raw(), lambda h: h.__setitem__("version", "\u00b9.0"))),
    ("header_files_incomplete", "HEADER_SCHEMA", "files does not list counts.npy",
     lambda: edit_header(base_raw(), lambda h: h["files"].pop("counts.npy"))),
    ("header_class_duplicate", "HEADER_SCHEMA", "two classes are named \"cat\"",
     lambda: _class_duplicate(base_raw())),
    ("not_detfmt", "NOT_DETFMT", "format is \"detfmt2\"",
     lambda: edit_header(base_raw(), lambda h: h.__setitem__("format", "detfmt2"))),
    ("version_major", "VERSION_UNSUPPORTED", "version 2.0",
     lambda: edit_header(base_raw(), lambda h: h.__setitem__("version", "2.0"))),
    ("feature_unknown", "FEATURE_UNSUPPORTED", "required_features lists an unknown feature",
     lambda: edit_header(base_raw(), lambda h: h.__setitem__("required_features",
                                                             ["org.example.hologram"]))),
    ("not_a_directory", "NOT_DETFMT", "the dataset path is a regular file (holding a header)",
     lambda: _as_file(base_raw())),
    ("header_codecs_name", "CODEC_UNKNOWN", "image.codecs names the codec \"webp\"",
     lambda: edit_header(base_raw(), lambda h: h["image"].__setitem__("codecs", {"webp": 3}))),
    ("header_codecs_count", "HEADER_SCHEMA", "image.codecs adds up to N but disagrees with the "
     "index", lambda: _codecs_count(base_mixed())),
    ("header_metadata_limit", "LIMIT_EXCEEDED", "metadata has 1025 members",
     lambda: edit_header(base_raw(), lambda h: h.__setitem__(
         "metadata", {f"k{i}": "" for i in range(1025)}))),
    ("header_arrays_dtype", "NPY_DTYPE", "header.arrays says boxes.npy is <f8",
     lambda: edit_header(base_raw(), lambda h: h["arrays"]["boxes.npy"].__setitem__(
         "dtype", "<f8"))),
    # member files
    ("file_missing", "FILE_MISSING", "counts.npy is absent",
     lambda: _omit(base_raw(), "counts.npy")),
    ("path_unsafe", "PATH_UNSAFE", "boxes.npy is a directory",
     lambda: _directory(base_raw(), "boxes.npy")),
    ("file_size", "FILE_SIZE", "header.files says boxes.npy is one byte longer",
     lambda: _file_size(base_raw())),
    ("file_checksum", "FILE_CHECKSUM", "header.files xxh3_64 of classes.npy differs",
     lambda: _file_checksum(base_raw())),
    # .npy
    ("npy_bad_magic", "NPY_HEADER", "counts.npy does not start with \\x93NUMPY",
     lambda: npy_bytes_edit(base_raw(), "counts.npy", lambda d: b"\x93NUMPZ" + d[6:])),
    ("npy_bad_version", "NPY_HEADER", ".npy format version 4.0",
     lambda: npy_bytes_edit(base_raw(), "counts.npy", lambda d: d[:6] + b"\x04\x00" + d[8:])),
    ("npy_extra_key", "NPY_HEADER", ".npy header dict has a fourth key",
     lambda: npy_bytes_edit(base_raw(), "counts.npy", lambda d: d.replace(
         b"'shape': (3,), }      ", b"'shape': (3,), 'x': 1}"))),
    ("npy_header_too_long", "NPY_HEADER", "counts.npy HEADER_LEN is 5046 (limit 4096)",
     lambda: _long_npy_header(base_raw())),
    ("npy_pickle", "NPY_DTYPE", "classes.npy is an object array holding a pickle",
     lambda: _pickle_classes(base_raw())),
    ("npy_wrong_dtype", "NPY_DTYPE", "boxes.npy is float64",
     lambda: _with_array("boxes.npy", lambda a: a.astype("<f8"))(base_raw())),
    ("npy_big_endian", "NPY_DTYPE", "boxes.npy is big-endian float32",
     lambda: _with_array("boxes.npy", lambda a: a.astype(">f4"))(base_raw())),
    ("npy_index_dtype", "NPY_DTYPE", "index.npy lacks the reserved field",
     lambda: _with_array("index.npy", lambda a: _drop_reserved(a))(base_raw())),
    ("npy_fortran", "NPY_ORDER", "classes.npy declares fortran_order True",
     lambda: _with_array("classes.npy", lambda a: a, fortran=True)(base_raw())),
    ("npy_truncated", "NPY_SIZE", "boxes.npy lacks its last 4 bytes",
     lambda: npy_bytes_edit(base_raw(), "boxes.npy", lambda d: d[:-4])),
    ("npy_trailing", "NPY_SIZE", "4 bytes after the data of counts.npy",
     lambda: npy_bytes_edit(base_raw(), "counts.npy", lambda d: d + bytes(4))),
    ("npy_shape", "NPY_SHAPE", "boxes.npy is (3, 2, 5) but the header says (3, 2, 4)",
     lambda: _with_array("boxes.npy", lambda a: np.zeros((3, 2, 5), "<f4"))(base_raw())),
    ("count_mismatch", "COUNT_MISMATCH", "counts has N-1 entries (file and header.arrays)",
     lambda: _counts_short(base_raw())),
    # index and images.bin
    ("offset_first", "OFFSETS_BOUNDS", "the first payload starts at 64",
     lambda: _first_offset(base_mixed())),
    ("offset_huge", "OFFSETS_BOUNDS", "offset 2^64-64 (wraps around in 64-bit arithmetic)",
     lambda: _offset_huge(base_mixed())),
    ("offsets_gap", "OFFSETS_BOUNDS", "64 unused bytes between payloads 0 and 1",
     lambda: _offsets_gap(base_mixed())),
    ("blob_truncated", "OFFSETS_BOUNDS", "images.bin lacks its last 70 bytes",
     lambda: _truncate_blob(base_mixed())),
    ("offsets_overlap", "OFFSETS_NON_MONOTONIC", "payloads 1 and 2 share their bytes",
     lambda: _offsets_overlap(base_mixed())),
    ("offsets_swapped", "OFFSETS_BOUNDS", "payloads 1 and 2 stored in reverse order (the first "
     "broken link, record 1's, is a gap)", lambda: _offsets_swapped()),
    ("offset_misaligned", "OFFSET_ALIGNMENT", "payload 1 starts 8 bytes after a 64 boundary",
     lambda: _offset_misaligned(base_mixed())),
    ("blob_trailing", "BLOB_SIZE", "64 zero bytes after the last padded payload",
     lambda: blob_edit(base_mixed(), lambda blob: blob.extend(bytes(64)))),
    ("padding_nonzero", "PADDING_NONZERO", "a padding byte after payload 0 is 0x20",
     lambda: _padding_nonzero(base_mixed())),
    ("limit_side", "LIMIT_EXCEEDED", "a 16385x1 image (zstd RLE frame)",
     _big_side),
    ("limit_zero_width", "LIMIT_EXCEEDED", "a record with width 0 (and 0 decoded bytes)",
     lambda: edit_index(base_raw(), 2, width=0, decoded_nbytes=0)),
    ("decoded_nbytes", "SAMPLE_SIZE", "decoded_nbytes is not height*width*3",
     lambda: edit_index(base_mixed(), 1, decoded_nbytes=46)),
    ("raw_nbytes", "SAMPLE_SIZE", "raw payload one byte longer than height*width*3",
     lambda: _raw_longer(base_raw())),
    ("index_channels", "INDEX_FIELD", "channels is 4",
     lambda: edit_index(base_mixed(), 0, channels=4)),
    ("index_flags", "INDEX_FIELD", "flags is 1",
     lambda: edit_index(base_mixed(), 1, flags=1)),
    ("index_reserved", "INDEX_FIELD", "reserved is 1",
     lambda: edit_index(base_mixed(), 2, reserved=1)),
    ("codec_unknown", "CODEC_UNKNOWN", "codec id 7",
     lambda: _codec_unknown(base_raw())),
    ("fixed_shape_mismatch", "FIXED_SHAPE", "image.fixed_shape is [4, 6, 3] but samples differ",
     lambda: _fixed_shape(base_raw())),
    ("fixed_shape_codec", "FIXED_SHAPE", "a zstd sample in a fixed-shape dataset",
     lambda: _fixed_shape_codec()),
    ("checksum", "CHECKSUM", "one payload byte flipped; index checksum kept",
     lambda: _checksum(base_mixed())),
    # codecs
    ("zstd_size", "ZSTD_SIZE", "the frame declares 51 bytes, the index 36",
     lambda: one("zstd", payloads.zstd_frame(Z.tobytes() + bytes(15)))),
    ("zstd_no_size", "ZSTD_SIZE", "the frame has no content size",
     lambda: one("zstd", payloads.zstd_frame(Z.tobytes(), content_size=None, window_log=10))),
    ("zstd_window", "ZSTD_WINDOW", "the frame declares a 2 GiB window",
     lambda: one("zstd", payloads.zstd_frame(Z.tobytes(), window_log=31))),
    ("zstd_bad_magic", "ZSTD_CORRUPT", "the frame magic is wrong",
     lambda: one("zstd", b"\x29" + payloads.zstd_frame(Z.tobytes())[1:])),
    ("zstd_truncated", "ZSTD_CORRUPT", "the last block lacks its last 5 bytes",
     lambda: one("zstd", payloads.zstd_frame(Z.tobytes())[:-5])),
    ("zstd_content_checksum", "ZSTD_CORRUPT", "the frame's content checksum is wrong",
     lambda: one("zstd", _flip_last(payloads.zstd_frame(Z.tobytes(), checksum=True)))),
    ("zstd_dictionary", "ZSTD_CORRUPT", "the frame requires dictionary 7",
     lambda: one("zstd", _with_dict_id(payloads.zstd_frame(Z.tobytes())))),
    ("zstd_trailing", "ZSTD_TRAILING", "4 bytes follow the frame",
     lambda: one("zstd", payloads.zstd_frame(Z.tobytes()) + b"\x00\x01\x02\x03")),
    ("zstd_two_frames", "ZSTD_TRAILING", "a second frame follows the first",
     lambda: one("zstd", payloads.zstd_frame(Z.tobytes()) + payloads.zstd_frame(b"\x00"))),
    ("png_rgba", "IMAGE_DECODE", "PNG color type 6 (RGBA)",
     lambda: one("png", payloads.png(Z, color_type=6))),
    ("png_16bit", "IMAGE_DECODE", "PNG bit depth 16",
     lambda: one("png", payloads.png(Z, bit_depth=16))),
    ("png_gray", "IMAGE_DECODE", "PNG color type 0 (grayscale)",
     lambda: one("png", payloads.png(Z, color_type=0))),
    ("png_wrong_size", "IMAGE_DECODE", "PNG is 4x3, the index says 3x4",
     lambda: one("png", payloads.png(pattern(4, 3, 46)))),
    ("png_not_png", "IMAGE_DECODE", "codec png, payload is a JPEG",
     lambda: one("png", payloads.FROZEN_JPEG[5, 7], payloads.jpeg_source(5, 7))),
    ("jpeg_truncated", "IMAGE_DECODE", "JPEG cut before its end",
     lambda: one("jpeg", payloads.FROZEN_JPEG[5, 7][:400], payloads.jpeg_source(5, 7))),
    ("jpeg_wrong_size", "IMAGE_DECODE", "JPEG is 5x7, the index says 7x5",
     lambda: one("jpeg", payloads.FROZEN_JPEG[5, 7], payloads.jpeg_source(7, 5))),
    # labels
    ("box_nan", "BOX_INVALID", "a NaN coordinate in a valid slot",
     lambda: edit_array(base_raw(), "boxes.npy", lambda a: set_item(a, (0, 1, 2), np.nan))),
    ("box_inf", "BOX_INVALID", "an infinite coordinate in a valid slot",
     lambda: edit_array(base_raw(), "boxes.npy", lambda a: set_item(a, (1, 0, 3), np.inf))),
    ("box_inverted", "BOX_INVALID", "x2 < x1",
     lambda: edit_array(base_raw(), "boxes.npy", lambda a: set_item(a, (0, 1, 2), 0.5))),
    ("box_out_of_image", "BOX_OUT_OF_IMAGE", "x2 = width + 0.5",
     lambda: edit_array(base_raw(), "boxes.npy", lambda a: set_item(a, (0, 1, 2), 6.5))),
    ("box_negative", "BOX_OUT_OF_IMAGE", "y1 = -0.25",
     lambda: edit_array(base_raw(), "boxes.npy", lambda a: set_item(a, (1, 0, 1), -0.25))),
    ("class_too_large", "CLASS_RANGE", "class id == number of classes",
     lambda: edit_array(base_raw(), "classes.npy", lambda a: set_item(a, (1, 0), 3))),
    ("class_negative", "CLASS_RANGE", "class id -1 in a valid slot",
     lambda: edit_array(base_raw(), "classes.npy", lambda a: set_item(a, (0, 1), -1))),
    ("count_above_max", "COUNT_RANGE", "count = max_boxes + 1 (its M slots hold valid boxes)",
     lambda: edit_array(base_raw(), "counts.npy", lambda a: set_item(a, (0,), 3))),
    ("count_negative", "COUNT_RANGE", "count -1",
     lambda: edit_array(base_raw(), "counts.npy", lambda a: set_item(a, (2,), -1))),
    ("box_padding", "MASK_INCONSISTENT", "a padding box slot holds 1.0",
     lambda: edit_array(base_raw(), "boxes.npy", lambda a: set_item(a, (1, 1, 0), 1.0))),
    ("box_padding_negative_zero", "MASK_INCONSISTENT", "a padding box slot holds -0.0",
     lambda: edit_array(base_raw(), "boxes.npy", lambda a: set_item(a, (2, 0, 3), -0.0))),
    ("class_padding", "MASK_INCONSISTENT", "a padding class slot holds 0",
     lambda: edit_array(base_raw(), "classes.npy", lambda a: set_item(a, (2, 1), 0))),
    ("box_field_padding", "MASK_INCONSISTENT", "a padding slot of box_iscrowd holds 1",
     lambda: edit_array(case_box_fields(), "box_iscrowd.npy", lambda a: set_item(a, (1, 0), 1))),
    # optional per-image fields
    ("string_offsets", "OFFSETS_NON_MONOTONIC", "file_name offsets decrease",
     lambda: _string_offsets(case_image_fields())),
    ("string_too_long", "LIMIT_EXCEEDED", "a file_name of 4097 bytes",
     lambda: _long_file_name()),
    ("orig_size_zero", "IMAGE_FIELD", "orig_size height 0",
     lambda: edit_array(case_image_fields(), "orig_size.npy", lambda a: set_item(a, (1, 0), 0))),
    ("scale_offset_negative", "IMAGE_FIELD", "scale_offset sx = -0.5",
     lambda: edit_array(case_image_fields(), "scale_offset.npy",
                        lambda a: set_item(a, (0, 0), -0.5))),
    ("string_utf8", "IMAGE_FIELD", "a file_name is not UTF-8",
     lambda: _string_utf8(case_image_fields())),
]


def _as_file(dataset: Dataset) -> Dataset:
    dataset.as_file = dataset.header_bytes()
    return dataset


def _with_dict_id(frame: bytes) -> bytes:
    """Set Dictionary_ID_flag to 1 and insert a one-byte dictionary id (7)."""
    return frame[:4] + bytes([frame[4] | 1]) + b"\x07" + frame[5:]


def _long_npy_header(dataset: Dataset) -> Dataset:
    counts = load(dataset, "counts.npy")
    text = "{'descr': '<i4', 'fortran_order': False, 'shape': (3,), }"
    text += " " * (5056 - 10 - len(text) - 1) + "\n"
    dataset.files["counts.npy"] = (b"\x93NUMPY\x01\x00" + len(text).to_bytes(2, "little")
                                   + text.encode() + counts.tobytes())
    return dataset.seal()


def _fixed_shape_codec() -> Dataset:
    return build([Sample(pattern(5, 7, 47)), Sample(pattern(5, 7, 48), "zstd")], CLASSES,
                 fixed_shape=(5, 7, 3))


def _codecs_count(dataset: Dataset) -> Dataset:
    dataset.header["image"]["codecs"] = {"raw": 2, "zstd": 1}
    return dataset


def _long_file_name() -> Dataset:
    return build([Sample(pattern(2, 2, 49), file_name="x" * 4097)], CLASSES,
                 image_fields=["file_name"])


def _omit(dataset: Dataset, name: str) -> Dataset:
    dataset.extra[name] = None
    return dataset


def _directory(dataset: Dataset, name: str) -> Dataset:
    dataset.extra[name] = None
    dataset.extra[f"{name}/README"] = b"a directory where a file belongs\n"
    return dataset


def _drop_reserved(index: np.ndarray) -> np.ndarray:
    names = [name for name in index.dtype.names if name != "reserved"]
    out = np.zeros(len(index), [(name, index.dtype.fields[name][0]) for name in names])
    for name in names:
        out[name] = index[name]
    return out


# --------------------------------------------------------------------------- 1.1: sharded roots

PACK_MAGIC = b"DETFMTPK"
PACK_PREFIX = 16  # magic, <u4 pack version, <u4 T


def dataset_members(dataset: Dataset) -> list[tuple[str, bytes]]:
    """A 1.0 dataset's files in the order S-11 prescribes: header.json (compact JSON, to keep
    the suite small), then the other members sorted by name."""
    header = dataset.header_raw
    if header is None:
        header = json.dumps(dataset.header, ensure_ascii=False, separators=(",", ":")).encode()
    return [("header.json", header), *sorted(dataset.files.items())]


def pack_members(members: list[tuple[str, bytes]], *, shift: dict[str, int] | None = None,
                 version: int = 1) -> bytes:
    """A shard file (SPEC §19.4): prefix, TOC, each member at align64 of the previous end.

    ``shift`` starts the named members that many bytes late (a hole, for invalid cases). The TOC
    length moves the members, which can lengthen the TOC: iterate to the fixed point.
    """
    toc, toc_len, placed = b"", -1, []
    while len(toc) != toc_len:
        toc_len = len(toc)
        position = align(PACK_PREFIX + toc_len)
        placed = []
        for name, data in members:
            position += (shift or {}).get(name, 0)
            placed.append({"name": name, "offset": position, "size": len(data)})
            position = align(position + len(data))
        toc = json.dumps({"members": placed}, separators=(",", ":")).encode()
    out = bytearray(PACK_MAGIC + version.to_bytes(4, "little") + len(toc).to_bytes(4, "little"))
    out += toc
    for entry, (_, data) in zip(placed, members, strict=True):
        out += bytes(entry["offset"] - len(out)) + data
    return bytes(out)


def pack_canonical(members: list[tuple[str, bytes]], *, toc_tail: bytes = b"") -> bytes:
    """A shard file in the layout writers use since format 1.2 (SPEC §19.4, S-26): images.bin
    first at the page boundary 4096·k right after the table of contents, which ASCII spaces pad
    to its declared length T = 4096·k - 16; then the other members sorted by name, each at
    align64 of the previous end. ``toc_tail`` replaces the first padding bytes (invalid cases)."""
    ordered = sorted(members, key=lambda m: (m[0] != "images.bin", m[0].encode()))
    k = 1
    while True:
        position = 4096 * k
        placed = []
        for name, data in ordered:
            placed.append({"name": name, "offset": position, "size": len(data)})
            position = align(position + len(data))
        toc = json.dumps({"members": placed}, separators=(",", ":")).encode()
        if PACK_PREFIX + len(toc) + len(toc_tail) <= 4096 * k:
            break
        k += 1
    length = 4096 * k - PACK_PREFIX
    toc = toc + toc_tail
    out = bytearray(PACK_MAGIC + (1).to_bytes(4, "little") + length.to_bytes(4, "little"))
    out += toc + b" " * (length - len(toc))
    for entry, (_, data) in zip(placed, ordered, strict=True):
        out += bytes(entry["offset"] - len(out)) + data
    return bytes(out)


def pack_toc(data: bytes) -> list[dict]:
    """The members of a (valid) shard file's table of contents."""
    length = int.from_bytes(data[12:16], "little")
    return json.loads(data[PACK_PREFIX:PACK_PREFIX + length].rstrip(b" "))["members"]


@dataclass
class Root:
    """A sharded (1.1) root as bytes in memory: manifest.json, shard files and other files."""

    manifest: dict
    files: dict[str, bytes | None]  # relative POSIX path -> bytes (None: not written)
    samples: list[Sample]  # in global order (the expected dump)
    datasets: list[Dataset]  # the 1.0 dataset packed in each shard
    manifest_raw: bytes | None = None  # replaces the encoded manifest (invalid cases)
    links: dict[str, str] = field(default_factory=dict)  # symbolic links the runner makes

    def manifest_bytes(self) -> bytes:
        if self.manifest_raw is not None:
            return self.manifest_raw
        return _dump(self.manifest)

    def shard(self, k: int) -> dict:
        return self.manifest["shards"][k]

    def reseal(self, k: int) -> Root:
        """Recompute shard k's ``bytes`` and ``xxh3_64`` from its file (only one rule breaks)."""
        data = self.files[self.shard(k)["path"]]
        assert data is not None
        self.shard(k)["bytes"] = len(data)
        self.shard(k)["xxh3_64"] = xxhash.xxh3_64_hexdigest(data)
        return self

    def edit_shard(self, k: int, transform: Callable[[bytes], bytes]) -> Root:
        path = self.shard(k)["path"]
        data = self.files[path]
        assert data is not None
        self.files[path] = transform(data)
        return self.reseal(k)

    def repack(self, k: int, members: list[tuple[str, bytes]], **options: object) -> Root:
        return self.edit_shard(k, lambda _: pack_members(members, **options))  # type: ignore[arg-type]

    def write(self, directory: Path) -> None:
        directory.mkdir(parents=True)
        files = {"manifest.json": self.manifest_bytes(), **self.files}
        for name, data in sorted(files.items()):
            if data is None:
                continue
            target = directory / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)


def build_root(parts: Sequence[tuple[str, list[Sample]]],
               classes: Sequence[tuple[str, int | None]] = CLASSES, *,
               box_fields: Sequence[tuple[str, str]] = (), image_fields: Sequence[str] = (),
               fixed_shape: tuple[int, int, int] | None = None, max_side: int | None = None,
               codec: str | None = None,
               shard_classes: dict[int, Sequence[tuple[str, int | None]]] | None = None,
               canonical: bool = False, ragged: Sequence[int] = (),
               version: str | None = None) -> Root:
    """Lay out a valid sharded root exactly as SPEC §19 prescribes: one packed 1.0 dataset per
    (key, samples) part, each padded to its own max_boxes (S-12), and the manifest naming them.

    ``canonical`` packs the shards in the writers' layout of format 1.2 (S-26; default: the 1.1
    layout, header.json first, which readers still accept); ``ragged`` lists the shards whose
    labels use the ragged layout (the manifest then requires ragged_labels, version 1.2)."""
    datasets = [build(samples, (shard_classes or {}).get(k, classes), box_fields=box_fields,
                      image_fields=image_fields, fixed_shape=fixed_shape, max_side=max_side,
                      ragged=k in ragged)
                for k, (_, samples) in enumerate(parts)]
    used = {sample.codec for _, samples in parts for sample in samples}
    if codec is None:
        codec = used.pop() if len(used) == 1 else "mixed"
    files: dict[str, bytes | None] = {}
    shards = []
    first = 0
    for (key, samples), dataset in zip(parts, datasets, strict=True):
        path = f"shards/part-{key}.detfmt"
        members = dataset_members(dataset)
        data = files[path] = pack_canonical(members) if canonical else pack_members(members)
        shards.append({"path": path, "key": key, "num_samples": len(samples),
                       "first_index": first, "bytes": len(data),
                       "xxh3_64": xxhash.xxh3_64_hexdigest(data),
                       "max_boxes": dataset.header["max_boxes"]})
        first += len(samples)
    write_id = xxhash.xxh3_128_hexdigest(b"".join(
        json.dumps(shard, sort_keys=True).encode() for shard in shards))
    manifest = {
        "format": "detfmt",
        "version": version or ("1.2" if ragged else "1.1"),
        "required_features": ["sharded", *(["ragged_labels"] if ragged else [])],
        "extensions": {},
        "write_id": write_id,
        "num_samples": first,
        "schema": {
            "codec": codec,
            "classes": [{"name": name, "source_id": source} for name, source in classes],
            "box_fields": [{"name": name, "dtype": dtype} for name, dtype in box_fields],
            "image_fields": list(image_fields),
            "fixed_shape": list(fixed_shape) if fixed_shape else None,
            "max_side": max_side,
        },
        "shards": shards,
        "writer": WRITER,
        "metadata": {},
    }
    samples = [sample for _, part in parts for sample in part]
    return Root(manifest, files, samples, datasets)


def expected_root(root: Root) -> dict:
    """The expected canonical dump of a sharded root: the manifest and every sample in global
    order (conformance/README.md)."""
    manifest = json.loads(root.manifest_bytes())
    return {"manifest": manifest, "samples": sample_records(root.samples, manifest["schema"])}


def _boxed(height: int, width: int, seed: int, count: int, codec: str = "raw",
           fields: bool = False) -> Sample:
    """A sample with ``count`` distinct boxes inside its image (and per-box/per-image fields)."""
    boxes = [[(j % width) * 0.5, (j % height) * 0.25, width - j % 2, height - (j % 3) * 0.25]
             for j in range(count)]
    sample = Sample(pattern(height, width, seed), codec, boxes=boxes,
                    classes=[(seed + j) % 3 for j in range(count)])
    if fields:
        sample.box_fields = {"iscrowd": [j % 2 for j in range(count)]}
        sample.source_id = seed * 1000 + 7
        sample.file_name = f"img-{seed:03d}.png" if seed % 2 else f"dossier/é-{seed}.jpg"
    return sample


def case_sharded() -> Root:
    return build_root([
        ("00000", [_boxed(4, 6, 60, 2, fields=True), _boxed(3, 5, 61, 1, fields=True),
                   _boxed(2, 3, 62, 0, fields=True)]),
        ("00001", [_boxed(5, 4, 63, 4, fields=True), _boxed(6, 6, 64, 1, fields=True)]),
        ("00002", [_boxed(3, 3, 65, 0, fields=True), _boxed(1, 2, 66, 1, fields=True),
                   _boxed(4, 4, 67, 0, fields=True)]),
    ], box_fields=[("iscrowd", "|u1")], image_fields=["source_id", "file_name"])


def case_sharded_empty_shard() -> Root:
    return build_root([
        ("a", [_boxed(3, 4, 68, 1), _boxed(2, 2, 69, 2)]),
        ("b", []),
        ("c", [_boxed(4, 3, 70, 3)]),
    ])


def case_sharded_no_shards() -> Root:
    return build_root([], codec="raw")


def case_sharded_orphans() -> Root:
    """Files the manifest does not name: a stray shard, a failed write's leftovers, a temporary
    manifest."""
    root = build_root([("00000", [_boxed(3, 3, 71, 1)]), ("00001", [_boxed(2, 5, 72, 2)])])
    stray = pack_members(dataset_members(build([_boxed(9, 9, 73, 1)], CLASSES)))
    root.files["shards/part-00002.detfmt"] = stray[:-1]  # truncated: a reader must not look
    root.files["shards/.part-00001.detfmt.tmp-5e1f"] = b"DETFMTPK\x07"
    root.files[".manifest.x1y2.tmp"] = b'{"format": "detfmt", "shards": ['
    root.files["shards/notes.txt"] = b"not part of the dataset\n"
    return root


def case_sharded_mixed_codecs() -> Root:
    jpeg = Sample(payloads.jpeg_source(5, 7), "jpeg", payload=payloads.FROZEN_JPEG[5, 7],
                  boxes=[[0, 0, 7, 5]], classes=[1])
    return build_root([
        ("0", [_boxed(3, 4, 74, 1, "zstd"), _boxed(4, 3, 75, 2, "png")]),
        ("1", [jpeg, _boxed(2, 2, 76, 0, "raw")]),
    ])


def case_sharded_fixed_shape() -> Root:
    return build_root([
        ("0", [_boxed(5, 7, 77, 1), _boxed(5, 7, 78, 3)]),
        ("1", [_boxed(5, 7, 79, 0), _boxed(5, 7, 80, 2)]),
    ], fixed_shape=(5, 7, 3), max_side=7)


def case_sharded_minimal_manifest() -> Root:
    """A manifest without the keys readers default (SPEC §19.3)."""
    root = build_root([("0", [_boxed(2, 3, 85, 1)]), ("1", [_boxed(3, 2, 86, 2)])],
                      [("cat", None), ("dog", None), ("person", None)])
    for key in ("extensions", "writer", "metadata"):
        del root.manifest[key]
    for key in ("box_fields", "image_fields", "fixed_shape", "max_side"):
        del root.manifest["schema"][key]
    for entry in root.manifest["schema"]["classes"]:
        del entry["source_id"]
    return root


VALID_1_1: dict[str, tuple[Callable[[], Root], str]] = {
    "sharded": (case_sharded, "3 shards of 3, 2 and 3 samples with max_boxes 2, 4 and 1, "
                "variable image sizes, a box field and image fields"),
    "sharded_empty_shard": (case_sharded_empty_shard, "a shard with num_samples 0 between two "
                            "others"),
    "sharded_no_shards": (case_sharded_no_shards, "a manifest with no shards and num_samples 0"),
    "sharded_orphans": (case_sharded_orphans, "files the manifest does not name (a truncated "
                        "stray shard, temporary files) are ignored"),
    "sharded_mixed_codecs": (case_sharded_mixed_codecs, "schema codec mixed: zstd and png in one "
                             "shard, jpeg and raw in the other"),
    "sharded_fixed_shape": (case_sharded_fixed_shape, "schema fixed_shape [5, 7, 3] and max_side "
                            "7 in every shard"),
    "sharded_minimal_manifest": (case_sharded_minimal_manifest, "the manifest omits the optional "
                                 "keys (extensions, writer, metadata, schema fields, source_id)"),
}


def base_root() -> Root:
    """The base of the 1.1 invalid cases: two raw shards of two samples, with boxes in both."""
    return build_root([
        ("00000", [_boxed(4, 6, 81, 2), _boxed(3, 5, 82, 1)]),
        ("00001", [_boxed(2, 3, 83, 0), _boxed(3, 4, 84, 3)]),
    ])


def edit_manifest(root: Root, edit: Callable[[dict], object]) -> Root:
    edit(root.manifest)
    return root


def _drop_shard_file(root: Root) -> Root:
    root.files[root.shard(1)["path"]] = None
    return root


def _flip_hex(value: str) -> str:
    return f"{int(value, 16) ^ 1:016x}"


def _gap_byte(data: bytes) -> bytes:
    """Set the last zero byte before the first member that follows a gap to 0x01."""
    members = pack_toc(data)
    for before, after in itertools.pairwise(members):
        if before["offset"] + before["size"] < after["offset"]:
            at = after["offset"] - 1
            return data[:at] + b"\x01" + data[at + 1:]
    raise ValueError("no gap between members")


def _repack_members(edit: Callable[[list[tuple[str, bytes]]], list[tuple[str, bytes]]],
                    k: int = 0, **options: object) -> Callable[[], Root]:
    def case() -> Root:
        root = base_root()
        return root.repack(k, edit(dataset_members(root.datasets[k])), **options)
    return case


def _duplicate_path(root: Root) -> Root:
    first, second = root.shard(0), root.shard(1)
    second.update(path=first["path"], num_samples=first["num_samples"], bytes=first["bytes"],
                  xxh3_64=first["xxh3_64"], max_boxes=first["max_boxes"])
    root.manifest["num_samples"] = 2 * first["num_samples"]
    return root


def _both_layouts(root: Root) -> Root:
    dataset = base_raw()
    root.files.update({"header.json": dataset.header_bytes(), **dataset.files})
    return root


def _other_classes() -> Root:
    parts = [("00000", [_boxed(4, 6, 81, 2)]), ("00001", [_boxed(3, 4, 84, 3)])]
    return build_root(parts, shard_classes={1: [("cat", 17), ("wolf", 18), ("person", 1)]})


def _inner(k: int, edit: Callable[[Dataset], Dataset]) -> Callable[[], Root]:
    """Shard k's 1.0 dataset breaks one 1.0 rule; the manifest entry is resealed."""
    def case() -> Root:
        root = base_root()
        return root.repack(k, dataset_members(edit(root.datasets[k])))
    return case


def _replace_toc_byte(data: bytes) -> bytes:
    return data[:PACK_PREFIX] + b"[" + data[PACK_PREFIX + 1:]


INVALID_1_1: list[tuple[str, str, str, Callable[[], Root]]] = [
    # the root and the manifest (S-1 .. S-6)
    ("root_both_layouts", "ROOT_LAYOUT", "a valid sharded root that also holds a valid 1.0 "
     "dataset (header.json and its member files)", lambda: _both_layouts(base_root())),
    ("manifest_json", "MANIFEST_SCHEMA", "manifest.json is not valid JSON (cut short)",
     lambda: _cut_manifest(base_root())),
    ("manifest_unknown_key", "MANIFEST_SCHEMA", "the manifest has a member shard_count",
     lambda: edit_manifest(base_root(), lambda m: m.update(shard_count=2))),
    ("manifest_missing_key", "MANIFEST_SCHEMA", "the manifest has no num_samples",
     lambda: edit_manifest(base_root(), lambda m: m.pop("num_samples"))),
    ("manifest_write_id", "MANIFEST_SCHEMA", "write_id has upper-case hex digits",
     lambda: edit_manifest(base_root(), lambda m: m.update(write_id=m["write_id"].upper()))),
    ("manifest_shard_xxh3", "MANIFEST_SCHEMA", "a shard's xxh3_64 has 15 hex digits",
     lambda: edit_manifest(base_root(), lambda m: m["shards"][0].update(
         xxh3_64=m["shards"][0]["xxh3_64"][1:]))),
    ("manifest_not_sharded", "MANIFEST_SCHEMA", "required_features lacks \"sharded\"",
     lambda: edit_manifest(base_root(), lambda m: m.update(required_features=[]))),
    ("manifest_format", "NOT_DETFMT", "format is \"detfmt2\"",
     lambda: edit_manifest(base_root(), lambda m: m.update(format="detfmt2"))),
    ("manifest_major", "VERSION_UNSUPPORTED", "version is \"2.0\"",
     lambda: edit_manifest(base_root(), lambda m: m.update(version="2.0"))),
    ("manifest_feature_unknown", "FEATURE_UNSUPPORTED", "required_features also names "
     "org.example.future", lambda: edit_manifest(base_root(), lambda m: m.update(
         required_features=["sharded", "org.example.future"]))),
    ("num_samples_sum", "SHARD_INDEXING", "num_samples is one more than the shards hold",
     lambda: edit_manifest(base_root(), lambda m: m.update(num_samples=m["num_samples"] + 1))),
    ("first_index_gap", "SHARD_INDEXING", "shards[1].first_index skips one index (the sum of "
     "num_samples is right)", lambda: edit_manifest(base_root(), lambda m: m["shards"][1].update(
         first_index=m["shards"][1]["first_index"] + 1))),
    ("path_parent", "PATH_UNSAFE", "a shard path \"../x\"",
     lambda: edit_manifest(base_root(), lambda m: m["shards"][1].update(path="../x"))),
    ("path_absolute", "PATH_UNSAFE", "an absolute shard path",
     lambda: edit_manifest(base_root(), lambda m: m["shards"][1].update(
         path="/shards/part-00001.detfmt"))),
    ("path_backslash", "PATH_UNSAFE", "a shard path with a backslash separator",
     lambda: edit_manifest(base_root(), lambda m: m["shards"][1].update(
         path="shards\\part-00001.detfmt"))),
    ("path_duplicate", "PATH_UNSAFE", "two entries (different keys) name the same shard file",
     lambda: _duplicate_path(base_root())),
    ("shard_missing", "FILE_MISSING", "the manifest names a shard file that does not exist",
     lambda: _drop_shard_file(base_root())),
    # shard files against the manifest (S-7, S-8)
    ("shard_size", "SHARD_SIZE", "the entry's bytes is 64 more than the file (xxh3_64 right)",
     lambda: edit_manifest(base_root(), lambda m: m["shards"][1].update(
         bytes=m["shards"][1]["bytes"] + 64))),
    ("shard_checksum", "SHARD_CHECKSUM", "the entry's xxh3_64 differs in one bit (size right)",
     lambda: edit_manifest(base_root(), lambda m: m["shards"][0].update(
         xxh3_64=_flip_hex(m["shards"][0]["xxh3_64"])))),
    ("schema_classes", "SCHEMA_MISMATCH", "shard 1's header names class 1 wolf, the manifest dog",
     _other_classes),
    ("schema_max_boxes", "SCHEMA_MISMATCH", "an entry's max_boxes differs from its shard's header",
     lambda: edit_manifest(base_root(), lambda m: m["shards"][0].update(
         max_boxes=m["shards"][0]["max_boxes"] + 1))),
    # the pack format (S-9, S-10)
    ("pack_magic", "PACK_MAGIC", "shard 1 starts with DETFMTpk",
     lambda: base_root().edit_shard(1, lambda d: b"DETFMTpk" + d[8:])),
    ("pack_version", "VERSION_UNSUPPORTED", "shard 0 has pack version 2",
     lambda: base_root().edit_shard(0, lambda d: d[:8] + (2).to_bytes(4, "little") + d[12:])),
    ("pack_toc_json", "PACK_LAYOUT", "the table of contents is not valid JSON",
     lambda: base_root().edit_shard(0, _replace_toc_byte)),
    ("pack_hole", "PACK_LAYOUT", "64 zero bytes before member index.npy (the TOC says so)",
     _repack_members(lambda members: members, shift={"index.npy": 64})),
    ("pack_gap_nonzero", "PACK_LAYOUT", "a byte between two members is 0x01",
     lambda: base_root().edit_shard(1, _gap_byte)),
    ("pack_trailing", "PACK_LAYOUT", "one zero byte after the last member",
     lambda: base_root().edit_shard(0, lambda d: d + b"\x00")),
    ("pack_no_header", "PACK_LAYOUT", "the table of contents has no header.json",
     _repack_members(lambda members: members[1:])),
    ("pack_extra_member", "PACK_LAYOUT", "a member notes.txt that the inner header does not "
     "name", _repack_members(lambda members: [members[0], *sorted(
         [*members[1:], ("notes.txt", b"not part of the dataset\n")])])),
    # the 1.0 dataset inside a shard (S-11): the 1.0 rule's id
    ("pack_member_missing", "FILE_MISSING", "the table of contents lacks counts.npy",
     _repack_members(lambda members: [m for m in members if m[0] != "counts.npy"])),
    ("shard_sample_checksum", "CHECKSUM", "a payload byte in shard 1 flipped; index checksum "
     "kept", _inner(1, _checksum)),
    ("shard_box_out_of_image", "BOX_OUT_OF_IMAGE", "x2 = width + 0.5 in shard 1, local sample 1",
     _inner(1, lambda d: edit_array(d, "boxes.npy", lambda a: set_item(a, (1, 0, 2), 4.5)))),
]


def _cut_manifest(root: Root) -> Root:
    root.manifest_raw = root.manifest_bytes()[:-40]
    return root


# --------------------------------------------------------------------------- output

#: Requirements a case exercises beyond the rule id it names (SPEC.md R-n).
COVERS: dict[str, list[str]] = {
    "newer_minor": ["R-9"],
    "extensions_ignored": ["R-9"],
    "foreign_entries": ["R-43"],
    "npy_header_forms": ["R-15"],
    "offset_huge": ["R-46", "R-47"],
    "limit_side": ["R-46"],
    "zstd_size": ["R-46"],
    "npy_pickle": ["R-17"],
    "jpeg_scans": ["R-50"],
    "jpeg_scans_256": ["R-50"],
}

SUITE_DIRS = ("v1", "v1_1", "v1_2")

#: Cases that cannot be committed at full size: the runner grows a file before running them.
GROW = {"header_too_large": {"file": "header.json", "byte": " ", "size": (1 << 20) + 1}}


def _dump(value: object) -> bytes:
    return (json.dumps(value, ensure_ascii=False, indent=1) + "\n").encode()


def all_suites() -> list[tuple[str, str, dict, list]]:
    """(directory, format version, valid cases, invalid cases) of every suite: the released
    cases of 1.0 and 1.1 here, and those of 1.2 (conformance_pins.py)."""
    import conformance_pins as pins

    return [
        ("v1", "1.0", {**VALID, **pins.VALID}, [*INVALID, *pins.INVALID]),
        ("v1_1", "1.1", {**VALID_1_1, **pins.VALID_1_1}, [*INVALID_1_1, *pins.INVALID_1_1]),
        ("v1_2", "1.2", pins.VALID_1_2, pins.INVALID_1_2),
    ]


def generate(root: Path) -> None:
    """Write <root>/v1/ (format 1.0) and <root>/v1_1/ (1.1, sharded roots): valid and invalid
    cases, the sidecars of the valid ones and the catalog <root>/cases.json."""
    suites = all_suites()
    ids = [case for _, _, valid, invalid in suites for case in [*valid, *(c[0] for c in invalid)]]
    if len(set(ids)) != len(ids):
        raise ValueError("case ids must be unique")
    catalog: dict = {"suite": "detfmt conformance", "format_version": "1.2", "valid": [],
                     "invalid": []}
    for base, version, valid, _ in suites:
        for case_id, (builder, description) in valid.items():
            dataset = builder()
            directory = root / base / "valid" / case_id
            dataset.write(directory)
            expect = expected_root if isinstance(dataset, Root) else expected
            (directory.parent / f"{case_id}.expected.json").write_bytes(_dump(expect(dataset)))
            entry = {"id": case_id, "format_version": version, "path": f"{base}/valid/{case_id}",
                     "expected": f"{base}/valid/{case_id}.expected.json",
                     "description": description, "covers": COVERS.get(case_id, [])}
            if dataset.links:
                entry["links"] = [[path, target] for path, target in sorted(dataset.links.items())]
            catalog["valid"].append(entry)
    for base, version, _, invalid in suites:
        for case_id, rule, description, builder in invalid:
            dataset = builder()
            dataset.write(root / base / "invalid" / case_id)
            entry = {"id": case_id, "format_version": version, "path": f"{base}/invalid/{case_id}",
                     "rule": rule, "description": description, "covers": COVERS.get(case_id, [])}
            if case_id in GROW:
                entry["grow"] = GROW[case_id]
            if dataset.links:
                entry["links"] = [[path, target] for path, target in sorted(dataset.links.items())]
            catalog["invalid"].append(entry)
    (root / "cases.json").write_bytes(_dump(catalog))


def tree(root: Path) -> dict[str, bytes]:
    """Every generated file under root (v1/, v1_1/ and cases.json), by relative path."""
    files = {"cases.json": (root / "cases.json").read_bytes()} if (root / "cases.json").exists() \
        else {}
    for base in SUITE_DIRS:
        for path in sorted((root / base).rglob("*")):
            if path.is_file():
                files[path.relative_to(root).as_posix()] = path.read_bytes()
    return files


def differences(root: Path = ROOT) -> list[str]:
    """Paths whose committed bytes differ from a fresh generation (empty when in sync)."""
    with tempfile.TemporaryDirectory() as scratch:
        fresh_root = Path(scratch)
        generate(fresh_root)
        fresh, committed = tree(fresh_root), tree(root)
    return sorted(name for name in fresh.keys() | committed.keys()
                  if fresh.get(name) != committed.get(name))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="compare with the committed suite instead of writing it")
    parser.add_argument("--root", type=Path, default=ROOT)
    args = parser.parse_args(argv)
    if args.check:
        diff = differences(args.root)
        for name in diff:
            print(f"differs: {name}")
        return 1 if diff else 0
    for base in SUITE_DIRS:
        if (args.root / base).exists():
            shutil.rmtree(args.root / base)
    generate(args.root)
    suites = all_suites()
    print(f"wrote {sum(len(s[2]) for s in suites)} valid and {sum(len(s[3]) for s in suites)} "
          f"invalid cases under {args.root}")
    return 0


if __name__ == "__main__":
    import make_conformance  # one copy of the module (conformance_pins imports it by name)

    sys.exit(make_conformance.main())
