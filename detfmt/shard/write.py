"""Engine-agnostic distributed writing: ``write_shard`` per task, one ``commit`` at the end.

Any engine (Ray, Dask, Spark, Slurm arrays, multiprocessing) runs ``write_shard`` per partition
and returns its `ShardMeta` to one driver, which calls ``commit``. Shard names are functions of
the caller's key, so a retried task rewrites its own file instead of adding a duplicate (S-13);
published shards are never changed; the manifest is published last, by a compare-and-swap on
the generation the write started from (S-15), so readers never see a partial write and two
writers never silently drop each other's shards. Every root is reached through
`detfmt.storage`.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import msgspec

from detfmt import errors
from detfmt.format.manifest import (
    MANIFEST_NAME,
    MAX_MANIFEST_BYTES,
    BoxFieldInfo,
    ClassEntry,
    Manifest,
    Schema,
    ShardInfo,
    check_manifest,
    decode_manifest,
    encode_manifest,
    manifest_identity,
)
from detfmt.format.schema import Header
from detfmt.shard.gc import gc
from detfmt.shard.names import SHARD_DIR, shard_path
from detfmt.shard.session import (
    begin_write,
    current_session,
    end_write,
    ensure_session,
    remove_dead_leases,
)
from detfmt.storage import Digest, Storage, open_storage, temp_name

__all__ = [
    "DEFAULT_SHARD_BYTES",
    "SESSION_BASE",
    "ShardMeta",
    "begin_write",
    "commit",
    "end_write",
    "gc",
    "generation",
    "partition_key",
    "schema_of",
    "shard_path",
    "write_partition",
    "write_shard",
]

DEFAULT_SHARD_BYTES = 128 << 20
#: ``commit(base=SESSION_BASE)``: compare with the generation the write session started from.
SESSION_BASE: Any = object()


class ShardMeta(msgspec.Struct, frozen=True, kw_only=True):
    """What a write task reports to the driver: one shard's manifest entry plus its schema."""

    key: str
    path: str
    num_samples: int
    bytes: int
    xxh3_64: str
    max_boxes: int
    schema: Schema
    #: the features the shard's header requires (ragged_labels): the manifest lists them too
    features: list[str] = []


def generation(root: str | os.PathLike[str], *,
               storage_options: Mapping[str, Any] | None = None) -> str | None:
    """The root's current manifest generation (None: no manifest): pass it to `commit` as
    ``base`` to publish only if nobody committed in between."""
    return _generation(open_storage(root, storage_options))


def schema_of(header: Header, codec: str) -> Schema:
    """The manifest schema of a shard with this 1.0 header: ``codec`` when every sample uses
    it (or there are none), else "mixed"."""
    used = {name for name, count in header.image.codecs.items() if count}
    return Schema(
        codec=codec if used <= {codec} else "mixed",  # type: ignore[arg-type]
        classes=[ClassEntry(name=c.name, source_id=c.source_id) for c in header.classes],
        box_fields=[BoxFieldInfo(name=f.name, dtype=f.dtype) for f in header.box_fields],
        image_fields=list(header.image_fields),
        fixed_shape=list(header.image.fixed_shape) if header.image.fixed_shape else None,
        max_side=header.image.max_side,
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
    ``metadata``, ``workers``, ``progress``). The shard is streamed into one complete file at a
    temporary path (`detfmt.writing.writer.build_shard`: each byte written once), then published
    whole under its name (S-13): a rename on the same file system, one PUT on an object store.
    A retry with the same key and samples writes the same bytes (S-14) and is accepted; other
    bytes under a name the published manifest lists are refused (SHARD_PUBLISHED). Nothing is
    published until `commit`; until then the write's lease keeps `gc` away from the shard.
    """
    from detfmt.writing.options import WriteOptions
    from detfmt.writing.writer import (
        build_shard,  # the writer pulls in the image stack; keep it lazy
    )

    rel = shard_path(key)
    if "overwrite" in write_options:
        raise errors.UsageError("write_shard does not take 'overwrite' (published shards are "
                                "never replaced, S-13)")
    workers = write_options.pop("workers", 0)
    progress = write_options.pop("progress", False)
    options = WriteOptions.from_kwargs(codec=codec, **write_options)  # UsageError, before I/O
    storage = open_storage(root, storage_options)
    try:
        ensure_session(storage)
        staging = storage.staging_dir(rel)
    except errors.DetfmtError:
        raise
    except OSError as error:
        raise errors.WriteError(f"cannot write to {storage.where(SHARD_DIR)}: {error}",
                                path=storage.where(SHARD_DIR), errno=error.errno) from error
    tmp = os.path.join(staging, temp_name(f"part-{key}.detfmt"))
    try:
        built = build_shard(samples, tmp, classes=classes, options=options, workers=workers,
                            progress=progress)
        publish_shard(storage, tmp, rel, Digest(built.bytes, built.xxh3_64))
    except errors.DetfmtError:
        raise  # already typed (WriteError is an OSError too)
    except OSError as error:
        raise errors.WriteError(f"writing shard {key!r} failed: {error}",
                                path=storage.where(rel), errno=error.errno) from error
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    return ShardMeta(key=key, path=rel, num_samples=built.num_samples, bytes=built.bytes,
                     xxh3_64=built.xxh3_64, max_boxes=built.max_boxes,
                     schema=schema_of(built.header, codec),
                     features=list(built.header.required_features))


def publish_shard(storage: Storage, local: str, rel: str, digest: Digest, *,
                  move: bool = True) -> None:
    """Store the complete local file as shard ``rel``, never changing a published shard.

    Exclusive create first. If the name is taken: identical bytes are a retry (S-14, done);
    other bytes under a name the published manifest lists are refused (SHARD_PUBLISHED);
    a leftover no manifest lists (a failed attempt) is replaced atomically, never in place."""
    while True:
        if storage.put_file(local, rel, exclusive=True, move=move):
            return
        try:
            existing = storage.digest(rel, limit=digest.size)
        except FileNotFoundError:
            continue  # removed meanwhile (gc of a dead attempt): create it again
        if existing == digest:
            return
        if rel in _published_paths(storage):
            raise errors.TargetExistsError(
                f"shard {rel} is named by the published manifest with other content; rewriting "
                "it would change a committed dataset under its readers: use new keys "
                "(key_prefix) or a new root",
                path=storage.url,
                rule="SHARD_PUBLISHED",
            )
        storage.put_file(local, rel, move=move)
        return


def _published_paths(storage: Storage) -> set[str]:
    """The shard paths of the root's published manifest (empty when it has none, or when it
    is unreadable: such a manifest publishes nothing readers could use)."""
    data, _ = storage.read_generation(MANIFEST_NAME, MAX_MANIFEST_BYTES)
    if data is None:
        return set()
    try:
        return {s.path for s in decode_manifest(data, storage.where(MANIFEST_NAME)).shards}
    except errors.DetfmtError:
        return set()


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
    base: str | object | None = SESSION_BASE,
) -> Manifest:
    """Publish the manifest listing ``metas`` (sorted by key), atomically and exclusively.

    A compare-and-swap on the manifest's generation (S-15): the manifest is replaced only if
    it is still the one this write started from, ``base``. By default that is the generation
    read when this process's write session of the root began (the first `write_shard`, or
    `begin_write`), else the one read now. When another commit got there first this raises
    `CommitConflictError` and publishes nothing, so no commit silently drops another's shards.
    How the swap is made atomic depends on the storage (docs/reliability.md): a lock and a
    rename on a file system, a conditional PUT on S3.

    Each shard file must exist with the size its meta reports. Shards of earlier manifests or
    failed attempts that are not listed stay until `gc` removes them.
    """
    storage = open_storage(root, storage_options)
    session = current_session(storage)
    if base is SESSION_BASE:
        base = session.base if session is not None else _generation(storage)
    metas = [m if isinstance(m, ShardMeta) else msgspec.convert(m, ShardMeta) for m in metas]
    metas.sort(key=lambda m: m.key.encode())
    keys = [m.key for m in metas]
    if len(set(keys)) != len(keys):
        raise errors.UsageError("two shards share a key", rule="SHARD_KEY")
    if storage.exists("header.json"):
        raise errors.TargetExistsError("root holds a 1.0 dataset (header.json)",
                                       path=storage.url)
    if not metas and schema is None:
        raise errors.UsageError("commit of zero shards needs an explicit schema")
    for m in metas:
        if shard_path(m.key) != m.path:
            raise errors.UsageError(f"shard {m.key!r} path {m.path!r} does not match its key")
        _check_stored(storage, m.path, m.bytes)
    shards = list_shards([(m.path, m.key, m.num_samples, m.bytes, m.xxh3_64, m.max_boxes)
                          for m in metas])
    version, features = manifest_identity(f for m in metas for f in m.features)
    manifest = Manifest(
        format="detfmt",
        version=version,
        required_features=features,
        write_id=write_id or uuid.uuid4().hex,
        num_samples=sum(s.num_samples for s in shards),
        schema=schema if schema is not None else _common_schema(metas),
        shards=shards,
        writer=writer_name(),
        metadata=dict(metadata or {}),
    )
    generation = publish(storage, manifest, base)  # type: ignore[arg-type]
    if session is not None:
        session.committed(generation)
    remove_dead_leases(storage)  # of finished task processes (pool workers skip exit handlers)
    return manifest


def list_shards(entries: Sequence[tuple[str, str, int, int, str, int]],
                first: int = 0) -> list[ShardInfo]:
    """Manifest entries for ``(path, key, num_samples, bytes, xxh3_64, max_boxes)`` in the
    given order, with consecutive first indices from ``first`` (S-5)."""
    out = []
    for path, key, num, size, digest, max_boxes in entries:
        out.append(ShardInfo(path=path, key=key, num_samples=num, first_index=first,
                             bytes=size, xxh3_64=digest, max_boxes=max_boxes))
        first += num
    return out


def writer_name() -> str:
    from detfmt.version import __version__

    return f"detfmt-python {__version__}"


def _generation(storage: Storage) -> str | None:
    return storage.read_generation(MANIFEST_NAME, MAX_MANIFEST_BYTES)[1]


def _check_stored(storage: Storage, rel: str, expected: int) -> None:
    """The shard exists with the size its entry will declare (a manifest never names a
    missing or partial shard, S-15)."""
    try:
        size = storage.size(rel)
    except FileNotFoundError as error:
        raise errors.WriteError(f"shard {rel} is missing", path=storage.url) from error
    except OSError as error:
        raise errors.WriteError(f"cannot stat shard {rel}: {error}", path=storage.url,
                                errno=error.errno) from error
    if size != expected:
        raise errors.WriteError(f"shard {rel} has {size} bytes, meta says {expected}",
                                path=storage.url)


def publish(storage: Storage, manifest: Manifest, base: str | None) -> str:
    """Swap ``manifest`` in if the root's manifest still has generation ``base``; returns the
    new generation. `CommitConflictError` when another commit won; other failures are
    `WriteError` (the old manifest stays, unless the message says it was published)."""
    data = encode_manifest(check_manifest(manifest))
    try:
        return storage.swap(MANIFEST_NAME, data, base)
    except errors.DetfmtError:
        raise
    except OSError as error:
        raise errors.WriteError(f"cannot publish the manifest: {error}", path=storage.url,
                                errno=error.errno) from error
