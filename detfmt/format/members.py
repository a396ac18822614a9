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
           "member_names"]

IMAGE_FIELDS = ("orig_size", "scale_offset", "source_id", "file_name")
NAMES_FILE = "file_name.bin"
NAME_OFFSETS_FILE = "file_name.offsets.npy"
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


def array_specs(n: int, m: int, box_fields: Sequence[tuple[str, str]],
                num_boxes: int | None = None) -> list[ArraySpec]:
    """Every .npy member of a dataset with N samples, M box slots and these per-box fields;
    with ``num_boxes`` (T), the labels in the ragged layout (SPEC §10.2)."""
    slots: tuple[int, ...] = (n, m) if num_boxes is None else (num_boxes,)
    arrays = [
        ArraySpec(spec.INDEX_FILE, spec.INDEX_DTYPE, (n,)),
        ArraySpec(spec.COUNTS_FILE, np.dtype("<i4"), (n,)),
        ArraySpec(spec.BOXES_FILE, np.dtype("<f4"), (*slots, 4)),
        ArraySpec(spec.CLASSES_FILE, np.dtype("<i4"), slots),
        *(ArraySpec(spec.box_field_file(name), np.dtype(descr), slots)
          for name, descr in box_fields),
        ArraySpec("orig_size.npy", np.dtype("<u4"), (n, 2)),
        ArraySpec("scale_offset.npy", np.dtype("<f8"), (n, 4)),
        ArraySpec("source_id.npy", np.dtype("<i8"), (n,)),
        ArraySpec(NAME_OFFSETS_FILE, np.dtype("<u8"), (n + 1,)),
    ]
    return arrays


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
