"""The manifest of a sharded root (SPEC.md §19): msgspec Structs, strict decoding and encoding.

The manifest is the only source of truth for a sharded root, so decoding is strict (unknown keys
rejected) and every cross-field rule (S-4, S-5, S-6) is checked here, once, for all readers.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Annotated, Any, Literal

import msgspec

from detfmt.errors import (
    ManifestError,
    NotDetfmtError,
    UnsafePathError,
    UnsupportedVersionError,
)
from detfmt.format import spec
from detfmt.format.jsonprofile import parse_json

__all__ = [
    "FORMAT_VERSION",
    "MANIFEST_NAME",
    "MAX_MANIFEST_BYTES",
    "SUPPORTED_FEATURES",
    "BoxFieldInfo",
    "ClassEntry",
    "Manifest",
    "Schema",
    "ShardInfo",
    "decode_manifest",
    "encode_manifest",
    "manifest_identity",
]

MANIFEST_NAME = spec.MANIFEST_FILE
FORMAT_VERSION = spec.FORMAT_VERSION_SHARDED
SUPPORTED_FEATURES = frozenset({spec.SHARDED_FEATURE, spec.RAGGED_FEATURE})
MAX_MANIFEST_BYTES = 64 << 20
_HEX16 = re.compile(r"[0-9a-f]{16}\Z")
_HEX32 = re.compile(r"[0-9a-f]{32}\Z")
MAX_SAMPLES = 2**63 - 1  # global indices are int64

NonNeg = Annotated[int, msgspec.Meta(ge=0, le=(1 << 63) - 1)]
_PATH_COMPONENT = re.compile(r"[A-Za-z0-9_.-]{1,255}\Z")
_VERSION = re.compile(r"[0-9]{1,4}\.[0-9]{1,4}\Z")
KNOWN_MINORS = frozenset({1, 2})  # manifests exist since 1.1; 1.2 adds ragged shards


class _Strict(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    pass


class ClassEntry(_Strict):
    name: str
    source_id: int | None = None


class BoxFieldInfo(_Strict):
    name: str
    dtype: Literal["|u1", "<i4", "<f4"]


class Schema(_Strict):
    """What every shard shares; checked against each shard's inner 1.0 header (S-8)."""

    codec: Literal["raw", "zstd", "jpeg", "png", "mixed"]
    classes: list[ClassEntry]
    box_fields: list[BoxFieldInfo] = []
    image_fields: list[str] = []
    fixed_shape: list[int] | None = None
    max_side: int | None = None


class ShardInfo(_Strict):
    path: str
    key: str
    num_samples: NonNeg
    first_index: NonNeg
    bytes: Annotated[int, msgspec.Meta(gt=0, le=(1 << 63) - 1)]
    xxh3_64: str
    max_boxes: Annotated[int, msgspec.Meta(ge=0, le=65536)]


class Manifest(_Strict):
    format: str
    version: str
    required_features: list[str]
    write_id: str
    num_samples: NonNeg
    schema: Schema
    shards: list[ShardInfo]
    extensions: dict[str, Any] = {}
    writer: str = ""
    metadata: dict[str, str] = {}


def manifest_identity(shard_features: Iterable[str]) -> tuple[str, list[str]]:
    """``version`` and ``required_features`` of a manifest whose shards' headers require
    ``shard_features``: "sharded" plus each of them, version 1.2 as soon as a shard uses ragged
    labels, 1.1 otherwise (S-rules of SPEC §19, W-1)."""
    extra = sorted(set(shard_features) - {spec.SHARDED_FEATURE})
    version = spec.FORMAT_VERSION_RAGGED if spec.RAGGED_FEATURE in extra else FORMAT_VERSION
    return version, [spec.SHARDED_FEATURE, *extra]


def _check_path(path: str, where: str) -> None:
    """S-6: relative, '/'-separated components of [A-Za-z0-9_.-], none '.' or '..'."""
    parts = path.split("/")
    if len(path) > 4096 or not all(_PATH_COMPONENT.match(p) and p not in (".", "..")
                                   for p in parts):
        raise UnsafePathError(f"unsafe shard path {path!r}", path=where)


def _check_identity(raw: dict[str, Any], where: str) -> None:
    """SPEC §19.4 steps 3 to 5: format, version, required features, before the schema (so a
    manifest of a later minor gets a version error, not a schema one)."""
    if raw.get("format") != "detfmt":
        raise NotDetfmtError(f"format is {raw.get('format')!r}, not 'detfmt'", path=where)
    version = raw.get("version")
    if not isinstance(version, str) or not _VERSION.match(version):
        raise ManifestError(f"version {version!r} is not MAJOR.MINOR", path=where)
    major, minor = (int(part) for part in version.split("."))
    if major != 1 or minor not in KNOWN_MINORS:
        raise UnsupportedVersionError(
            f"manifest version {version!r} is not supported",
            found=version,
            supported=FORMAT_VERSION,
            path=where,
        )
    features = raw.get("required_features")
    if not isinstance(features, list) or not all(isinstance(f, str) for f in features):
        raise ManifestError("required_features must be a list of strings", path=where)
    unknown = sorted(set(features) - SUPPORTED_FEATURES)
    if unknown:
        raise UnsupportedVersionError(
            f"required features {unknown} are not supported",
            found=",".join(unknown),
            supported=",".join(sorted(SUPPORTED_FEATURES)),
            rule="FEATURE_UNSUPPORTED",
            path=where,
        )


def check_manifest(m: Manifest, where: str = MANIFEST_NAME) -> Manifest:
    """The rules a schema alone cannot express, in the order of SPEC §19.4 steps 3 to 8."""
    _check_identity({"format": m.format, "version": m.version,
                     "required_features": list(m.required_features)}, where)
    if "sharded" not in m.required_features:
        raise ManifestError("required_features must contain 'sharded'", path=where)
    if len(set(m.required_features)) != len(m.required_features):
        raise ManifestError("required_features must be unique", path=where)
    if not _HEX32.match(m.write_id):
        raise ManifestError(f"write_id {m.write_id!r} is not 32 lowercase hex digits", path=where)
    for k, s in enumerate(m.shards):
        if not _HEX16.match(s.xxh3_64):
            raise ManifestError(f"shards[{k}].xxh3_64 is not 16 lowercase hex digits", path=where)
    seen: set[str] = set()
    for s in m.shards:  # step 7 (S-6)
        _check_path(s.path, where)
        if s.path.lower() in seen:
            raise UnsafePathError(f"shard path {s.path!r} is listed twice (ignoring ASCII "
                                  "case)", path=where)
        seen.add(s.path.lower())
    expected_first = 0
    for k, s in enumerate(m.shards):  # step 8 (S-5)
        if s.first_index != expected_first:
            raise ManifestError(
                f"shards[{k}].first_index is {s.first_index}, expected {expected_first}",
                rule="SHARD_INDEXING",
                path=where,
            )
        if s.num_samples * 48 > s.bytes:  # an index record per sample: no file is smaller
            raise ManifestError(
                f"shards[{k}] claims {s.num_samples} samples in {s.bytes} bytes",
                rule="SHARD_INDEXING",
                path=where,
            )
        expected_first += s.num_samples
    if expected_first > MAX_SAMPLES:
        raise ManifestError(
            f"the shards hold {expected_first} samples, more than {MAX_SAMPLES}",
            rule="SHARD_INDEXING",
            path=where,
        )
    if expected_first != m.num_samples:
        raise ManifestError(
            f"num_samples is {m.num_samples} but the shards hold {expected_first}",
            rule="SHARD_INDEXING",
            path=where,
        )
    return m


def decode_manifest(data: bytes, where: str = MANIFEST_NAME) -> Manifest:
    """Decode and fully check manifest bytes; raises typed errors only (SPEC §19.4 steps 2-8)."""
    raw = parse_json(data, path=where, limit=MAX_MANIFEST_BYTES, rule="MANIFEST_SCHEMA",
                     error=ManifestError)
    _check_identity(raw, where)
    try:
        m = msgspec.convert(raw, Manifest)
    except msgspec.ValidationError as e:
        raise ManifestError(f"invalid manifest: {e}", path=where) from e
    return check_manifest(m, where)


def encode_manifest(m: Manifest) -> bytes:
    """Canonical bytes (sorted keys, newline) so equal manifests are byte-identical."""
    return msgspec.json.format(msgspec.json.encode(m, order="sorted"), indent=1) + b"\n"
