"""``gc``: remove what failed or superseded sharded writes left behind (S-16), and nothing else.

Deletion is confined: only entries directly under ``shards/`` (and manifest temporaries and dead
leases in the root) whose names the writer gives (`detfmt.shard.names`), of the kind it creates
(regular files, its own temporary directories; never a link), are removed; ``shards`` is never
followed when it is a link; a directory that is not a sharded root is refused. Nothing unlisted
is collected while a live write lease exists (`detfmt.shard.session`), however long the write
takes, nor anything younger than the grace period; a lease dated more than its ttl in the future
is not live (a wrong clock cannot disable gc), and the report names the leases honoured.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from detfmt import errors
from detfmt.format.manifest import MANIFEST_NAME, MAX_MANIFEST_BYTES, decode_manifest
from detfmt.format.pack import MAGIC
from detfmt.shard.names import MANIFEST_TEMP, SHARD_DIR, SHARD_FILE, TEMPORARY
from detfmt.shard.session import LEASE_PATTERN, lease_state
from detfmt.storage import Storage, StoredEntry, open_storage

__all__ = ["GcReport", "collect", "gc"]


@dataclass
class GcReport:
    """What `collect` removed, what it kept of its own kind, and why; ``honoured_leases``: the
    live leases that kept unlisted files, ``future_leases``: leases dated more than their ttl
    ahead of this clock, treated as dead (and removed)."""

    removed: list[str] = field(default_factory=list)
    kept_for_writes: list[str] = field(default_factory=list)
    kept_young: list[str] = field(default_factory=list)
    live_writes: int = 0
    honoured_leases: list[str] = field(default_factory=list)
    future_leases: list[str] = field(default_factory=list)


def gc(
    root: str | os.PathLike[str],
    *,
    grace_seconds: float = 3600.0,
    storage_options: Mapping[str, Any] | None = None,
) -> list[str]:
    """Delete shard files and temporaries the manifest does not name (S-16); returns them.

    Raises `NotDetfmtError` for a directory that is neither a sharded root (manifest.json)
    nor one a sharded write is creating (a lease), `UsageError` for a 1.0 dataset,
    `UnsafePathError` when ``shards`` is a link, and the manifest's own errors when it is
    invalid (never guessing what it lists)."""
    return collect(open_storage(root, storage_options), grace_seconds=grace_seconds).removed


def collect(storage: Storage, *, grace_seconds: float = 3600.0,
            ignore_lease: str | None = None) -> GcReport:
    """`gc` with a report. ``ignore_lease``: the token of a lease whose own leftovers may go
    (a failed write cleaning up after itself)."""
    report = GcReport()
    with contextlib.ExitStack() as stack:
        try:  # local roots: no commit runs meanwhile
            stack.enter_context(storage.lock(MANIFEST_NAME))
        except (FileNotFoundError, NotADirectoryError) as error:
            raise errors.NotDetfmtError("not a sharded detfmt root: no such directory",
                                        path=storage.url) from error
        _collect_locked(storage, report, grace_seconds, ignore_lease)
    report.removed.sort()
    return report


def _collect_locked(storage: Storage, report: GcReport, grace_seconds: float,
                    ignore_lease: str | None) -> None:
    if storage.exists("header.json"):
        raise errors.UsageError(
            "this is a 1.0 dataset, not a sharded root: gc only cleans sharded roots "
            "(detfmt cleanup removes a 1.0 writer's temporaries)", path=storage.url)
    data, _ = storage.read_generation(MANIFEST_NAME, MAX_MANIFEST_BYTES)
    listed: set[str] = set()
    if data is not None:
        listed = {s.path for s in decode_manifest(data, storage.where(MANIFEST_NAME)).shards}
    top = storage.list_dir("")
    leases = [e for e in top if e.is_file and LEASE_PATTERN.match(_name(e))]
    # a writer killed while it created its lease leaves that lease's temporary: still a write
    own_temps = [e for e in top if e.is_file and TEMPORARY.match(_name(e))]
    if data is None and not leases and not own_temps:
        raise errors.NotDetfmtError(
            "not a sharded detfmt root: no manifest.json and no write in progress; gc "
            "deletes nothing here", path=storage.url)
    now = time.time()
    live, dead = [], []
    for lease in leases:
        match = LEASE_PATTERN.match(_name(lease))
        if match is not None and match.group(1) == ignore_lease:
            continue  # the caller's own lease: it releases it itself
        state = lease_state(storage, lease, now)
        (live if state == "live" else dead).append(lease)
        if state == "future":
            report.future_leases.append(storage.where(lease.rel))
    report.live_writes = len(live)
    report.honoured_leases = sorted(storage.where(lease.rel) for lease in live)
    candidates = [e for e in storage.list_dir(SHARD_DIR)
                  if e.rel not in listed and _is_own_shard_entry(storage, e)]
    candidates += [e for e in top if e.is_file and (MANIFEST_TEMP.match(_name(e))
                                                    or TEMPORARY.match(_name(e)))]
    for entry in candidates:
        if live:
            report.kept_for_writes.append(storage.where(entry.rel))
        elif not _older(entry, now, grace_seconds):
            report.kept_young.append(storage.where(entry.rel))
        else:
            _remove(storage, entry, report)
    for lease in dead:  # after the shards: a root without manifest stays recognisable
        _remove(storage, lease, report)


def _name(entry: StoredEntry) -> str:
    return entry.rel.rsplit("/", 1)[-1]


def _is_own_shard_entry(storage: Storage, entry: StoredEntry) -> bool:
    """A shard file (a regular file named ``part-<key>.detfmt`` that starts with the pack
    magic) or a temporary of the writer (file or directory); never a link or a foreign file."""
    name = _name(entry)
    if SHARD_FILE.match(name) and entry.is_file:
        try:
            return storage.read(entry.rel, len(MAGIC) - 1)[: len(MAGIC)] == MAGIC
        except OSError:
            return False
    return bool(TEMPORARY.match(name)) and (entry.is_file or entry.is_dir)


def _older(entry: StoredEntry, now: float, grace_seconds: float) -> bool:
    if math.isnan(entry.mtime):
        return grace_seconds <= 0
    return now - entry.mtime >= grace_seconds


def _remove(storage: Storage, entry: StoredEntry, report: GcReport) -> None:
    try:
        if entry.is_dir:
            storage.delete_tree(entry.rel)
        else:
            storage.delete(entry.rel)
    except FileNotFoundError:
        return
    report.removed.append(storage.where(entry.rel))
