"""The 1.1 manifest (docs/spec-sharding.md §3): msgspec Structs, strict decoding, atomic publish.

The manifest is the only source of truth for a sharded root, so decoding is strict (unknown keys
rejected) and every cross-field rule (S-4, S-5, S-6) is checked here, once, for all readers.
"""

from __future__ import annotations

import os
import re
from typing import Annotated, Any, Literal

import msgspec

from detfmt.errors import NotDetfmtError, UnsafePathError, UnsupportedVersionError
from detfmt.shard.errors import ManifestError, RootLayoutError
from detfmt.storage import ANY_GENERATION, LocalStorage

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
    "check_root_layout",
    "decode_manifest",
    "encode_manifest",
    "publish_manifest",
    "read_manifest",
]

MANIFEST_NAME = "manifest.json"
FORMAT_VERSION = "1.1"
SUPPORTED_FEATURES = frozenset({"sharded"})
MAX_MANIFEST_BYTES = 64 << 20
_HEX16 = re.compile(r"[0-9a-f]{16}\Z")
_HEX32 = re.compile(r"[0-9a-f]{32}\Z")
MAX_SAMPLES = 2**63 - 1  # global indices are int64

NonNeg = Annotated[int, msgspec.Meta(ge=0)]


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
    bytes: Annotated[int, msgspec.Meta(gt=0)]
    xxh3_64: str
    max_boxes: NonNeg


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


def check_root_layout(root: str | os.PathLike[str]) -> None:
    """S-1: a local root holding manifest.json must not hold header.json (any entry of that name,
    even a broken link), or a 1.0 reader and a 1.1 reader would read two different datasets."""
    root = os.fspath(root)
    if os.path.lexists(os.path.join(root, "header.json")):
        raise RootLayoutError(
            "the root holds both manifest.json and header.json; a root is either a 1.0 dataset "
            "or a 1.1 sharded dataset",
            path=root,
        )


def _check_path(path: str, where: str) -> None:
    parts = path.split("/")
    if (
        not path
        or "\\" in path
        or path.startswith("/")
        or any(p in ("", ".", "..") for p in parts)
        or "\x00" in path
    ):
        raise UnsafePathError(f"unsafe shard path {path!r}", path=where)


def check_manifest(m: Manifest, where: str = MANIFEST_NAME) -> Manifest:
    """Apply the rules a schema alone cannot express (S-4, S-5, S-6)."""
    if m.format != "detfmt":
        raise NotDetfmtError(f"format is {m.format!r}, not 'detfmt'", path=where)
    major, _, minor = m.version.partition(".")
    if major != "1" or minor not in ("1",):
        raise UnsupportedVersionError(
            f"manifest version {m.version!r} is not supported",
            found=m.version,
            supported=FORMAT_VERSION,
            path=where,
        )
    unknown = sorted(set(m.required_features) - SUPPORTED_FEATURES)
    if unknown:
        raise UnsupportedVersionError(
            f"required features {unknown} are not supported",
            found=",".join(unknown),
            supported=",".join(sorted(SUPPORTED_FEATURES)),
            rule="FEATURE_UNSUPPORTED",
            path=where,
        )
    if "sharded" not in m.required_features:
        raise ManifestError("required_features must contain 'sharded'", path=where)
    if not _HEX32.match(m.write_id):
        raise ManifestError(f"write_id {m.write_id!r} is not 32 lowercase hex digits", path=where)
    seen: set[str] = set()
    expected_first = 0
    for k, s in enumerate(m.shards):
        _check_path(s.path, where)
        if s.path in seen:
            raise UnsafePathError(f"shard path {s.path!r} is listed twice", path=where)
        seen.add(s.path)
        if not _HEX16.match(s.xxh3_64):
            raise ManifestError(f"shards[{k}].xxh3_64 is not 16 lowercase hex digits", path=where)
        if s.first_index != expected_first:
            raise ManifestError(
                f"shards[{k}].first_index is {s.first_index}, expected {expected_first}",
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
    """Decode and fully check manifest bytes; raises typed errors only (S-3..S-6)."""
    if len(data) > MAX_MANIFEST_BYTES:
        raise ManifestError(
            f"manifest is {len(data)} bytes, limit {MAX_MANIFEST_BYTES}", path=where
        )
    try:
        m = msgspec.json.decode(data, type=Manifest)
    except msgspec.ValidationError as e:
        # identity first: a foreign JSON object should say "not detfmt", not "schema"
        try:
            raw = msgspec.json.decode(data)
        except msgspec.DecodeError:
            raw = None
        if isinstance(raw, dict) and raw.get("format") != "detfmt":
            raise NotDetfmtError("manifest format is not 'detfmt'", path=where) from e
        raise ManifestError(f"invalid manifest: {e}", path=where) from e
    except msgspec.DecodeError as e:
        raise ManifestError(f"manifest is not valid JSON: {e}", path=where) from e
    return check_manifest(m, where)


def encode_manifest(m: Manifest) -> bytes:
    """Canonical bytes (sorted keys, newline) so equal manifests are byte-identical."""
    return msgspec.json.format(msgspec.json.encode(m, order="sorted"), indent=1) + b"\n"


def read_manifest(root: str | os.PathLike[str]) -> Manifest:
    """Read ``<root>/manifest.json`` from local disk."""
    path = os.path.join(os.fspath(root), MANIFEST_NAME)
    with open(path, "rb") as f:
        data = f.read(MAX_MANIFEST_BYTES + 1)
    return decode_manifest(data, path)


def publish_manifest(root: str | os.PathLike[str], m: Manifest) -> str:
    """Publish ``m`` at ``<root>/manifest.json`` unconditionally and atomically (S-15), whatever
    manifest is there; `detfmt.shard.write.commit` is the compare-and-swap writers use."""
    storage = LocalStorage(os.fspath(root))
    storage.swap(MANIFEST_NAME, encode_manifest(check_manifest(m)), ANY_GENERATION)
    return storage.where(MANIFEST_NAME)
