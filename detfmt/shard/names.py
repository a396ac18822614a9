"""The names a sharded writer gives the files of a root, and nothing else.

`gc` deletes only entries whose names match these patterns (and that are what the pattern
says: a regular file or a directory, never a link), so it never removes a file it did not
create, whatever else lives in the root.
"""

from __future__ import annotations

import re

from detfmt import errors

__all__ = [
    "KEY_PATTERN",
    "MANIFEST_TEMP",
    "SHARD_DIR",
    "SHARD_FILE",
    "TEMPORARY",
    "shard_path",
]

SHARD_DIR = "shards"
KEY_PATTERN = re.compile(r"[A-Za-z0-9_.-]{1,128}\Z")
#: ``shards/part-<key>.detfmt`` (S-13)
SHARD_FILE = re.compile(r"part-([A-Za-z0-9_.-]{1,128})\.detfmt\Z")
#: temporaries of `detfmt.storage.temp_name` (``.tmp-<base>-<12 hex>``), and the build directory
#: ``<temporary>.d`` of a shard
TEMPORARY = re.compile(r"\.tmp-[A-Za-z0-9_.-]{1,160}-[0-9a-f]{12}(\.d)?\Z")
#: manifest temporaries of a local commit (this version, and ``mkstemp``'s of earlier ones)
MANIFEST_TEMP = re.compile(r"\.manifest\.(json\.[0-9a-f]{12}|[a-z0-9_]{8})\.tmp\Z")


def shard_path(key: str) -> str:
    """The shard's path relative to the root, a pure function of its key (S-13)."""
    if not isinstance(key, str) or not KEY_PATTERN.match(key) or key in (".", ".."):
        raise errors.UsageError(f"shard key must match [A-Za-z0-9_.-]{{1,128}}, got {key!r}")
    return f"{SHARD_DIR}/part-{key}.detfmt"
