"""The header.json schema as msgspec Structs: the single source of the JSON Schema in SPEC.md.

Objects are decoded leniently about unknown members (a 1.x reader ignores what a later minor
version adds) and strictly about everything it knows: types, ranges and string shapes.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from detfmt.format import spec

__all__ = [
    "ArrayInfo",
    "BoxField",
    "ClassInfo",
    "FileInfo",
    "Header",
    "ImageInfo",
    "header_json_schema",
]

NonNegative = Annotated[int, msgspec.Meta(ge=0)]
Side = Annotated[int, msgspec.Meta(ge=1, le=spec.MAX_SIDE)]
HexDigest = Annotated[str, msgspec.Meta(pattern=r"^[0-9a-f]{16}$")]
ClassName = Annotated[str, msgspec.Meta(min_length=1, max_length=spec.MAX_CLASS_NAME_CHARS)]
Int64 = Annotated[int, msgspec.Meta(ge=-(1 << 63), le=(1 << 63) - 1)]


class ClassInfo(msgspec.Struct, frozen=True, kw_only=True):
    """One class: its name and its id in the source dataset (e.g. a COCO category id)."""

    name: ClassName
    source_id: Int64 | None = None


class ImageInfo(msgspec.Struct, frozen=True, kw_only=True):
    """Dataset-wide facts about the stored images."""

    channels: Literal[3] = 3
    color: Literal["RGB"] = "RGB"
    #: [H, W, 3] when every sample is raw with that shape, so the blob is one (N, H, W, 3) array.
    fixed_shape: tuple[Side, Side, Literal[3]] | None = None
    #: the long-side limit the writer resized to, if any (informational).
    max_side: Side | None = None
    #: number of samples per codec name (informational, checked by verify).
    codecs: dict[str, NonNegative] = {}


class FileInfo(msgspec.Struct, frozen=True, kw_only=True):
    """Size and xxh3-64 (hex, seed 0) of one member file."""

    size: NonNegative
    xxh3_64: HexDigest


class ArrayInfo(msgspec.Struct, frozen=True, kw_only=True):
    """dtype and shape of one .npy member, cross-checked with its .npy header.

    ``dtype`` is the numpy descr: a string such as ``"<f4"``, or for the structured index a list
    of ``[field, type]`` pairs.
    """

    dtype: str | list[tuple[str, str]]
    shape: list[NonNegative]


class BoxField(msgspec.Struct, frozen=True, kw_only=True):
    """An optional per-box field stored as box_<name>.npy, shape (N, M), padding 0."""

    name: Annotated[str, msgspec.Meta(pattern=spec.BOX_FIELD_NAME_PATTERN)]
    dtype: Literal["|u1", "<i4", "<f4"]


class Header(msgspec.Struct, frozen=True, kw_only=True):
    """Contents of header.json, format 1.0."""

    format: Literal["detfmt"]
    version: Annotated[str, msgspec.Meta(pattern=r"^[0-9]{1,4}\.[0-9]{1,4}$")]
    num_samples: Annotated[int, msgspec.Meta(ge=0, le=spec.MAX_SAMPLES)]
    max_boxes: Annotated[int, msgspec.Meta(ge=0, le=spec.MAX_BOXES)]
    classes: Annotated[list[ClassInfo], msgspec.Meta(max_length=spec.MAX_CLASSES)]
    image: ImageInfo
    files: dict[str, FileInfo]
    arrays: dict[str, ArrayInfo]
    required_features: list[str] = []
    #: T, the total box count of ragged labels (SPEC §10.2); checked (and used) only when
    #: required_features lists ragged_labels, ignored otherwise.
    num_boxes: Any = None
    extensions: dict[str, Any] = {}
    box_fields: list[BoxField] = []
    image_fields: list[Literal["orig_size", "scale_offset", "source_id", "file_name"]] = []
    writer: Annotated[str, msgspec.Meta(max_length=256)] = ""
    metadata: dict[str, str] = {}

    @property
    def ragged(self) -> bool:
        """Whether the labels use the ragged layout (SPEC §10.2)."""
        return spec.RAGGED_FEATURE in self.required_features

    @property
    def num_classes(self) -> int:
        """Number of classes; valid class ids are 0..num_classes-1."""
        return len(self.classes)

    @property
    def class_names(self) -> list[str]:
        """Class names by contiguous id."""
        return [info.name for info in self.classes]


def header_json_schema() -> dict[str, Any]:
    """The JSON Schema of header.json, as printed in SPEC.md's appendix."""
    return msgspec.json.schema(Header)
