"""Publishing a local sharded root to a remote one (any fsspec URL).

The listed shards are uploaded first and the manifest last, in one PUT, which object stores make
atomic: readers see the old manifest or the new one, never a partial dataset.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from detfmt.shard.manifest import MANIFEST_NAME, Manifest, read_manifest

__all__ = ["upload"]


def _fs(url: str, storage_options: Mapping[str, Any] | None) -> tuple[Any, str]:
    import fsspec

    fs, path = fsspec.core.url_to_fs(url, **(storage_options or {}))
    return fs, path.rstrip("/")


def upload(
    local_root: str | os.PathLike[str],
    url: str,
    *,
    storage_options: Mapping[str, Any] | None = None,
) -> Manifest:
    """Copy a committed local sharded root to ``url``: shards first, manifest.json last."""
    local_root = os.fspath(local_root)
    manifest = read_manifest(local_root)
    fs, base = _fs(url, storage_options)
    for shard in manifest.shards:
        fs.put_file(os.path.join(local_root, shard.path), f"{base}/{shard.path}")
    fs.put_file(os.path.join(local_root, MANIFEST_NAME), f"{base}/{MANIFEST_NAME}")
    return manifest
