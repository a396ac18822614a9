"""What a written dataset consists of: its member files, their array shapes and its header.

The writer knows every member name from its options before the first sample (the shard layout
reserves its table of contents from that), and builds header.json here, for real and as the worst
case for any number of samples (`detfmt.writing.options` checks that one before a sample is read).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Protocol

import msgspec
import numpy as np

from detfmt.format import npy, spec
from detfmt.format.schema import ArrayInfo, BoxField, ClassInfo, FileInfo, Header, ImageInfo
from detfmt.version import __version__

__all__ = ["ArraySpec", "HeaderOptions", "array_specs", "build_header", "encode_header",
           "member_names", "member_table"]

#: the per-image fields this writer records (all of SPEC §10.3's)
IMAGE_FIELDS = spec.IMAGE_FIELDS
NAMES_FILE = spec.string_field_bytes("file_name")
WRITER = f"detfmt-python {__version__}"
#: the largest number a header or table of contents can hold (u64: 20 digits)
MAX_NUMBER = 10**20 - 1
_PLACEHOLDER_DIGEST = "0" * 16


class HeaderOptions(Protocol):
    """The write options the header records (`detfmt.writing.options.WriteOptions` has them)."""

    @property
    def max_side(self) -> int | None: ...

    @property
    def box_fields(self) -> tuple[tuple[str, str], ...]: ...

    @property
    def metadata(self) -> Mapping[str, str]: ...


class ArraySpec(msgspec.Struct, frozen=True):
    """One .npy member: dtype, shape, and the bytes its header and data take."""

    name: str
    dtype: np.dtype
    shape: tuple[int, ...]

    @property
    def npy_header(self) -> bytes:
        return npy.encode_header(self.dtype, self.shape)

    @property
    def data_bytes(self) -> int:
        return int(np.prod(self.shape, dtype=object)) * self.dtype.itemsize

    @property
    def size(self) -> int:
        return len(self.npy_header) + self.data_bytes

    @property
    def info(self) -> ArrayInfo:
        descr = np.lib.format.dtype_to_descr(self.dtype)
        return ArrayInfo(dtype=descr if isinstance(descr, str) else [tuple(f) for f in descr],
                         shape=list(self.shape))


def member_table(n: int, m: int, box_fields: Sequence[tuple[str, str]],
                 image_fields: Sequence[str], num_boxes: int | None = None,
                 ) -> list[tuple[str, str, tuple[int, ...]]]:
    """THE member table (SPEC §6, §10): (name, dtype descr, shape) of every .npy member of a
    dataset with N samples, M box slots, these per-box and per-image fields; with ``num_boxes``
    (T), the labels in the ragged layout (§10.2). The index's descr is ``"index"`` (its record
    dtype is `spec.INDEX_DTYPE`). The checks, the writer and verify all read it from here."""
    slots: tuple[int, ...] = (n, m) if num_boxes is None else (num_boxes,)
    table = [
        (spec.INDEX_FILE, "index", (n,)),
        (spec.COUNTS_FILE, spec.LABEL_DTYPES[spec.COUNTS_FILE], (n,)),
        (spec.BOXES_FILE, spec.LABEL_DTYPES[spec.BOXES_FILE], (*slots, 4)),
        (spec.CLASSES_FILE, spec.LABEL_DTYPES[spec.CLASSES_FILE], slots),
        *((spec.box_field_file(name), descr, slots) for name, descr in box_fields),
    ]
    for name in image_fields:
        if name in spec.STRING_FIELDS:
            table.append((spec.image_field_array(name), spec.STRING_OFFSETS_DTYPE, (n + 1,)))
        else:
            descr, tail = spec.IMAGE_FIELD_ARRAYS[name]
            table.append((spec.image_field_array(name), descr, (n, *tail)))
    return table


def array_specs(n: int, m: int, box_fields: Sequence[tuple[str, str]],
                num_boxes: int | None = None) -> list[ArraySpec]:
    """Every .npy member this writer writes (`member_table` with all per-image fields)."""
    return [ArraySpec(name, spec.INDEX_DTYPE if descr == "index" else np.dtype(descr), shape)
            for name, descr, shape in member_table(n, m, box_fields, IMAGE_FIELDS, num_boxes)]


def member_names(box_fields: Sequence[tuple[str, str]]) -> list[str]:
    """All member files of a dataset written with these box fields, header.json included."""
    arrays = [a.name for a in array_specs(0, 0, box_fields)]
    return sorted([spec.HEADER_FILE, spec.BLOB_FILE, NAMES_FILE, *arrays])


def build_header(*, classes: Sequence[ClassInfo], options: HeaderOptions, n: int, m: int,
                 codecs: Mapping[str, int], fixed_shape: tuple[int, int, int] | None,
                 files: Mapping[str, FileInfo], arrays: Sequence[ArraySpec],
                 num_boxes: int | None = None) -> Header:
    """The header; with ``num_boxes`` (T) one of ragged labels: version 1.2, the required
    feature ragged_labels and ``num_boxes`` (W-1, W-19)."""
    ragged = num_boxes is not None
    return Header(
        format=spec.FORMAT_NAME,
        version=spec.FORMAT_VERSION_RAGGED if ragged else spec.FORMAT_VERSION,
        required_features=[spec.RAGGED_FEATURE] if ragged else [],
        num_boxes=num_boxes,
        num_samples=n, max_boxes=m,
        classes=list(classes),
        image=ImageInfo(fixed_shape=fixed_shape, max_side=options.max_side, codecs=dict(codecs)),
        files=dict(sorted(files.items())),
        arrays={a.name: a.info for a in sorted(arrays, key=lambda a: a.name)},
        box_fields=[BoxField(name=name, dtype=descr) for name, descr in options.box_fields],
        image_fields=list(IMAGE_FIELDS),
        writer=WRITER,
        metadata=dict(options.metadata),
    )


def encode_header(header: Header) -> bytes:
    members = msgspec.to_builtins(header)
    if members.get("num_boxes") is None:  # only ragged labels have it (SPEC §10.2)
        members.pop("num_boxes", None)
    return json.dumps(members, indent=2, ensure_ascii=False,
                      sort_keys=False).encode("utf-8") + b"\n"


def placeholder_files(sizes: Mapping[str, int]) -> dict[str, FileInfo]:
    """File entries with the real sizes and a digest of the right length, to size the header
    before the digests are known."""
    return {name: FileInfo(size=size, xxh3_64=_PLACEHOLDER_DIGEST) for name, size in sizes.items()}
