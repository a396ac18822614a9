"""The checks of SPEC.md, shared by the reader (``open``), ``verify`` and the writer.

Each check yields `Violation`s instead of raising, so ``verify`` can report every broken rule
while ``open`` raises the first one. All arithmetic on values read from disk is done in Python
ints or in uint64 with explicit bounds, so hostile numbers cannot wrap around.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass

import msgspec
import numpy as np

from detfmt import errors, spec
from detfmt.schema import Header

__all__ = ["Violation", "check_index", "check_labels", "expected_arrays", "parse_header"]

@dataclass(frozen=True)
class Violation:
    """One broken rule: its id, the file, the sample (if any) and a readable message."""

    rule: str
    path: str
    message: str
    index: int | None = None

    def to_error(self) -> errors.FormatError:
        return errors.error_for(self.rule, self.message, path=self.path, index=self.index)

    def __str__(self) -> str:
        where = self.path + (f": sample {self.index}" if self.index is not None else "")
        return f"{where}: {self.message} [{self.rule}]"


# --------------------------------------------------------------------------- header


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not valid JSON")


def _no_duplicates(pairs: list[tuple[str, object]]) -> dict:
    result: dict = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"duplicate key {key!r}")
        result[key] = value
    return result


def parse_header(data: bytes, path: str) -> Header:
    """Decode and validate header.json bytes (rules HEADER_*, NOT_DETFMT, VERSION/FEATURE)."""
    if not data:
        raise errors.HeaderError("header is empty", rule="HEADER_ENCODING", path=path)
    if data.startswith(b"\xef\xbb\xbf"):
        raise errors.HeaderError("header starts with a byte-order mark", rule="HEADER_ENCODING",
                                 path=path)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise errors.HeaderError(f"header is not UTF-8: {error}", rule="HEADER_ENCODING",
                                 path=path) from error
    try:
        raw = json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as error:
        raise errors.HeaderError(f"header is not valid JSON: {error}", rule="HEADER_JSON",
                                 path=path) from error
    if not isinstance(raw, dict):
        raise errors.HeaderError("header must be a JSON object", rule="HEADER_JSON", path=path)
    _check_identity(raw, path)
    try:
        header = msgspec.convert(raw, Header)
    except msgspec.ValidationError as error:
        raise errors.HeaderError(f"header does not match the schema: {error}",
                                 rule="HEADER_SCHEMA", path=path) from error
    for violation in check_header(header, path):
        raise violation.to_error()
    return header


def _check_identity(raw: dict, path: str) -> None:
    """Identity and version come first: a newer dataset gets a version error, not a schema one."""
    if raw.get("format") != spec.FORMAT_NAME:
        raise errors.NotDetfmtError(
            f"not a detfmt header: 'format' is {raw.get('format')!r}, expected 'detfmt'", path=path)
    version = raw.get("version")
    parts = version.split(".") if isinstance(version, str) else []
    if len(parts) != 2 or not all(p.isascii() and p.isdigit() and 0 < len(p) <= 4 for p in parts):
        raise errors.HeaderError(f"'version' must be 'MAJOR.MINOR', got {version!r}",
                                 rule="HEADER_SCHEMA", path=path)
    if int(parts[0]) != spec.MAJOR_VERSION:
        raise errors.UnsupportedVersionError(
            f"format version {version} is not supported (this reader reads {spec.MAJOR_VERSION}.x)",
            found=version, supported=spec.FORMAT_VERSION, rule="VERSION_UNSUPPORTED", path=path)
    features = raw.get("required_features", [])
    if not isinstance(features, list) or not all(isinstance(f, str) for f in features):
        raise errors.HeaderError("'required_features' must be a list of strings",
                                 rule="HEADER_SCHEMA", path=path)
    unknown = sorted(set(features) - spec.KNOWN_FEATURES)
    if unknown:
        raise errors.UnsupportedVersionError(
            f"dataset requires features this reader does not know: {unknown}",
            found=version, supported=spec.FORMAT_VERSION, rule="FEATURE_UNSUPPORTED", path=path)


def expected_arrays(header: Header) -> dict[str, tuple[str, tuple[int, ...]]]:
    """Every .npy member the header implies, with its exact dtype descr and shape."""
    n, m = header.num_samples, header.max_boxes
    arrays: dict[str, tuple[str, tuple[int, ...]]] = {
        spec.INDEX_FILE: ("index", (n,)),
        spec.BOXES_FILE: (spec.LABEL_DTYPES[spec.BOXES_FILE], (n, m, 4)),
        spec.CLASSES_FILE: (spec.LABEL_DTYPES[spec.CLASSES_FILE], (n, m)),
        spec.COUNTS_FILE: (spec.LABEL_DTYPES[spec.COUNTS_FILE], (n,)),
    }
    for field in header.box_fields:
        arrays[spec.box_field_file(field.name)] = (field.dtype, (n, m))
    for name in header.image_fields:
        if name in spec.STRING_FIELDS:
            arrays[f"{name}.offsets.npy"] = (spec.STRING_OFFSETS_DTYPE, (n + 1,))
        else:
            dtype, tail = spec.IMAGE_FIELD_ARRAYS[name]
            arrays[f"{name}.npy"] = (dtype, (n, *tail))
    return arrays


def expected_files(header: Header) -> list[str]:
    """All member files (besides header.json) the header implies."""
    files = [spec.BLOB_FILE, *expected_arrays(header)]
    files += [f"{name}.bin" for name in header.image_fields if name in spec.STRING_FIELDS]
    return sorted(files)


def check_header(header: Header, path: str) -> Iterator[Violation]:
    """Cross-field rules the schema alone cannot express."""
    names = [info.name for info in header.classes]
    if len(set(names)) != len(names):
        yield Violation("HEADER_SCHEMA", path, "class names must be unique")
    ids = [info.source_id for info in header.classes if info.source_id is not None]
    if len(set(ids)) != len(ids):
        yield Violation("HEADER_SCHEMA", path, "class source_ids must be unique")
    box_names = [field.name for field in header.box_fields]
    if len(set(box_names)) != len(box_names):
        yield Violation("HEADER_SCHEMA", path, "box field names must be unique")
    if len(set(header.image_fields)) != len(header.image_fields):
        yield Violation("HEADER_SCHEMA", path, "image field names must be unique")
    if len(header.metadata) > spec.MAX_METADATA_ITEMS or sum(
        len(k) + len(v) for k, v in header.metadata.items()
    ) > spec.MAX_METADATA_BYTES:
        yield Violation("LIMIT_EXCEEDED", path, "metadata exceeds its size limits")
    unknown_codecs = set(header.image.codecs) - set(spec.CODEC_IDS)
    if unknown_codecs:
        yield Violation("CODEC_UNKNOWN", path, f"unknown codec names {sorted(unknown_codecs)}")
    expected = expected_files(header)
    if sorted(header.files) != expected:
        yield Violation("HEADER_SCHEMA", path,
                        f"'files' must list exactly {expected}, got {sorted(header.files)}")
    arrays = expected_arrays(header)
    if sorted(header.arrays) != sorted(arrays):
        yield Violation("HEADER_SCHEMA", path,
                        f"'arrays' must list exactly {sorted(arrays)}, got {sorted(header.arrays)}")
        return
    for name, (dtype, shape) in arrays.items():
        info = header.arrays[name]
        wanted = _index_descr() if dtype == "index" else dtype
        got = info.dtype if isinstance(info.dtype, str) else [list(f) for f in info.dtype]
        if got != wanted:
            yield Violation("NPY_DTYPE", path, f"header says {name} has dtype {info.dtype!r}, "
                            f"expected {wanted!r}")
        if tuple(info.shape) != shape:
            yield Violation("COUNT_MISMATCH", path, f"header says {name} has shape {info.shape},"
                            f" but num_samples/max_boxes imply {list(shape)}")
    if sum(header.image.codecs.values()) not in (0, header.num_samples) and header.image.codecs:
        yield Violation("HEADER_SCHEMA", path, "image.codecs counts do not add up to num_samples")


def _index_descr() -> list[list[str]]:
    return [list(field) for field in np.lib.format.dtype_to_descr(spec.INDEX_DTYPE)]


# --------------------------------------------------------------------------- index


#: Records checked at open, and the block size of a full index check (`Dataset.validate_index`);
#: reading checks exactly the records it uses (`index_rows_ok`), so the first batch after open
#: costs O(batch) whatever N is.
INDEX_CHUNK = 1 << 8


def index_rows_ok(index: np.ndarray, header: Header, blob_size: int, counts: np.ndarray,
                  max_boxes: int, rows: np.ndarray) -> bool:
    """True when the records ``rows`` (sorted, unique) and their counts pass every check of
    `check_index` and `check_counts` for the one-record ranges ``[row, row + 1)``, links to both
    neighbours included: one vectorized pass with no per-rule work (the hot case). When it is
    False, `check_index` and `check_counts` on those ranges name the rule and the record."""
    n = len(index)
    if n == 0 or not len(rows):
        return n != 0 or blob_size == 0
    size = np.uint64(blob_size)
    mask = np.uint64(spec.ALIGNMENT - 1)
    recs = index[rows]
    offsets = recs["offset"]
    nbytes = recs["nbytes"]
    if not ((offsets <= size).all() and (nbytes <= size).all()):
        return False
    ends = (offsets + nbytes + mask) & ~mask  # bounded by the blob size: no wrap-around
    has_prev = rows > 0
    prev = index[np.where(has_prev, rows - 1, 0)]
    prev_bounded = (prev["offset"] <= size) & (prev["nbytes"] <= size)
    prev_ends = (np.minimum(prev["offset"], size) + np.minimum(prev["nbytes"], size) + mask) & ~mask
    linked = np.where(has_prev, prev_bounded & (offsets == prev_ends), offsets == 0)
    has_next = rows < n - 1
    nxt = index[np.where(has_next, rows + 1, 0)]
    linked &= np.where(has_next, nxt["offset"] == ends, ends == size)
    heights = recs["height"]
    widths = recs["width"]
    codecs = recs["codec"]
    decoded = heights.astype(np.uint64) * widths.astype(np.uint64) * np.uint64(spec.CHANNELS)
    raw = codecs == spec.CODEC_RAW
    good = (linked & (heights >= 1) & (heights <= spec.MAX_SIDE) & (widths >= 1)
            & (widths <= spec.MAX_SIDE) & (recs["channels"] == spec.CHANNELS)
            & (recs["flags"] == 0) & (recs["reserved"] == 0) & (codecs <= spec.CODEC_PNG)
            & (recs["decoded_nbytes"] == decoded)
            & np.where(raw, nbytes == decoded, nbytes != 0))
    fixed = header.image.fixed_shape
    if fixed is not None:
        good &= raw & (heights == fixed[0]) & (widths == fixed[1])
    row_counts = counts[rows]
    return bool(good.all() and (row_counts >= 0).all() and (row_counts <= max_boxes).all())


def check_index(index: np.ndarray, header: Header, blob_size: int, path: str,
                start: int = 0, stop: int | None = None) -> Iterator[Violation]:
    """Vectorized structural checks of index records [start, stop) (no payload reads).

    Payloads are packed: record 0 starts at 0, record i+1 starts where record i ends rounded up
    to 64, and the last one ends (rounded up) at the blob's size. Checking that chain for a range
    needs only the record before it, so a reader can validate a huge index chunk by chunk.
    """
    n = len(index)
    stop = n if stop is None else min(stop, n)
    if n == 0:
        if blob_size != 0:
            yield Violation("BLOB_SIZE", path, f"images.bin has {blob_size} bytes but N is 0")
        return
    if start >= stop:
        return
    lo = max(start - 1, 0)
    # The chain includes the record after the range too: otherwise the last record of a chunk
    # could overlap the next chunk's payloads and be used before that chunk is validated.
    records = index[lo:min(stop + 1, n)]
    offsets = records["offset"]
    nbytes = records["nbytes"]
    big = np.flatnonzero((offsets > np.uint64(blob_size)) | (nbytes > np.uint64(blob_size)))
    if big.size:  # bounded by the real file size, so the sums below cannot wrap around
        i = lo + int(big[0])
        yield Violation("OFFSETS_BOUNDS", path, f"offset {int(index['offset'][i])} or length "
                        f"{int(index['nbytes'][i])} exceeds the blob size {blob_size}", i)
        return
    mask = np.uint64(spec.ALIGNMENT - 1)
    aligned_ends = (offsets + nbytes + mask) & ~mask
    if start == 0 and int(offsets[0]) != 0:
        yield Violation("OFFSETS_BOUNDS", path, f"first offset is {int(offsets[0])}, expected 0", 0)
        return
    if len(records) > 1 and not np.array_equal(offsets[1:], aligned_ends[:-1]):
        yield _diagnose_chain(offsets, nbytes, aligned_ends, lo, path)
        return
    if stop == n:
        end = int(aligned_ends[-1])
        if end != blob_size:
            rule = "OFFSETS_BOUNDS" if end > blob_size else "BLOB_SIZE"
            yield Violation(rule, path, f"payloads end at {end} but images.bin has {blob_size} "
                            "bytes", n - 1 if end > blob_size else None)
            return
    records = index[start:stop]
    yield from _check_records(records, header, path, start)


def _diagnose_chain(offsets, nbytes, aligned_ends, lo: int, path: str) -> Violation:
    """Name the first broken link of the payload chain precisely (only runs on failure)."""
    misaligned = np.flatnonzero(offsets & np.uint64(spec.ALIGNMENT - 1))
    ends = offsets + nbytes
    backwards = np.flatnonzero(offsets[1:] < ends[:-1])
    gaps = np.flatnonzero(offsets[1:] != aligned_ends[:-1])
    first = int(gaps[0]) + 1
    # Contract and SPEC §8: a misaligned offset, then an overlap (a payload starting before the
    # previous one ends), anywhere in the chain outranks a gap, so swapped offsets read as
    # OFFSETS_NON_MONOTONIC even when the first broken link is a gap.
    if misaligned.size:
        i = int(misaligned[0])
        return Violation("OFFSET_ALIGNMENT", path,
                         f"payload offset {int(offsets[i])} is not a multiple of 64", lo + i)
    if backwards.size:
        i = int(backwards[0]) + 1
        return Violation("OFFSETS_NON_MONOTONIC", path,
                         f"payload {lo + i} starts at {int(offsets[i])}, inside payload "
                         f"{lo + i - 1} which ends at {int(ends[i - 1])}", lo + i)
    return Violation("OFFSETS_BOUNDS", path,
                     f"payload {lo + first} starts at {int(offsets[first])}, expected "
                     f"{int(aligned_ends[first - 1])} (payloads are packed at 64-byte steps)",
                     lo + first)


def _check_records(records: np.ndarray, header: Header, path: str, start: int
                   ) -> Iterator[Violation]:
    """Per-record rules: sizes, channels, codec, reserved fields, fixed shape."""
    heights = records["height"]
    widths = records["width"]
    codecs = records["codec"]
    nbytes = records["nbytes"]
    bad = np.flatnonzero((heights < 1) | (heights > spec.MAX_SIDE) | (widths < 1)
                         | (widths > spec.MAX_SIDE))
    if bad.size:
        i = int(bad[0])
        yield Violation("LIMIT_EXCEEDED", path, f"image size {int(heights[i])}x{int(widths[i])} "
                        f"outside 1..{spec.MAX_SIDE}", start + i)
        return
    bad = np.flatnonzero(records["channels"] != spec.CHANNELS)
    if bad.size:
        i = int(bad[0])
        yield Violation("INDEX_FIELD", path, f"channels is {int(records['channels'][i])}, must "
                        "be 3", start + i)
    bad = np.flatnonzero((records["flags"] != 0) | (records["reserved"] != 0))
    if bad.size:
        yield Violation("INDEX_FIELD", path, "flags and reserved must be 0", start + int(bad[0]))
    bad = np.flatnonzero(codecs > spec.CODEC_PNG)
    if bad.size:
        i = int(bad[0])
        yield Violation("CODEC_UNKNOWN", path, f"unknown codec id {int(codecs[i])}", start + i)
    decoded = heights.astype(np.uint64) * widths.astype(np.uint64) * np.uint64(spec.CHANNELS)
    bad = np.flatnonzero(records["decoded_nbytes"] != decoded)
    if bad.size:
        i = int(bad[0])
        yield Violation("SAMPLE_SIZE", path, f"decoded_nbytes is "
                        f"{int(records['decoded_nbytes'][i])}, expected height*width*3 = "
                        f"{int(decoded[i])}", start + i)
        return
    bad = np.flatnonzero((codecs == spec.CODEC_RAW) & (nbytes != decoded))
    if bad.size:
        i = int(bad[0])
        yield Violation("SAMPLE_SIZE", path, f"raw payload has {int(nbytes[i])} bytes, expected "
                        f"{int(decoded[i])}", start + i)
    bad = np.flatnonzero((codecs != spec.CODEC_RAW) & (nbytes == 0))
    if bad.size:
        yield Violation("SAMPLE_SIZE", path, "encoded payload is empty", start + int(bad[0]))
    fixed = header.image.fixed_shape
    if fixed is not None:
        bad = np.flatnonzero((codecs != spec.CODEC_RAW) | (heights != fixed[0])
                             | (widths != fixed[1]))
        if bad.size:
            i = int(bad[0])
            yield Violation("FIXED_SHAPE", path, f"sample is {_codec_name(codecs[i])} "
                            f"{int(heights[i])}x{int(widths[i])}, but the header fixes raw "
                            f"{fixed[0]}x{fixed[1]}", start + i)


def check_index_tail(index: np.ndarray, header: Header, blob_size: int, path: str
                     ) -> Iterator[Violation]:
    """O(1) checks a reader makes at open: the last record ends at the blob's end; a fixed-shape
    blob has exactly N equal strides."""
    n = len(index)
    if n == 0:
        yield from check_index(index, header, blob_size, path)
        return
    last = index[n - 1]
    offset, length = int(last["offset"]), int(last["nbytes"])
    end = spec.align_up(offset + length)
    if offset > blob_size or length > blob_size or end > blob_size:
        yield Violation("OFFSETS_BOUNDS", path, f"the last payload ends at {end}, past the "
                        f"{blob_size}-byte blob", n - 1)
    elif end != blob_size:
        yield Violation("BLOB_SIZE", path, f"payloads end at {end} but images.bin has "
                        f"{blob_size} bytes")
    fixed = header.image.fixed_shape
    if fixed is not None and blob_size != n * spec.align_up(fixed[0] * fixed[1] * fixed[2]):
        yield Violation("FIXED_SHAPE", path, f"a fixed-shape blob of {n} samples of "
                        f"{list(fixed)} must have {n * spec.align_up(fixed[0] * fixed[1] * 3)} "
                        f"bytes, not {blob_size}")


def check_counts(counts: np.ndarray, max_boxes: int, path: str, start: int = 0
                 ) -> Iterator[Violation]:
    bad = np.flatnonzero((counts < 0) | (counts > max_boxes))
    if bad.size:
        i = int(bad[0])
        yield Violation("COUNT_RANGE", path, f"box count {int(counts[i])} outside 0..{max_boxes}",
                        start + i)


def _codec_name(codec_id) -> str:
    return spec.CODEC_NAMES.get(int(codec_id), f"codec {int(codec_id)}")


def check_string_offsets(offsets: np.ndarray, size: int, path: str) -> Iterator[Violation]:
    if int(offsets[0]) != 0 or int(offsets[-1]) != size:
        yield Violation("OFFSETS_BOUNDS", path, f"string offsets must run from 0 to {size}")
        return
    lengths = np.diff(offsets.astype(np.int64)) if len(offsets) > 1 else np.zeros(0, np.int64)
    if (offsets > np.uint64(size)).any() or (lengths < 0).any():
        i = int(np.flatnonzero(lengths < 0)[0]) if (lengths < 0).any() else None
        yield Violation("OFFSETS_NON_MONOTONIC", path, "string offsets decrease", i)
        return
    long = np.flatnonzero(lengths > spec.MAX_STRING_BYTES)
    if long.size:
        yield Violation("LIMIT_EXCEEDED", path, f"string longer than {spec.MAX_STRING_BYTES} bytes",
                        int(long[0]))


# --------------------------------------------------------------------------- labels


def check_labels(
    *,
    boxes: np.ndarray,
    classes: np.ndarray,
    counts: np.ndarray,
    heights: np.ndarray,
    widths: np.ndarray,
    num_classes: int,
    indices: np.ndarray,
    paths: tuple[str, str],
    box_fields: dict[str, tuple[str, np.ndarray]] | None = None,
) -> Iterator[Violation]:
    """Label rules over a block of samples: finite, ordered, inside the image, classes in range,
    padding exact. ``boxes`` (B, M', 4) and ``classes`` (B, M') may be trimmed to any M' >= the
    block's largest count; ``indices`` gives each row's dataset index for messages."""
    boxes_path, classes_path = paths
    if boxes.size == 0 and classes.size == 0:
        return
    m = boxes.shape[1]
    mask = np.arange(m) < counts[:, None]
    x1, y1, x2, y2 = (boxes[..., k] for k in range(4))
    finite = np.isfinite(boxes).all(axis=-1)
    bad = mask & ~(finite & (x1 <= x2) & (y1 <= y2))
    if bad.any():
        row, slot = np.argwhere(bad)[0]
        yield Violation("BOX_INVALID", boxes_path, f"box {int(slot)} is {boxes[row, slot].tolist()}"
                        " (NaN/inf, or x2 < x1 / y2 < y1)", int(indices[row]))
        return
    w = widths[:, None].astype(np.float32)
    h = heights[:, None].astype(np.float32)
    bad = mask & ((x1 < 0) | (y1 < 0) | (x2 > w) | (y2 > h))
    if bad.any():
        row, slot = np.argwhere(bad)[0]
        yield Violation("BOX_OUT_OF_IMAGE", boxes_path,
                        f"box {int(slot)} {boxes[row, slot].tolist()} lies outside the "
                        f"{int(widths[row])}x{int(heights[row])} image", int(indices[row]))
    bad = mask & ((classes < 0) | (classes >= num_classes))
    if bad.any():
        row, slot = np.argwhere(bad)[0]
        yield Violation("CLASS_RANGE", classes_path, f"class id {int(classes[row, slot])} of box "
                        f"{int(slot)} outside 0..{num_classes - 1}", int(indices[row]))
    padding = ~mask
    bad_boxes = padding & (boxes.view(np.uint32) != 0).any(axis=-1)
    bad_classes = padding & (classes != spec.CLASS_PADDING)
    if bad_boxes.any() or bad_classes.any():
        which = bad_boxes | bad_classes
        row, slot = np.argwhere(which)[0]
        path = boxes_path if bad_boxes[row, slot] else classes_path
        yield Violation("MASK_INCONSISTENT", path, f"padding slot {int(slot)} (count "
                        f"{int(counts[row])}) must hold box +0.0 and class -1",
                        int(indices[row]))
    for name, (field_path, values) in (box_fields or {}).items():
        bad = padding & (values.view(np.uint8 if values.dtype.itemsize == 1 else np.uint32) != 0)
        if bad.any():
            row, slot = np.argwhere(bad)[0]
            yield Violation("MASK_INCONSISTENT", field_path,
                            f"padding slot {int(slot)} of box field {name!r} must be 0",
                            int(indices[row]))


def label_rows_broken(*, boxes: np.ndarray, classes: np.ndarray, counts: np.ndarray,
                      heights: np.ndarray, widths: np.ndarray, num_classes: int,
                      box_fields: list[np.ndarray]) -> np.ndarray:
    """(B,) bool: which rows break any label rule of `check_labels` (R-37 .. R-40).

    The vectorized pass a reader runs once per chunk; `check_labels` on the broken rows then
    names the rule and the sample (it only runs when something is wrong).
    """
    if not len(counts):
        return np.zeros(0, bool)
    m = boxes.shape[1]
    mask = np.arange(m) < counts[:, None]
    x1, y1, x2, y2 = (boxes[..., k] for k in range(4))
    # NaN fails every comparison and an infinity fails a bound, so these also test finiteness
    with np.errstate(invalid="ignore"):
        good = (x1 <= x2) & (y1 <= y2) & (x1 >= 0) & (y1 >= 0)
        good &= x2 <= widths[:, None].astype(np.float32)
        good &= y2 <= heights[:, None].astype(np.float32)
    good &= (classes >= 0) & (classes < num_classes)
    padding = ~mask
    raw = boxes.view(np.uint32)
    clean = (good | padding).all() and not (padding & (classes != spec.CLASS_PADDING)).any()
    clean = clean and not (padding[..., None] & (raw != 0)).any()
    for values in box_fields:
        field = values.view(np.uint8 if values.dtype.itemsize == 1 else np.uint32)
        clean = clean and not (padding & (field != 0)).any()
    if clean:  # the hot case: one pass, no per-row reductions
        return np.zeros(len(counts), bool)
    bad = (mask & ~good).any(axis=1)
    bad |= (padding & (raw != 0).any(axis=-1)).any(axis=1)
    bad |= (padding & (classes != spec.CLASS_PADDING)).any(axis=1)
    for values in box_fields:
        raw = values.view(np.uint8 if values.dtype.itemsize == 1 else np.uint32)
        bad |= (padding & (raw != 0)).any(axis=1)
    return bad
