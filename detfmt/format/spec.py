"""Constants of the format, mirrored from SPEC.md (a test checks they agree).

Everything a reader or writer must agree on byte for byte lives here: file names, dtypes,
codec ids, alignment and limits. Nothing in this module does I/O.
"""

from __future__ import annotations

import numpy as np

FORMAT_NAME = "detfmt"
FORMAT_VERSION = "1.0"
#: The revision of SPEC.md this implementation follows (§14: a revision changes no header
#: version; it pins choices with conformance cases and lists its narrowings).
SPEC_REVISION = "1.2.1"
MAJOR_VERSION = 1
#: The feature of the ragged label layout (SPEC §10.2, format 1.2).
RAGGED_FEATURE = "ragged_labels"
FORMAT_VERSION_RAGGED = "1.2"
#: required_features entries of a dataset header this implementation understands.
KNOWN_FEATURES: frozenset[str] = frozenset({RAGGED_FEATURE})

ALIGNMENT = 64  # every payload starts at a multiple of this many bytes

# File names (fixed; readers never list the directory).
HEADER_FILE = "header.json"
BLOB_FILE = "images.bin"
INDEX_FILE = "index.npy"
BOXES_FILE = "boxes.npy"
CLASSES_FILE = "classes.npy"
COUNTS_FILE = "counts.npy"

# Limits, checked before any allocation or mapping.
MAX_HEADER_BYTES = 1 << 20  # 1 MiB by default; readers may be configured higher
MAX_NPY_HEADER_BYTES = 4096
MAX_SAMPLES = 1 << 40
MAX_BOXES = 1 << 16  # M, boxes per image
MAX_TOTAL_BOXES = 1 << 56  # T, the num_boxes of ragged labels
MAX_CLASSES = 1 << 16
MAX_SIDE = 16384  # stored height and width
MAX_CLASS_NAME_CHARS = 256  # characters (code points), as JSON Schema maxLength counts
MAX_METADATA_ITEMS = 1024
MAX_METADATA_BYTES = 64 * 1024

# Sharded roots (SPEC §19).
FORMAT_VERSION_SHARDED = "1.1"  # the version a sharded root without ragged labels declares
SHARDED_FEATURE = "sharded"
MANIFEST_FILE = "manifest.json"
MAX_MANIFEST_BYTES = 64 << 20
# Packed shard files (SPEC §19.4).
PACK_MAGIC = b"DETFMTPK"
PACK_VERSION = 1
PACK_PREFIX = 16  # magic, <u4 pack version, <u4 table-of-contents length
MAX_TOC_BYTES = 1 << 20

# Epoch order (SPEC §18): sort keys keep >= 16 random bits above the index bits.
MAX_ORDER_SAMPLES = 1 << 48

CHANNELS = 3
CLASS_PADDING = -1  # class id in padding slots; box padding is +0.0

# Codec ids stored in index.npy.
CODEC_RAW = 0
CODEC_ZSTD = 1
CODEC_JPEG = 2
CODEC_PNG = 3
CODEC_IDS: dict[str, int] = {
    "raw": CODEC_RAW, "zstd": CODEC_ZSTD, "jpeg": CODEC_JPEG, "png": CODEC_PNG,
}
CODEC_NAMES: dict[int, str] = {value: key for key, value in CODEC_IDS.items()}

#: The index record: 48 bytes, packed, little-endian (SPEC.md "index.npy").
INDEX_DTYPE = np.dtype(
    [
        ("offset", "<u8"),
        ("nbytes", "<u8"),
        ("decoded_nbytes", "<u8"),
        ("checksum", "<u8"),
        ("height", "<u4"),
        ("width", "<u4"),
        ("channels", "u1"),
        ("codec", "u1"),
        ("flags", "<u2"),
        ("reserved", "<u4"),
    ]
)

# Optional per-box fields: dtype strings allowed, and their padding value (always 0).
BOX_FIELD_DTYPES = ("|u1", "<i4", "<f4")
BOX_FIELD_NAME_PATTERN = r"^[a-z][a-z0-9_]{0,31}$"

# Optional per-image fields: name -> (dtype, trailing shape) ; file_name is a string column.
IMAGE_FIELD_ARRAYS: dict[str, tuple[str, tuple[int, ...]]] = {
    "orig_size": ("<u4", (2,)),  # (height, width) of the source image
    "scale_offset": ("<f8", (4,)),  # (sx, sy, tx, ty): stored = source * s + t
    "source_id": ("<i8", ()),  # the source dataset's image id; -1 when unknown
}
STRING_FIELDS = ("file_name",)  # UTF-8 strings: <name>.bin + <name>.offsets.npy (<u8, N+1)
IMAGE_FIELDS = (*IMAGE_FIELD_ARRAYS, *STRING_FIELDS)
MAX_STRING_BYTES = 4096
#: the largest source image a writer decodes (pixels): decompression bombs are refused before
MAX_SOURCE_PIXELS = 1 << 28
#: progressive JPEG scans a stored JPEG may hold (R-50; NVIDIA nvImageCodec's default; real
#: encoders use 2-20)
MAX_JPEG_SCANS = 256

#: npy dtypes a reader accepts, per array (exact descr match; big-endian, objects, pickles refused).
LABEL_DTYPES = {
    BOXES_FILE: "<f4",
    CLASSES_FILE: "<i4",
    COUNTS_FILE: "<i4",
}
STRING_OFFSETS_DTYPE = "<u8"


def box_field_file(name: str) -> str:
    """File name of an optional per-box field."""
    return f"box_{name}.npy"


def image_field_files(name: str) -> tuple[str, ...]:
    """File names of an optional per-image field."""
    if name in STRING_FIELDS:
        return (string_field_bytes(name), image_field_array(name))
    return (image_field_array(name),)


def image_field_array(name: str) -> str:
    """The .npy member of a per-image field: its values, or a string field's offsets."""
    return f"{name}.offsets.npy" if name in STRING_FIELDS else f"{name}.npy"


def string_field_bytes(name: str) -> str:
    """The member holding a string field's UTF-8 bytes back to back."""
    return f"{name}.bin"


def align_up(value: int, alignment: int = ALIGNMENT) -> int:
    """Round ``value`` up to a multiple of ``alignment``."""
    return -(-value // alignment) * alignment
