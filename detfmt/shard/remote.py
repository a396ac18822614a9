"""Publishing a local sharded root to a remote one (any fsspec URL).

Publishing creates the listed shards first (never replacing a published one) and swaps the
manifest in last (`detfmt.storage`): readers see the old manifest or the new one, never a
partial dataset, and a published shard never changes under them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from detfmt.errors import ShardChecksumError
from detfmt.format.manifest import MANIFEST_NAME, MAX_MANIFEST_BYTES, Manifest, decode_manifest
from detfmt.shard.session import begin_write
from detfmt.shard.write import publish, publish_shard
from detfmt.storage import Digest, LocalStorage, file_digest, open_storage

__all__ = ["upload"]


def upload(
    local_root: str | os.PathLike[str],
    url: str,
    *,
    storage_options: Mapping[str, Any] | None = None,
) -> Manifest:
    """Publish a committed local sharded root at ``url``: shards first, manifest.json last.

    Each shard is hashed against the local manifest, then created at the target only if
    absent (published shards are immutable: an identical copy already there is kept, other
    bytes under a name the target's manifest lists are refused with SHARD_PUBLISHED). The
    manifest is a compare-and-swap on the target's manifest as read before the upload began,
    so a concurrent commit to the target is a `CommitConflictError`, never a silent loss.
    """
    source = LocalStorage(os.fspath(local_root))
    data = source.read(MANIFEST_NAME, MAX_MANIFEST_BYTES)
    manifest = decode_manifest(data, source.where(MANIFEST_NAME))
    target = open_storage(url, storage_options)
    with begin_write(target) as session:
        for shard in manifest.shards:
            local = source.where(shard.path)
            found = file_digest(local)
            if found != Digest(shard.bytes, shard.xxh3_64):
                raise ShardChecksumError(
                    f"local shard has {found.size} bytes, xxh3 {found.xxh3_64}; the manifest "
                    f"says {shard.bytes}, {shard.xxh3_64}: refusing to publish it", path=local)
            publish_shard(target, local, shard.path, found, move=False)
        publish(target, manifest, session.base)
    return manifest
