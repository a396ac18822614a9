"""The adversarial cases of docs/reliability.md §2 (research note, cases 1-24 and 29-30 here;
25-28 live in test_rel_writer.py / test_rel_crash.py / test_rel_faults.py / test_rel_readonly.py).

Each case damages a private copy of a tiny valid dataset, then opens it and reads every sample in
a sandboxed child (1 GiB address space, 10 s): the test asserts the exact error class and rule
id, the file named, and the sample index where one applies. A crash, hang, MemoryError or any
other exception fails the case instead of killing pytest.
"""

from __future__ import annotations

import io
import json
import pickle
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import relharness as rh
import zstandard
from PIL import Image


@dataclass(frozen=True)
class Case:
    id: str
    damage: Callable[[Path], Any]
    error: str
    rule: str
    file: str | None = None  # the error's path must end with this
    index: int | None = None
    codec: str = "raw"
    op: str = "op_open_iterate"
    message: str | None = None  # a substring the message must contain


# ------------------------------------------------------------------------------ header helpers


def header_text(ds: Path) -> str:
    return (ds / "header.json").read_text()


def set_header(ds: Path, **changes: Any) -> None:
    h = rh.read_header(ds)
    h.update(changes)
    rh.write_header(ds, h)


def drop_header_key(key: str) -> Callable[[Path], None]:
    def damage(ds: Path) -> None:
        h = rh.read_header(ds)
        del h[key]
        rh.write_header(ds, h)

    return damage


def header_value(key: str, value: Any) -> Callable[[Path], None]:
    return lambda ds: set_header(ds, **{key: value})


def header_bytes(fn: Callable[[bytes], bytes]) -> Callable[[Path], None]:
    return lambda ds: (ds / "header.json").write_bytes(fn((ds / "header.json").read_bytes()))


def only_header(fn: Callable[[Path], None]) -> Callable[[Path], None]:
    """Apply ``fn`` and delete every other file: the error must come from the header alone."""

    def damage(ds: Path) -> None:
        fn(ds)
        for p in ds.iterdir():
            if p.name != "header.json":
                p.unlink()

    return damage


def deep_nesting(ds: Path) -> None:
    text = header_text(ds)
    depth = 100_000
    nested = "[" * depth + "]" * depth
    (ds / "header.json").write_text(text.rstrip()[:-1] + f', "extensions": {{"x": {nested}}}}}')


def huge_header(ds: Path) -> None:
    h = rh.read_header(ds)
    h["extensions"] = {"pad": "x" * (1 << 20)}
    rh.write_header(ds, h)


def duplicate_key(ds: Path) -> None:
    text = header_text(ds)
    (ds / "header.json").write_text(text.replace('"format"', '"format": "detfmt", "format"', 1))


def raw_json_value(key: str, literal: str) -> Callable[[Path], None]:
    """Set ``key`` to a JSON literal json.dumps cannot produce (NaN, Infinity, 10^5 digits)."""

    def damage(ds: Path) -> None:
        h = rh.read_header(ds)
        h[key] = "@@VALUE@@"
        text = json.dumps(h).replace('"@@VALUE@@"', literal)
        (ds / "header.json").write_text(text)

    return damage


# ------------------------------------------------------------------------------ npy helpers


def npy_resize_rows(name: str, rows: int) -> Callable[[Path], None]:
    """Give ``name`` a first dimension of ``rows`` (repeat or drop rows), resealed."""

    def damage(ds: Path) -> None:
        arr = rh.load_npy(ds, name)
        reps = np.resize(arr, (rows, *arr.shape[1:]))
        rh.save_npy(ds, name, reps)

    return damage


def npy_fake_dtype(name: str, descr: str, itemsize: int | None = None) -> Callable[[Path], None]:
    """Rewrite the npy header's descr (data bytes resized to stay consistent), resealed."""

    def damage(ds: Path) -> None:
        header, body = rh.npy_split((ds / name).read_bytes())
        count = int(np.prod(header["shape"]))
        size = itemsize if itemsize is not None else np.dtype(descr).itemsize
        header["descr"] = descr
        body = body[: count * size].ljust(count * size, b"\0")
        (ds / name).write_bytes(rh.npy_join(header, body))
        rh.reseal(ds, name)

    return damage


def npy_fortran(name: str) -> Callable[[Path], None]:
    def damage(ds: Path) -> None:
        header, body = rh.npy_split((ds / name).read_bytes())
        header["fortran_order"] = True
        (ds / name).write_bytes(rh.npy_join(header, body))
        rh.reseal(ds, name)

    return damage


class _Marker:
    """Unpickling this creates a file: proves whether a pickle payload ever ran."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (Path.touch, (Path(self.path),))


def npy_pickle(name: str) -> Callable[[Path], None]:
    def damage(ds: Path) -> None:
        marker = ds.parent / f"{ds.name}.PICKLE_RAN"
        arr = np.empty(3, dtype=object)
        arr[:] = [_Marker(str(marker))] * 3
        buf = io.BytesIO()
        np.save(buf, arr, allow_pickle=True)
        (ds / name).write_bytes(buf.getvalue())
        rh.reseal(ds, name)

    return damage


def npy_bytes(name: str, fn: Callable[[bytes], bytes], seal: bool = True) -> Callable[[Path], None]:
    def damage(ds: Path) -> None:
        (ds / name).write_bytes(fn((ds / name).read_bytes()))
        if seal:
            rh.reseal(ds, name)

    return damage


def index_set(i: int, **fields: int) -> Callable[[Path], None]:
    def damage(ds: Path) -> None:
        def edit(index: np.ndarray) -> None:
            for k, v in fields.items():
                index[i][k] = v % (1 << (index.dtype.fields[k][0].itemsize * 8))

        rh.edit_npy(ds, "index.npy", edit)

    return damage


def swap_offsets(a: int, b: int) -> Callable[[Path], None]:
    def damage(ds: Path) -> None:
        def edit(index: np.ndarray) -> None:
            index["offset"][[a, b]] = index["offset"][[b, a]]

        rh.edit_npy(ds, "index.npy", edit)

    return damage


def huge_counts(key: str, value: int) -> Callable[[Path], None]:
    """Claim ``value`` samples (or boxes) consistently in the header and every npy header, so
    only the real file sizes can tell: nothing of that size may be allocated."""

    def damage(ds: Path) -> None:
        h = rh.read_header(ds)
        h[key] = value
        if key == "num_samples":
            h["image"]["codecs"] = {name: value for name in h["image"].get("codecs", {})}
        dim = 0 if key == "num_samples" else 1
        per_box = ("boxes.npy", "classes.npy")
        for name, info in h["arrays"].items():
            if dim == 1 and not (name in per_box or name.startswith("box_")):
                continue
            shape = list(info["shape"])
            if dim < len(shape) and not (name.endswith("offsets.npy") and dim == 0):
                shape[dim] = value
            elif name.endswith("offsets.npy") and dim == 0:
                shape[0] = value + 1
            else:
                continue
            info["shape"] = shape
            header, body = rh.npy_split((ds / name).read_bytes())
            header["shape"] = tuple(shape)
            (ds / name).write_bytes(rh.npy_join(header, body))
        rh.write_header(ds, h)
        rh.reseal(ds)

    return damage


# ------------------------------------------------------------------------------ payload helpers


def zstd_frame(content: bytes, *, fcs: int | None, window_log: int | None = None,
               extra: bytes = b"") -> bytes:
    """A zstd frame around the real blocks of ``content`` with a forged header: declared content
    size ``fcs`` (None: absent) and window ``2**window_log`` (None: single segment)."""
    real = zstandard.ZstdCompressor(level=3, write_content_size=True).compress(content)
    fhd = real[4]
    single, fcs_flag, dict_flag = (fhd >> 5) & 1, fhd >> 6, fhd & 3
    fcs_size = [1 if single else 0, 2, 4, 8][fcs_flag]
    start = 4 + 1 + (0 if single else 1) + [0, 1, 2, 4][dict_flag] + fcs_size
    blocks = real[start:]
    checksum = fhd & 0b100
    if window_log is None and fcs is not None:  # single segment, 8-byte content size
        head = bytes([0b11100000 | checksum]) + struct.pack("<Q", fcs)
    else:
        exponent = (window_log or 17) - 10
        wd = bytes([exponent << 3])
        if fcs is None:
            head = bytes([checksum]) + wd
        else:
            head = bytes([0b11000000 | checksum]) + wd + struct.pack("<Q", fcs)
    return real[:4] + head + blocks + extra


def pixels(ds: Path, i: int) -> bytes:
    """The raw RGB bytes of sample ``i`` of the raw base dataset's twin (same seed)."""
    return rh.make_samples(5, 1)[i]["image"].tobytes()


def zstd_payload(i: int, **kw: Any) -> Callable[[Path], None]:
    return lambda ds: rh.replace_payload(ds, i, zstd_frame(pixels(ds, i), **kw))


def zstd_bad_block(i: int) -> Callable[[Path], None]:
    def damage(ds: Path) -> None:
        p = bytearray(rh.payload_of(ds, i))
        fhd = p[4]
        single, fcs_flag, dict_flag = (fhd >> 5) & 1, fhd >> 6, fhd & 3
        start = 5 + (0 if single else 1) + [0, 1, 2, 4][dict_flag] + [1 if single else 0, 2, 4,
                                                                       8][fcs_flag]
        p[start] |= 0b110  # block type 3: reserved, always invalid
        rh.replace_payload(ds, i, bytes(p))

    return damage


def payload_edit(i: int, fn: Callable[[bytes], bytes], **fields: int) -> Callable[[Path], None]:
    return lambda ds: rh.replace_payload(ds, i, fn(rh.payload_of(ds, i)), **fields)


def png_bytes(h: int, w: int) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(np.full((h, w, 3), 7, np.uint8)).save(buf, format="PNG")
    return buf.getvalue()


def png_bomb(h: int, w: int) -> bytes:
    """A tiny PNG whose IHDR claims h x w RGB pixels (all-zero rows compress to nothing)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))

    row = b"\0" * (1 + 3 * w)
    comp = zlib.compressobj(9)
    idat = b"".join(comp.compress(row) for _ in range(min(h, 64))) + comp.flush()
    ihdr = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")


def png_bad_crc(data: bytes) -> bytes:
    b = bytearray(data)
    b[16 + 3] ^= 0x01  # a byte of IHDR's width: the chunk CRC no longer matches
    return bytes(b)


def jpeg_other_size(ds: Path, i: int) -> bytes:
    h, w, _ = rh.make_samples(5, 1)[i]["image"].shape
    buf = io.BytesIO()
    Image.fromarray(np.zeros((h + 8, w, 3), np.uint8)).save(buf, format="JPEG")
    return buf.getvalue()


# ------------------------------------------------------------------------------ label helpers


def first_sample(ds: Path, pred: Callable[[int, int], bool]) -> int:
    counts = rh.load_npy(ds, "counts.npy")
    m = rh.read_header(ds)["max_boxes"]
    for i, c in enumerate(counts):
        if pred(int(c), m):
            return i
    raise AssertionError("the base dataset lacks a sample for this case")


def set_box(value: list[float], where: str = "valid") -> Callable[[Path], None]:
    def damage(ds: Path) -> None:
        i = first_sample(ds, (lambda c, m: c > 0) if where == "valid" else (lambda c, m: c < m))
        c = int(rh.load_npy(ds, "counts.npy")[i])
        slot = 0 if where == "valid" else c

        def edit(boxes: np.ndarray) -> None:
            boxes[i, slot] = value

        rh.edit_npy(ds, "boxes.npy", edit)

    return damage


def set_label(name: str, value: float, where: str = "valid") -> Callable[[Path], None]:
    def damage(ds: Path) -> None:
        i = first_sample(ds, (lambda c, m: c > 0) if where == "valid" else (lambda c, m: c < m))
        c = int(rh.load_npy(ds, "counts.npy")[i])
        slot = 0 if where == "valid" else c

        def edit(arr: np.ndarray) -> None:
            arr[i, slot] = value

        rh.edit_npy(ds, name, edit)

    return damage


def set_count(delta: int) -> Callable[[Path], None]:
    def damage(ds: Path) -> None:
        m = rh.read_header(ds)["max_boxes"]

        def edit(counts: np.ndarray) -> None:
            counts[0] = m + delta

        rh.edit_npy(ds, "counts.npy", edit)

    return damage


def float_classes(ds: Path) -> None:
    arr = rh.load_npy(ds, "classes.npy").astype("<f4")
    rh.save_npy(ds, "classes.npy", arr)


# ------------------------------------------------------------------------------ path helpers


def member_symlink(name: str) -> Callable[[Path], None]:
    def damage(ds: Path) -> None:
        real = ds.parent / f"{ds.name}-{name}.real"
        (ds / name).rename(real)
        (ds / name).symlink_to(real)

    return damage


def member_fifo(name: str) -> Callable[[Path], None]:
    def damage(ds: Path) -> None:
        import os

        (ds / name).unlink()
        os.mkfifo(ds / name)

    return damage


def member_dir(name: str) -> Callable[[Path], None]:
    def damage(ds: Path) -> None:
        (ds / name).unlink()
        (ds / name).mkdir()

    return damage


def header_box_field(name: str) -> Callable[[Path], None]:
    def damage(ds: Path) -> None:
        h = rh.read_header(ds)
        h["box_fields"] = [{"name": name, "dtype": "|u1"}]
        rh.write_header(ds, h)

    return damage


def header_extra_file(name: str) -> Callable[[Path], None]:
    def damage(ds: Path) -> None:
        h = rh.read_header(ds)
        h["files"][name] = {"size": 0, "xxh3_64": "0" * 16}
        rh.write_header(ds, h)

    return damage


L, H, D, U, V = ("LayoutError", "HeaderError", "DecodeError", "UnsafePathError",
                 "UnsupportedVersionError")
HJ = "header.json"
CASES = [
    # 1 header encoding
    Case("01-empty", header_bytes(lambda b: b""), H, "HEADER_ENCODING", HJ),
    Case("01-non-utf8", header_bytes(lambda b: b.replace(b'"detfmt"', b'"det\xfffmt"', 1)), H,
         "HEADER_ENCODING", HJ),
    Case("01-bom", header_bytes(lambda b: b"\xef\xbb\xbf" + b), H, "HEADER_ENCODING", HJ),
    # 2 size and nesting
    Case("02-over-1MiB", huge_header, H, "HEADER_TOO_LARGE", HJ),
    Case("02-deep-nesting", deep_nesting, H, "HEADER_JSON", HJ),
    # 3 JSON oddities
    Case("03-duplicate-key", duplicate_key, H, "HEADER_JSON", HJ, message="duplicate"),
    Case("03-nan", raw_json_value("writer", "NaN"), H, "HEADER_JSON", HJ),
    Case("03-infinity", raw_json_value("writer", "-Infinity"), H, "HEADER_JSON", HJ),
    Case("03-huge-int", raw_json_value("num_samples", "1" + "0" * 100_000), H, "HEADER_JSON", HJ),
    Case("03-top-level-array", header_bytes(lambda b: b"[" + b + b"]"), H, "HEADER_JSON", HJ),
    Case("03-not-detfmt", header_value("format", "safetensors"), "NotDetfmtError", "NOT_DETFMT",
         HJ),
    # 4 versions and features, decided from the header alone
    Case("04-major-2", only_header(header_value("version", "2.0")), V, "VERSION_UNSUPPORTED", HJ),
    Case("04-required-feature", only_header(header_value("required_features", ["sharding"])), V,
         "FEATURE_UNSUPPORTED", HJ, message="sharding"),
    # 5 schema
    Case("05-missing-key", drop_header_key("num_samples"), H, "HEADER_SCHEMA", HJ,
         message="num_samples"),
    Case("05-string-count", header_value("num_samples", "7"), H, "HEADER_SCHEMA", HJ,
         message="num_samples"),
    Case("05-negative-count", header_value("num_samples", -1), H, "HEADER_SCHEMA", HJ,
         message="num_samples"),
    Case("05-float-count", header_value("max_boxes", 1.5), H, "HEADER_SCHEMA", HJ,
         message="max_boxes"),
    Case("05-bool-count", header_value("num_samples", True), H, "HEADER_SCHEMA", HJ,
         message="num_samples"),
    # 6 count mismatches between files
    Case("06-counts-longer", npy_resize_rows("counts.npy", 6), L, "COUNT_MISMATCH", "counts.npy"),
    Case("06-boxes-shorter", npy_resize_rows("boxes.npy", 4), L, "COUNT_MISMATCH", "boxes.npy"),
    Case("06-string-offsets", npy_resize_rows("file_name.offsets.npy", 5), L, "COUNT_MISMATCH",
         "file_name.offsets.npy"),
    # 7 huge counts: rejected from limits or file sizes, nothing allocated
    Case("07-num-samples-2**62", header_value("num_samples", 2**62), H, "HEADER_SCHEMA", HJ),
    Case("07-max-boxes-2**40", header_value("max_boxes", 2**40), H, "HEADER_SCHEMA", HJ),
    Case("07-num-samples-2**39-consistent", huge_counts("num_samples", 2**39), L, "NPY_SIZE"),
    Case("07-max-boxes-2**16-consistent", huge_counts("max_boxes", 2**16), L, "NPY_SIZE"),
    # 8-9 dtypes, pickles, order
    Case("08-pickle", npy_pickle("boxes.npy"), L, "NPY_DTYPE", "boxes.npy"),
    Case("09-big-endian", npy_fake_dtype("boxes.npy", ">f4"), L, "NPY_DTYPE", "boxes.npy"),
    Case("09-f8", npy_fake_dtype("boxes.npy", "<f8"), L, "NPY_DTYPE", "boxes.npy"),
    Case("09-object", npy_fake_dtype("counts.npy", "|O", 8), L, "NPY_DTYPE", "counts.npy"),
    Case("09-unicode", npy_fake_dtype("classes.npy", "<U10"), L, "NPY_DTYPE", "classes.npy"),
    Case("09-void", npy_fake_dtype("counts.npy", "|V8"), L, "NPY_DTYPE", "counts.npy"),
    Case("09-fortran", npy_fortran("boxes.npy"), L, "NPY_ORDER", "boxes.npy"),
    # 10 npy sizes
    Case("10-npy-truncated", npy_bytes("boxes.npy", lambda b: b[:-4]), L, "NPY_SIZE", "boxes.npy"),
    Case("10-npy-trailing", npy_bytes("counts.npy", lambda b: b + b"\0" * 4), L, "NPY_SIZE",
         "counts.npy"),
    Case("10-npy-unsealed", npy_bytes("boxes.npy", lambda b: b[:-4], seal=False), L, "FILE_SIZE",
         "boxes.npy"),
    # 11-13 offsets
    Case("11-first-offset", index_set(0, offset=64), L, "OFFSETS_BOUNDS", "images.bin", 0),
    Case("11-past-eof", index_set(4, nbytes=10**6), L, "OFFSETS_BOUNDS", "images.bin", 4),
    Case("11-blob-longer", npy_bytes("images.bin", lambda b: b + b"\0" * 64), L, "BLOB_SIZE",
         "images.bin"),
    # SPEC 1.2 §8: the first broken link decides, at its own record: record 1 now starts past
    # payload 0's end (a gap), whatever record 2 holds
    Case("12-decreasing", swap_offsets(1, 2), L, "OFFSETS_BOUNDS", "images.bin", 1),
    Case("13-offset-2**63-1", index_set(1, offset=2**63 - 1), L, "OFFSETS_BOUNDS", "images.bin",
         1),
    Case("13-offset-wraps", index_set(1, offset=2**64 - 64), L, "OFFSETS_BOUNDS", "images.bin", 1),
    Case("13-nbytes-2**64-1", index_set(0, nbytes=2**64 - 1), L, "OFFSETS_BOUNDS", "images.bin",
         0),
    # 14 sample sizes and index fields
    Case("14-decoded-nbytes", index_set(2, decoded_nbytes=1), L, "SAMPLE_SIZE", "images.bin", 2),
    Case("14-height-zero", index_set(3, height=0), L, "LIMIT_EXCEEDED", "images.bin", 3),
    Case("14-height-huge", index_set(3, height=2**31), L, "LIMIT_EXCEEDED", "images.bin", 3),
    Case("14-channels", index_set(1, channels=4), L, "INDEX_FIELD", "images.bin", 1),
    Case("14-codec-unknown", index_set(1, codec=9), D, "CODEC_UNKNOWN", "images.bin", 1),
    # 15 blob truncated or extended after writing
    Case("15-blob-truncated", npy_bytes("images.bin", lambda b: b[:-1], seal=False), L,
         "BLOB_SIZE", "images.bin"),
    Case("15-blob-extended", npy_bytes("images.bin", lambda b: b + b"\0", seal=False), L,
         "BLOB_SIZE", "images.bin"),
    # 17-18 zstd
    Case("17-zstd-declares-4GiB", zstd_payload(1, fcs=1 << 32), D, "ZSTD_SIZE", "images.bin", 1,
         codec="zstd"),
    Case("17-zstd-window-2**31",
         lambda ds: rh.replace_payload(ds, 1, zstd_frame(pixels(ds, 1), fcs=len(pixels(ds, 1)),
                                                          window_log=31)),
         D, "ZSTD_WINDOW", "images.bin", 1, codec="zstd"),
    Case("18-zstd-no-content-size", zstd_payload(2, fcs=None), D, "ZSTD_SIZE", "images.bin", 2,
         codec="zstd"),
    Case("18-zstd-bad-block", zstd_bad_block(2), D, "ZSTD_CORRUPT", "images.bin", 2,
         codec="zstd"),
    Case("18-zstd-truncated", payload_edit(3, lambda p: p[: len(p) // 2]), D, "ZSTD_CORRUPT",
         "images.bin", 3, codec="zstd"),
    Case("18-zstd-trailing", payload_edit(3, lambda p: p + b"junk"), D, "ZSTD_TRAILING",
         "images.bin", 3, codec="zstd"),
    Case("18-zstd-two-frames", payload_edit(3, lambda p: p + p), D, "ZSTD_TRAILING", "images.bin",
         3, codec="zstd"),
    # 19 jpeg / png
    Case("19-jpeg-truncated", payload_edit(1, lambda p: p[: len(p) // 2]), D, "IMAGE_DECODE",
         "images.bin", 1, codec="jpeg"),
    Case("19-jpeg-other-size", lambda ds: rh.replace_payload(ds, 1, jpeg_other_size(ds, 1)), D,
         "IMAGE_DECODE", "images.bin", 1, codec="jpeg"),
    Case("19-png-bad-crc", payload_edit(2, png_bad_crc), D, "IMAGE_DECODE", "images.bin", 2,
         codec="png"),
    Case("19-png-truncated", payload_edit(2, lambda p: p[:40]), D, "IMAGE_DECODE", "images.bin",
         2, codec="png"),
    Case("19-png-other-size", lambda ds: rh.replace_payload(ds, 2, png_bytes(3, 3)), D,
         "IMAGE_DECODE", "images.bin", 2, codec="png"),
    Case("19-png-bomb", lambda ds: rh.replace_payload(ds, 0, png_bomb(60000, 60000)), D,
         "IMAGE_DECODE", "images.bin", 0, codec="png"),
    # 20-23 labels (checked when a sample is read; verify checks all)
    Case("20-box-nan", set_box([np.nan, 0, 1, 1]), "LabelError", "BOX_INVALID", "boxes.npy", 0),
    Case("20-box-inf", set_box([0, 0, np.inf, 1]), "LabelError", "BOX_INVALID", "boxes.npy", 0),
    Case("20-box-reversed", set_box([3, 0, 1, 1]), "LabelError", "BOX_INVALID", "boxes.npy", 0),
    Case("21-box-outside", set_box([0, 0, 1000, 1]), "LabelError", "BOX_OUT_OF_IMAGE",
         "boxes.npy", 0),
    Case("21-box-negative", set_box([-5, 0, 1, 1]), "LabelError", "BOX_OUT_OF_IMAGE", "boxes.npy",
         0),
    Case("22-class-too-big", set_label("classes.npy", 3), "LabelError", "CLASS_RANGE",
         "classes.npy", 0),
    Case("22-class-negative", set_label("classes.npy", -1), "LabelError", "CLASS_RANGE",
         "classes.npy", 0),
    Case("22-class-float", float_classes, L, "NPY_DTYPE", "classes.npy"),
    Case("23-count-too-big", set_count(+1), "LabelError", "COUNT_RANGE", "counts.npy", 0),
    Case("23-count-negative", set_count(-1000), "LabelError", "COUNT_RANGE", "counts.npy", 0),
    Case("23-box-padding", set_box([0, 0, 1, 1], "padding"), "LabelError", "MASK_INCONSISTENT",
         "boxes.npy"),
    Case("23-class-padding", set_label("classes.npy", 0, "padding"), "LabelError",
         "MASK_INCONSISTENT", "classes.npy"),
    Case("23-field-padding", set_label("box_iscrowd.npy", 1, "padding"), "LabelError",
         "MASK_INCONSISTENT", "box_iscrowd.npy"),
    # 24 unsafe members
    Case("24-symlink-member", member_symlink("boxes.npy"), U, "PATH_UNSAFE", "boxes.npy"),
    Case("24-symlink-header", member_symlink("header.json"), U, "PATH_UNSAFE", HJ),
    Case("24-fifo-member", member_fifo("counts.npy"), U, "PATH_UNSAFE", "counts.npy"),
    Case("24-fifo-header", member_fifo("header.json"), U, "PATH_UNSAFE", HJ),
    Case("24-directory-member", member_dir("images.bin"), U, "PATH_UNSAFE", "images.bin"),
    Case("24-traversal-box-field", header_box_field("../../etc/passwd"), H, "HEADER_SCHEMA", HJ),
    Case("24-traversal-file-entry", header_extra_file("../outside.npy"), H, "HEADER_SCHEMA", HJ),
    Case("24-absolute-file-entry", header_extra_file("/etc/passwd"), H, "HEADER_SCHEMA", HJ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_case(case: Case, dataset: Callable[..., Path], worker: rh.SafeWorker) -> None:
    ds = dataset(case.codec)
    case.damage(ds)
    out = worker.call(case.op, str(ds))
    assert out.kind == "detfmt", f"{case.id}: expected {case.error}[{case.rule}], got {out}"
    assert case.error in out.extra["mro"], f"{case.id}: {out}"
    assert out.rule == case.rule, f"{case.id}: {out}"
    assert out.path is not None, f"{case.id}: the error names no file: {out}"
    if case.file is not None:
        assert out.path.endswith(case.file), f"{case.id}: wrong file: {out}"
    if case.index is not None:
        assert out.index == case.index, f"{case.id}: wrong sample index: {out}"
    if case.message is not None:
        assert case.message in out.detail, f"{case.id}: {out}"
    if case.id == "08-pickle":
        assert not (ds.parent / f"{ds.name}.PICKLE_RAN").exists(), "the pickle payload ran"


def test_cases_cover_every_codec() -> None:
    assert {c.codec for c in CASES} == set(rh.CODECS)


def test_valid_datasets_read_cleanly(base_datasets: dict[str, Path],
                                     worker: rh.SafeWorker) -> None:
    """The control group: the undamaged copies open, iterate and verify."""
    for codec, path in base_datasets.items():
        out = worker.call("op_check_all", str(path))
        assert out.kind == "ok" and not out.value.get("violations"), f"{codec}: {out}"
        assert "open_error" not in out.value, f"{codec}: {out}"


def test_header_limit_is_configurable(dataset: Callable[..., Path]) -> None:
    """Case 2: the 1 MiB limit is a default; a reader can raise it."""
    import detfmt

    ds = dataset()
    huge_header(ds)
    with pytest.raises(detfmt.HeaderError) as info:
        detfmt.open(ds)
    assert info.value.rule == "HEADER_TOO_LARGE"
    with detfmt.open(ds, max_header_bytes=4 << 20) as opened:
        assert len(opened) == 5


def test_unsupported_version_reports_found_and_supported(dataset: Callable[..., Path]) -> None:
    import detfmt

    ds = dataset()
    set_header(ds, version="2.0")
    with pytest.raises(detfmt.UnsupportedVersionError) as info:
        detfmt.open(ds)
    assert (info.value.found, info.value.supported) == ("2.0", "1.0")


def test_minor_version_and_unknown_keys_are_accepted(dataset: Callable[..., Path]) -> None:
    """Case 4's other half: a newer minor version with unknown optional keys still opens."""
    import detfmt

    ds = dataset()
    set_header(ds, version="1.7", some_future_key={"x": 1})
    with detfmt.open(ds) as opened:
        assert len(opened) == 5


# ---------------------------------------------------------------------- 16: bit flips, verify


@pytest.mark.parametrize("codec", rh.CODECS)
def test_16_bitflip_passes_open_and_fails_verify(codec: str, dataset: Callable[..., Path],
                                                 worker: rh.SafeWorker) -> None:
    ds = dataset(codec)
    index = rh.load_npy(ds, "index.npy")
    i = 3
    pos = int(index[i]["offset"]) + int(index[i]["nbytes"]) // 2
    rh.mutate(ds, "images.bin", "bitflip", pos=pos, bit=3)
    assert worker.call("op_open", str(ds)).kind == "ok"  # structural checks only
    out = worker.call("op_verify", str(ds))
    assert out.kind == "ok", str(out)
    assert ["CHECKSUM", i] in out.value, out.value
    raised = worker.call("detfmt:verify", str(ds))
    assert raised.kind == "detfmt" and raised.rule in ("CHECKSUM", "FILE_CHECKSUM"), str(raised)
    assert "IntegrityError" in raised.extra["mro"]


@pytest.mark.parametrize("codec", rh.CODECS)
def test_every_payload_byte_flip_is_named_by_verify(codec: str, tmp_path: Path) -> None:
    """Exhaustive: each byte of each payload flipped in turn; verify() names that sample."""
    ds = rh.build_dataset(tmp_path / "tiny", n=2, seed=4, codec=codec, lo=4, hi=7)
    out = rh.run_safe("op_flip_every_payload_byte", str(ds), timeout=60)
    assert out.kind == "ok", str(out)
    assert out.value["flips"] > 40
    assert out.value["nmiss"] == 0, out.value


# ---------------------------------------------------------------------- 29-30: generations


def test_29_truncated_under_reader_is_detected(dataset: Callable[..., Path]) -> None:
    out = rh.run_safe("relcases_child:truncate_under_reader", str(dataset()))
    assert out.kind == "ok", str(out)
    assert out.value == ["DatasetChangedError", "DATASET_CHANGED"]


def test_29_sigbus_is_the_documented_limit(dataset: Callable[..., Path]) -> None:
    """Touching a mapped page past a truncated end is SIGBUS; no reader can turn that into an
    exception. This test documents the limit (docs/reliability.md) and that it stays in the
    child: writers never truncate, so only outside damage can cause it."""
    out = rh.run_safe("relcases_child:touch_after_truncate", str(dataset()))
    assert out.kind == "signal" and "SIGBUS" in out.detail, str(out)


def test_29_overwrite_keeps_old_inodes_for_live_readers(dataset: Callable[..., Path]) -> None:
    out = rh.run_safe("relcases_child:overwrite_under_reader", str(dataset()))
    assert out.kind == "ok", str(out)
    assert out.value == {"old_still_reads": True, "check": "DATASET_CHANGED",
                         "new_opens": True}


def test_30_pickled_reader_detects_replacement(dataset: Callable[..., Path]) -> None:
    import detfmt

    ds_path = dataset()
    with detfmt.open(ds_path) as ds:
        blob = pickle.dumps(ds)
        assert len(blob) < 4096, "only the path and the generation should be pickled"
        again = pickle.loads(blob)
        assert len(again) == len(ds)
        assert not ds[0].image.flags.writeable  # read-only view of the mapping
        rh.build_dataset(ds_path, n=5, seed=9, overwrite=True)
        with pytest.raises(detfmt.DatasetChangedError):
            pickle.loads(blob)


def test_30_torch_dataset_worker_detects_replacement(dataset: Callable[..., Path]) -> None:
    """A DataLoader worker unpickles the torch dataset and re-opens the path: if the dataset was
    replaced since the main process opened it, the worker must refuse, not mix versions."""
    pytest.importorskip("torch")
    import detfmt
    from detfmt.torch.dataset import DetectionDataset

    ds_path = dataset()
    main = DetectionDataset(ds_path)
    state = pickle.dumps(main)
    worker_copy = pickle.loads(state)
    assert worker_copy[0]["image"].shape[-1] == 3  # unchanged: the worker reads normally
    rh.build_dataset(ds_path, n=5, seed=9, overwrite=True)
    late_worker = pickle.loads(state)
    with pytest.raises(detfmt.DatasetChangedError):
        late_worker[0]


def test_30_ring_loader_worker_detects_replacement(dataset: Callable[..., Path]) -> None:
    """The same for RingDataLoader: its workers re-open the path when they start."""
    pytest.importorskip("torch")
    import detfmt
    from detfmt.torch import RingDataLoader

    ds_path = dataset()
    loader = RingDataLoader(ds_path, batch_size=2, num_workers=1,
                            multiprocessing_context="fork")
    try:
        rh.build_dataset(ds_path, n=5, seed=9, overwrite=True)
        with pytest.raises(detfmt.DatasetChangedError):
            for _ in loader:
                pass
    finally:
        loader.close()
