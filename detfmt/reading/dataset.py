"""`Dataset`: the zero-copy, numpy-only reader of one 1.0 dataset, over any member source.

Opening reads header.json and the small .npy headers, checks every count, offset and size
against the real member sizes (in Python ints) and only then maps the members read-only. The
index records, counts and labels are checked in chunks the first time a sample of the chunk is
read (a bitmap remembers which chunks passed), so opening stays O(1), the first batch costs
O(batch), and no unchecked record or label ever reaches the user (R-44); ``verify`` checks
everything. The same class reads a dataset directory and a packed shard file
(`detfmt.reading.sources`); batches of both go through the one gather engine
(`detfmt.reading.gather`).
"""

from __future__ import annotations

import mmap
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from detfmt import errors
from detfmt.format import npy, spec
from detfmt.format import rules as validate
from detfmt.format.records import DatasetSchema, Sample, sample_index
from detfmt.format.schema import Header
from detfmt.order import DEFAULT_SHARD_WINDOW, OrderSpec, default_quasi_block
from detfmt.reading.gather import Gather, single_part
from detfmt.reading.protocol import EpochIteration
from detfmt.reading.sources import DirectorySource, Member, MemberSource

__all__ = ["Dataset"]

# How far a sample has been checked: its record and count, then its labels.
_UNCHECKED, _RECORD, _LABELS, _BROKEN = 0, 1, 2, 3


def _codec_of(header: Header) -> str:
    used = [name for name, count in header.image.codecs.items() if count]
    return used[0] if len(used) == 1 else "mixed"


#: opens of a directory that overwrites keep replacing while it is read (each retry means
#: another complete overwrite happened meanwhile)
_OPEN_ATTEMPTS = 8


class Dataset(EpochIteration):
    """An opened 1.0 dataset: a directory, or a packed shard file. Use :func:`detfmt.open`.

    Thread-safe for reading. Pickling sends only the location and the members' identity; the
    receiver re-opens the dataset and raises `DatasetChangedError` if it was replaced in between.
    """

    def __init__(self, path_or_source: str | os.PathLike[str] | MemberSource, *,
                 max_header_bytes: int = spec.MAX_HEADER_BYTES) -> None:
        self._max_header_bytes = max_header_bytes
        for attempt in range(_OPEN_ATTEMPTS):
            source = (path_or_source if isinstance(path_or_source, MemberSource)
                      else DirectorySource(path_or_source))
            self.source = source
            try:
                self._open(source)
                return
            except errors.DetfmtError:
                # An overwrite exchanged the directory while we read it and is deleting the
                # old files (FILE_MISSING, HEADER_MISSING...): open the new one instead.
                retry = (isinstance(source, DirectorySource) and source.replaced()
                         and attempt + 1 < _OPEN_ATTEMPTS)
                source.close()
                if not retry:
                    raise
            except BaseException:
                source.close()
                raise

    # ------------------------------------------------------------------ opening

    def _open(self, source: MemberSource) -> None:
        header_path = self.member_path(spec.HEADER_FILE)
        header = validate.parse_header(source.read_header(self._max_header_bytes), header_path)
        self.header: Header = header
        members: dict[str, Member] = {}
        for name in validate.expected_files(header):
            member = source.member(name)
            members[name] = member
            declared = header.files[name].size
            if member.size != declared:
                rule = "BLOB_SIZE" if name == spec.BLOB_FILE else "FILE_SIZE"
                raise errors.LayoutError(f"{name} has {member.size} bytes, header says {declared}",
                                         rule=rule, path=member.path)
        source.check_names(members)
        self.members = members
        arrays = {name: self._map_npy(members[name], dtype, shape)
                  for name, (dtype, shape) in validate.expected_arrays(header).items()}
        self.index: np.ndarray = arrays[spec.INDEX_FILE]
        self.counts: np.ndarray = arrays[spec.COUNTS_FILE]
        blob = members[spec.BLOB_FILE]
        for violation in validate.check_index_tail(self.index, header, blob.size, blob.path):
            raise violation.to_error()
        #: The label arrays as stored: (N, M, 4) and (N, M), or (T, 4) and (T,) when `ragged`
        #: (SPEC §10); `label_slots` and ``ds[i]`` read both layouts alike. `boxes`, `classes`
        #: and `box_fields` are the padded layout only.
        self.ragged: bool = header.ragged
        self._starts: np.ndarray | None = None  # S_i of ragged labels, built on first use
        self.stored_boxes: np.ndarray = arrays[spec.BOXES_FILE]
        self.stored_classes: np.ndarray = arrays[spec.CLASSES_FILE]
        self.stored_box_fields: dict[str, np.ndarray] = {
            f.name: arrays[spec.box_field_file(f.name)] for f in header.box_fields}
        self.image_fields: dict[str, np.ndarray] = {
            name: arrays[spec.image_field_array(name)] for name in header.image_fields
            if name not in spec.STRING_FIELDS}
        self._strings: dict[str, tuple[np.ndarray, Member]] = {}
        for name in header.image_fields:
            if name in spec.STRING_FIELDS:
                offsets = arrays[spec.image_field_array(name)]
                text = members[spec.string_field_bytes(name)]
                if int(offsets[0]) != 0 or int(offsets[-1]) != text.size:  # O(1) at open;
                    raise errors.LayoutError(  # each string is checked when read
                        f"string offsets must run from 0 to {text.size}", rule="OFFSETS_BOUNDS",
                        path=members[spec.image_field_array(name)].path)
                self._strings[name] = (offsets, text)
        self.blob_member = blob
        #: images.bin as a flat, read-only uint8 array: a zero-copy view of the reader's own
        #: mapping (the bytes its index checks covered). Sample i is
        #: ``blob[offsets[i] : offsets[i] + nbytes[i]]``; raw payloads are the (H, W, 3) pixels.
        self.blob: np.ndarray = blob.array(np.dtype(np.uint8), blob.size, 0)
        self.offsets = self.index["offset"]
        self.nbytes = self.index["nbytes"]
        self.heights = self.index["height"]
        self.widths = self.index["width"]
        self.codecs = self.index["codec"]
        self.max_boxes = header.max_boxes
        self.fixed_images = self._fixed_images()
        # Records, counts and labels are checked when first used; one byte per sample
        # says how far (zeroed pages: nothing is allocated for samples never read).
        self._state = _zeroed_bytes(len(self.index))
        # Per sample, whether its payload passed the SPEC §9 structure checks in this process:
        # the bytes are immutable once committed, so later reads (`read_image`, the engine's
        # batches) decode without the walk.
        self.payload_checked = _zeroed_bytes(len(self.index))
        self._broken = False  # some sample's labels break a rule
        self._lock = threading.Lock()
        self._sizes: np.ndarray | None = None
        self._pread_fd = -1
        self.ensure_checked(np.arange(min(len(self.index), validate.INDEX_CHUNK)), labels=False)
        self.schema = DatasetSchema(
            classes=list(header.classes), box_fields=list(header.box_fields),
            image_fields=list(header.image_fields),
            fixed_shape=tuple(header.image.fixed_shape) if header.image.fixed_shape else None,
            max_side=header.image.max_side, codec=_codec_of(header))
        self.engine = Gather(single_part(self), self.location)

    def _map_npy(self, member: Member, dtype: str, shape: tuple[int, ...]) -> np.ndarray:
        header = npy.parse_header(member.prefix(spec.MAX_NPY_HEADER_BYTES), member.size,
                                   member.path)
        wanted = spec.INDEX_DTYPE if dtype == "index" else np.dtype(dtype)
        wanted_descr = np.lib.format.dtype_to_descr(wanted)
        if header.descr != wanted_descr:
            raise errors.LayoutError(f"{member.name} has dtype {header.descr!r}, expected "
                                     f"{wanted_descr!r}", rule="NPY_DTYPE", path=member.path)
        if header.shape != shape:
            rule = "COUNT_MISMATCH" if header.shape[:1] != shape[:1] else "NPY_SHAPE"
            raise errors.LayoutError(f"{member.name} has shape {list(header.shape)}, the header "
                                     f"implies {list(shape)}", rule=rule, path=member.path)
        npy.check_layout(header, member.size, member.path)
        count = 1
        for dim in shape:
            count *= dim
        return member.array(wanted, count, header.data_offset).reshape(shape)

    def _fixed_images(self) -> np.ndarray | None:
        shape = self.header.image.fixed_shape
        if shape is None or not len(self.index):
            return None
        h, w, c = shape
        stride = spec.align_up(h * w * c)
        return np.lib.stride_tricks.as_strided(
            self.blob, shape=(len(self.index), h, w, c), strides=(stride, w * c, c, 1),
            writeable=False)

    # ------------------------------------------------------------------ lazy checks

    def ensure_checked(self, rows: np.ndarray, labels: bool = True) -> None:
        """Check the index records and counts, and (``labels``) the labels, of ``rows`` (local
        indices in 0..N-1) before use: each record once (its links to both neighbours included,
        SPEC §8), then a lookup in a per-sample state array. A broken record raises the typed
        error of its rule; a broken label too, naming the first broken sample among ``rows``,
        while the other samples stay readable."""
        if not len(rows):
            return
        need = _LABELS if labels else _RECORD
        state = self._state[rows]
        if (state < need).any():
            todo = np.unique(rows[state < need])
            fresh = todo[self._state[todo] == _UNCHECKED]
            if len(fresh):
                self._check_records(fresh)
            if labels:
                self._check_labels(todo[self._state[todo] == _RECORD])
            state = self._state[rows]
        if labels and self._broken and (state == _BROKEN).any():
            self._blame(rows[state == _BROKEN])

    def _check_row(self, i: int, labels: bool = True) -> None:
        """`ensure_checked` of one row: one lookup once it has been checked."""
        state = self._state[i]
        if state < (_LABELS if labels else _RECORD) or (labels and state == _BROKEN):
            self.ensure_checked(np.array([i]), labels)

    def _check_records(self, rows: np.ndarray) -> None:
        blob = self.blob_member
        if not validate.index_rows_ok(self.index, self.header, blob.size, self.counts,
                                      self.max_boxes, rows):
            # Something is broken (the rare path): name the first broken record among ``rows``
            # with the record-major check of SPEC §8/§12 (each record's rules, then its count;
            # the id does not depend on which records are checked together)
            for row in rows.tolist():
                for violation in validate.check_index(
                        self.index, self.header, blob.size, blob.path, row, row + 1,
                        self.counts[row : row + 1], self.members[spec.COUNTS_FILE].path):
                    raise violation.to_error()
        self._state[rows] = np.maximum(self._state[rows], _RECORD)

    def _check_labels(self, rows: np.ndarray) -> None:
        if not len(rows):
            return
        bad = self._broken_label_rows(rows)
        if bad.any():
            self._broken = True
        self._state[rows] = np.where(bad, _BROKEN, _LABELS)

    def _broken_label_rows(self, rows: np.ndarray) -> np.ndarray:
        """(len(rows),) bool: which of the checked-record ``rows`` break a label rule."""
        if self.ragged:
            counts = self.counts[rows]
            span = self._ragged_rows(rows, counts)
            return validate.ragged_rows_broken(
                boxes=self.stored_boxes[span], classes=self.stored_classes[span], counts=counts,
                heights=self.heights[rows], widths=self.widths[rows],
                num_classes=self.header.num_classes)
        return validate.label_rows_broken(
            boxes=self.stored_boxes[rows], classes=self.stored_classes[rows],
            counts=self.counts[rows],
            heights=self.heights[rows], widths=self.widths[rows],
            num_classes=self.header.num_classes,
            box_fields=[values[rows] for values in self.stored_box_fields.values()])

    def _blame(self, rows: np.ndarray) -> None:
        for violation in self._label_violations(np.unique(rows)[:1]):
            raise violation.to_error()

    def validate_index(self) -> None:
        """Check every index record and count now (reading checks what it uses, lazily)."""
        n = len(self)
        if n and not (self._state >= _RECORD).all():
            self._validate_records(n)
        if self.ragged and self._starts is None:  # SPEC §12 step 4d, after every record
            self._starts = self._count_sum(_ragged_starts(self.counts, self.max_boxes))

    def _validate_records(self, n: int) -> None:
        blob = self.blob_member
        step = max(validate.INDEX_CHUNK, 1 << 16)
        for start in range(0, n, step):
            stop = min(n, start + step)
            for violation in validate.check_index(self.index, self.header, blob.size, blob.path,
                                                  start, stop, self.counts[start:stop],
                                                  self.members[spec.COUNTS_FILE].path):
                raise violation.to_error()
            self._state[start:stop] = np.maximum(self._state[start:stop], _RECORD)

    # ------------------------------------------------------------------ labels (SPEC §10)

    def _label_starts(self) -> np.ndarray:
        """(N + 1,) int64: sample i's ragged labels are rows ``starts[i] : starts[i + 1]``.

        Built once, from every count (each sample's start depends on all counts before it): a
        count out of range, or counts not adding up to num_boxes, is reported after the record
        checks of every sample (SPEC §12 steps 4c, then 4d)."""
        starts = self._starts
        if starts is None:
            starts = _ragged_starts(self.counts, self.max_boxes)
            if starts is None or int(starts[-1]) != self.header.num_boxes:
                self.validate_index()  # raises the first broken record or count, or COUNT_SUM
            starts = self._starts = self._count_sum(starts)
        return starts

    def _count_sum(self, starts: np.ndarray | None) -> np.ndarray:
        """``starts`` once they add up to num_boxes (R-49); counts are known to be in range."""
        total = int(starts[-1]) if starts is not None else None
        if starts is None or total != self.header.num_boxes:
            raise errors.LabelError(
                f"the box counts add up to {total}, the header's num_boxes is "
                f"{self.header.num_boxes}", rule="COUNT_SUM",
                path=self.members[spec.COUNTS_FILE].path)
        return starts

    @property
    def boxes(self) -> np.ndarray:
        """The (N, M, 4) float32 boxes as stored, padded (zero-copy, unchecked: ``ds[i]`` and
        `labels` check them). A ragged dataset stores no such array, and indexing its flat rows
        as (sample, slot) would give wrong boxes silently, so this refuses it."""
        self._padded_layout("boxes")
        return self.stored_boxes

    @property
    def classes(self) -> np.ndarray:
        """The (N, M) int32 class ids as stored, padded with -1; see `boxes`."""
        self._padded_layout("classes")
        return self.stored_classes

    @property
    def box_fields(self) -> dict[str, np.ndarray]:
        """The per-box fields as stored, (N, M) each; see `boxes`."""
        self._padded_layout("box_fields")
        return self.stored_box_fields

    def _padded_layout(self, name: str) -> None:
        if self.ragged:
            raise errors.UsageError(
                f"ds.{name} is the stored padded (N, M) array, and this dataset stores ragged "
                f"labels (one row per box, SPEC §10): call ds.ragged_labels() (rows with "
                f"offsets) or ds.labels() (padded arrays, materialised); both work on every "
                f"dataset and layout (the raw rows: ds.stored_{name} with ds.counts)",
                rule="RAGGED_LABELS", path=self.path)

    def _ragged_rows(self, rows: np.ndarray, counts: np.ndarray) -> slice | np.ndarray:
        """Where the ragged labels of ``rows`` lie, back to back: a slice when the rows are
        consecutive (no gather), else an index array."""
        starts = self._label_starts()
        if not len(rows):
            return slice(0, 0)
        first, last = int(rows[0]), int(rows[-1])
        if last - first == len(rows) - 1 and (len(rows) == 1 or (np.diff(rows) == 1).all()):
            return slice(int(starts[first]), int(starts[last + 1]))
        wide = counts.astype(np.intp)
        ends = np.cumsum(wide)
        return np.repeat(starts[rows] - (ends - wide), wide) + np.arange(int(ends[-1]))

    def label_slots(self, rows: np.ndarray, m: int
                    ) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
        """The labels of the checked local ``rows`` in ``m`` slots (``m`` at least their largest
        count): boxes (b, m, 4), classes (b, m) and per-box fields (b, m), padded with +0.0,
        -1 and 0. Both layouts give the same arrays (SPEC §10.2)."""
        if not self.ragged:
            if m <= self.max_boxes:  # the stored padding is the padding
                return (self.stored_boxes[rows, :m], self.stored_classes[rows, :m],
                        {name: values[rows, :m] for name, values in self.stored_box_fields.items()})
            boxes, classes, fields = self._empty_slots(len(rows), m)
            mk = self.max_boxes
            boxes[:, :mk] = self.stored_boxes[rows]
            classes[:, :mk] = self.stored_classes[rows]
            for name, values in fields.items():
                values[:, :mk] = self.stored_box_fields[name][rows]
            return boxes, classes, fields
        if not len(self.stored_classes):  # T = 0: nothing to gather
            return self._empty_slots(len(rows), m)
        # slot s of row r reads ragged row starts[r] + s; slots past the count read row 0 (one
        # exists: T >= 1) and are then set to the padding values
        slots = np.arange(m)
        padding = slots >= self.counts[rows][:, None]
        where = self._label_starts()[rows][:, None] + slots
        where[padding] = 0
        boxes = self.stored_boxes.take(where, axis=0)
        classes = self.stored_classes.take(where)
        boxes[padding] = 0.0
        classes[padding] = spec.CLASS_PADDING
        fields = {}
        for name, values in self.stored_box_fields.items():
            fields[name] = values.take(where)
            fields[name][padding] = 0
        return boxes, classes, fields

    def _empty_slots(self, b: int, m: int
                     ) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
        return (np.zeros((b, m, 4), np.float32), np.full((b, m), spec.CLASS_PADDING, np.int32),
                {name: np.zeros((b, m), values.dtype)
                 for name, values in self.stored_box_fields.items()})

    def _label_violations(self, rows: np.ndarray) -> Iterator[validate.Violation]:
        paths = (self.members[spec.BOXES_FILE].path, self.members[spec.CLASSES_FILE].path)
        if self.ragged:  # name the rules on the broken samples only, re-padded
            rows = rows[self._broken_label_rows(rows)]
            boxes, classes, fields = self.label_slots(
                rows, int(self.counts[rows].max()) if len(rows) else 0)
        else:
            boxes, classes = self.stored_boxes[rows], self.stored_classes[rows]
            fields = {name: values[rows] for name, values in self.stored_box_fields.items()}
        return validate.check_labels(
            boxes=boxes, classes=classes, counts=self.counts[rows],
            heights=self.heights[rows], widths=self.widths[rows],
            num_classes=self.header.num_classes, indices=rows, paths=paths,
            box_fields={name: (self.members[spec.box_field_file(name)].path, values)
                        for name, values in fields.items()})

    def iter_label_violations(self, block: int = 4096) -> Iterator[validate.Violation]:
        """Check the labels of every sample, ``block`` samples at a time (bounded memory)."""
        n = len(self)
        for start in range(0, n, block):
            yield from self._label_violations(np.arange(start, min(n, start + block)))

    # ------------------------------------------------------------------ access

    def __len__(self) -> int:
        return self.header.num_samples

    @property
    def location(self) -> str:
        return self.source.location

    @property
    def path(self) -> Path:
        """The dataset directory or shard file."""
        return Path(self.source.location)

    def member_path(self, name: str) -> str:
        """Where member ``name`` lives, for messages (``<shard>#<name>`` inside a shard)."""
        if isinstance(self.source, DirectorySource):
            return str(self.path / name)
        return f"{self.location}#{name}"

    @property
    def format_version(self) -> str:
        return self.header.version

    def codec_counts(self) -> dict[str, int]:
        return {name: int(count) for name, count in self.header.image.codecs.items() if count}

    def disk_usage(self) -> dict[str, int]:
        files = {name: member.size for name, member in self.members.items()}
        files[spec.HEADER_FILE] = len(self.source.read_header(self._max_header_bytes))
        return files

    @property
    def class_names(self) -> list[str]:
        return self.header.class_names

    @property
    def metadata(self) -> dict[str, str]:
        return dict(self.header.metadata)

    @property
    def sizes(self) -> np.ndarray:
        """(N, 2) int32 stored (height, width) of every image."""
        if self._sizes is None:
            self.validate_index()
            self._sizes = np.stack([self.heights, self.widths], axis=1).astype(np.int32)
        return self._sizes

    @property
    def blob_path(self) -> str:
        return self.blob_member.path

    def _row(self, index: Any) -> int:
        i = sample_index(index, len(self), self.location)
        self._check_row(i, labels=False)
        return i

    def image_shape(self, index: int) -> tuple[int, int, int]:
        i = self._row(index)
        return int(self.heights[i]), int(self.widths[i]), spec.CHANNELS

    def codec(self, index: int) -> str:
        """The codec name of one sample's stored payload."""
        return spec.CODEC_NAMES[int(self.codecs[self._row(index)])]

    def payload(self, index: int) -> memoryview:
        """The stored bytes of one sample, as written (a zero-copy read-only view): what a copy
        that keeps payloads byte for byte (no re-encode) needs, with `codec`."""
        i = self._row(index)
        start = int(self.offsets[i])
        return memoryview(self.blob[start : start + int(self.nbytes[i])])

    def payload_checksum(self, index: int) -> int:
        """The XXH3-64 stored for one sample's payload (a copy checks the bytes against it)."""
        return int(self.index["checksum"][self._row(index)])

    def decode_into(self, index: int, out: np.ndarray) -> None:
        """Decode sample ``index`` into ``out``, an (H, W, 3) uint8 array or view."""
        i = self._row(index)
        h, w = int(self.heights[i]), int(self.widths[i])
        if out.shape != (h, w, 3) or out.dtype != np.uint8:
            raise errors.UsageError(f"out must be uint8 {(h, w, 3)}, got {out.dtype} {out.shape}")
        self.read_into(i, out)

    def read_into(self, i: int, out: np.ndarray) -> None:
        """Decode checked row ``i`` into ``out`` (h, w, 3), possibly a strided view."""
        from detfmt.format import codecs

        codec = int(self.codecs[i])
        start = int(self.offsets[i])
        if codec == spec.CODEC_RAW:
            h, w = out.shape[0], out.shape[1]
            np.copyto(out, self.blob[start : start + h * w * 3].reshape(h, w, 3))
            return
        payload = self.blob[start : start + int(self.nbytes[i])]
        checked = bool(self.payload_checked[i])
        codecs.decode_into(payload, codec, out, path=self.blob_path, index=i,
                           structure_checked=checked)
        if not checked:
            self.payload_checked[i] = 1

    def read_image(self, index: int) -> np.ndarray:
        """The image of one sample: a read-only zero-copy view for raw, a new array otherwise."""
        return self._image(self._row(index))

    def _image(self, i: int) -> np.ndarray:
        h, w = int(self.heights[i]), int(self.widths[i])
        if int(self.codecs[i]) == spec.CODEC_RAW:
            start = int(self.offsets[i])
            return self.blob[start : start + h * w * 3].reshape(h, w, 3)
        out = np.empty((h, w, 3), np.uint8)
        self.read_into(i, out)
        return out

    def image_field(self, name: str) -> np.ndarray:
        """Per-image field ``name`` of every sample (a read-only mapped view)."""
        if name not in self.image_fields:
            raise errors.UsageError(f"the dataset has no per-image field {name!r} (it has "
                                    f"{sorted(self.header.image_fields)})", path=self.location)
        return self.image_fields[name]

    def string_offsets(self, name: str) -> np.ndarray:
        """The (N + 1,) byte offsets of string field ``name`` (checked per string when read)."""
        if name not in self._strings:
            raise errors.UsageError(f"the dataset has no string field {name!r}",
                                    path=self.location)
        return self._strings[name][0]

    def string_field(self, name: str, index: int) -> str:
        if name not in self._strings:
            raise errors.UsageError(f"the dataset has no string field {name!r}",
                                    path=self.location)
        return self._string(name, sample_index(index, len(self), self.location))

    def _string(self, name: str, i: int) -> str:
        offsets, member = self._strings[name]
        start, end = int(offsets[i]), int(offsets[i + 1])
        if not start <= end <= member.size:
            raise errors.LayoutError(f"{name} offsets [{start}, {end}) are decreasing or past the "
                                     f"{member.size}-byte file", rule="OFFSETS_NON_MONOTONIC",
                                     path=self.member_path(spec.image_field_array(name)), index=i)
        if end - start > spec.MAX_STRING_BYTES:
            raise errors.LayoutError(f"{name} is {end - start} bytes, over the "
                                     f"{spec.MAX_STRING_BYTES}-byte limit", rule="LIMIT_EXCEEDED",
                                     path=self.member_path(spec.image_field_array(name)), index=i)
        try:
            return member.slice(start, end).decode("utf-8")
        except UnicodeDecodeError as error:
            raise errors.LabelError(f"{name} is not valid UTF-8", rule="IMAGE_FIELD",
                                    path=member.path, index=i) from error

    def __getitem__(self, index: int) -> Sample:  # type: ignore[override]
        if isinstance(index, slice):
            raise errors.UsageError("use ds.batch(indices) to read several samples")
        i = sample_index(index, len(self), self.location)
        self._check_row(i)
        count = int(self.counts[i])
        if self.ragged:
            start = int(self._label_starts()[i])
            span: Any = slice(start, start + count)
        else:
            span = (i, slice(0, count))
        fields_ = {name: values[span].copy() for name, values in self.stored_box_fields.items()}
        for name, values in self.image_fields.items():
            fields_[name] = values[i].copy()
        for name in self._strings:
            fields_[name] = self._string(name, i)
        return Sample(index=i, image=self._image(i), boxes=self.stored_boxes[span].copy(),
                      classes=self.stored_classes[span].copy(), fields=fields_)

    def part_ranges(self) -> list[tuple[int, int]]:
        return [(0, len(self))] if len(self) else []

    def order_spec(self, order: str = "random", *, shard_window: int = DEFAULT_SHARD_WINDOW,
                   quasi_block: int | None = None, quasi_window: int = 8) -> OrderSpec:
        """The order of a 1.0 dataset: O-3 (``"random"``), O-4 (``"quasi_random"``: blocks of
        ``quasi_block`` samples, default about 8 MiB of payload, shuffled in windows of
        ``quasi_window`` blocks) or ``"sequential"``; ``shard_window`` does not apply."""
        if quasi_block is None:
            quasi_block = default_quasi_block(self.nbytes) if order == "quasi_random" else 32
        return OrderSpec(len(self), order, None, shard_window, quasi_block, quasi_window)

    # ------------------------------------------------------------------ pread

    def pread_fd(self) -> int:
        """A descriptor of the file holding images.bin, verified to be the one mapped at open,
        shared by all threads (positional reads only); closed by `close`."""
        with self._lock:
            if self._pread_fd < 0:
                self._pread_fd = self.blob_member.open_pread()
            return self._pread_fd

    # ------------------------------------------------------------------ lifecycle

    def check(self) -> None:
        """Raise `DatasetChangedError` if any member was replaced or truncated since opening.

        Committed files are never modified in place, so a changed identity means someone replaced
        the dataset (this mapping still reads the old, intact files) or damaged it.
        """
        self.source.check_unchanged()

    @property
    def generation(self) -> tuple:
        """The identity of every member, as captured at open."""
        return self.source.generation

    def close(self) -> None:
        """Drop the mappings (arrays already handed out keep them alive)."""
        self.members = {}
        if self._pread_fd >= 0:
            os.close(self._pread_fd)
            self._pread_fd = -1
        self.source.close()

    def __enter__(self) -> Dataset:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        if getattr(self, "_pread_fd", -1) >= 0:
            os.close(self._pread_fd)

    def __reduce__(self):
        return (_reopen, (self.source.reopen_spec(), self._max_header_bytes, self.generation))

    def __repr__(self) -> str:
        return (f"detfmt.Dataset({self.location!r}, samples={len(self)}, "
                f"classes={self.header.num_classes}, max_boxes={self.header.max_boxes})")


def _zeroed_bytes(n: int) -> np.ndarray:
    """``n`` zero bytes whose pages the kernel allocates on first write, one small page each.
    numpy asks for huge pages for large arrays, so the first writes to a few scattered samples
    (the first batch after open) could each wait for the kernel to find or compact a 2 MiB page;
    a private anonymous mapping keeps that cost to a small-page fault per page touched."""
    flags = getattr(mmap, "MAP_PRIVATE", 0) | getattr(mmap, "MAP_ANONYMOUS", 0)
    if n < 1 << 22 or not hasattr(mmap, "MAP_ANONYMOUS"):
        return np.zeros(n, np.uint8)
    return np.frombuffer(mmap.mmap(-1, n, flags=flags), np.uint8)


def _ragged_starts(counts: np.ndarray, max_boxes: int, chunk: int = 1 << 20
                   ) -> np.ndarray | None:
    """(N + 1,) int64 running sums of ``counts``, or None if a count is outside 0..M (a sum of
    unchecked counts means nothing). Chunked: bounded temporaries for any N."""
    n = len(counts)
    starts = np.zeros(n + 1, np.int64)
    for lo in range(0, n, chunk):
        part = counts[lo : lo + chunk]
        if ((part < 0) | (part > max_boxes)).any():
            return None
        np.cumsum(part, dtype=np.int64, out=starts[lo + 1 : lo + 1 + len(part)])
        starts[lo + 1 : lo + 1 + len(part)] += starts[lo]
    return starts


def _reopen(source: tuple[Any, tuple], max_header_bytes: int, generation: tuple) -> Dataset:
    opener, args = source
    dataset = Dataset(opener(*args), max_header_bytes=max_header_bytes)
    if dataset.generation != generation:
        raise errors.DatasetChangedError("the dataset was replaced since it was pickled",
                                         path=dataset.location)
    return dataset
