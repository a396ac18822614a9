"""The checks of SPEC.md, shared by the reader (``open``), ``verify`` and the writer.

Each check yields `Violation`s instead of raising, so ``verify`` can report every broken rule
while ``open`` raises the first one. All arithmetic on values read from disk is done in Python
ints or in uint64 with explicit bounds, so hostile numbers cannot wrap around.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import msgspec
import numpy as np

from detfmt import errors
from detfmt.format import jsonprofile, spec
from detfmt.format.members import member_table
from detfmt.format.schema import Header

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


def parse_header(data: bytes, path: str) -> Header:
    """Decode and validate header.json bytes (rules HEADER_*, NOT_DETFMT, VERSION/FEATURE), in
    the order of SPEC.md §12 step 1. The caller has checked the size (R-2)."""
    raw = jsonprofile.parse_json(data, path=path, limit=None, rule="HEADER_JSON",
                           error=errors.HeaderError, encoding_rule="HEADER_ENCODING")
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
    """Every .npy member the header implies, with its exact dtype descr and shape, in byte-wise
    name order. Labels are (N, M, 4) and (N, M), or (T, 4) and (T,) when ragged (SPEC §10.2)."""
    table = member_table(header.num_samples, header.max_boxes,
                         [(field.name, field.dtype) for field in header.box_fields],
                         header.image_fields, _num_boxes(header) if header.ragged else None)
    # SPEC §12: members are checked in byte-wise name order
    return {name: (descr, shape) for name, descr, shape in sorted(table)}


def _num_boxes(header: Header) -> int:
    """T of ragged labels; `check_header` has checked it is an integer in range."""
    return int(header.num_boxes)


def num_boxes_problem(header: Header) -> str | None:
    """Why ``num_boxes`` is unusable for ragged labels (SPEC §5, step 1j), or None."""
    value = header.num_boxes
    if not header.ragged:
        return None
    if value is None:
        return "num_boxes is required when required_features lists 'ragged_labels'"
    if isinstance(value, bool) or not isinstance(value, int) \
            or not 0 <= value <= spec.MAX_TOTAL_BOXES:
        return f"num_boxes must be an integer in 0..2^56, got {value!r}"
    return None


def expected_files(header: Header) -> list[str]:
    """All member files (besides header.json) the header implies."""
    files = [spec.BLOB_FILE, *expected_arrays(header)]
    files += [f"{name}.bin" for name in header.image_fields if name in spec.STRING_FIELDS]
    return sorted(files)


def check_header(header: Header, path: str) -> Iterator[Violation]:
    """Cross-member rules the schema alone cannot express, in the order of SPEC.md §12 step 1."""
    problem = num_boxes_problem(header)  # step 1j: part of the schema
    if problem:
        yield Violation("HEADER_SCHEMA", path, problem)
        return
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
    if len(set(header.required_features)) != len(header.required_features):
        yield Violation("HEADER_SCHEMA", path, "required_features must be unique")
    if len(header.metadata) > spec.MAX_METADATA_ITEMS or sum(
        len(k) + len(v) for k, v in header.metadata.items()
    ) > spec.MAX_METADATA_BYTES:
        yield Violation("LIMIT_EXCEEDED", path, "metadata exceeds its size limits")
    unknown_codecs = set(header.image.codecs) - set(spec.CODEC_IDS)
    if unknown_codecs:
        yield Violation("CODEC_UNKNOWN", path, f"unknown codec names {sorted(unknown_codecs)}")
    if header.image.codecs and sum(header.image.codecs.values()) != header.num_samples:
        yield Violation("HEADER_SCHEMA", path, "image.codecs counts do not add up to num_samples")
    expected = expected_files(header)
    if sorted(header.files) != expected:
        yield Violation("HEADER_SCHEMA", path,
                        f"'files' must list exactly {expected}, got {sorted(header.files)}")
    arrays = expected_arrays(header)
    if sorted(header.arrays) != sorted(arrays):
        yield Violation("HEADER_SCHEMA", path,
                        f"'arrays' must list exactly {sorted(arrays)}, got {sorted(header.arrays)}")
        return
    for name, (dtype, shape) in arrays.items():  # byte-wise name order
        info = header.arrays[name]
        wanted = _index_descr() if dtype == "index" else dtype
        got = info.dtype if isinstance(info.dtype, str) else [list(f) for f in info.dtype]
        if got != wanted:
            yield Violation("NPY_DTYPE", path, f"header says {name} has dtype {info.dtype!r}, "
                            f"expected {wanted!r}")
        if tuple(info.shape) != shape:
            sizes = "num_samples/num_boxes" if header.ragged else "num_samples/max_boxes"
            yield Violation("COUNT_MISMATCH", path, f"header says {name} has shape {info.shape},"
                            f" but {sizes} imply {list(shape)}")


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
    `check_index` (its box-count check included) for the one-record ranges ``[row, row + 1)``,
    links to both neighbours included: one vectorized pass with no per-rule work (the hot case).
    When it is False, `check_index` on those ranges names the rule and the record."""
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
                start: int = 0, stop: int | None = None, counts: np.ndarray | None = None,
                counts_path: str = "") -> Iterator[Violation]:
    """Structural checks of index records [start, stop) (no payload reads), record by record.

    SPEC.md §8 and §12 step 4: for each record in index order, its bounds, its link to the
    previous payload, then R-25 .. R-29, then its box count (R-36, when ``counts`` holds the
    counts of the same records); the first failing record decides, and within it the first
    failing rule. That order does not depend on how the records are split into ranges, so a
    reader can validate a huge index range by range (in increasing order) and report the same
    id as a full check. A range also checks the bounds and link of the record after it, so no
    payload of the range overlaps the next one unnoticed.
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
    hi = min(stop + 1, n)
    records = index[lo:hi]
    offsets = records["offset"]
    nbytes = records["nbytes"]
    size = np.uint64(blob_size)
    codes = np.zeros(len(records), np.int8)  # per record: 0 ok, else the first failing rule

    def mark(rank: int, bad: np.ndarray) -> None:
        codes[(codes == 0) & bad] = rank

    mark(_BOUNDS, (offsets > size) | (nbytes > size))
    mask = np.uint64(spec.ALIGNMENT - 1)
    ends = offsets + nbytes  # both <= blob_size where it matters (the bounds rank comes first)
    if lo == 0 and offsets[0] != 0 and codes[0] == 0:
        codes[0] = _FIRST
    link = np.zeros(len(records), bool)
    link[1:] = offsets[1:] != ((ends[:-1] + mask) & ~mask)
    misaligned = (offsets & mask) != 0
    overlap = np.zeros(len(records), bool)
    overlap[1:] = offsets[1:] < ends[:-1]
    mark(_ALIGNMENT, link & misaligned)
    mark(_OVERLAP, link & overlap)
    mark(_GAP, link)
    own = np.zeros(len(records), bool)  # records whose own checks belong to this range
    own[start - lo:stop - lo] = True
    heights, widths = records["height"], records["width"]
    mark(_SIDE, own & ((heights < 1) | (heights > spec.MAX_SIDE) | (widths < 1)
                       | (widths > spec.MAX_SIDE)))
    mark(_FIELD, own & ((records["channels"] != spec.CHANNELS) | (records["flags"] != 0)
                        | (records["reserved"] != 0)))
    codecs = records["codec"]
    mark(_CODEC, own & (codecs > spec.CODEC_PNG))
    decoded = heights.astype(np.uint64) * widths.astype(np.uint64) * np.uint64(spec.CHANNELS)
    mark(_SIZE, own & ((records["decoded_nbytes"] != decoded)
                       | ((codecs == spec.CODEC_RAW) & (nbytes != decoded))
                       | ((codecs != spec.CODEC_RAW) & (nbytes == 0))))
    fixed = header.image.fixed_shape
    if fixed is not None:
        mark(_FIXED, own & ((codecs != spec.CODEC_RAW) | (heights != fixed[0])
                            | (widths != fixed[1])))
    if counts is not None:
        per_record = np.zeros(len(records), np.int64)
        per_record[start - lo:stop - lo] = counts
        mark(_COUNT, own & ((per_record < 0) | (per_record > header.max_boxes)))
    if start > lo:
        codes[0] = 0  # the record before the range was checked with its own range
    bad = np.flatnonzero(codes)
    if bad.size:
        k = int(bad[0])
        yield _record_violation(int(codes[k]), records, k, lo + k, path, counts_path,
                                per_record if counts is not None else None, header)


_BOUNDS, _FIRST, _ALIGNMENT, _OVERLAP, _GAP, _SIDE, _FIELD, _CODEC, _SIZE, _FIXED, _COUNT = \
    range(1, 12)


def _record_violation(code: int, records: np.ndarray, k: int, i: int, path: str,
                      counts_path: str, counts: np.ndarray | None, header: Header) -> Violation:
    """The violation of record ``i`` (position ``k`` in ``records``) for its first failing rule."""
    r = records[k]
    offset, length = int(r["offset"]), int(r["nbytes"])
    h, w = int(r["height"]), int(r["width"])
    if code == _BOUNDS:
        return Violation("OFFSETS_BOUNDS", path, f"offset {offset} or length {length} exceeds "
                         "the size of images.bin", i)
    if code == _FIRST:
        return Violation("OFFSETS_BOUNDS", path, f"first offset is {offset}, expected 0", i)
    previous_end = int(records[k - 1]["offset"]) + int(records[k - 1]["nbytes"])
    if code == _ALIGNMENT:
        return Violation("OFFSET_ALIGNMENT", path,
                         f"payload offset {offset} is not a multiple of 64", i)
    if code == _OVERLAP:
        return Violation("OFFSETS_NON_MONOTONIC", path, f"payload {i} starts at {offset}, "
                         f"inside payload {i - 1} which ends at {previous_end}", i)
    if code == _GAP:
        return Violation("OFFSETS_BOUNDS", path, f"payload {i} starts at {offset}, expected "
                         f"{spec.align_up(previous_end)} (payloads are packed at 64-byte steps)",
                         i)
    if code == _SIDE:
        return Violation("LIMIT_EXCEEDED", path,
                         f"image size {h}x{w} outside 1..{spec.MAX_SIDE}", i)
    if code == _FIELD:
        return Violation("INDEX_FIELD", path, f"channels {int(r['channels'])}, flags "
                         f"{int(r['flags'])}, reserved {int(r['reserved'])}: must be 3, 0, 0", i)
    if code == _CODEC:
        return Violation("CODEC_UNKNOWN", path, f"unknown codec id {int(r['codec'])}", i)
    if code == _SIZE:
        return Violation("SAMPLE_SIZE", path, f"decoded_nbytes {int(r['decoded_nbytes'])} and "
                         f"nbytes {length} do not fit a {h}x{w}x3 "
                         f"{_codec_name(r['codec'])} image", i)
    if code == _FIXED:
        fixed = header.image.fixed_shape
        assert fixed is not None
        return Violation("FIXED_SHAPE", path, f"sample is {_codec_name(r['codec'])} {h}x{w}, but "
                         f"the header fixes raw {fixed[0]}x{fixed[1]}", i)
    assert counts is not None
    return Violation("COUNT_RANGE", counts_path,
                     f"box count {int(counts[k])} outside 0..{header.max_boxes}", i)


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


def _codec_name(codec_id) -> str:
    return spec.CODEC_NAMES.get(int(codec_id), f"codec {int(codec_id)}")


def check_string_offsets(offsets: np.ndarray, size: int, path: str) -> Iterator[Violation]:
    """The offsets of a string field (SPEC.md §11.2): the tails, then sample by sample
    ``offsets[i] <= offsets[i+1] <= size`` (R-23), then the length limit (R-25); the first
    failing sample decides."""
    if int(offsets[0]) != 0 or int(offsets[-1]) != size:
        yield Violation("OFFSETS_BOUNDS", path, f"string offsets must run from 0 to {size}")
        return
    starts, ends = offsets[:-1], offsets[1:]
    codes = np.zeros(len(starts), np.int8)
    codes[(ends < starts) | (ends > np.uint64(size))] = 1
    long = (codes == 0) & (ends - np.minimum(starts, ends) > np.uint64(spec.MAX_STRING_BYTES))
    codes[long] = 2
    bad = np.flatnonzero(codes)
    if not bad.size:
        return
    i = int(bad[0])
    if codes[i] == 1:
        yield Violation("OFFSETS_NON_MONOTONIC", path, f"string offsets [{int(starts[i])}, "
                        f"{int(ends[i])}) decrease or pass the {size}-byte file", i)
    else:
        yield Violation("LIMIT_EXCEEDED", path, f"string longer than {spec.MAX_STRING_BYTES} "
                        "bytes", i)


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
    # SPEC.md §12: the first failing sample (row) decides, then the first failing rule of it
    found: list[tuple[int, int, Violation]] = []
    m = boxes.shape[1]
    mask = np.arange(m) < counts[:, None]
    x1, y1, x2, y2 = (boxes[..., k] for k in range(4))
    finite = np.isfinite(boxes).all(axis=-1)
    bad = mask & ~(finite & (x1 <= x2) & (y1 <= y2))
    if bad.any():
        row, slot = np.argwhere(bad)[0]
        found.append((int(row), 0, Violation(
            "BOX_INVALID", boxes_path, f"box {int(slot)} is {boxes[row, slot].tolist()} (NaN/inf,"
            " or x2 < x1 / y2 < y1)", int(indices[row]))))
    w = widths[:, None].astype(np.float32)
    h = heights[:, None].astype(np.float32)
    bad = mask & ((x1 < 0) | (y1 < 0) | (x2 > w) | (y2 > h))
    if bad.any():
        row, slot = np.argwhere(bad)[0]
        found.append((int(row), 1, Violation(
            "BOX_OUT_OF_IMAGE", boxes_path, f"box {int(slot)} {boxes[row, slot].tolist()} lies "
            f"outside the {int(widths[row])}x{int(heights[row])} image", int(indices[row]))))
    bad = mask & ((classes < 0) | (classes >= num_classes))
    if bad.any():
        row, slot = np.argwhere(bad)[0]
        found.append((int(row), 2, Violation(
            "CLASS_RANGE", classes_path, f"class id {int(classes[row, slot])} of box "
            f"{int(slot)} outside 0..{num_classes - 1}", int(indices[row]))))
    padding = ~mask
    bad_boxes = padding & (boxes.view(np.uint32) != 0).any(axis=-1)
    bad_classes = padding & (classes != spec.CLASS_PADDING)
    if bad_boxes.any() or bad_classes.any():
        which = bad_boxes | bad_classes
        row, slot = np.argwhere(which)[0]
        path = boxes_path if bad_boxes[row, slot] else classes_path
        found.append((int(row), 3, Violation(
            "MASK_INCONSISTENT", path, f"padding slot {int(slot)} (count {int(counts[row])}) "
            "must hold box +0.0 and class -1", int(indices[row]))))
    for name, (field_path, values) in (box_fields or {}).items():
        bad = padding & (values.view(np.uint8 if values.dtype.itemsize == 1 else np.uint32) != 0)
        if bad.any():
            row, slot = np.argwhere(bad)[0]
            found.append((int(row), 3, Violation(
                "MASK_INCONSISTENT", field_path,
                f"padding slot {int(slot)} of box field {name!r} must be 0", int(indices[row]))))
    for _, _, violation in sorted(found, key=lambda item: item[:2]):
        yield violation


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


def ragged_rows_broken(*, boxes: np.ndarray, classes: np.ndarray, counts: np.ndarray,
                       heights: np.ndarray, widths: np.ndarray, num_classes: int) -> np.ndarray:
    """(B,) bool: which samples break R-37 .. R-39, from their ragged labels (SPEC §10.2).

    ``boxes`` (T', 4) and ``classes`` (T',) hold the valid boxes of the B samples back to back,
    ``counts`` (B,) how many each has; there are no padding slots to check.
    """
    if not len(counts):
        return np.zeros(0, bool)
    counts = counts.astype(np.intp)
    h = np.repeat(heights, counts).astype(np.float32)
    w = np.repeat(widths, counts).astype(np.float32)
    x1, y1, x2, y2 = (boxes[:, k] for k in range(4))
    with np.errstate(invalid="ignore"):  # NaN fails every comparison, infinity a bound
        good = (x1 <= x2) & (y1 <= y2) & (x1 >= 0) & (y1 >= 0) & (x2 <= w) & (y2 <= h)
    good &= (classes >= 0) & (classes < num_classes)
    if good.all():
        return np.zeros(len(counts), bool)
    bad = np.zeros(len(counts), bool)
    bad[np.repeat(np.arange(len(counts)), counts)[~good]] = True
    return bad

