"""Errors specific to sharded (1.1) datasets; all are `detfmt.errors` subclasses with rule ids."""

from __future__ import annotations

from detfmt.errors import FormatError, IntegrityError, LayoutError

__all__ = [
    "ManifestError",
    "PackError",
    "RootLayoutError",
    "SchemaMismatchError",
    "ShardChecksumError",
]


class ManifestError(FormatError):
    """manifest.json is unreadable, too large or does not match the 1.1 schema (S-3, S-5)."""

    default_rule = "MANIFEST_SCHEMA"


class PackError(LayoutError):
    """A packed shard file's table of contents or member layout is invalid (S-9, S-10)."""

    default_rule = "PACK_LAYOUT"


class RootLayoutError(LayoutError):
    """A root holds both manifest.json and header.json: neither a 1.0 nor a 1.1 root (S-1)."""

    default_rule = "ROOT_LAYOUT"


class SchemaMismatchError(FormatError):
    """A shard's inner 1.0 header disagrees with the manifest schema or shard entry (S-8)."""

    default_rule = "SCHEMA_MISMATCH"


class ShardChecksumError(IntegrityError):
    """A shard file's size or xxh3-64 differs from its manifest entry (S-7, S-21)."""

    default_rule = "SHARD_CHECKSUM"
