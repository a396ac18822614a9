"""Conformance cases of format 1.2 (SPEC.md change log, 1.2): one case per resolved choice.

Each invalid case breaks the rule it names, or two rules whose order SPEC.md §12 / §19.4 fixes
(ids starting ``order_``: the case name says which check must come first). Each valid case holds
something a strict reader might refuse but SPEC.md allows. The ragged label layout (§10.2, the
feature ``ragged_labels``) has its own cases under ``conformance/v1_2/``.

Used by tools/make_conformance.py (which registers these lists); like it, it never imports
detfmt.
"""

from __future__ import annotations

import hashlib
import json
import re
import zlib
from collections.abc import Callable

import conformance_payloads as payloads
import make_conformance as mc
import numpy as np
import xxhash
from make_conformance import CLASSES, Dataset, Root, Sample, pattern

# --------------------------------------------------------------------------- helpers


def raw(dataset: Dataset, old: bytes, new: bytes) -> Dataset:
    """Replace bytes of the encoded header (exactly once)."""
    data = dataset.header_bytes()
    if data.count(old) != 1:
        raise ValueError(f"{old!r} occurs {data.count(old)} times in the header")
    dataset.header_raw = data.replace(old, new)
    return dataset


def raw_manifest(root: Root, old: bytes, new: bytes) -> Root:
    data = root.manifest_bytes()
    if data.count(old) != 1:
        raise ValueError(f"{old!r} occurs {data.count(old)} times in the manifest")
    root.manifest_raw = data.replace(old, new)
    return root


def header(edit: Callable[[dict], object], base: Callable[[], Dataset] = mc.base_raw
           ) -> Callable[[], Dataset]:
    def case() -> Dataset:
        dataset = base()
        edit(dataset.header)
        return dataset
    return case


def both(*edits: Callable[[Dataset], object], base: Callable[[], Dataset] = mc.base_raw
         ) -> Callable[[], Dataset]:
    """Apply several edits to one base dataset (for the order cases)."""
    def case() -> Dataset:
        dataset = base()
        for edit in edits:
            result = edit(dataset)
            if isinstance(result, Dataset):
                dataset = result
        return dataset
    return case


def flip_payload(dataset: Dataset, i: int, *, reseal_file: bool = True) -> Dataset:
    """Flip the first byte of payload i, keeping its index checksum (CHECKSUM); with
    ``reseal_file`` False, header.files keeps the old images.bin hash too (FILE_CHECKSUM)."""
    before = dict(dataset.header["files"]["images.bin"])
    data = mc.stored_payloads(dataset)
    data[i] = bytes([data[i][0] ^ 0x01]) + data[i][1:]
    mc.relayout(dataset, data, checksums=False)
    if not reseal_file:
        dataset.header["files"]["images.bin"] = before
    return dataset


def set_array(name: str, key: tuple, value: float) -> Callable[[Dataset], Dataset]:
    return lambda d: mc.edit_array(d, name, lambda a: mc.set_item(a, key, value))


def index_edit(i: int, **changes: int) -> Callable[[Dataset], Dataset]:
    return lambda d: mc.edit_index(d, i, **changes)


def fortran(name: str) -> Callable[[Dataset], Dataset]:
    def edit(dataset: Dataset) -> Dataset:
        dataset.files[name] = payloads.npy(mc.load(dataset, name), fortran=True)
        return dataset.seal()
    return edit


def retype(name: str, dtype: str) -> Callable[[Dataset], Dataset]:
    def edit(dataset: Dataset) -> Dataset:
        dataset.files[name] = payloads.npy(mc.load(dataset, name).astype(dtype))
        return dataset.seal()
    return edit


def four_raw() -> Dataset:
    return mc.build([Sample(pattern(4, 6, 90 + i), boxes=[[0, 0, 1, 1]], classes=[i % 3])
                     for i in range(4)], CLASSES)


def named(names: list[str]) -> Dataset:
    return mc.build([Sample(pattern(2, 2, 95 + i), file_name=name, orig_size=(2, 2))
                     for i, name in enumerate(names)], CLASSES,
                    image_fields=["orig_size", "file_name"])


def set_offsets(values: dict[int, int]) -> Callable[[Dataset], Dataset]:
    def edit(dataset: Dataset) -> Dataset:
        offsets = mc.load(dataset, "file_name.offsets.npy")
        for i, value in values.items():
            offsets[i] = value
        mc.store(dataset, "file_name.offsets.npy", offsets)
        return dataset.seal()
    return edit


def one(codec: str, payload: bytes | None = None, image: np.ndarray | None = None) -> Dataset:
    return mc.one(codec, payload, image)


Z = mc.Z
ZB = Z.tobytes()


def deep(levels: int) -> bytes:
    return b'"extensions": {"deep": ' + b"[" * levels + b"]" * levels + b"}"


# --------------------------------------------------------------------------- .npy helpers


def npy_header(name: str, text: str, data: Callable[[bytes], bytes] = lambda d: d, *,
               version: int = 1) -> Callable[[], Dataset]:
    """base_raw with member ``name``'s array header replaced by ``text`` (padded as numpy
    pads it, newline-terminated; .npy version 1, latin-1, or 3, UTF-8), its data kept (or
    changed by ``data``)."""
    def case() -> Dataset:
        dataset = mc.base_raw()
        old = dataset.files[name]
        start = 10 if old[6] == 1 else 12
        body = data(old[start + int.from_bytes(old[8:start], "little"):])
        prefix = 10 if version == 1 else 12
        encoded = text.encode("latin-1" if version == 1 else "utf-8")
        padded = encoded + b" " * (-(prefix + len(encoded) + 1) % 64) + b"\n"
        dataset.files[name] = (b"\x93NUMPY" + bytes([version, 0])
                               + len(padded).to_bytes(prefix - 8, "little") + padded + body)
        return dataset.seal()
    return case


def _boxes_with_shape(*shape: int) -> Dataset:
    """base_raw whose boxes.npy, and header.arrays, have ``shape`` (zero-filled beyond the
    real boxes)."""
    dataset = mc.base_raw()
    boxes = mc.load(dataset, "boxes.npy")
    grown = np.zeros(shape, np.float32)
    grown[:, :boxes.shape[1], :4] = boxes
    dataset.files["boxes.npy"] = payloads.npy(grown)
    dataset.header["arrays"]["boxes.npy"]["shape"] = list(shape)
    return dataset.seal()


def _png_ihdr_twice() -> bytes:
    data = payloads.png(mc.Z)
    return data[:33] + data[8:33] + data[33:]  # signature, IHDR, IHDR again, the rest


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return (len(data).to_bytes(4, "big") + kind + data
            + zlib.crc32(kind + data).to_bytes(4, "big"))


def _png_fdict() -> bytes:
    """mc.Z as PNG whose zlib header sets FDICT (a preset dictionary, DICTID 1)."""
    good = payloads.png(mc.Z)
    at = good.index(b"IDAT") - 4
    length = int.from_bytes(good[at:at + 4], "big")
    body = good[at + 8:at + 8 + length]
    flg = next(f for f in range(256) if f & 0x20 and (f & 0xC0) == (body[1] & 0xC0)
               and ((body[0] << 8) | f) % 31 == 0)
    stream = bytes([body[0], flg]) + (1).to_bytes(4, "big") + body[2:]
    return good[:at] + _png_chunk(b"IDAT", stream) + good[at + 12 + length:]


def case_jpeg_adobe_12() -> Dataset:
    """No JFIF, component ids R, G, B, and an Adobe segment of exactly 12 data bytes (after its
    length field) with transform 1: YCbCr (§9.3 J3)."""
    adobe = _segment(0xEE, b"Adobe\x00\x64\x00\x00\x00\x00\x01")
    payload = jpeg_edit(JPEG57, lambda s: component_ids(without_jfif(s, adobe), b"RGB"))
    decoded = payloads.FROZEN_JPEG_DECODED[hashlib.sha256(JPEG57).hexdigest()]
    image = np.frombuffer(decoded, np.uint8).reshape(5, 7, 3)
    return mc.build([Sample(image, "jpeg", payload=payload, boxes=[[0, 0, 7, 5]], classes=[0])],
                    CLASSES)


def case_npy_grammar() -> Dataset:
    """§6's grammar at its edges: leading zeros (003), spaces around every token, trailing
    commas, double quotes, no final newline, and no padding."""
    dataset = mc.base_raw()
    texts = {
        "counts.npy": "{'descr': '<i4', 'fortran_order': False, 'shape': (003,), }",
        "boxes.npy": ' { "descr" : "<f4" , "fortran_order" : False , "shape" : ( 3 , 2 , 4 , ) } ',
        "index.npy": "{'shape': (3,), 'descr': [" + ", ".join(
            f'("{name}", "{dtype}")' for name, dtype in mc.INDEX_DESCR) + ", ], "
        "'fortran_order': False}",
    }
    for name, text in texts.items():
        old = dataset.files[name]
        body = old[10 + int.from_bytes(old[8:10], "little"):]
        dataset.files[name] = (b"\x93NUMPY\x01\x00" + len(text).to_bytes(2, "little")
                               + text.encode("latin-1") + body)
    return dataset.seal()


# --------------------------------------------------------------------------- JPEG helpers

JPEG57 = payloads.FROZEN_JPEG[5, 7]
JPEG_SOURCE57 = payloads.jpeg_source(5, 7)


def jpeg_edit(data: bytes, edit: Callable[[list[tuple[int, bytes]]], list[tuple[int, bytes]]]
              ) -> bytes:
    return b"".join(segment for _, segment in edit(payloads.jpeg_segments(data)))


def _sof(segments: list[tuple[int, bytes]], change: Callable[[bytearray], object]
         ) -> list[tuple[int, bytes]]:
    out = []
    for marker, segment in segments:
        if marker == 0xC0:
            segment = bytearray(segment)
            change(segment)
            segment = bytes(segment)
        out.append((marker, segment))
    return out


def sof_marker(data: bytes, marker: int) -> bytes:
    def change(segment: bytearray) -> None:
        segment[1] = marker
    return jpeg_edit(data, lambda s: _sof(s, change))


def sof_byte(data: bytes, offset: int, value: int) -> bytes:
    def change(segment: bytearray) -> None:
        segment[offset] = value
    return jpeg_edit(data, lambda s: _sof(s, change))


def _segment(marker: int, body: bytes) -> bytes:
    return bytes([0xFF, marker]) + (len(body) + 2).to_bytes(2, "big") + body


ADOBE_RGB = _segment(0xEE, b"Adobe\x00\x64\x00\x00\x00\x00\x00")  # transform 0: RGB
EXIF_ORIENTATION_6 = _segment(0xE1, b"Exif\x00\x00" + b"II*\x00\x08\x00\x00\x00"
                              + b"\x01\x00" + b"\x12\x01\x03\x00\x01\x00\x00\x00\x06\x00\x00\x00"
                              + b"\x00\x00\x00\x00")


def without_jfif(segments: list[tuple[int, bytes]], *insert: bytes) -> list[tuple[int, bytes]]:
    """Drop the JFIF APP0 segment, put ``insert`` segments in its place."""
    out = [segments[0], *((0xE0 + 1, extra) for extra in insert)]
    return out + [(m, s) for m, s in segments[1:] if m != 0xE0]


def component_ids(segments: list[tuple[int, bytes]], ids: bytes) -> list[tuple[int, bytes]]:
    out = []
    for marker, segment in segments:
        segment = bytearray(segment)
        if marker == 0xC0:
            for k, value in enumerate(ids):
                segment[10 + 3 * k] = value
        if marker == 0xDA:
            for k, value in enumerate(ids):
                segment[5 + 2 * k] = value
        out.append((marker, bytes(segment)))
    return out


GRAY128 = np.full((8, 8, 3), 128, np.uint8)  # the image of payloads.progressive_gray


RESTART = payloads.FROZEN_JPEG_MORE["RESTART"]
RESTART_SOURCE = payloads.jpeg_source(16, 24)


def _coded_start(data: bytes) -> int:
    """Where the first scan's entropy-coded data starts."""
    sos = data.index(b"\xff\xda")
    return sos + 2 + int.from_bytes(data[sos + 2:sos + 4], "big")


def at_restart(n: int, change: Callable[[bytes], bytes]) -> bytes:
    """RESTART with its restart marker number ``n`` (counted from 0) replaced by change(it)."""
    start = _coded_start(RESTART)
    found = [m.start() for m in re.finditer(rb"\xff[\xd0-\xd7]", RESTART[start:])]
    at = start + found[n]
    return RESTART[:at] + change(RESTART[at:at + 2]) + RESTART[at + 2:]


def cut_coded(data: bytes) -> bytes:
    """The second half of the (single) scan's coded data removed, EOI kept."""
    start = _coded_start(data)
    return data[:start + (len(data) - 2 - start) // 2] + data[-2:]


def first_scan_data(data: bytes, coded: bytes) -> bytes:
    """The first scan's one byte of coded data (progressive_gray) replaced by ``coded``."""
    start = _coded_start(data)
    return data[:start] + coded + data[start + 1:]


def refinement_ah(data: bytes) -> bytes:
    """progressive_gray with its first refinement scan (Ah 1, Al 0) made Ah 2, Al 1."""
    at = data.index(b"\xff\xda\x00\x08\x01\x01\x00\x01\x01\x10")
    return data[:at + 9] + b"\x21" + data[at + 10:]


def jpeg_case(payload: bytes, image: np.ndarray = JPEG_SOURCE57) -> Callable[[], Dataset]:
    return lambda: one("jpeg", payload, image)


def reference_jpeg(kind: str, image_key: str | None = None) -> Sample:
    """A sample of a frozen JPEG whose reference pixels are libjpeg-turbo's decode."""
    decoded = np.frombuffer(payloads.FROZEN_JPEG_MORE[image_key or f"{kind}_DECODED"], np.uint8)
    return Sample(decoded.reshape(16, 24, 3), "jpeg", payload=payloads.FROZEN_JPEG_MORE[kind],
                  boxes=[[1, 2, 23, 15]], classes=[2])


# --------------------------------------------------------------------------- 1.0: valid


def case_json_profile() -> Dataset:
    """RFC 8259 whitespace, escapes, __proto__ and other plain member names, -0, 2^64."""
    dataset = mc.build([Sample(pattern(2, 3, 100), boxes=[[0, 0, 3, 2]], classes=[0])],
                       [("\U0001F697 car", 1), ("caf\u00e9", 2), ("__proto__", 3)],
                       metadata={"__proto__": "p", "": "empty name", "constructor": "c"})
    dataset.header["extensions"] = {"__proto__": {"polluted": True}, "neg_zero": 0,
                                    "big": 2**64, "text": "x"}
    data = dataset.header_bytes()
    data = data.replace(b'"neg_zero": 0', b'"neg_zero": -0')
    data = data.replace(b'"text": "x"', b'"text": "\\u00e9\\/\\ud83d\\ude97\\t"')
    data = data.replace("caf\u00e9".encode(), b"caf\\u00e9")
    data = data.replace(b"\n", b"\r\n\t")
    dataset.header_raw = data
    return dataset


def case_json_limits() -> Dataset:
    """64 nested arrays and objects, a number token of 64 characters, the largest binary64."""
    dataset = mc.build([Sample(pattern(2, 2, 101))], CLASSES)
    return raw(dataset, b'"extensions": {}', deep(62)[:-1] + b', "n": -' + b"9" * 63
               + b', "f": 1.7976931348623157e308}')


def case_source_ids_2_53() -> Dataset:
    """Distinct source ids that are equal as binary64 values, and the int64 extremes."""
    return mc.build([Sample(pattern(2, 2, 102), boxes=[[0, 0, 1, 1]], classes=[3])],
                    [("a", 2**53), ("b", 2**53 + 1), ("c", -2**63), ("d", 2**63 - 1)])


def case_class_names_astral() -> Dataset:
    """A class name of 256 code points outside the BMP (512 UTF-16 units), a writer string too."""
    dataset = mc.build([Sample(pattern(2, 2, 103))], [("\U0001F697" * 256, None), ("b", None)])
    dataset.header["writer"] = "\U0001F600" * 256
    return dataset


def case_version_leading_zeros() -> Dataset:
    return mc.build([Sample(pattern(2, 2, 104))], CLASSES, version="01.0000")


def case_num_boxes_ignored() -> Dataset:
    """num_boxes without the feature ragged_labels is an unknown member (R-9), ignored."""
    dataset = mc.build([Sample(pattern(2, 2, 105), boxes=[[0, 0, 1, 1]], classes=[0])], CLASSES)
    dataset.header["num_boxes"] = 99
    return dataset


def case_box_negative_zero() -> Dataset:
    """-0.0 in a valid slot: -0.0 >= 0 and -0.0 <= W hold (only padding must be +0.0)."""
    return mc.build([Sample(pattern(3, 4, 106), boxes=[[-0.0, -0.0, 2, 3]], classes=[1])],
                    CLASSES)


def case_box_field_nan() -> Dataset:
    return mc.build([Sample(pattern(3, 4, 107), boxes=[[0, 0, 2, 3], [1, 1, 2, 2]],
                            classes=[1, 2], box_fields={"score": [float("nan"), float("inf")]})],
                    CLASSES, box_fields=[("score", "<f4")], max_boxes=3)


def case_no_classes() -> Dataset:
    return mc.build([Sample(pattern(2, 2, 108)), Sample(pattern(1, 3, 109))], [], max_boxes=2)


def case_zstd_dict_id_zero() -> Dataset:
    return one("zstd", payloads.zstd_frame(ZB, dict_id=0))


def case_zstd_window_limit() -> Dataset:
    return one("zstd", payloads.zstd_frame(ZB, window_log=27))


def case_png_interlaced() -> Dataset:
    return mc.build([Sample(pattern(9, 11, 110), "png", boxes=[[0, 0, 11, 9]], classes=[0],
                            payload=payloads.png(pattern(9, 11, 110), interlace=True)),
                     Sample(pattern(1, 2, 111), "png",
                            payload=payloads.png(pattern(1, 2, 111), interlace=True))], CLASSES)


def case_png_chunks() -> Dataset:
    """Ancillary chunks (ignored: gAMA is not applied), a suggested palette (PLTE), the zlib
    stream split over three IDAT chunks."""
    image = pattern(5, 6, 112)
    chunks = ((b"gAMA", (45455).to_bytes(4, "big")), (b"tEXt", b"Comment\x00conformance"),
              (b"PLTE", bytes(range(12))), (b"pHYs", bytes(9)))
    return one("png", payloads.png(image, before_idat=chunks, idat_parts=3), image)


def case_jpeg_subsampled() -> Dataset:
    """4:2:0 and 4:2:2 chroma: pixels within the tolerance of the reference decode (§9.3)."""
    return mc.build([reference_jpeg("SUB_420"), reference_jpeg("SUB_422")], CLASSES)


def case_jpeg_forms() -> Dataset:
    """Progressive, restart markers, extended sequential (SOF1), EXIF orientation 6 without JFIF
    (not applied), a comment: all decoded like the baseline image."""
    source = payloads.jpeg_source(16, 24)
    exif = jpeg_edit(JPEG57, lambda s: without_jfif(s, EXIF_ORIENTATION_6,
                                                      _segment(0xFE, b"a comment")))
    return mc.build([
        Sample(source, "jpeg", payload=payloads.FROZEN_JPEG_MORE["PROGRESSIVE"]),
        Sample(source, "jpeg", payload=payloads.FROZEN_JPEG_MORE["RESTART"],
               boxes=[[0, 0, 24, 16]], classes=[1]),
        Sample(JPEG_SOURCE57, "jpeg", payload=sof_marker(JPEG57, 0xC1)),
        Sample(JPEG_SOURCE57, "jpeg", payload=exif, boxes=[[0, 0, 7, 5]], classes=[0]),
    ], CLASSES)


def case_jpeg_scans_256() -> Dataset:
    """The most scans R-50 allows, in a consistent progression."""
    return mc.build([Sample(GRAY128, "jpeg", payload=payloads.progressive_gray(256))], CLASSES)


def pretty(value: object, indent: int = 0) -> str:
    """JSON with one member per line and arrays of scalars on one line (readable in SPEC.md)."""
    pad = " " * (indent + 1)
    if isinstance(value, dict) and value:
        members = [f"{pad}{json.dumps(k, ensure_ascii=False)}: {pretty(v, indent + 1)}"
                   for k, v in value.items()]
        return "{\n" + ",\n".join(members) + "\n" + " " * indent + "}"
    if isinstance(value, list) and any(isinstance(v, dict) for v in value):
        items = [pad + pretty(v, indent + 1) for v in value]
        return "[\n" + ",\n".join(items) + "\n" + " " * indent + "]"
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))


def worked_example() -> Dataset:
    """The two-sample dataset of SPEC.md §20 (its bytes are printed there)."""
    image0 = np.arange(2 * 2 * 3, dtype=np.uint8).reshape(2, 2, 3) * 20
    image1 = np.full((1, 3, 3), 200, np.uint8)
    dataset = mc.build([
        Sample(image0, boxes=[[0.5, 0.0, 2.0, 1.5]], classes=[1]),
        Sample(image1, "zstd", payload=payloads.zstd_frame(image1.tobytes(), blocks=[("rle", 9)])),
    ], [("cat", None), ("dog", 18)])
    dataset.header_raw = (pretty(dataset.header) + "\n").encode()
    return dataset


VALID: dict[str, tuple[Callable[[], Dataset], str]] = {
    "worked_example": (worked_example, "the two-sample dataset whose bytes SPEC.md §20 prints"),
    "json_profile": (case_json_profile, "CR, LF and tab between tokens, escapes (\\u00e9, \\/, a "
                     "surrogate pair), member names __proto__, constructor and \"\", -0, 2^64"),
    "json_limits": (case_json_limits, "64 nested arrays and objects, a 64-character number token, "
                    "1.7976931348623157e308"),
    "source_ids_2_53": (case_source_ids_2_53, "source ids 2^53 and 2^53+1 (equal as binary64), "
                        "-2^63 and 2^63-1"),
    "class_names_astral": (case_class_names_astral, "a class name and writer of 256 code points "
                           "outside the BMP (512 UTF-16 code units)"),
    "version_leading_zeros": (case_version_leading_zeros, "version \"01.0000\" is 1.0"),
    "num_boxes_ignored": (case_num_boxes_ignored, "num_boxes without ragged_labels is ignored"),
    "box_negative_zero": (case_box_negative_zero, "-0.0 coordinates in a valid slot"),
    "box_field_nan": (case_box_field_nan, "NaN and infinity in a valid slot of a <f4 box field"),
    "no_classes": (case_no_classes, "no classes (C = 0) and no boxes"),
    "zstd_dict_id_zero": (case_zstd_dict_id_zero, "a zstd frame with a Dictionary_ID field of 0"),
    "zstd_window_limit": (case_zstd_window_limit, "a zstd frame declaring a window of exactly "
                          "2^27 bytes"),
    "png_interlaced": (case_png_interlaced, "Adam7-interlaced PNGs (9x11 and 1x2)"),
    "png_chunks": (case_png_chunks, "PNG with gAMA, tEXt, PLTE and pHYs chunks and three IDAT "
                   "chunks"),
    "jpeg_subsampled": (case_jpeg_subsampled, "4:2:0 and 4:2:2 JPEGs with sharp chroma edges, "
                        "checked against the reference decode (interpolated chroma)"),
    "jpeg_forms": (case_jpeg_forms, "progressive, restart markers, SOF1, EXIF orientation 6 "
                   "without JFIF (not applied), a COM segment"),
    "num_boxes_wrong_type": (header(lambda h: h.__setitem__("num_boxes", "many")),
                             "num_boxes \"many\" (a string) without the feature ragged_labels: "
                             "an unknown member, whatever its type (R-9), not HEADER_SCHEMA"),
    "png_reserved_bit": (lambda: one("png", payloads.png(mc.Z, before_idat=((b"prvt", b"x"),)),
                                     mc.Z), "an ancillary chunk prvt whose reserved bit (third "
                         "letter lower case) is set: ignored like any ancillary chunk (P2)"),
    "jpeg_adobe_12": (case_jpeg_adobe_12, "no JFIF, component ids R, G, B and an Adobe APP14 of "
                      "exactly 12 data bytes after its length field, transform 1: YCbCr"),
    "npy_grammar": (case_npy_grammar, ".npy headers at the edges of the exact grammar: shape "
                    "(003,), spaces around every token, trailing commas, double-quoted index "
                    "pairs, no final newline"),
    "jpeg_scans_256": (case_jpeg_scans_256, "a progressive JPEG of 256 scans, the most R-50 "
                       "allows"),
}


# --------------------------------------------------------------------------- 1.0: invalid


def _duplicate_escaped(dataset: Dataset) -> Dataset:
    data = dataset.header_bytes()
    dataset.header_raw = data.replace(b"{\n", b'{\n  "ver\\u0073ion": "1.0",\n', 1)
    return dataset


def _orig_size_zero(i: int) -> Callable[[Dataset], Dataset]:
    return set_array("orig_size.npy", (i, 0), 0)


def _png_gray_then_raw() -> Dataset:
    return mc.build([Sample(Z, "png", payload=payloads.png(Z, color_type=0)),
                     Sample(pattern(2, 2, 113))], CLASSES)


def _padding_and_decode() -> Dataset:
    dataset = _png_gray_then_raw()
    index = mc.load(dataset, "index.npy")
    end = int(index[0]["offset"] + index[0]["nbytes"])
    return mc.blob_edit(dataset, lambda blob: blob.__setitem__(end, 0x01))


def _skippable_first() -> bytes:
    skippable = (0x184D2A50).to_bytes(4, "little") + (4).to_bytes(4, "little") + b"skip"
    return skippable + payloads.zstd_frame(ZB)


def _codecs_sum_two_h(header_dict: dict) -> None:
    header_dict["image"]["codecs"] = {"raw": 2}


def _symlinked(dataset: Dataset, name: str) -> Dataset:
    data = dataset.header_bytes() if name == "header.json" else dataset.files[name]
    target = name.replace(".", "-real.")
    dataset.extra[target] = data
    dataset.extra[name] = None  # not written: the runner makes it a link to the copy
    dataset.links[name] = target
    return dataset


def _counts_size(dataset: Dataset) -> Dataset:
    dataset.header["files"]["counts.npy"]["size"] += 1
    return dataset


def _bad_utf8_first(dataset: Dataset) -> Dataset:
    data = dataset.files["file_name.bin"]
    dataset.files["file_name.bin"] = b"\xff" + data[1:]
    return dataset.seal()


def _zstd_bad_magic_checksum() -> Dataset:
    frame = payloads.zstd_frame(ZB)
    dataset = one("zstd", b"\x29" + frame[1:])
    return mc.edit_index(dataset, 0, checksum=xxhash.xxh3_64_intdigest(frame))


def _big_rle() -> Dataset:
    image = np.zeros((3, 16384, 3), np.uint8)
    return one("zstd", payloads.zstd_frame(image.tobytes(), blocks=[("rle", image.nbytes)]),
               image)


def _png_interlace_2() -> bytes:
    data = bytearray(payloads.png(Z))
    data[28] = 2  # IHDR interlace method (8 + 4 + 4 + 12)
    ihdr = bytes(data[12:29])
    data[29:33] = zlib.crc32(ihdr).to_bytes(4, "big")
    return bytes(data)


INVALID: list[tuple[str, str, str, Callable[[], Dataset]]] = [
    # the JSON profile (§5.6) on header.json
    ("header_float_integer", "HEADER_SCHEMA", "num_samples is 3.0 (an integer is required)",
     lambda: raw(mc.base_raw(), b'"num_samples": 3,', b'"num_samples": 3.0,')),
    ("header_exponent_integer", "HEADER_SCHEMA", "max_boxes is 2e0",
     lambda: raw(mc.base_raw(), b'"max_boxes": 2,', b'"max_boxes": 2e0,')),
    ("header_bool_integer", "HEADER_SCHEMA", "a class source_id is true",
     lambda: raw(mc.base_raw(), b'"source_id": 17', b'"source_id": true')),
    ("header_duplicate_escaped", "HEADER_JSON", "\"ver\\u0073ion\" duplicates \"version\"",
     lambda: _duplicate_escaped(mc.base_raw())),
    ("header_lone_surrogate", "HEADER_JSON", "a metadata value holds the escape \\ud800 alone",
     lambda: raw(mc.base_raw(), b'"metadata": {}', b'"metadata": {"k": "\\ud800x"}')),
    ("header_depth", "HEADER_JSON", "65 nested arrays and objects",
     lambda: raw(mc.base_raw(), b'"extensions": {}', deep(63))),
    ("header_number_long", "HEADER_JSON", "a number token of 65 characters in extensions",
     lambda: raw(mc.base_raw(), b'"extensions": {}', b'"extensions": {"n": 1' + b"0" * 64
                 + b"}")),
    ("header_number_infinite", "HEADER_JSON", "1e400 in extensions (not finite as binary64)",
     lambda: raw(mc.base_raw(), b'"extensions": {}', b'"extensions": {"x": 1e400}')),
    ("header_whitespace_nbsp", "HEADER_JSON", "a U+00A0 no-break space between two tokens",
     lambda: raw(mc.base_raw(), b'{\n  "format"', '{\n\u00a0 "format"'.encode())),
    ("header_control_character", "HEADER_JSON", "a raw tab inside a string",
     lambda: raw(mc.base_raw(), b'"metadata": {}', b'"metadata": {"k": "a\tb"}')),
    ("header_empty_object", "NOT_DETFMT", "header.json is {}",
     lambda: raw(mc.base_raw(), mc.base_raw().header_bytes(), b"{}")),
    ("header_feature_sharded", "FEATURE_UNSUPPORTED", "a header requires the manifest feature "
     "sharded", header(lambda h: h.update(required_features=["sharded"]))),
    ("source_id_duplicate_2_53", "HEADER_SCHEMA", "two classes with source_id 2^53+1",
     lambda: mc.build([Sample(pattern(2, 2, 114))], [("a", 2**53 + 1), ("b", 2**53 + 1)])),
    ("source_id_range", "HEADER_SCHEMA", "a source_id of 2^63",
     lambda: mc.build([Sample(pattern(2, 2, 115))], [("a", 2**63)])),
    ("class_name_astral_257", "HEADER_SCHEMA", "a class name of 257 code points (outside the "
     "BMP)", lambda: mc.build([Sample(pattern(2, 2, 116))], [("\U0001F697" * 257, None)])),
    # header check order (§12 step 1)
    ("order_format_before_version", "NOT_DETFMT", "format \"x\" and version \"abc\"",
     header(lambda h: h.update(format="x", version="abc"))),
    ("order_version_before_schema", "VERSION_UNSUPPORTED", "version 2.0 and no num_samples",
     header(lambda h: (h.update(version="2.0"), h.pop("num_samples")))),
    ("order_version_syntax_before_features", "HEADER_SCHEMA", "version \"1\" and an unknown "
     "required feature", header(lambda h: h.update(version="1",
                                                    required_features=["org.example.x"]))),
    ("order_features_before_schema", "FEATURE_UNSUPPORTED", "an unknown required feature and "
     "num_samples \"3\"", header(lambda h: h.update(required_features=["org.example.x"],
                                                   num_samples="3"))),
    ("order_schema_before_limits", "HEADER_SCHEMA", "1025 metadata members and num_samples "
     "\"3\"", header(lambda h: h.update(metadata={f"k{i}": "" for i in range(1025)},
                                       num_samples="3"))),
    ("order_metadata_before_codec_names", "LIMIT_EXCEEDED", "1025 metadata members and the "
     "codec name webp", header(lambda h: (h.update(metadata={f"k{i}": "" for i in range(1025)}),
                                         h["image"].update(codecs={"webp": 3})))),
    ("order_codec_names_before_sum", "CODEC_UNKNOWN", "image.codecs {\"webp\": 1} (unknown, "
     "and its sum is not N)", header(lambda h: h["image"].update(codecs={"webp": 1}))),
    ("order_codecs_sum_before_arrays", "HEADER_SCHEMA", "image.codecs adds up to 2 of 3, and "
     "arrays says boxes.npy is <f8", header(lambda h: (_codecs_sum_two_h(h), h["arrays"][
         "boxes.npy"].update(dtype="<f8")))),
    ("order_arrays_byte_order", "COUNT_MISMATCH", "arrays: box_iscrowd.npy has a wrong shape, "
     "boxes.npy a wrong dtype (box_iscrowd.npy sorts first)",
     header(lambda h: (h["arrays"]["box_iscrowd.npy"].update(shape=[3, 4]),
                       h["arrays"]["boxes.npy"].update(dtype="<f8")), mc.case_box_fields)),
    ("order_array_dtype_before_shape", "NPY_DTYPE", "arrays says boxes.npy is <f8 of shape "
     "[3, 2, 5]", header(lambda h: h["arrays"]["boxes.npy"].update(dtype="<f8",
                                                                    shape=[3, 2, 5]))),
    # member files and .npy order (§12 steps 2, 3)
    ("member_symlink", "PATH_UNSAFE", "boxes.npy is a symbolic link to a copy of itself",
     lambda: _symlinked(mc.base_raw(), "boxes.npy")),
    ("header_symlink", "PATH_UNSAFE", "header.json is a symbolic link to a copy of itself",
     lambda: _symlinked(mc.base_raw(), "header.json")),
    ("order_members_byte_order", "FILE_SIZE", "boxes.npy one byte shorter than header.files "
     "says, counts.npy missing", both(lambda d: mc._file_size(d), lambda d: mc._omit(d,
                                                                               "counts.npy"))),
    ("order_member_sizes_before_npy", "FILE_SIZE", "counts.npy one byte shorter than declared, "
     "boxes.npy in Fortran order", both(fortran("boxes.npy"), _counts_size)),
    ("order_npy_byte_order", "NPY_ORDER", "box_iscrowd.npy in Fortran order, boxes.npy "
     "big-endian (box_iscrowd.npy sorts first)",
     both(fortran("box_iscrowd.npy"), retype("boxes.npy", ">f4"), base=mc.case_box_fields)),
    ("order_npy_before_index", "NPY_SIZE", "boxes.npy lacks its last 4 bytes, record 0 has "
     "codec 7", both(index_edit(0, codec=7), lambda d: mc.npy_bytes_edit(d, "boxes.npy",
                                                                          lambda b: b[:-4]))),
    # index records, record by record (§8, §12 step 4)
    ("order_record_major", "CODEC_UNKNOWN", "record 0 has codec 7, record 1 height 0",
     both(index_edit(1, height=0, decoded_nbytes=0), index_edit(0, codec=7))),
    ("order_count_with_its_record", "COUNT_RANGE", "count 0 is 3 (max_boxes 2), record 1 has "
     "flags 1", both(index_edit(1, flags=1), set_array("counts.npy", (0,), 3))),
    ("order_first_broken_link", "OFFSETS_BOUNDS", "a gap before payload 1, payload 3 starts 8 "
     "bytes after a 64 boundary (the first broken link decides)",
     lambda: mc.relayout(four_raw(), mc.stored_payloads(four_raw()), shift={1: 64, 3: 8})),
    ("nbytes_huge", "OFFSETS_BOUNDS", "record 1 nbytes 2^64-32 (wraps around in 64-bit "
     "arithmetic)", lambda: mc.edit_index(mc.base_mixed(), 1, nbytes=(1 << 64) - 32)),
    ("order_tail_before_records", "BLOB_SIZE", "64 bytes after the last payload, record 0 has "
     "codec 7", both(index_edit(0, codec=7),
                     lambda d: mc.blob_edit(d, lambda b: b.extend(bytes(64))))),
    ("order_string_tail_before_records", "OFFSETS_BOUNDS", "the last file_name offset is past "
     "file_name.bin, record 0 has codec 7",
     both(index_edit(0, codec=7), set_offsets({3: 10**6}), base=mc.case_image_fields)),
    # verification passes (§12 steps 6-9)
    ("order_payload_byte", "FILE_CHECKSUM", "one payload byte flipped: images.bin's hash in "
     "header.files and the record's checksum both kept (file checksums come first)",
     both(lambda d: flip_payload(d, 0, reseal_file=False), base=mc.base_mixed)),
    ("order_file_checksum_before_labels", "FILE_CHECKSUM", "the classes.npy hash differs, a "
     "box is NaN", both(set_array("boxes.npy", (0, 1, 2), np.nan), mc._file_checksum)),
    ("order_codecs_count_before_labels", "HEADER_SCHEMA", "image.codecs disagrees with the "
     "index, a box is NaN", both(set_array("boxes.npy", (0, 0, 0), np.nan), mc._codecs_count,
                                 base=mc.base_mixed)),
    ("order_labels_before_payloads", "BOX_INVALID", "payload 0 fails its checksum, sample 1 "
     "has a NaN box", both(lambda d: flip_payload(d, 0), set_array("boxes.npy", (1, 0, 0),
                                                                    np.nan))),
    ("order_labels_sample_major", "CLASS_RANGE", "sample 0 has class 5, sample 1 a NaN box",
     both(set_array("classes.npy", (0, 0), 5), set_array("boxes.npy", (1, 0, 0), np.nan))),
    ("order_label_rules", "BOX_OUT_OF_IMAGE", "one box of sample 0 lies outside the image, "
     "another has class 5", both(set_array("boxes.npy", (0, 1, 2), 6.5),
                                 set_array("classes.npy", (0, 0), 5))),
    ("order_labels_before_image_fields", "BOX_OUT_OF_IMAGE", "orig_size 0 and a box outside the "
     "image, both in sample 0", both(_orig_size_zero(0), set_array("boxes.npy", (0, 0, 2), 7),
                                     base=mc.case_image_fields)),
    ("order_image_fields_before_payloads", "IMAGE_FIELD", "payload 0 fails its checksum, sample "
     "2 has orig_size 0", both(lambda d: flip_payload(d, 0), _orig_size_zero(2),
                               base=mc.case_image_fields)),
    ("order_orig_size_before_file_name", "IMAGE_FIELD", "file_name offsets decrease at sample "
     "1, orig_size 0 at sample 2", both(set_offsets({1: 5, 2: 3}), _orig_size_zero(2),
                                        base=lambda: named(["abcde", "", "xy"]))),
    ("order_string_offsets_sample_major", "LIMIT_EXCEEDED", "file name 0 has 4097 bytes, the "
     "offsets decrease at sample 1", both(set_offsets({2: 4000}),
                                          base=lambda: named(["x" * 4097, "ab", "cd"]))),
    ("order_string_offsets_before_utf8", "LIMIT_EXCEEDED", "file name 0 is not UTF-8, file name "
     "2 has 4097 bytes", both(_bad_utf8_first, base=lambda: named(["ab", "cd", "x" * 4097]))),
    ("order_payload_sample_major", "IMAGE_DECODE", "payload 0 is a grayscale PNG, payload 1 "
     "fails its checksum", both(lambda d: flip_payload(d, 1), base=_png_gray_then_raw)),
    ("order_checksum_before_decode", "CHECKSUM", "a zstd payload with a broken magic number "
     "and the checksum of the intact frame", lambda: _zstd_bad_magic_checksum()),
    ("order_padding_before_decode", "PADDING_NONZERO", "payload 0 is a grayscale PNG followed "
     "by a nonzero padding byte", _padding_and_decode),
    # zstd (§9.2)
    ("zstd_reserved_bit", "ZSTD_CORRUPT", "the frame header's reserved bit is set",
     lambda: one("zstd", payloads.zstd_frame(ZB, reserved_bit=True))),
    ("zstd_skippable_first", "ZSTD_CORRUPT", "a skippable frame precedes the frame",
     lambda: one("zstd", _skippable_first())),
    ("zstd_header_truncated", "ZSTD_CORRUPT", "the payload ends inside the frame header",
     lambda: one("zstd", payloads.zstd_frame(ZB)[:5])),
    ("zstd_rle_block_too_large", "ZSTD_CORRUPT", "an RLE block of 147456 bytes (over 128 KiB)",
     lambda: _big_rle()),
    ("zstd_block_over_window", "ZSTD_CORRUPT", "a raw block of 1728 bytes in a frame with a "
     "1 KiB window", lambda: one("zstd", payloads.zstd_frame(pattern(24, 24, 117).tobytes(),
                                                             window_log=10),
                                 pattern(24, 24, 117))),
    ("order_zstd_size_before_window", "ZSTD_SIZE", "no content size and a 2 GiB window",
     lambda: one("zstd", payloads.zstd_frame(ZB, content_size=None, window_log=31))),
    ("order_zstd_window_before_dictionary", "ZSTD_WINDOW", "a 2 GiB window and dictionary 7",
     lambda: one("zstd", payloads.zstd_frame(ZB, window_log=31, dict_id=7))),
    ("order_zstd_dictionary_before_trailing", "ZSTD_CORRUPT", "dictionary 7 and 4 bytes after "
     "the frame", lambda: one("zstd", payloads.zstd_frame(ZB, dict_id=7) + b"\x00\x01\x02\x03")),
    ("order_zstd_trailing_before_checksum", "ZSTD_TRAILING", "a wrong content checksum and 4 "
     "bytes after the frame", lambda: one("zstd", mc._flip_last(payloads.zstd_frame(
         ZB, checksum=True)) + b"\x00\x01\x02\x03")),
    # png (§9.4): every failure is IMAGE_DECODE
    ("png_crc_idat", "IMAGE_DECODE", "the IDAT chunk's CRC is wrong",
     lambda: one("png", payloads.png(Z, bad_crc=True))),
    ("png_crc_ancillary", "IMAGE_DECODE", "an ancillary tEXt chunk's CRC is wrong",
     lambda: one("png", payloads.png(Z, before_idat=((b"tEXt", b"k\x00v"),),
                                     bad_crc_chunk=b"tEXt"))),
    ("png_trailing", "IMAGE_DECODE", "4 bytes after IEND",
     lambda: one("png", payloads.png(Z, trailing=b"\x00\x00\x00\x00"))),
    ("png_adler", "IMAGE_DECODE", "the zlib stream's Adler-32 is wrong",
     lambda: one("png", payloads.png(Z, bad_adler=True))),
    ("png_data_long", "IMAGE_DECODE", "the zlib stream holds one byte after the image",
     lambda: one("png", payloads.png(Z, extra_data=b"\x00"))),
    ("png_data_short", "IMAGE_DECODE", "the zlib stream lacks the image's last byte",
     lambda: one("png", payloads.png(Z, cut_data=1))),
    ("png_filter_type", "IMAGE_DECODE", "every scanline has filter type 5",
     lambda: one("png", payloads.png(Z, filter_type=5))),
    ("png_unknown_critical", "IMAGE_DECODE", "an unknown critical chunk TEST",
     lambda: one("png", payloads.png(Z, before_idat=((b"TEST", b"x"),)))),
    ("png_idat_apart", "IMAGE_DECODE", "a tEXt chunk between two IDAT chunks",
     lambda: one("png", payloads.png(Z, idat_parts=2, between_idat=b"tEXt"))),
    ("png_compression_method", "IMAGE_DECODE", "IHDR compression method 1",
     lambda: one("png", payloads.png(Z, compression=1))),
    ("png_interlace_method", "IMAGE_DECODE", "IHDR interlace method 2",
     lambda: one("png", _png_interlace_2())),
    # jpeg (§9.3): every failure is IMAGE_DECODE
    ("jpeg_gray", "IMAGE_DECODE", "a one-component (grayscale) JPEG",
     jpeg_case(payloads.FROZEN_JPEG_MORE["GRAY"])),
    ("jpeg_cmyk", "IMAGE_DECODE", "a four-component (CMYK, Adobe) JPEG",
     jpeg_case(payloads.FROZEN_JPEG_MORE["CMYK"])),
    ("jpeg_precision_12", "IMAGE_DECODE", "SOF precision 12",
     jpeg_case(sof_byte(JPEG57, 4, 12))),
    ("jpeg_lossless", "IMAGE_DECODE", "an SOF3 (lossless) frame",
     jpeg_case(sof_marker(JPEG57, 0xC3))),
    ("jpeg_arithmetic", "IMAGE_DECODE", "an SOF9 (arithmetic coding) frame",
     jpeg_case(sof_marker(JPEG57, 0xC9))),
    ("jpeg_sampling", "IMAGE_DECODE", "luma sampling factors 4x1 (4:1:1)",
     jpeg_case(sof_byte(JPEG57, 11, 0x41))),
    ("jpeg_adobe_rgb", "IMAGE_DECODE", "no JFIF segment and an Adobe segment with transform 0 "
     "(RGB components)", jpeg_case(jpeg_edit(JPEG57, lambda s: without_jfif(s, ADOBE_RGB)))),
    ("jpeg_rgb_component_ids", "IMAGE_DECODE", "no JFIF segment and component ids R, G, B",
     jpeg_case(jpeg_edit(JPEG57, lambda s: component_ids(without_jfif(s), b"RGB")))),
    ("jpeg_two_frames", "IMAGE_DECODE", "two SOF segments",
     jpeg_case(jpeg_edit(JPEG57, lambda s: [x for seg in s for x in (
         [seg, seg] if seg[0] == 0xC0 else [seg])]))),
    ("jpeg_unknown_marker", "IMAGE_DECODE", "a JPG0 (FF F0) segment before the frame",
     jpeg_case(jpeg_edit(JPEG57, lambda s: [s[0], (0xF0, _segment(0xF0, b"x")), *s[1:]]))),
    ("jpeg_bytes_between_segments", "IMAGE_DECODE", "two zero bytes between two segments",
     jpeg_case(jpeg_edit(JPEG57, lambda s: [s[0], s[1], (0, b"\x00\x00"), *s[2:]]))),
    ("jpeg_trailing", "IMAGE_DECODE", "4 bytes after EOI", jpeg_case(JPEG57 + b"\x00\x01\x02\x03")),
    ("jpeg_scans", "IMAGE_DECODE", "a progressive JPEG of 257 scans in a consistent progression "
     "(R-50 allows 256)", jpeg_case(payloads.progressive_gray(257), GRAY128)),
    # 1.2.1: §9.3 J4's entropy rules (verification); each case names the choice it pins
    ("jpeg_bytes_before_eoi", "IMAGE_DECODE", "2 bytes (00 00) between the scan's last coded "
     "bits and EOI: extraneous bytes are IMAGE_DECODE at the end of a payload too (libjpeg "
     "warns and decoders carry on)", jpeg_case(JPEG57[:-2] + b"\x00\x00" + JPEG57[-2:])),
    ("jpeg_bytes_before_restart", "IMAGE_DECODE", "2 bytes (00 00) before the restart marker "
     "RST1: extraneous bytes inside a scan", jpeg_case(at_restart(1, lambda rst: b"\x00\x00"
                                                                   + rst), RESTART_SOURCE)),
    ("jpeg_data_short", "IMAGE_DECODE", "the scan's coded data ends before its last block (half "
     "of it cut, EOI kept): data that runs out is not zero-filled",
     jpeg_case(cut_coded(JPEG57), JPEG_SOURCE57)),
    ("jpeg_restart_missing", "IMAGE_DECODE", "restart marker RST1 removed (DRI: one MCU per "
     "interval): no resynchronisation", jpeg_case(at_restart(1, lambda rst: b""),
                                                  RESTART_SOURCE)),
    ("jpeg_restart_sequence", "IMAGE_DECODE", "the second restart marker is RST5 instead of "
     "RST1", jpeg_case(at_restart(1, lambda rst: b"\xff\xd5"), RESTART_SOURCE)),
    ("jpeg_restart_extra", "IMAGE_DECODE", "an RST5 after the last restart interval, before EOI "
     "(the interval puts none there)", jpeg_case(RESTART[:-2] + b"\xff\xd5" + RESTART[-2:],
                                                 RESTART_SOURCE)),
    ("jpeg_huffman_code", "IMAGE_DECODE", "an invalid Huffman code (bits 1011... where the only "
     "DC code is 0) in the first scan, 16 bits available", jpeg_case(
         first_scan_data(payloads.progressive_gray(256), b"\xbf\x00"), GRAY128)),
    ("jpeg_progression", "IMAGE_DECODE", "a refinement scan with Ah 2, Al 1 where the previous "
     "scan of its coefficient had Al 1 (Ah must be the last Al)", jpeg_case(
         refinement_ah(payloads.progressive_gray(256)), GRAY128)),
    # 1.2.1: §6's grammar is exact; each case names the choice it pins
    ("npy_header_tab", "NPY_HEADER", "a tab between two entries of counts.npy's header "
     "(whitespace is spaces only: pins the grammar as exact, not a minimum)",
     npy_header("counts.npy", "{'descr': '<i4',\t'fortran_order': False, 'shape': (3,), }")),
    ("npy_order_string", "NPY_HEADER", "'fortran_order': 'False' (a string): a wrong-typed "
     "value is outside the grammar, not NPY_ORDER and not false",
     npy_header("counts.npy", "{'descr': '<i4', 'fortran_order': 'False', 'shape': (3,), }")),
    ("npy_order_zero", "NPY_HEADER", "'fortran_order': 0: a wrong-typed value is outside the "
     "grammar, not a false value",
     npy_header("counts.npy", "{'descr': '<i4', 'fortran_order': 0, 'shape': (3,), }")),
    ("npy_shape_string", "NPY_HEADER", "'shape': '3' (a string): outside the grammar, not "
     "COUNT_MISMATCH or NPY_SHAPE",
     npy_header("counts.npy", "{'descr': '<i4', 'fortran_order': False, 'shape': '3', }")),
    ("npy_descr_list_pairs", "NPY_HEADER", "index.npy's descr pairs written as lists "
     "([['offset', '<u8'], ...]): outside the grammar, not NPY_DTYPE",
     npy_header("index.npy", "{'descr': [" + ", ".join(
         f"['{name}', '{dtype}']" for name, dtype in mc.INDEX_DESCR)
         + "], 'fortran_order': False, 'shape': (3,), }")),
    ("npy_shape_unicode_digit", "NPY_HEADER", "counts.npy (.npy version 3, UTF-8) has shape "
     "(\u0663,), an ARABIC-INDIC DIGIT THREE: int digits are ASCII 0-9 only",
     npy_header("counts.npy", "{'descr': '<i4', 'fortran_order': False, 'shape': (\u0663,), }",
                version=3)),
    # 1.2.1: choices the text resolved but no case pinned
    ("features_type_and_unknown", "HEADER_SCHEMA", "required_features [\"zzz\", 5]: an array "
     "that is not all strings is HEADER_SCHEMA before any name is looked up (§12 1i), not "
     "FEATURE_UNSUPPORTED", header(lambda h: h.__setitem__("required_features", ["zzz", 5]))),
    ("arrays_shape_other_dim", "COUNT_MISMATCH", "header.arrays says boxes.npy is [3, 2, 5] "
     "(right first dimension, wrong second), the file agrees with it: §12 1k checks the "
     "header's shape whichever dimension differs, so COUNT_MISMATCH, not NPY_SHAPE",
     lambda: _boxes_with_shape(3, 2, 5)),
    ("png_ihdr_twice", "IMAGE_DECODE", "a second IHDR chunk right after the first (correct CRC): "
     "P2 allows IHDR only first", lambda: mc.one("png", _png_ihdr_twice(), mc.Z)),
    ("jpeg_adobe_11", "IMAGE_DECODE", "no JFIF, component ids R, G, B and an APP14 \"Adobe\" of "
     "11 data bytes (no transform byte): not an Adobe segment, so the ids say RGB (J3)",
     jpeg_case(jpeg_edit(JPEG57, lambda s: component_ids(without_jfif(
         s, _segment(0xEE, b"Adobe\x00\x64\x00\x00\x00\x00")), b"RGB")))),
    ("png_zlib_fdict", "IMAGE_DECODE", "the IDAT zlib header sets FDICT (a preset dictionary): "
     "P3's stream is RFC 1950 without one", lambda: one("png", _png_fdict(), mc.Z)),
    ("npy_shape_rank0", "COUNT_MISMATCH", "counts.npy has shape () (rank 0, one value): it has "
     "no first dimension, so R-20, not R-18 (NPY_SHAPE)",
     npy_header("counts.npy", "{'descr': '<i4', 'fortran_order': False, 'shape': (), }",
                data=lambda data: data[:4])),
]


# --------------------------------------------------------------------------- 1.1: sharded roots


def base_root() -> Root:
    return mc.base_root()


def _codec_records_root() -> Root:
    root = mc.build_root([("0", [Sample(pattern(2, 2, 151), "png")])], codec="raw")

    def says_raw(dataset: Dataset) -> None:
        dataset.header["image"]["codecs"] = {"raw": 1}
    return inner(0, says_raw)(root)


def small_root() -> Root:
    """One shard of one 1x1 sample: the base of manifest cases that need no second shard."""
    return mc.build_root([("0", [Sample(pattern(1, 1, 150))])])


def manifest(edit: Callable[[dict], object], base: Callable[[], Root] = base_root
             ) -> Callable[[], Root]:
    def case() -> Root:
        root = base()
        edit(root.manifest)
        return root
    return case


def inner(k: int, edit: Callable[[Dataset], Dataset | None], base: Callable[[], Root] = base_root
          ) -> Callable[[Root], Root]:
    """Shard k's 1.0 dataset is edited (its manifest entry resealed)."""
    def apply(root: Root) -> Root:
        dataset = root.datasets[k]
        dataset = edit(dataset) or dataset
        root.datasets[k] = dataset
        return root.repack(k, mc.dataset_members(dataset))
    return apply


def root_with(*edits: Callable[[Root], Root | None], base: Callable[[], Root] = base_root
              ) -> Callable[[], Root]:
    def case() -> Root:
        root = base()
        for edit in edits:
            root = edit(root) or root
        return root
    return case


def canonical_root() -> Root:
    return mc.build_root([("00000", [mc._boxed(4, 6, 120, 2), mc._boxed(3, 5, 121, 1)]),
                          ("00001", [mc._boxed(2, 3, 122, 0)])], canonical=True)


def _toc_edit(old: bytes, new: bytes) -> Callable[[bytes], bytes]:
    """Edit a canonical shard's table of contents in place: the padding absorbs the growth."""
    def edit(data: bytes) -> bytes:
        length = int.from_bytes(data[12:16], "little")
        toc = data[16:16 + length]
        assert toc.count(old) >= 1
        changed = toc.replace(old, new, 1)
        changed = changed[:length] if len(changed) > length else changed
        assert changed.rstrip(b" ") == toc.rstrip(b" ").replace(old, new, 1)
        return data[:16] + changed + data[16 + length:]
    return edit


def _move_shards(root: Root, directory: str) -> Root:
    for entry in root.manifest["shards"]:
        name = entry["path"].split("/")[-1]
        root.files[f"{directory}/{name}"] = root.files.pop(entry["path"])
    return root


def _nested(root: Root) -> Root:
    for entry in root.manifest["shards"]:
        new = f"data/2026-12/{entry['path'].split('/')[-1]}"
        root.files[new] = root.files.pop(entry["path"])
        entry["path"] = new
    return root


def _symlinked_shards(root: Root) -> Root:
    _move_shards(root, "real-shards")
    root.links["shards"] = "real-shards"
    return root


def _symlinked_manifest(root: Root) -> Root:
    root.files["manifest-real.json"] = root.manifest_bytes()
    root.files["manifest.json"] = None
    root.links["manifest.json"] = "manifest-real.json"
    return root


def _manifest_directory(root: Root) -> Root:
    root.files["manifest.json"] = None
    root.files["manifest.json/notes.txt"] = b"a directory where the manifest belongs\n"
    return root


def _through_file(root: Root) -> Root:
    root.files["x"] = b"a regular file where a directory belongs\n"
    root.shard(1)["path"] = "x/part-00001.detfmt"
    return root


def _too_many_samples(root: Root) -> Root:
    last = root.shard(1)
    last["num_samples"] = last["bytes"] // 48 + 1
    root.manifest["num_samples"] = last["first_index"] + last["num_samples"]
    return root


def _repack_dataset(k: int, dataset: Dataset) -> Callable[[Root], Root]:
    def apply(root: Root) -> Root:
        root.datasets[k] = dataset
        return root.repack(k, mc.dataset_members(dataset))
    return apply


def _fixed_parts() -> list[tuple[str, list[Sample]]]:
    return [("0", [mc._boxed(5, 7, 123, 1), mc._boxed(5, 7, 124, 2)]),
            ("1", [mc._boxed(5, 7, 125, 0)])]


def case_schema_fixed_shape_null() -> Root:
    """schema.fixed_shape null: shards may fix a shape or not."""
    parts = _fixed_parts()
    root = mc.build_root(parts)
    return _repack_dataset(0, mc.build(parts[0][1], CLASSES, fixed_shape=(5, 7, 3)))(root)


def _schema_fixed_shape_mismatch() -> Root:
    parts = _fixed_parts()
    root = mc.build_root(parts, fixed_shape=(5, 7, 3))
    return _repack_dataset(1, mc.build(parts[1][1], CLASSES))(root)


def _fields_parts() -> list[tuple[str, list[Sample]]]:
    return [("0", [mc._boxed(3, 4, 126, 1, fields=True)]),
            ("1", [mc._boxed(2, 5, 127, 2, fields=True)])]


def _schema_image_fields_order() -> Root:
    parts = _fields_parts()
    root = mc.build_root(parts, box_fields=[("iscrowd", "|u1")],
                         image_fields=["source_id", "file_name"])
    return _repack_dataset(1, mc.build(parts[1][1], CLASSES, box_fields=[("iscrowd", "|u1")],
                                       image_fields=["file_name", "source_id"]))(root)


def _codecs_edit(k: int, codecs: dict[str, int]) -> Callable[[Root], Root]:
    def apply(root: Root) -> Root:
        root.datasets[k].header["image"]["codecs"] = codecs
        return root.repack(k, mc.dataset_members(root.datasets[k]))
    return apply


def case_schema_codec_zero_entry() -> Root:
    """A shard header's image.codecs may name other codecs with count 0 (schema codec raw)."""
    return _codecs_edit(0, {"png": 0, "raw": 2})(base_root())


def _schema_codec_other() -> Root:
    root = base_root()
    samples = [mc._boxed(2, 3, 83, 0), mc._boxed(3, 4, 84, 3, "png")]
    return _repack_dataset(1, mc.build(samples, CLASSES))(root)


def _header_edit(k: int, edit: Callable[[dict], object]) -> Callable[[Root], Root]:
    def apply(root: Root) -> Root:
        edit(root.datasets[k].header)
        return root.repack(k, mc.dataset_members(root.datasets[k]))
    return apply


def case_sharded_canonical_layout() -> Root:
    return canonical_root()


def case_sharded_zero_size_member() -> Root:
    """Every file name is empty: file_name.bin is a member of size 0 (it shares its offset with
    the next member), in both layouts."""
    samples = [mc._boxed(2, 2, 128, 1), mc._boxed(3, 2, 129, 0)]
    for sample in samples:
        sample.file_name = ""
    root = mc.build_root([("0", samples[:1]), ("1", samples[1:])], image_fields=["file_name"])
    canonical = mc.pack_canonical(mc.dataset_members(root.datasets[1]))
    return root.edit_shard(1, lambda _: canonical)


def case_sharded_nested_path() -> Root:
    return _nested(base_root())


def case_sharded_version_leading_zero() -> Root:
    root = base_root()
    root.manifest["version"] = "01.01"
    return root


def case_sharded_empty_schema() -> Root:
    """A root without shards: the schema is checked for §19.3's types only (1.2.1)."""
    root = mc.build_root([])
    root.manifest["schema"].update(
        classes=[{"name": "a", "source_id": None}, {"name": "a", "source_id": None}],
        fixed_shape=[0, 0, 4], max_side=0, box_fields=[{"name": "Bad-Name", "dtype": "<f4"}])
    return root


def case_manifest_writer_metadata_large() -> Root:
    """The header's limits on writer and metadata (§15) are not the manifest's (1.2.1). The
    manifest is written compactly to keep the suite small; a value over 65,536 code points is
    checked by tests/format/test_spec_121_choices.py, not committed."""
    root = small_root()
    root.manifest["writer"] = "w" * 300
    root.manifest["metadata"] = {f"{i:03x}": "" for i in range(1025)}
    root.manifest_raw = json.dumps(root.manifest, separators=(",", ":")).encode()
    return root


def case_toc_leading_whitespace() -> Root:
    """The JSON profile's whitespace before the table of contents' value (1.2.1): the 1.1
    layout's zero gap before the first member absorbs it, so no offset moves."""
    def edit(data: bytes) -> bytes:
        length = int.from_bytes(data[12:16], "little")
        toc = b"\t\r\n " + data[16:16 + length]
        first = min(member["offset"] for member in mc.pack_toc(data))
        assert 16 + len(toc) <= first
        return (data[:12] + len(toc).to_bytes(4, "little") + toc
                + bytes(first - 16 - len(toc)) + data[first:])
    return small_root().edit_shard(0, edit)


VALID_1_1: dict[str, tuple[Callable[[], Root], str]] = {
    "worked_example_shard": (lambda: mc.build_root([("0", worked_example().samples)],
                                                   [("cat", None), ("dog", 18)], canonical=True),
                             "the worked example's samples as one shard (SPEC.md §20)"),
    "sharded_canonical_layout": (case_sharded_canonical_layout, "shards in the writers' layout "
                                 "of 1.2: images.bin first at 4096, the TOC padded with spaces"),
    "sharded_zero_size_member": (case_sharded_zero_size_member, "an empty file_name.bin member "
                                 "(size 0) in both layouts"),
    "sharded_nested_path": (case_sharded_nested_path, "shard paths data/2026-12/part-*.detfmt"),
    "sharded_version_leading_zero": (case_sharded_version_leading_zero, "manifest version "
                                     "\"01.01\" is 1.1"),
    "schema_fixed_shape_null": (case_schema_fixed_shape_null, "schema fixed_shape null, one shard "
                                "fixes [5, 7, 3], the other does not"),
    "sharded_empty_schema": (case_sharded_empty_schema, "no shards, and a schema with class "
                             "names a, a, fixed_shape [0, 0, 4], max_side 0 and a box field "
                             "Bad-Name: §5's constraints apply to shard headers only"),
    "manifest_extensions_ignored": (manifest(lambda m: m.__setitem__(
        "extensions", {"org.example.note": {"nested": [1, "two", None]}})), "manifest "
        "extensions hold a member (1.2.1: ignored like the header's, R-9; not \"reserved\")"),
    "schema_codec_zero_entry": (case_schema_codec_zero_entry, "schema codec raw, a shard header's "
                                "image.codecs also names png with count 0"),
    "manifest_writer_metadata_large": (case_manifest_writer_metadata_large, "manifest writer of "
                                       "300 code points, metadata of 1025 members (1.2.1: the "
                                       "header's limits of §15 do not apply; 64 MiB and the JSON "
                                       "profile do)"),
    "toc_leading_whitespace": (case_toc_leading_whitespace, "a table of contents that starts "
                               "with tab, CR, LF, space before its object (1.2.1: the JSON "
                               "profile's whitespace before the value; spaces only after it)"),
}


INVALID_1_1: list[tuple[str, str, str, Callable[[], Root]]] = [
    # the manifest: file, JSON profile, version (§19.3, S-3, S-4)
    ("manifest_symlink", "PATH_UNSAFE", "manifest.json is a symbolic link to a copy",
     root_with(_symlinked_manifest)),
    ("manifest_directory", "PATH_UNSAFE", "manifest.json is a directory",
     root_with(_manifest_directory)),
    ("manifest_bom", "MANIFEST_SCHEMA", "manifest.json starts with a UTF-8 byte-order mark",
     root_with(lambda r: setattr(r, "manifest_raw", b"\xef\xbb\xbf" + r.manifest_bytes()))),
    ("manifest_duplicate_escaped", "MANIFEST_SCHEMA", "\"ver\\u0073ion\" duplicates \"version\"",
     root_with(lambda r: raw_manifest(r, b'{\n "format"', b'{\n "ver\\u0073ion": "1.1",'
                                         b'\n "format"'))),
    ("manifest_float_integer", "MANIFEST_SCHEMA", "num_samples is 4.0",
     root_with(lambda r: raw_manifest(r, b' "num_samples": 4,', b' "num_samples": 4.0,'))),
    ("manifest_lone_surrogate", "MANIFEST_SCHEMA", "writer holds the escape \\udc00 alone",
     root_with(lambda r: raw_manifest(r, b'"writer": "', b'"writer": "\\udc00'))),
    ("manifest_version_1_0", "VERSION_UNSUPPORTED", "manifest version \"1.0\" (manifests "
     "exist since 1.1)", manifest(lambda m: m.update(version="1.0"))),
    ("manifest_version_1_3", "VERSION_UNSUPPORTED", "manifest version \"1.3\" (unknown minor)",
     manifest(lambda m: m.update(version="1.3"))),
    ("manifest_version_syntax", "MANIFEST_SCHEMA", "manifest version \"1\"",
     manifest(lambda m: m.update(version="1"))),
    ("manifest_max_boxes_range", "MANIFEST_SCHEMA", "a shard entry's max_boxes is 65537 (its "
     "header's is 2)", manifest(lambda m: m["shards"][0].update(max_boxes=65537))),
    ("manifest_features_duplicate", "MANIFEST_SCHEMA", "required_features lists sharded twice",
     manifest(lambda m: m.update(required_features=["sharded", "sharded"]))),
    ("order_manifest_version_before_schema", "VERSION_UNSUPPORTED", "version \"1.3\" and an "
     "unknown member", manifest(lambda m: m.update(version="1.3", shard_count=2))),
    ("order_manifest_features_before_schema", "FEATURE_UNSUPPORTED", "an unknown required "
     "feature and no num_samples", manifest(lambda m: (m.update(
         required_features=["sharded", "org.example.x"]), m.pop("num_samples")))),
    ("order_manifest_schema_before_paths", "MANIFEST_SCHEMA", "shard 0's path is ../x, shard 1's "
     "xxh3_64 has 15 digits", manifest(lambda m: (m["shards"][0].update(path="../x"), m[
         "shards"][1].update(xxh3_64=m["shards"][1]["xxh3_64"][1:])))),
    ("order_manifest_paths_before_indexing", "PATH_UNSAFE", "shard 0's first_index is 1, shard "
     "1's path is ../x", manifest(lambda m: (m["shards"][0].update(first_index=1), m[
         "shards"][1].update(path="../x")))),
    # shard paths (S-6)
    ("path_control", "PATH_UNSAFE", "a shard path holding a line feed",
     manifest(lambda m: m["shards"][1].update(path="shards/part\n-00001.detfmt"))),
    ("path_non_ascii", "PATH_UNSAFE", "a shard path holding \u00e4",
     manifest(lambda m: m["shards"][1].update(path="shards/p\u00e4rt-00001.detfmt"))),
    ("path_case_duplicate", "PATH_UNSAFE", "two shard paths that differ in ASCII case only",
     manifest(lambda m: m["shards"][1].update(path=m["shards"][0]["path"].upper()))),
    ("path_symlink_component", "PATH_UNSAFE", "the directory shards is a symbolic link",
     root_with(_symlinked_shards)),
    ("path_through_file", "FILE_MISSING", "a shard path x/part-00001.detfmt where x is a regular "
     "file", root_with(_through_file)),
    ("shard_too_many_samples", "SHARD_INDEXING", "an entry's num_samples times 48 exceeds its "
     "bytes", root_with(_too_many_samples)),
    # shard files (S-7 .. S-11) and their order
    ("order_shard_files_before_contents", "FILE_MISSING", "shard 0 has a broken magic number, "
     "shard 1 is missing", root_with(lambda r: r.edit_shard(0, lambda d: b"DETFMTpk" + d[8:]),
                                     mc._drop_shard_file)),
    ("order_shard_checksum_before_magic", "SHARD_CHECKSUM", "shard 0 has a broken magic "
     "number and the manifest its old xxh3_64",
     root_with(lambda r: r.files.__setitem__(r.shard(0)["path"], b"DETFMTpk"
                                             + r.files[r.shard(0)["path"]][8:]))),
    ("order_shard_major", "CHECKSUM", "a payload of shard 0 fails its checksum, shard 1 has a "
     "broken magic number", root_with(inner(0, mc._checksum),
                                      lambda r: r.edit_shard(1, lambda d: b"DETFMTpk" + d[8:]))),
    ("pack_short_file", "PACK_MAGIC", "the file of an empty shard has 12 bytes",
     root_with(lambda r: r.edit_shard(1, lambda _: b"DETFMTPK\x01\x00\x00\x00"),
               base=mc.case_sharded_empty_shard)),
    ("pack_toc_float", "PACK_LAYOUT", "the first member's offset is written 4096.0 (an "
     "integer is required)", root_with(lambda r: r.edit_shard(0, _toc_edit(
         b'"offset":4096,', b'"offset":4096.0,')), base=canonical_root)),
    ("pack_toc_duplicate_escaped", "PACK_LAYOUT", "the TOC holds \"\\u006dembers\" twice",
     root_with(lambda r: r.edit_shard(0, _toc_edit(b'{"members"', b'{"\\u006dembers":[],'
                                                                   b'"members"')),
               base=canonical_root)),
    ("pack_toc_trailing_newline", "PACK_LAYOUT", "a line feed after the TOC's JSON (only spaces "
     "may follow it)", root_with(lambda r: r.edit_shard(0, lambda _: mc.pack_canonical(
         mc.dataset_members(r.datasets[0]), toc_tail=b"\n")), base=canonical_root)),
    ("shard_header_feature_sharded", "FEATURE_UNSUPPORTED", "shard 1's header requires sharded",
     root_with(_header_edit(1, lambda h: h.update(required_features=["sharded"])))),
    ("order_inner_open_before_extra_members", "FILE_SIZE", "a member notes.txt the inner header "
     "does not name, and boxes.npy one byte shorter than declared",
     root_with(lambda r: r.repack(0, [*mc.dataset_members(mc._file_size(r.datasets[0])),
                                      ("notes.txt", b"x")]))),
    ("order_inner_open_before_schema", "NPY_ORDER", "shard 1 names class 1 wolf and its "
     "classes.npy is in Fortran order", root_with(inner(1, fortran("classes.npy")),
                                                   base=mc._other_classes)),
    ("order_schema_before_inner_verify", "SCHEMA_MISMATCH", "shard 1 names class 1 wolf and "
     "one of its payloads fails its checksum", root_with(inner(1, mc._checksum),
                                                          base=mc._other_classes)),
    # S-8
    ("schema_fixed_shape_mismatch", "SCHEMA_MISMATCH", "schema fixed_shape [5, 7, 3], shard 1's "
     "header has none", _schema_fixed_shape_mismatch),
    ("schema_image_fields_order", "SCHEMA_MISMATCH", "shard 1 lists its image fields in another "
     "order", _schema_image_fields_order),
    ("schema_codec_other", "SCHEMA_MISMATCH", "schema codec raw, shard 1 holds a png sample",
     _schema_codec_other),
    ("schema_codecs_empty", "SCHEMA_MISMATCH", "schema codec raw, shard 0's image.codecs is {}",
     root_with(_codecs_edit(0, {}))),
    ("schema_max_side", "SCHEMA_MISMATCH", "shard 1's max_side is 640, the schema's null",
     root_with(_header_edit(1, lambda h: h["image"].update(max_side=640)))),
    # 1.2.1: choices the text resolved but no case pinned
    ("manifest_format_absent", "NOT_DETFMT", "the manifest has no format member: S-22 (absent or "
     "not \"detfmt\"), not a missing key of S-3", manifest(lambda m: m.pop("format"), small_root)),
    ("manifest_schema_absent", "MANIFEST_SCHEMA", "the manifest has no schema member",
     manifest(lambda m: m.pop("schema"), small_root)),
    ("schema_codec_records", "HEADER_SCHEMA", "schema codec raw and the shard header's "
     "image.codecs {\"raw\": 1} agree (S-8 holds), but the shard's record is png: S-8 compares "
     "the header, and the records are checked against the header's image.codecs (§12 step 6, "
     "HEADER_SCHEMA), not against the schema", _codec_records_root),
    ("manifest_nested_unknown_key", "MANIFEST_SCHEMA", "a shard entry has an unknown member "
     "zzz: unknown keys are refused in every object of the manifest, not only at its top",
     manifest(lambda m: m["shards"][0].__setitem__("zzz", 1), small_root)),
]


# --------------------------------------------------------------------------- 1.2: ragged labels


def ragged_samples() -> list[Sample]:
    fields = {"iscrowd": [0, 1], "track_id": [7, -3], "score": [0.5, 1.0]}
    return [
        Sample(pattern(4, 6, 130), boxes=[[0, 0, 2, 2], [1, 1, 6, 4]], classes=[0, 1],
               box_fields=fields, source_id=11, file_name="a.jpg"),
        Sample(pattern(3, 3, 131), source_id=12, file_name=""),
        Sample(pattern(5, 4, 132), boxes=[[0, 0, 4, 5], [1, 1, 2, 2], [0, 4, 1, 5],
                                          [3, 0, 4, 1], [2, 2, 2, 2]], classes=[2, 2, 0, 1, 2],
               box_fields={"iscrowd": [1, 0, 0, 1, 0], "track_id": [1, 2, 3, 4, 5],
                           "score": [0.1, 0.2, 0.3, 0.4, 0.5]},
               source_id=13, file_name="dossier/c.png"),
        Sample(pattern(2, 2, 133), boxes=[[0.5, 0.5, 1.5, 2]], classes=[1],
               box_fields={"iscrowd": [0], "track_id": [9], "score": [-1.0]}, source_id=14,
               file_name="d"),
    ]


RAGGED_FIELDS = [("iscrowd", "|u1"), ("track_id", "<i4"), ("score", "<f4")]


def ragged() -> Dataset:
    return mc.build(ragged_samples(), CLASSES, box_fields=RAGGED_FIELDS,
                    image_fields=["source_id", "file_name"], ragged=True)


def ragged_plain() -> Dataset:
    return mc.build([Sample(s.image, boxes=s.boxes, classes=s.classes) for s in ragged_samples()],
                    CLASSES, ragged=True)


def case_ragged_crowded() -> Dataset:
    crowd = [[(j % 30) * 0.5, (j // 30) * 1.5, (j % 30) * 0.5 + 1, (j // 30) * 1.5 + 1]
             for j in range(300)]
    return mc.build([Sample(pattern(2, 3, 134), boxes=[[0, 0, 1, 1]], classes=[0]),
                     Sample(pattern(16, 16, 135), boxes=crowd, classes=[j % 3 for j in range(300)]),
                     Sample(pattern(3, 2, 136))], CLASSES, ragged=True)


def case_ragged_version_1_0() -> Dataset:
    """A dataset may use a feature with a version older than the one that introduced it."""
    return mc.build([Sample(pattern(2, 3, 137), boxes=[[0, 0, 3, 2]], classes=[1])], CLASSES,
                    ragged=True, version="1.0")


def case_sharded_ragged() -> Root:
    return mc.build_root([("0", [mc._boxed(4, 6, 138, 3), mc._boxed(2, 3, 139, 0),
                                 mc._boxed(3, 3, 140, 1)]),
                          ("1", [mc._boxed(3, 4, 141, 2)])], ragged=[0], canonical=True)


def case_sharded_ragged_version_1_1() -> Root:
    """R-9 for manifests: a feature is read whatever minor the manifest states (1.2.1)."""
    root = case_sharded_ragged()
    root.manifest["version"] = "1.1"
    return root


def case_sharded_feature_unused() -> Root:
    """A manifest may list a feature that no shard's header requires (1.2.1)."""
    root = base_root()
    root.manifest["version"] = "1.1"
    root.manifest["required_features"] = ["sharded", "ragged_labels"]
    return root


VALID_1_2: dict[str, tuple[Callable[[], Dataset | Root], str]] = {
    "ragged": (ragged, "ragged labels: counts 2, 0, 5, 1; box fields |u1, <i4, <f4; image fields"),
    "ragged_empty": (lambda: mc.build([], CLASSES, ragged=True), "ragged labels, N = 0"),
    "ragged_no_boxes": (lambda: mc.build([Sample(pattern(2, 2, 142)), Sample(pattern(1, 1, 143))],
                                         CLASSES, ragged=True), "ragged labels, no box at all "
                        "(M = 0, num_boxes 0)"),
    "ragged_crowded": (case_ragged_crowded, "ragged labels: 300 boxes in one sample, 1 and 0 in "
                       "the others"),
    "ragged_version_1_0": (case_ragged_version_1_0, "ragged_labels required by a version 1.0 "
                           "header"),
    "sharded_ragged": (case_sharded_ragged, "manifest 1.2: a ragged shard and a padded shard"),
    "sharded_ragged_version_1_1": (case_sharded_ragged_version_1_1, "manifest \"1.1\" listing "
                                   "ragged_labels over a ragged and a padded shard (1.2.1: read "
                                   "like 1.2, R-9 and S-4; not VERSION_UNSUPPORTED)"),
    "sharded_feature_unused": (case_sharded_feature_unused, "manifest \"1.1\" listing "
                               "ragged_labels over padded shards only (1.2.1: a listed feature "
                               "no shard uses is allowed, S-23; not SCHEMA_MISMATCH)"),
}

INVALID_1_2: list[tuple[str, str, str, Callable[[], Dataset | Root]]] = [
    ("ragged_count_sum", "COUNT_SUM", "the counts add up to num_boxes + 1",
     both(set_array("counts.npy", (1,), 1), base=ragged_plain)),
    ("order_ragged_records_before_sum", "COUNT_RANGE", "count 1 is -1 (the sum is off too)",
     both(set_array("counts.npy", (1,), -1), base=ragged_plain)),
    ("order_ragged_record_before_sum", "CODEC_UNKNOWN", "record 3 has codec 7 and count 1 is 1 "
     "(the sum is off too; 1.2.1: every record precedes the sum, not only the counts)",
     both(index_edit(3, codec=7), set_array("counts.npy", (1,), 1), base=ragged_plain)),
    ("ragged_count_range", "COUNT_RANGE", "count 2 is 6 with max_boxes 5 (the sum is right)",
     both(set_array("counts.npy", (0,), 1), set_array("counts.npy", (2,), 6),
          base=ragged_plain)),
    ("ragged_num_boxes_missing", "HEADER_SCHEMA", "ragged_labels without num_boxes",
     header(lambda h: h.pop("num_boxes"), ragged_plain)),
    ("ragged_features_duplicate", "HEADER_SCHEMA", "required_features lists ragged_labels twice",
     header(lambda h: h.update(required_features=["ragged_labels", "ragged_labels"]),
            ragged_plain)),
    ("ragged_header_arrays_padded", "COUNT_MISMATCH", "header.arrays gives boxes.npy the padded "
     "shape (N, M, 4)", header(lambda h: h["arrays"]["boxes.npy"].update(shape=[4, 5, 4]),
                               ragged_plain)),
    ("ragged_rows", "COUNT_MISMATCH", "boxes.npy has num_boxes + 1 rows",
     both(lambda d: _rows(d, "boxes.npy", np.zeros((1, 4), "<f4")), base=ragged_plain)),
    ("ragged_row_shape", "NPY_SHAPE", "boxes.npy is (num_boxes, 5)",
     both(lambda d: _widen(d), base=ragged_plain)),
    ("ragged_box_nan", "BOX_INVALID", "a NaN coordinate",
     both(set_array("boxes.npy", (3, 1), np.nan), base=ragged_plain)),
    ("ragged_box_out_of_image", "BOX_OUT_OF_IMAGE", "box 0 of sample 3: x2 = 2.5, width 2",
     both(set_array("boxes.npy", (7, 2), 2.5), base=ragged_plain)),
    ("ragged_class_range", "CLASS_RANGE", "class id 3 of 3 classes",
     both(set_array("classes.npy", (4,), 3), base=ragged_plain)),
    ("sharded_ragged_feature_missing", "SCHEMA_MISMATCH", "a ragged shard in a manifest that "
     "does not require ragged_labels", root_with(lambda r: r.manifest.update(
         required_features=["sharded"]), base=case_sharded_ragged)),
]


def _rows(dataset: Dataset, name: str, extra: np.ndarray) -> Dataset:
    mc.store(dataset, name, np.concatenate([mc.load(dataset, name), extra]))
    return dataset.seal()


def _widen(dataset: Dataset) -> Dataset:
    boxes = mc.load(dataset, "boxes.npy")
    mc.store(dataset, "boxes.npy", np.concatenate([boxes, np.zeros((len(boxes), 1), "<f4")], 1))
    return dataset.seal()


# --------------------------------------------------------------------------- SPEC.md §20


def _hexdump(data: bytes) -> str:
    lines = []
    for at in range(0, len(data), 16):
        chunk = data[at:at + 16]
        text = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        lines.append(f"{at:08x}  {chunk.hex(' '):<47}  |{text}|")
    return "\n".join(lines)


def worked_example_markdown() -> str:
    """The bytes of the cases worked_example and worked_example_shard, for SPEC.md §20."""
    dataset = worked_example()
    header = dataset.header_bytes()
    out = [f"`header.json` ({len(header)} bytes, UTF-8, shown as text; it ends with a line feed):",
           "", "```json", header.decode().rstrip("\n"), "```", ""]
    for name in ("images.bin", "index.npy", "boxes.npy", "classes.npy", "counts.npy"):
        data = dataset.files[name]
        out += [f"`{name}` ({len(data)} bytes):", "", "```", _hexdump(data), "```", ""]
    expected = mc.expected(dataset)
    out += ["The expected canonical dump (`conformance/v1/valid/worked_example.expected.json`; a "
            "reader prints `pixels`, the base64 of the decoded bytes, where the sidecar holds "
            "their SHA-256):", "", "```json", json.dumps(expected["samples"], indent=1), "```",
            ""]
    root = VALID_1_1["worked_example_shard"][0]()
    shard = root.files[root.shard(0)["path"]]
    assert shard is not None
    length = int.from_bytes(shard[12:16], "little")
    toc = shard[16:16 + length].rstrip(b" ")
    members = json.loads(toc)["members"]
    inner = dict(mc.dataset_members(root.datasets[0]))
    for member in members:
        if member["name"] != "header.json":
            assert inner[member["name"]] == dataset.files[member["name"]]
    out += [f"The same samples as one shard (`conformance/v1_1/valid/worked_example_shard`, "
            f"{len(shard)} bytes, S-26 layout). Its first 16 bytes:", "", "```",
            _hexdump(shard[:16]), "```", "",
            f"then the table of contents, {len(toc)} bytes of JSON followed by "
            f"{length - len(toc)} spaces (TOC_LEN = {length}, so images.bin starts at "
            f"{16 + length}):", "", "```json", toc.decode(), "```", "",
            "| member | offset | size |", "|---|---|---|"]
    out += [f"| `{m['name']}` | {m['offset']} | {m['size']} |" for m in members]
    out += ["", "Every member but `header.json` holds exactly the bytes of the file of that name "
            "above, and the bytes between members are zero; `header.json` is the same header "
            "written compactly:", "", "```json", inner["header.json"].decode(), "```", "",
            "`manifest.json`:", "", "```json", root.manifest_bytes().decode().rstrip("\n"),
            "```"]
    return "\n".join(out)
