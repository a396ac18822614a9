"""Remote roots (any fsspec URL): publishing a local sharded root, and per-sample range reads.

Publishing creates the listed shards first (never replacing a published one) and swaps the
manifest in last (`detfmt.storage`): readers see the old manifest or the new one, never a
partial dataset, and a published shard never changes under them.
Range reads (``fs.cat_ranges``) are for inspecting single samples without fetching whole shards;
training should go through the shard cache (one GET per shard).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from detfmt import _codecs, _npy, errors, spec, validate
from detfmt.reader import Sample
from detfmt.shard.errors import ShardChecksumError
from detfmt.shard.manifest import MANIFEST_NAME, MAX_MANIFEST_BYTES, Manifest, decode_manifest
from detfmt.shard.pack import PREFIX, parse_toc, toc_length_prefix
from detfmt.shard.session import begin_write
from detfmt.shard.write import publish, publish_shard
from detfmt.storage import Digest, LocalStorage, file_digest, open_storage

__all__ = ["RemoteSampleReader", "upload"]


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


class RemoteSampleReader:
    """Read single samples of a remote sharded root with a few range requests each.

    Per shard it fetches the table of contents, header.json and the small label arrays once
    (a handful of ranges, batched with ``cat_ranges``); each sample then costs one range for its
    payload. Meant for inspection (``reader[i]``), not for training throughput.
    """

    def __init__(self, url: str, *, storage_options: Mapping[str, Any] | None = None) -> None:
        self.fs, self.base = _fs(url, storage_options)
        where = f"{url}/{MANIFEST_NAME}"
        self.manifest = decode_manifest(self.fs.cat_file(f"{self.base}/{MANIFEST_NAME}"), where)
        self._starts = np.array([s.first_index for s in self.manifest.shards], np.int64)
        self._shards: dict[int, dict[str, Any]] = {}
        self.requests = 0

    def __len__(self) -> int:
        return self.manifest.num_samples

    def _ranges(self, path: str, spans: list[tuple[int, int]]) -> list[bytes]:
        self.requests += len(spans)
        return self.fs.cat_ranges([path] * len(spans), [a for a, _ in spans], [b for _, b in spans])

    def _shard(self, k: int) -> dict[str, Any]:
        if k in self._shards:
            return self._shards[k]
        info = self.manifest.shards[k]
        path = f"{self.base}/{info.path}"
        (head,) = self._ranges(path, [(0, PREFIX)])
        toc_len = toc_length_prefix(head, path)
        (blob,) = self._ranges(path, [(PREFIX, PREFIX + toc_len)])
        toc = parse_toc(blob, info.bytes, path)
        hm = toc.get(spec.HEADER_FILE)
        (hdata,) = self._ranges(path, [(hm.offset, hm.offset + hm.size)])
        header = validate.parse_header(hdata, f"{path}#{spec.HEADER_FILE}")
        arrays = validate.expected_arrays(header)
        names = [spec.INDEX_FILE, spec.COUNTS_FILE, spec.BOXES_FILE, spec.CLASSES_FILE]
        members = {n: toc.get(n) for n in names}
        if any(m is None for m in members.values()):
            raise errors.LayoutError("shard lacks a label member", rule="FILE_MISSING", path=path)
        raw = self._ranges(path, [(m.offset, m.offset + m.size) for m in members.values()])
        loaded = {}
        for (name, m), data in zip(members.items(), raw, strict=True):
            npy = _npy.parse_header(data[: spec.MAX_NPY_HEADER_BYTES], m.size, f"{path}#{name}")
            dtype, shape = arrays[name]
            dt = spec.INDEX_DTYPE if dtype == "index" else np.dtype(dtype)
            count = int(np.prod(shape)) if shape else 1
            loaded[name] = np.frombuffer(data, dt, count, npy.data_offset).reshape(shape)
        blob_member = toc.get(spec.BLOB_FILE)
        entry = {"path": path, "header": header, "blob": blob_member.offset, **loaded}
        self._shards[k] = entry
        return entry

    def __getitem__(self, index: int) -> Sample:
        n = len(self)
        i = int(index) + (n if int(index) < 0 else 0)
        if not 0 <= i < n:
            raise errors.UsageError(f"sample index {index} out of range for {n} samples")
        k = int(np.searchsorted(self._starts, i, side="right")) - 1
        j = i - int(self._starts[k])
        sh = self._shard(k)
        rec = sh[spec.INDEX_FILE][j]
        start = sh["blob"] + int(rec["offset"])
        (payload,) = self._ranges(sh["path"], [(start, start + int(rec["nbytes"]))])
        h, w = int(rec["height"]), int(rec["width"])
        image = np.empty((h, w, 3), np.uint8)
        _codecs.decode_into(
            np.frombuffer(payload, np.uint8), int(rec["codec"]), image, path=sh["path"], index=j
        )
        c = int(sh[spec.COUNTS_FILE][j])
        boxes = np.array(sh[spec.BOXES_FILE][j, :c])
        classes = np.array(sh[spec.CLASSES_FILE][j, :c])
        for violation in validate.check_labels(
            boxes=boxes[None],
            classes=classes[None],
            counts=np.array([c]),
            heights=np.array([h]),
            widths=np.array([w]),
            num_classes=sh["header"].num_classes,
            indices=np.array([j]),
            paths=(f"{sh['path']}#{spec.BOXES_FILE}", f"{sh['path']}#{spec.CLASSES_FILE}"),
        ):
            raise violation.to_error()
        return Sample(index=i, image=image, boxes=boxes, classes=classes)
