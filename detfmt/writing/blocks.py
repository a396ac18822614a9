"""Small raw arrays read in blocks and checked together: the writer's path for tiny samples.

Why: for a sample of a few hundred bytes, the per-sample Python of `prepare` and
`DatasetBuilder.append` (a dozen numpy calls, a record, a `Prepared`) costs far more than its
bytes. Here a sample that needs nothing but checks (a uint8 (H, W, 3) array stored raw at its
size, numeric labels, a plain file_name and source_id) costs a few copies into lists; the labels
of a whole block are checked at once with numpy, and the block is appended as columns.

Every rule is still checked for every sample, and an error still names its sample: a sample
whose labels the block cannot accept plainly (something to clamp or clip, or an error to name)
goes through `check_labels` with its own index, and a sample that does not fit a block at all (a
path, a PIL image, orig_size, a large image...) through `prepare` itself, after the samples read
before it. Pixels and labels are copied as they are read, so a caller may reuse its buffers
between samples, as with `prepare`.
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
import xxhash

from detfmt import fileio
from detfmt.errors import InvalidSampleError
from detfmt.format import spec
from detfmt.writing.prepare import _IDENTITY, Prepared, Rules, check_labels, prepare

__all__ = ["Block", "applies", "blocked_stream"]

BLOCK_SAMPLES = 4096  # samples read before their labels are checked together
BLOCK_BYTES = 1 << 20  # pixel bytes read before that
#: payloads from this size go the per-sample path, written from the caller's buffer (no copy);
#: below 3 * MAX_SIDE bytes, no side of an RGB image can exceed MAX_SIDE either
LARGE_PAYLOAD = min(fileio.OutputFile.DIRECT, spec.CHANNELS * spec.MAX_SIDE)
#: blocks of fewer samples are appended one by one (numpy's per-call cost would dominate)
MIN_BLOCK = 8
_U8, _F64, _I64 = np.dtype(np.uint8), np.dtype(np.float64), np.dtype(np.int64)
_ZEROS = bytes(spec.ALIGNMENT)
_INT64 = (-(1 << 63), (1 << 63) - 1)
_first, _second = operator.itemgetter(0), operator.itemgetter(1)
_FULL: tuple[int, Any] = (-1, None)  # what `_read_block` returns when the block is full


def applies(rules: Rules) -> bool:
    """Whether samples may take this path: raw payloads at their input size, no per-box fields
    (anything else encodes, resizes or checks per field, per sample)."""
    return (rules.codec_id == spec.CODEC_RAW and rules.as_given and not rules.fields
            and rules.pixel_limit is None)


@dataclasses.dataclass(slots=True)
class Block:
    """Consecutive valid samples as columns, in stored form: payloads back to back, each padded
    to the format's alignment."""

    pixels: memoryview
    offsets: np.ndarray  # (n,) int64: each payload's start in ``pixels``
    nbytes: np.ndarray  # (n,) int64: each payload's size (unpadded)
    sizes: np.ndarray  # (n, 2) int64: height, width
    checksums: np.ndarray  # (n,) uint64: XXH3-64 of each payload
    counts: np.ndarray  # (n,) int64: boxes per sample
    starts: np.ndarray  # (n,) int64: each sample's first box in ``boxes``
    boxes: np.ndarray  # (T, 4) float32
    classes: np.ndarray  # (T,) int32
    source_ids: np.ndarray  # (n,) int64
    names: bytes  # file names back to back (UTF-8)
    name_ends: np.ndarray  # (n,) int64: where each name ends in ``names``
    clipped: int

    def __len__(self) -> int:
        return len(self.counts)


class _Read:
    """The samples of one block as read: copies of their pixels and labels."""

    def __init__(self, first: int) -> None:
        self.first = first  # input index of the first sample
        self.payloads: list[bytes] = []
        self.shapes: list[tuple[int, int, int]] = []
        self.counts: list[int] = []
        self.boxes: list[bytes] = []  # float64, of the samples with boxes
        self.classes: list[bytes] = []  # int64, of the samples with boxes
        self.names: list[bytes] = []
        self.source_ids: list[int] = []


def blocked_stream(samples: Iterable[Any], rules: Rules) -> Iterator[tuple[int, Any]]:
    """(index, Block, Prepared or InvalidSampleError) for every input sample, in order: a
    Block stands for its samples from ``index`` on."""
    iterator = enumerate(samples)
    first = 0
    while True:
        read = _Read(first)
        try:
            odd = _read_block(iterator, read)
        except Exception:
            # the input itself failed: the samples read before come first (an invalid one among
            # them is the error to report, as it would have been without blocks); Ctrl-C and
            # SIGTERM (BaseExceptions) stop at once
            yield from _outcomes(read, rules)
            raise
        yield from _outcomes(read, rules)
        if odd is None:
            return
        if odd is _FULL:
            first += len(read.counts)
            continue
        index, sample = odd
        try:
            outcome: Prepared | InvalidSampleError = prepare(index, sample, rules)
        except InvalidSampleError as error:
            outcome = error
        yield index, outcome
        first = index + 1


def _read_block(iterator: Iterator[tuple[int, Any]], read: _Read) -> tuple[int, Any] | None:
    """Read samples into ``read`` until the block is full (`_FULL`), the input ends (None), or
    a sample does not fit a block ((index, sample), not read into it)."""
    payloads, shapes, counts = read.payloads.append, read.shapes.append, read.counts.append
    boxes, classes = read.boxes.append, read.classes.append
    names, source_ids = read.names.append, read.source_ids.append
    ndarray, asarray = np.ndarray, np.asarray
    u8, f64, i64 = _U8, _F64, _I64
    low, high = _INT64
    max_name, large = spec.MAX_STRING_BYTES, LARGE_PAYLOAD
    left, room = BLOCK_SAMPLES, BLOCK_BYTES
    for index, sample in iterator:
        # checks and copies into locals first: a sample that does not fit leaves no trace
        try:
            if type(sample) is not dict:
                return index, sample
            image, raw_boxes, raw_classes = sample["image"], sample["boxes"], sample["classes"]
            name = sample.get("file_name")
            source_id = sample.get("source_id")
            # no other key (orig_size, a per-box field, a typo...): `prepare` handles those
            if len(sample) != 3 + (name is not None) + (source_id is not None):
                return index, sample
            if type(image) is not ndarray or image.dtype is not u8:
                return index, sample
            shape = image.shape
            height, width, channels = shape
            nbytes = height * width * channels
            if channels != 3 or not 0 < nbytes < large:  # (so 0 < each side < MAX_SIDE)
                return index, sample
            label_ids = raw_classes if type(raw_classes) is ndarray else asarray(raw_classes)
            count = len(label_ids)
            if count:
                kind = label_ids.dtype
                if kind is not i64:
                    if kind.kind not in "iu":
                        return index, sample
                    label_ids = label_ids.astype(i64)
                label_boxes = raw_boxes if type(raw_boxes) is ndarray else asarray(raw_boxes, f64)
                if label_ids.ndim != 1 or label_boxes.shape != (count, 4):
                    return index, sample
                if label_boxes.dtype is not f64:
                    label_boxes = label_boxes.astype(f64)
                box_bytes, class_bytes = label_boxes.tobytes(), label_ids.tobytes()
            elif (raw_boxes.size if type(raw_boxes) is ndarray else len(raw_boxes)) or \
                    label_ids.ndim != 1:
                return index, sample
            if name is None:
                name = b""
            elif type(name) is str:
                name = name.encode("utf-8")
                if len(name) > max_name:
                    return index, sample
            else:
                return index, sample
            if source_id is None:
                source_id = -1
            elif type(source_id) is not int or not low <= source_id <= high:
                return index, sample
            payload = image.tobytes()
        except Exception:  # `prepare` names what is wrong, or raises it as before
            return index, sample
        payloads(payload)
        shapes(shape)
        counts(count)
        if count:
            boxes(box_bytes)
            classes(class_bytes)
        names(name)
        source_ids(source_id)
        room -= nbytes
        left -= 1
        if not left or room <= 0:
            return _FULL
    return None


def _outcomes(read: _Read, rules: Rules) -> Iterator[tuple[int, Any]]:
    """The read samples as Blocks of valid ones, and each invalid one's error, in order."""
    n, first = len(read.counts), read.first
    if n < MIN_BLOCK:
        for j in range(n):
            yield first + j, _one(read, j, rules)
        return
    sizes = np.empty((n, 2), np.int64)
    sizes[:, 0], sizes[:, 1] = list(map(_first, read.shapes)), list(map(_second, read.shapes))
    counts = np.array(read.counts, np.int64)
    ends = np.cumsum(counts)
    starts = ends - counts
    boxes = np.frombuffer(b"".join(read.boxes), np.float64).reshape(-1, 4)
    classes = np.frombuffer(b"".join(read.classes), np.int64)
    flagged = _flagged(sizes, counts, ends, boxes, classes, rules.num_classes)
    stored_boxes, stored_classes = boxes.astype(np.float32), classes.astype(np.int32)
    clipped = np.zeros(n, np.int64)
    columns = _Columns(read, sizes, counts, starts, stored_boxes, stored_classes, clipped)
    begin = 0
    for j in flagged.tolist():
        start, stop = int(starts[j]), int(ends[j])
        height, width = int(sizes[j, 0]), int(sizes[j, 1])
        try:
            fixed, ids, clipped[j] = check_labels(boxes[start:stop], classes[start:stop],
                                                  height, width, first + j, rules)
        except InvalidSampleError as error:
            if j > begin:
                yield first + begin, columns.block(begin, j)
            yield first + j, error
            begin = j + 1
            continue
        stored_boxes[start:stop], stored_classes[start:stop] = fixed, ids
    if begin < n:
        yield first + begin, columns.block(begin, n)


def _flagged(sizes: np.ndarray, counts: np.ndarray, ends: np.ndarray, boxes: np.ndarray,
             classes: np.ndarray, num_classes: int) -> np.ndarray:
    """The samples (sorted positions) whose labels are not plainly valid: a class id out of
    range, or a box not finite xyxy with 0 <= x1 <= x2 <= width and 0 <= y1 <= y2 <= height
    (NaN fails every comparison), or more boxes than the format allows."""
    heights, widths = np.repeat(sizes[:, 0], counts), np.repeat(sizes[:, 1], counts)
    x1, y1, x2, y2 = boxes[:, 0], boxes[:, 1], boxes[:, 2], boxes[:, 3]
    valid = (classes >= 0) & (classes < num_classes)
    valid &= (x1 >= 0.0) & (x1 <= x2) & (x2 <= widths)
    valid &= (y1 >= 0.0) & (y1 <= y2) & (y2 <= heights)
    flagged = counts > spec.MAX_BOXES
    bad = np.flatnonzero(~valid)
    if bad.size:
        flagged[np.searchsorted(ends, bad, side="right")] = True  # the samples owning them
    return np.flatnonzero(flagged)


class _Columns:
    """A read block's columns, cut into Blocks of consecutive valid samples."""

    def __init__(self, read: _Read, sizes: np.ndarray, counts: np.ndarray, starts: np.ndarray,
                 boxes: np.ndarray, classes: np.ndarray, clipped: np.ndarray) -> None:
        self.sizes, self.counts, self.starts = sizes, counts, starts
        self.boxes, self.classes, self.clipped = boxes, classes, clipped
        self.nbytes = sizes[:, 0] * sizes[:, 1] * spec.CHANNELS
        padded = self.nbytes + (-self.nbytes % spec.ALIGNMENT)
        self.offsets = np.cumsum(padded) - padded
        self.pixels = memoryview(_joined(read.payloads, self.nbytes, padded))
        self.checksums = np.array(list(map(xxhash.xxh3_64_intdigest, read.payloads)), np.uint64)
        self.source_ids = np.array(read.source_ids, np.int64)
        self.names = read.names
        self.name_ends = np.cumsum(np.fromiter(map(len, read.names), np.int64, len(read.names)))

    def block(self, begin: int, end: int) -> Block:
        boxes_from = int(self.starts[begin])
        boxes_to = int(self.starts[end - 1] + self.counts[end - 1])
        pixels_from = int(self.offsets[begin])
        pixels_to = int(self.offsets[end - 1] + self.nbytes[end - 1])
        pixels_to += -pixels_to % spec.ALIGNMENT
        names_from = int(self.name_ends[begin - 1]) if begin else 0
        return Block(
            pixels=self.pixels[pixels_from:pixels_to],
            offsets=self.offsets[begin:end] - pixels_from,
            nbytes=self.nbytes[begin:end], sizes=self.sizes[begin:end],
            checksums=self.checksums[begin:end], counts=self.counts[begin:end],
            starts=self.starts[begin:end] - boxes_from,
            boxes=self.boxes[boxes_from:boxes_to], classes=self.classes[boxes_from:boxes_to],
            source_ids=self.source_ids[begin:end],
            names=b"".join(self.names[begin:end]),
            name_ends=self.name_ends[begin:end] - names_from,
            clipped=int(self.clipped[begin:end].sum()))


def _joined(payloads: list[bytes], nbytes: np.ndarray, padded: np.ndarray) -> bytes:
    """The payloads back to back, each followed by zeros up to the alignment."""
    if np.array_equal(nbytes, padded):
        return b"".join(payloads)
    parts = []
    for payload, pad in zip(payloads, (padded - nbytes).tolist(), strict=True):
        parts.append(payload)
        parts.append(_ZEROS[:pad])
    return b"".join(parts)


def _one(read: _Read, j: int, rules: Rules) -> Prepared | InvalidSampleError:
    """Sample ``j`` of a small block, prepared alone."""
    index = read.first + j
    count = read.counts[j]
    if count:
        k = sum(1 for c in read.counts[:j] if c)  # the label lists hold samples with boxes
        raw_boxes = np.frombuffer(read.boxes[k], np.float64).reshape(-1, 4)
        raw_classes = np.frombuffer(read.classes[k], np.int64)
    else:
        raw_boxes, raw_classes = np.zeros((0, 4)), np.zeros(0, np.int64)
    height, width = read.shapes[j][0], read.shapes[j][1]
    try:
        boxes, classes, clipped = check_labels(raw_boxes, raw_classes, height, width, index,
                                               rules)
    except InvalidSampleError as error:
        return error
    payload = read.payloads[j]
    return Prepared(payload, height, width, spec.CODEC_RAW, xxhash.xxh3_64_intdigest(payload),
                    boxes, classes, (), (height, width), _IDENTITY, read.source_ids[j],
                    read.names[j], clipped)
