"""Engine-agnostic distributed writing: ``write_shard`` per task, one ``commit`` at the end.

Any engine (Ray, Dask, Spark, Slurm arrays, multiprocessing) runs ``write_shard`` per partition
and returns its `ShardMeta` to one driver, which calls ``commit``. Shard names are functions of
the caller's key, so a retried task overwrites its own file instead of adding a duplicate (S-13);
the manifest is published last and atomically (S-15), so readers never see a partial write.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import msgspec
import xxhash

from detfmt import errors
from detfmt.reader import Dataset
from detfmt.shard.manifest import (
    FORMAT_VERSION,
    MANIFEST_NAME,
    BoxFieldInfo,
    ClassEntry,
    Manifest,
    Schema,
    ShardInfo,
    check_manifest,
    encode_manifest,
    fsync_dir,
    publish_manifest,
    read_manifest,
)
from detfmt.shard.pack import pack_directory

__all__ = [
    "DEFAULT_SHARD_BYTES",
    "ShardMeta",
    "commit",
    "gc",
    "partition_key",
    "shard_path",
    "write_partition",
    "write_shard",
]

DEFAULT_SHARD_BYTES = 128 << 20
SHARD_DIR = "shards"
_KEY = re.compile(r"[A-Za-z0-9_.-]{1,128}\Z")


class ShardMeta(msgspec.Struct, frozen=True, kw_only=True):
    """What a write task reports to the driver: one shard's manifest entry plus its schema."""

    key: str
    path: str
    num_samples: int
    bytes: int
    xxh3_64: str
    max_boxes: int
    schema: Schema


def is_url(root: str | os.PathLike[str]) -> bool:
    """Remote roots are fsspec URLs (``s3://``, ``gs://``, ``http://``...); ``file://`` is local."""
    text = os.fspath(root)
    return "://" in text and not text.startswith("file://")


def _remote(root: str, storage_options: Mapping[str, Any] | None) -> tuple[Any, str]:
    import fsspec  # the scale extra; only remote roots need it

    fs, base = fsspec.core.url_to_fs(root, **(storage_options or {}))
    return fs, base.rstrip("/")


def shard_path(key: str) -> str:
    """The shard's path relative to the root, a pure function of its key (S-13)."""
    if not isinstance(key, str) or not _KEY.match(key) or key in (".", ".."):
        raise errors.UsageError(f"shard key must match [A-Za-z0-9_.-]{{1,128}}, got {key!r}")
    return f"{SHARD_DIR}/part-{key}.detfmt"


class _HashingWriter:
    def __init__(self, f: Any) -> None:
        self.f = f
        self.digest = xxhash.xxh3_64()
        self.size = 0

    def write(self, data: bytes) -> int:
        self.digest.update(data)
        self.size += len(data)
        return self.f.write(data)


def _schema_of(ds: Dataset, codec: str) -> Schema:
    h = ds.header
    used = {name for name, count in h.image.codecs.items() if count}
    return Schema(
        codec=codec if used <= {codec} else "mixed",  # type: ignore[arg-type]
        classes=[ClassEntry(name=c.name, source_id=c.source_id) for c in h.classes],
        box_fields=[BoxFieldInfo(name=f.name, dtype=f.dtype) for f in h.box_fields],
        image_fields=list(h.image_fields),
        fixed_shape=list(h.image.fixed_shape) if h.image.fixed_shape else None,
        max_side=h.image.max_side,
    )


def write_shard(
    samples: Iterable[Any],
    root: str | os.PathLike[str],
    key: str,
    *,
    classes: Sequence[Any],
    codec: str = "raw",
    storage_options: Mapping[str, Any] | None = None,
    **write_options: Any,
) -> ShardMeta:
    """Write one shard (a packed 1.0 dataset) at ``<root>/shards/part-<key>.detfmt``.

    ``samples``, ``classes``, ``codec`` and ``write_options`` are those of `detfmt.write`
    (``max_side``, ``fixed_size``, ``clip``, ``box_fields``, ``jpeg_quality``, ``zstd_level``,
    ``metadata``). The file appears complete or not at all; a retry with the same key and samples
    writes the same bytes to the same name (S-13, S-14). Nothing is published until `commit`.
    ``root`` may be an fsspec URL (``storage_options`` apply): the shard is built in the local
    temp directory and uploaded with one PUT.
    """
    from detfmt.writer import write  # the writer pulls in the image stack; keep it lazy

    rel = shard_path(key)
    for bad in ("overwrite", "workers", "progress"):
        if bad in write_options:
            raise errors.UsageError(f"write_shard does not take {bad!r}")
    remote = is_url(root)
    if remote:  # build locally, then one PUT: object stores make it appear whole or not at all
        shards_dir = tempfile.gettempdir()
        final = f"{os.fspath(root).rstrip('/')}/{rel}"
    else:
        shards_dir = os.path.join(os.fspath(root), SHARD_DIR)
        final = os.path.join(os.fspath(root), rel)
    try:
        os.makedirs(shards_dir, exist_ok=True)
        work = tempfile.mkdtemp(prefix=f".tmp-{key}-", dir=shards_dir)
    except OSError as error:
        raise errors.WriteError(f"cannot create {shards_dir}: {error}", path=shards_dir) from error
    try:
        src = os.path.join(work, "ds")
        write(samples, src, classes=classes, codec=codec, progress=False, **write_options)
        with Dataset(src) as ds:
            schema = _schema_of(ds, codec)
            num, max_boxes = len(ds), ds.header.max_boxes
        tmp = os.path.join(work, "packed")
        with open(tmp, "wb") as f:
            out = _HashingWriter(f)
            pack_directory(src, out)  # type: ignore[arg-type]
            f.flush()
            if not remote:
                os.fsync(f.fileno())
        _refuse_published_change(root, rel, out, storage_options)
        if remote:
            fs, base = _remote(os.fspath(root), storage_options)
            fs.put_file(tmp, f"{base}/{rel}")
        else:
            os.replace(tmp, final)
            fsync_dir(shards_dir)
    except errors.DetfmtError:
        raise  # already typed (WriteError is an OSError too)
    except OSError as error:
        raise errors.WriteError(f"writing shard {key!r} failed: {error}", path=final) from error
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return ShardMeta(
        key=key,
        path=rel,
        num_samples=num,
        bytes=out.size,
        xxh3_64=out.digest.hexdigest(),
        max_boxes=max_boxes,
        schema=schema,
    )


def _published_manifest(root: str | os.PathLike[str],
                        storage_options: Mapping[str, Any] | None) -> bytes | None:
    """The bytes of ``root``'s published manifest.json, or None when there is none."""
    try:
        if is_url(root):
            fs, base = _remote(os.fspath(root), storage_options)
            return fs.cat_file(f"{base}/{MANIFEST_NAME}")
        with open(os.path.join(os.fspath(root), MANIFEST_NAME), "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None


def _refuse_published_change(root: str | os.PathLike[str], rel: str, out: _HashingWriter,
                             storage_options: Mapping[str, Any] | None) -> None:
    """S-13: a shard the published manifest names may be rewritten with the same bytes only.

    Readers of the published dataset map that file; different content under the same name would
    change a committed dataset under them (SHARD_SIZE errors, or other samples at the same size).
    """
    from detfmt.shard.manifest import decode_manifest

    data = _published_manifest(root, storage_options)
    if data is None:
        return
    try:
        listed = {s.path: s for s in decode_manifest(data).shards}
    except errors.DetfmtError:
        return  # an unreadable manifest publishes nothing readers could use
    entry = listed.get(rel)
    if entry is not None and (entry.bytes, entry.xxh3_64) != (out.size, out.digest.hexdigest()):
        raise errors.TargetExistsError(
            f"shard {rel} is named by the published manifest with other content; rewriting it "
            "would change a committed dataset under its readers: use new keys (key_prefix) or a "
            "new root",
            path=os.fspath(root),
            rule="SHARD_PUBLISHED",
        )


def partition_key(partition: int, seq: int, prefix: str = "") -> str:
    """Key of the ``seq``-th shard rolled from input partition ``partition`` (any engine)."""
    return f"{prefix}{int(partition):05d}-{int(seq):04d}"


def _estimated_bytes(sample: Mapping[str, Any]) -> int:
    """Stored size guess used to roll shards: the input image's bytes plus its labels."""
    image = sample.get("image")
    if isinstance(image, (bytes, bytearray, memoryview)):
        size = len(image)
    elif isinstance(image, (str, os.PathLike)):
        try:
            size = os.path.getsize(image)
        except OSError:
            size = 0
    else:
        size = int(getattr(image, "nbytes", 0))
    return size + int(getattr(sample.get("boxes"), "nbytes", 0)) + 64


def write_partition(
    samples: Iterable[Mapping[str, Any]],
    root: str | os.PathLike[str],
    partition: int,
    *,
    classes: Sequence[Any],
    shard_bytes: int = DEFAULT_SHARD_BYTES,
    key_prefix: str = "",
    **options: Any,
) -> list[ShardMeta]:
    """Write one input partition as shards rolled at ``shard_bytes`` (estimated from the input).

    Keys are ``partition_key(partition, seq)``, so any engine given the same partitioning writes
    the same files, and a retried partition rewrites them. Returns the metas for `commit`.
    """
    if shard_bytes < 1:
        raise errors.UsageError(f"shard_bytes must be >= 1, got {shard_bytes}")
    metas: list[ShardMeta] = []
    buf: list[Mapping[str, Any]] = []
    size = 0
    for sample in samples:
        buf.append(sample)
        size += _estimated_bytes(sample)
        if size >= shard_bytes:
            key = partition_key(partition, len(metas), key_prefix)
            metas.append(write_shard(buf, root, key, classes=classes, **options))
            buf, size = [], 0
    if buf:
        key = partition_key(partition, len(metas), key_prefix)
        metas.append(write_shard(buf, root, key, classes=classes, **options))
    return metas


def _common_schema(metas: Sequence[ShardMeta]) -> Schema:
    """All shards must agree on classes and fields; fixed_shape and codec survive only when
    every shard has the same one (else null / "mixed")."""
    first = metas[0].schema
    shapes = {tuple(m.schema.fixed_shape) if m.schema.fixed_shape else None for m in metas}
    codecs = {m.schema.codec for m in metas}
    base = msgspec.structs.replace(first, fixed_shape=None, codec="mixed")
    for m in metas:
        if msgspec.structs.replace(m.schema, fixed_shape=None, codec="mixed") != base:
            raise errors.UsageError(
                f"shard {m.key!r} has a different schema than shard {metas[0].key!r}",
                rule="SCHEMA_MISMATCH",
            )
    shape = shapes.pop() if len(shapes) == 1 else None
    codec = codecs.pop() if len(codecs) == 1 else "mixed"
    return msgspec.structs.replace(first, fixed_shape=list(shape) if shape else None, codec=codec)


def commit(
    root: str | os.PathLike[str],
    metas: Iterable[ShardMeta | Mapping[str, Any]],
    *,
    write_id: str | None = None,
    metadata: Mapping[str, str] | None = None,
    schema: Schema | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> Manifest:
    """Publish the manifest listing ``metas`` (sorted by key), atomically (S-15).

    Each shard file must exist with the size its meta reports. Shards from earlier manifests or
    failed attempts that are not listed stay on disk until `gc` removes them. For a URL root the
    manifest is one PUT (atomic on object stores), after every shard was checked to exist.
    """
    root = os.fspath(root)
    if is_url(root):
        fs, base = _remote(root, storage_options)

        def exists(rel: str) -> bool:
            return bool(fs.exists(f"{base}/{rel}"))

        def size_of(rel: str) -> int:
            return int(fs.info(f"{base}/{rel}")["size"])
    else:

        def exists(rel: str) -> bool:
            return os.path.exists(os.path.join(root, rel))

        def size_of(rel: str) -> int:
            return os.stat(os.path.join(root, rel)).st_size

    metas = [m if isinstance(m, ShardMeta) else msgspec.convert(m, ShardMeta) for m in metas]
    metas.sort(key=lambda m: m.key.encode())
    keys = [m.key for m in metas]
    if len(set(keys)) != len(keys):
        raise errors.UsageError("two shards share a key", rule="SHARD_KEY")
    if exists("header.json"):
        raise errors.TargetExistsError("root holds a 1.0 dataset (header.json)", path=root)
    if not metas and schema is None:
        raise errors.UsageError("commit of zero shards needs an explicit schema")
    for m in metas:
        if shard_path(m.key) != m.path:
            raise errors.UsageError(f"shard {m.key!r} path {m.path!r} does not match its key")
        try:
            size = size_of(m.path)
        except FileNotFoundError as error:
            raise errors.WriteError(f"shard {m.path} is missing", path=root) from error
        if size != m.bytes:
            raise errors.WriteError(
                f"shard {m.path} has {size} bytes, meta says {m.bytes}", path=root
            )
    shards, first = [], 0
    for m in metas:
        shards.append(
            ShardInfo(
                path=m.path,
                key=m.key,
                num_samples=m.num_samples,
                first_index=first,
                bytes=m.bytes,
                xxh3_64=m.xxh3_64,
                max_boxes=m.max_boxes,
            )
        )
        first += m.num_samples
    from detfmt.version import __version__

    manifest = Manifest(
        format="detfmt",
        version=FORMAT_VERSION,
        required_features=["sharded"],
        write_id=write_id or uuid.uuid4().hex,
        num_samples=first,
        schema=schema if schema is not None else _common_schema(metas),
        shards=shards,
        writer=f"detfmt-python {__version__}",
        metadata=dict(metadata or {}),
    )
    try:
        if is_url(root):
            fs.pipe_file(f"{base}/{MANIFEST_NAME}", encode_manifest(check_manifest(manifest)))
        else:
            publish_manifest(root, manifest)
    except errors.DetfmtError:
        raise
    except OSError as error:
        raise errors.WriteError(f"cannot publish the manifest: {error}", path=root) from error
    return manifest


def gc(
    root: str | os.PathLike[str],
    *,
    grace_seconds: float = 3600.0,
    storage_options: Mapping[str, Any] | None = None,
) -> list[str]:
    """Delete shard files and temporaries the manifest does not name, older than the grace (S-16).

    Returns the removed paths. Without a manifest nothing is published, so everything older than
    the grace period under ``shards/`` is an orphan.
    """
    root = os.fspath(root)
    if is_url(root):
        return _gc_remote(root, grace_seconds, storage_options)
    if not os.path.isdir(root):
        return []
    try:
        listed = {s.path for s in read_manifest(root).shards}
    except FileNotFoundError:
        listed = set()
    removed: list[str] = []
    now = time.time()
    shards_dir = os.path.join(root, SHARD_DIR)
    if os.path.isdir(shards_dir):
        for entry in os.scandir(shards_dir):
            rel = f"{SHARD_DIR}/{entry.name}"
            if rel in listed:
                continue
            with contextlib.suppress(FileNotFoundError):
                if now - entry.stat(follow_symlinks=False).st_mtime < grace_seconds:
                    continue
                if entry.is_dir(follow_symlinks=False):
                    shutil.rmtree(entry.path, ignore_errors=True)
                else:
                    os.unlink(entry.path)
                removed.append(entry.path)
    for entry in os.scandir(root):  # stale manifest temporaries from a crashed commit
        if entry.name.startswith(".manifest.") and entry.name != MANIFEST_NAME:
            with contextlib.suppress(FileNotFoundError):
                if now - entry.stat().st_mtime >= grace_seconds:
                    os.unlink(entry.path)
                    removed.append(entry.path)
    return sorted(removed)


def _gc_remote(
    root: str, grace_seconds: float, storage_options: Mapping[str, Any] | None
) -> list[str]:
    """`gc` for a URL root: delete unlisted objects under ``shards/`` older than the grace."""
    from detfmt.shard.manifest import decode_manifest

    fs, base = _remote(root, storage_options)
    try:
        listed = {s.path for s in decode_manifest(fs.cat_file(f"{base}/{MANIFEST_NAME}")).shards}
    except FileNotFoundError:
        listed = set()
    try:
        entries = fs.ls(f"{base}/{SHARD_DIR}", detail=True)
    except FileNotFoundError:
        return []
    removed = []
    now = time.time()
    for entry in entries:
        name = entry["name"].rstrip("/")
        if f"{SHARD_DIR}/{name.rsplit('/', 1)[-1]}" in listed:
            continue
        try:
            age = now - fs.modified(name).timestamp()
        except (NotImplementedError, FileNotFoundError, OSError):
            age = float("inf") if grace_seconds <= 0 else 0.0
        if age >= grace_seconds:
            fs.rm(name, recursive=entry.get("type") == "directory")
            removed.append(name)
    return sorted(removed)
