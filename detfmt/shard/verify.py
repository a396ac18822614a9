"""Full check of a local sharded (1.1) root: manifest, every shard's bytes, and every 1.0 rule.

Each shard is checked against its manifest entry (size, xxh3-64: S-7), opened as a packed 1.0
dataset (layout: S-9..S-11), compared with the manifest schema (S-8), and then run through the
same per-member, per-payload and per-label checks as ``detfmt.verify`` (the core's helpers are
reused, so the two can never disagree about a 1.0 rule).
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path

import xxhash

from detfmt import errors
from detfmt.shard.errors import (
    ManifestError,
    PackError,
    RootLayoutError,
    SchemaMismatchError,
    ShardChecksumError,
)
from detfmt.shard.manifest import check_root_layout, read_manifest, shard_lstat
from detfmt.shard.packed import PackedDataset
from detfmt.validate import Violation
from detfmt.verify import VerifyReport

__all__ = ["verify_sharded"]

# the module, not the ``detfmt.verify`` function that shadows it as a package attribute
core_verify = importlib.import_module("detfmt.verify")

_ERRORS: dict[str, type[errors.FormatError]] = {
    "SHARD_CHECKSUM": ShardChecksumError,
    "SHARD_SIZE": ShardChecksumError,
    "SCHEMA_MISMATCH": SchemaMismatchError,
    "PACK_LAYOUT": PackError,
    "MANIFEST_SCHEMA": ManifestError,
    "SHARD_INDEXING": ManifestError,
    "ROOT_LAYOUT": RootLayoutError,
}


def _error(v: Violation) -> errors.FormatError:
    cls = _ERRORS.get(v.rule)
    if cls is None:
        return v.to_error()
    return cls(v.message, rule=v.rule, path=v.path, index=v.index)


def _file_digest(path: str) -> tuple[int, str]:
    digest = xxhash.xxh3_64()
    size = 0
    with open(path, "rb") as f:
        while chunk := f.read(8 << 20):
            digest.update(chunk)
            size += len(chunk)
    return size, digest.hexdigest()


def _check_members(ds: PackedDataset, report: VerifyReport) -> None:
    """FILE_CHECKSUM of every member against the shard's own 1.0 header."""
    for name, info in ds.header.files.items():
        member = ds._members[name]
        got = xxhash.xxh3_64_hexdigest(member._view)
        if got != info.xxh3_64:
            report.add(
                Violation(
                    "FILE_CHECKSUM", member.path, f"xxh3-64 is {got}, header says {info.xxh3_64}"
                )
            )


def verify_sharded(root: str | os.PathLike[str], *, raise_on_error: bool = True) -> VerifyReport:
    """Check everything docs/spec-sharding.md and SPEC.md require of a local sharded root.

    Returns a `VerifyReport` whose violations name the shard file (``path#member`` for members)
    and the shard-local sample index. Raises the first violation's typed error when
    ``raise_on_error``.
    """
    from detfmt.shard.sharded import ShardedDataset

    root_path = Path(root)
    report = VerifyReport(path=root_path)
    try:
        check_root_layout(root_path)
        manifest = read_manifest(root_path)
        checker = ShardedDataset(root_path, check_files=False)  # listed below
    except errors.FormatError as error:
        report.add(
            Violation(error.rule or "MANIFEST_SCHEMA", error.path or str(root_path), error.message)
        )
        return _finish(report, raise_on_error)
    report.num_samples = manifest.num_samples
    present = []
    for info in manifest.shards:  # SPEC §19.4 step 9: every shard file, before any content
        path = str(root_path / info.path)
        try:
            size = shard_lstat(str(root_path), info.path).st_size
        except errors.FormatError as error:
            report.add(Violation(error.rule or "FILE_MISSING", error.path or path, error.message))
            continue
        if size != info.bytes:
            report.add(Violation("SHARD_SIZE", path, f"{size} bytes, manifest says {info.bytes}"))
            continue
        present.append(info)
    if len(present) != len(manifest.shards):
        return _finish(report, raise_on_error)
    for k, info in enumerate(manifest.shards):  # step 10, shard by shard
        path = str(root_path / info.path)
        _, digest = _file_digest(path)
        if digest != info.xxh3_64:
            report.add(
                Violation(
                    "SHARD_CHECKSUM", path, f"xxh3-64 is {digest}, manifest says {info.xxh3_64}"
                )
            )
        try:
            ds = PackedDataset(path)
            ds.validate_index()
            checker._check_schema(ds, k)
        except errors.FormatError as error:
            report.add(
                Violation(error.rule or "FORMAT", error.path or path, error.message, error.index)
            )
            continue
        _check_members(ds, report)
        core_verify.check_codec_counts(ds, report)
        core_verify._check_labels(ds, report)
        core_verify._check_image_fields(ds, report)
        core_verify._check_payloads(ds, report)
    return _finish(report, raise_on_error)


def _finish(report: VerifyReport, raise_on_error: bool) -> VerifyReport:
    if raise_on_error and report.violations:
        error = _error(report.violations[0])
        error.violations = list(report.violations)  # type: ignore[attr-defined]
        raise error
    return report
