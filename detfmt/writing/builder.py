"""Appending prepared samples to a sink, then writing the label members once, in bounded memory.

The images stream into ``images.bin`` as samples arrive. Everything else is per-sample records
(index, counts, sizes, names...) and flat labels (K boxes per sample) that cannot be placed until
N and the largest box count M are known: they are gathered per block of samples into spools that
stay in memory up to a budget and then move to nameless scratch files (nothing to clean up after
a crash). At the end each member is written exactly once, the padded (N, M) label arrays in
chunks of bounded size, and header.json last, with every member's size and digest.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence

import numpy as np

from detfmt import fileio
from detfmt.errors import UsageError
from detfmt.format import members, spec
from detfmt.format.schema import ClassInfo, FileInfo, Header
from detfmt.writing.blocks import Block
from detfmt.writing.options import WriteOptions
from detfmt.writing.prepare import _IDENTITY, Prepared
from detfmt.writing.sink import Sink

__all__ = ["DatasetBuilder"]

BLOCK = 4096  # samples gathered in Python lists before they become spool bytes
SPOOL_MEMORY = 32 << 20  # spool bytes kept in memory before they move to scratch files
SPOOL_BUFFER = 1 << 20  # after that, each spool buffers this much before a write
CHUNK_BYTES = 4 << 20  # read and pad labels in chunks of about this size
CHUNK_ROWS = 1 << 16


class _Spools:
    """Spools that share one memory budget; past it, every spool moves to a scratch file for
    good (each then buffers at most ``SPOOL_BUFFER``: memory stays flat, and no large buffer is
    allocated and freed over and over, which the allocator would not give back)."""

    def __init__(self, directory: str, budget: int) -> None:
        self.directory = directory
        self.budget = budget
        self.in_memory = 0
        self.spilled = False
        self.spools: list[_Spool] = []

    def new(self) -> _Spool:
        spool = _Spool(self)
        self.spools.append(spool)
        return spool

    def spill(self) -> None:
        self.spilled = True
        for spool in self.spools:
            spool.spill()
        self.in_memory = 0

    def close(self) -> None:
        for spool in self.spools:
            spool.close()


class _Spool:
    """Bytes appended in order: in memory, then (after a spill) in a nameless scratch file."""

    def __init__(self, owner: _Spools) -> None:
        self.owner = owner
        self.memory = bytearray()
        self.fd = -1
        self.in_file = 0
        self.size = 0

    def append(self, data: np.ndarray | bytes) -> None:
        view = memoryview(data).cast("B") if isinstance(data, np.ndarray) else data
        self.memory += view
        self.size += len(view)
        if self.owner.spilled:
            if len(self.memory) >= SPOOL_BUFFER:
                self.spill()
            return
        self.owner.in_memory += len(view)
        if self.owner.in_memory > self.owner.budget:
            self.owner.spill()

    def spill(self) -> None:
        if not self.memory:
            return
        if self.fd < 0:
            self.fd = fileio.anonymous_file(self.owner.directory)
        fileio.write_all(self.fd, self.memory, self.in_file)
        self.in_file += len(self.memory)
        self.memory = bytearray()

    def reader(self) -> _SpoolReader:
        return _SpoolReader(self)

    def chunks(self, size: int | None = None) -> Iterator[memoryview | bytes]:
        size = size or CHUNK_BYTES
        reader = self.reader()
        for start in range(0, self.size, size):
            yield reader.read(min(size, self.size - start))

    def close(self) -> None:
        self.memory = bytearray()
        if self.fd >= 0:
            fd, self.fd = self.fd, -1
            os.close(fd)


class _SpoolReader:
    """Reads a spool from its start, in pieces of any size."""

    def __init__(self, spool: _Spool) -> None:
        self.spool = spool
        self.position = 0

    def read(self, nbytes: int) -> memoryview | bytes:
        spool, start = self.spool, self.position
        self.position += nbytes
        if start >= spool.in_file:  # all in memory: a view, no copy
            begin = start - spool.in_file
            return memoryview(spool.memory)[begin : begin + nbytes]
        parts = []
        end = min(start + nbytes, spool.in_file)
        while start < end:
            got = os.pread(spool.fd, end - start, start)
            if not got:
                raise OSError(f"scratch file ended at {start} of {spool.in_file} bytes")
            parts.append(got)
            start += len(got)
        parts.append(bytes(spool.memory[: self.position - spool.in_file]) if
                     self.position > spool.in_file else b"")
        return b"".join(parts)


class DatasetBuilder:
    """Appends `Prepared` samples to a sink (`detfmt.writing.sink`) and finalizes the dataset."""

    def __init__(self, sink: Sink, options: WriteOptions, *,
                 spool_memory: int | None = None) -> None:
        self.sink = sink
        self.options = options
        self.blob: fileio.OutputFile = sink.blob
        self._spools = _Spools(sink.scratch_dir, spool_memory or SPOOL_MEMORY)
        new = self._spools.new
        self.index, self.counts, self.orig_size = new(), new(), new()
        self.scale_offset, self.source_id, self.names, self.name_ends = new(), new(), new(), new()
        self.boxes, self.classes = new(), new()
        self.fields = [new() for _ in options.box_fields]
        self.name_ends.append(np.zeros(1, np.uint64))
        self.n = 0
        self.max_boxes = 0
        self.num_boxes = 0
        self.ragged = False  # decided at finalize, from N, M and T (WriteOptions.labels)
        self.clipped = 0
        self.codec_counts = [0] * len(spec.CODEC_IDS)
        self.shape: tuple[int, int] | None = None
        self.same_shape = True
        self._name_end = 0
        self._reset_block()

    def _reset_block(self) -> None:
        self._records: list[tuple] = []
        self._counts: list[int] = []
        self._boxes: list[np.ndarray] = []
        self._classes: list[np.ndarray] = []
        self._fields: list[list[np.ndarray]] = [[] for _ in self.fields]
        self._orig: list[tuple[int, int]] = []
        self._scale: list[tuple[float, ...]] = []
        self._source: list[int] = []
        self._names: list[bytes] = []
        self._ends: list[int] = []

    def append(self, item: Prepared) -> None:
        if self.n >= spec.MAX_SAMPLES:
            raise UsageError(f"more than {spec.MAX_SAMPLES} samples")
        payload = item.payload
        nbytes = len(payload) if isinstance(payload, bytes) else payload.nbytes
        offset = self.blob.size
        self.blob.write(payload, -nbytes % spec.ALIGNMENT)
        height, width = item.height, item.width
        self._records.append((offset, nbytes, height * width * spec.CHANNELS, item.checksum,
                              height, width, spec.CHANNELS, item.codec, 0, 0))
        count = len(item.classes)
        self._counts.append(count)
        if count:
            self._boxes.append(item.boxes)
            self._classes.append(item.classes)
            for values, block in zip(item.fields, self._fields, strict=True):
                block.append(values)
            self.num_boxes += count
            if count > self.max_boxes:
                self.max_boxes = count
        self._orig.append(item.orig_size)
        self._scale.append(item.scale_offset)
        self._source.append(item.source_id)
        if item.name:
            self._names.append(item.name)
            self._name_end += len(item.name)
        self._ends.append(self._name_end)
        self.clipped += item.clipped
        self.codec_counts[item.codec] += 1
        if self.shape != (height, width):
            if self.shape is not None:
                self.same_shape = False
            self.shape = (height, width)
        self.n += 1
        if len(self._records) >= BLOCK:
            self._flush_block()

    def append_block(self, block: Block) -> None:
        """Append a block of checked samples (`detfmt.writing.blocks`) as columns: one write of its
        pixels, one array per member."""
        n = len(block)
        if self.n + n > spec.MAX_SAMPLES:
            raise UsageError(f"more than {spec.MAX_SAMPLES} samples")
        self._flush_block()  # samples appended one by one before it come first
        offset = self.blob.size
        self.blob.write(block.pixels)
        records = np.zeros(n, spec.INDEX_DTYPE)
        records["offset"] = offset + block.offsets
        records["nbytes"] = records["decoded_nbytes"] = block.nbytes
        records["checksum"] = block.checksums
        records["height"], records["width"] = block.sizes[:, 0], block.sizes[:, 1]
        records["channels"], records["codec"] = spec.CHANNELS, spec.CODEC_RAW
        self.index.append(records)
        self.counts.append(block.counts.astype("<i4"))
        if len(block.boxes):
            self.boxes.append(block.boxes.astype("<f4", copy=False))
            self.classes.append(block.classes.astype("<i4", copy=False))
            self.num_boxes += len(block.boxes)
            self.max_boxes = max(self.max_boxes, int(block.counts.max()))
        self.orig_size.append(block.sizes.astype("<u4"))
        self.scale_offset.append(np.tile(np.array(_IDENTITY, "<f8"), (n, 1)))
        self.source_id.append(block.source_ids.astype("<i8", copy=False))
        self.name_ends.append((self._name_end + block.name_ends).astype("<u8"))
        if block.names:
            self.names.append(block.names)
            self._name_end += len(block.names)
        self.clipped += block.clipped
        self.codec_counts[spec.CODEC_RAW] += n
        first, last = block.sizes[0].tolist(), block.sizes[-1].tolist()
        if (self.shape is not None and self.shape != tuple(first)) or \
                not (block.sizes == block.sizes[0]).all():
            self.same_shape = False
        self.shape = (last[0], last[1])
        self.n += n

    def _flush_block(self) -> None:
        if not self._records:
            return
        self.index.append(np.array(self._records, spec.INDEX_DTYPE))
        self.counts.append(np.array(self._counts, "<i4"))
        if self._boxes:
            self.boxes.append(np.concatenate(self._boxes).astype("<f4", copy=False))
            self.classes.append(np.concatenate(self._classes).astype("<i4", copy=False))
            for spool, block, (_, descr) in zip(self.fields, self._fields,
                                                self.options.box_fields, strict=True):
                spool.append(np.concatenate(block).astype(descr, copy=False))
        self.orig_size.append(np.array(self._orig, "<u4"))
        self.scale_offset.append(np.array(self._scale, "<f8"))
        self.source_id.append(np.array(self._source, "<i8"))
        self.name_ends.append(np.array(self._ends, "<u8"))
        if self._names:
            self.names.append(b"".join(self._names))
        self._reset_block()

    # ------------------------------------------------------------------ finalize

    def finalize(self, classes: Sequence[ClassInfo]) -> Header:
        """Write every member but images.bin once, then header.json; make the sink durable."""
        sink = self.sink
        self._flush_block()
        self.blob.finish()
        n, m = self.n, self.max_boxes
        self.ragged = self.options.ragged(n, m, self.num_boxes)
        total = self.num_boxes if self.ragged else None
        arrays = members.array_specs(n, m, self.options.box_fields, num_boxes=total)
        sizes = {spec.BLOB_FILE: self.blob.size, members.NAMES_FILE: self.names.size}
        sizes.update((a.name, a.size) for a in arrays)
        draft = self._header(classes, arrays, members.placeholder_files(sizes))
        header_size = len(members.encode_header(draft))
        sink.plan({**sizes, spec.HEADER_FILE: header_size})
        files = {spec.BLOB_FILE: sink.close_member(self.blob)}
        per_image = {"orig_size": self.orig_size, "scale_offset": self.scale_offset,
                     "source_id": self.source_id, "file_name": self.name_ends}
        flat = {spec.INDEX_FILE: self.index, spec.COUNTS_FILE: self.counts,
                **{spec.image_field_array(name): per_image[name] for name in members.IMAGE_FIELDS}}
        padded = {spec.BOXES_FILE: (self.boxes, 4, 0), spec.CLASSES_FILE:
                  (self.classes, 1, spec.CLASS_PADDING)}
        for spool, (name, _) in zip(self.fields, self.options.box_fields, strict=True):
            padded[spec.box_field_file(name)] = (spool, 1, 0)
        if self.ragged:  # the spools hold the valid boxes back to back: the ragged arrays
            flat.update((name, spool) for name, (spool, _, _) in padded.items())
        for array in arrays:
            out = sink.member(array.name)
            out.write(array.npy_header)
            if array.name in flat:
                for chunk in flat[array.name].chunks():
                    out.write(chunk)
            else:
                spool, width, fill = padded[array.name]
                self._write_padded(out, spool, array.dtype, width, fill)
            files[array.name] = sink.close_member(out)
        out = sink.member(members.NAMES_FILE)
        for chunk in self.names.chunks():
            out.write(chunk)
        files[members.NAMES_FILE] = sink.close_member(out)
        header = self._header(classes, arrays, files)
        encoded = members.encode_header(header)
        if len(encoded) != header_size:
            raise AssertionError("header size changed between planning and writing")
        out = sink.member(spec.HEADER_FILE)
        out.write(encoded)
        sink.close_member(out)
        sink.finish()
        self._spools.close()
        return header

    def _header(self, classes: Sequence[ClassInfo], arrays: Sequence[members.ArraySpec],
                files: dict[str, FileInfo]) -> Header:
        fixed = None
        if (self.n and self.same_shape and self.shape
                and self.codec_counts[spec.CODEC_RAW] == self.n):  # SPEC §9.5: raw only
            fixed = (self.shape[0], self.shape[1], spec.CHANNELS)
        codecs = {spec.CODEC_NAMES[i]: c for i, c in enumerate(self.codec_counts) if c}
        return members.build_header(classes=classes, options=self.options, n=self.n,
                                     m=self.max_boxes, codecs=codecs, fixed_shape=fixed,
                                     files=files, arrays=arrays,
                                     num_boxes=self.num_boxes if self.ragged else None)

    def _write_padded(self, out: fileio.OutputFile, spool: _Spool, dtype: np.dtype, width: int,
                      fill: int) -> None:
        """Write the (N, M[, width]) array from the flat spool, a bounded chunk of rows at a
        time (counts are read in chunks too: nothing here grows with N)."""
        n, m = self.n, self.max_boxes
        if n == 0 or m == 0:
            return
        rows = max(1, min(CHUNK_ROWS, CHUNK_BYTES // (m * width * dtype.itemsize)))
        counts, flat = self.counts.reader(), spool.reader()
        slots = np.arange(m)
        for start in range(0, n, rows):
            chunk = np.frombuffer(counts.read(min(rows, n - start) * 4), "<i4")
            values = np.frombuffer(flat.read(int(chunk.sum()) * width * dtype.itemsize), dtype)
            block = np.full((len(chunk), m, width), fill, dtype)
            block[slots < chunk[:, None]] = values.reshape(-1, width)
            out.write(block)

    def abandon(self) -> None:
        self._spools.close()
        self.sink.abandon()
