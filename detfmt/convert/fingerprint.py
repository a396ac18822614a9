"""A fingerprint of the source files a conversion read, stored in the dataset card.

Each file contributes its name relative to the source root, its size and the XXH3-128 of its
bytes, in the order the converter read them; the fingerprint is the XXH3-128 of that list. The
same source files give the same fingerprint wherever the source folder lies, and any changed,
added, removed or renamed file changes it. The per-file digests also find duplicate images.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import xxhash

__all__ = ["FINGERPRINT_SCHEME", "Fingerprint", "file_digest"]

FINGERPRINT_SCHEME = "xxh3-128"
_CHUNK = 1 << 20


def file_digest(path: str | os.PathLike[str]) -> tuple[int, bytes]:
    """(size, XXH3-128 digest) of a file's bytes."""
    hasher = xxhash.xxh3_128()
    size = 0
    with open(path, "rb") as handle:
        while chunk := handle.read(_CHUNK):
            hasher.update(chunk)
            size += len(chunk)
    return size, hasher.digest()


class Fingerprint:
    """Accumulates (relative name, size, digest) of every source file read, in order."""

    def __init__(self, root: str | os.PathLike[str] | None) -> None:
        self.root = Path(root) if root is not None else None
        self._hasher = xxhash.xxh3_128()
        self.files = 0
        self.bytes = 0

    def _name(self, path: str | os.PathLike[str]) -> str:
        name = os.fspath(path)
        if self.root is not None:
            with contextlib.suppress(ValueError):  # outside the root: the name as given
                name = Path(name).relative_to(self.root).as_posix()
        return name

    def add(self, path: str | os.PathLike[str], size: int, digest: bytes) -> None:
        """Add a file already hashed (``path`` as the converter names it)."""
        name = self._name(path).encode("utf-8", "surrogateescape")
        self._hasher.update(len(name).to_bytes(4, "little") + name)
        self._hasher.update(size.to_bytes(8, "little") + digest)
        self.files += 1
        self.bytes += size

    def add_file(self, path: str | os.PathLike[str], read_from: str | os.PathLike[str] | None = None
                 ) -> bytes:
        """Hash a file (read from ``read_from``, default ``path``) and add it; return its digest."""
        size, digest = file_digest(read_from if read_from is not None else path)
        self.add(path, size, digest)
        return digest

    def hexdigest(self) -> str:
        return f"{FINGERPRINT_SCHEME}:{self._hasher.hexdigest()}"
