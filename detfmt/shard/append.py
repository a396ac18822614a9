"""``detfmt append ROOT SRC``: add datasets to a sharded root as new shards, in one commit.

A ROOT that does not exist yet (or is an empty directory) becomes a new sharded root.

A growing dataset never needs a full rewrite: each source (a 1.0 directory, or a sharded root,
local or remote) becomes new shards whose payloads are the source's bytes as stored (a 1.0
directory is packed member by member; a source shard is copied whole), checked against the
source's own checksums while they are copied. The new manifest keeps every existing shard where
it was (global indices do not move) and lists the new ones after them. It is published by the
same compare-and-swap as `commit`: an append that races another commit fails with
`CommitConflictError` and removes the shards it added. Readers opened before the append keep
their manifest and the immutable shards it names.

Classes must match by name, in order (class ids are stored in the payload labels); box fields,
image fields and ``max_side`` must match too. Anything else is a `IncompatibleDatasetsError`:
remapping classes is a separate step.
"""

from __future__ import annotations

import contextlib
import errno
import os
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from detfmt import errors
from detfmt.errors import IncompatibleDatasetsError, ShardChecksumError
from detfmt.format import spec
from detfmt.format.manifest import (
    MANIFEST_NAME,
    MAX_MANIFEST_BYTES,
    Manifest,
    Schema,
    ShardInfo,
    decode_manifest,
    manifest_identity,
)
from detfmt.format.pack import pack_directory
from detfmt.format.schema import Header
from detfmt.reading.dataset import Dataset
from detfmt.shard.names import SHARD_DIR, shard_path
from detfmt.shard.session import LEASE_PATTERN, begin_write
from detfmt.shard.write import list_shards, publish, schema_of, writer_name
from detfmt.storage import (
    Digest,
    Storage,
    StoredEntry,
    copy_digest,
    file_digest,
    open_storage,
    temp_name,
)

__all__ = ["append"]


def append(
    root: str | os.PathLike[str],
    sources: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    *,
    storage_options: Mapping[str, Any] | None = None,
    source_options: Mapping[str, Any] | None = None,
    metadata: Mapping[str, str] | None = None,
    allow_duplicates: bool = False,
) -> Manifest:
    """Append ``sources`` to the sharded root ``root`` in one atomic commit; returns the new
    manifest. ``storage_options`` apply to ``root``, ``source_options`` to remote sources;
    ``metadata`` entries are added to the manifest's.

    A sample whose image bytes (payload checksum and size) are already in the root, or in an
    earlier source, is refused before anything is copied (`IncompatibleDatasetsError`, rule
    ``DUPLICATE_SAMPLES``, naming them) unless ``allow_duplicates``: appending the same data
    twice is never silent."""
    if isinstance(sources, (str, os.PathLike)):
        sources = [sources]
    if not sources:
        raise errors.UsageError("append needs at least one source")
    storage = open_storage(root, storage_options)
    if storage.exists("header.json"):
        raise errors.TargetExistsError(
            "root holds a 1.0 dataset (header.json): append grows sharded roots only",
            path=storage.url)
    data, base = storage.read_generation(MANIFEST_NAME, MAX_MANIFEST_BYTES)
    if data is not None:
        old: Manifest | None = decode_manifest(data, storage.where(MANIFEST_NAME))
    elif any(not _writer_entry(e) for e in storage.list_dir("")):
        raise errors.DatasetNotFoundError(
            "not a sharded root (no manifest.json) and not empty: append grows a sharded root, "
            "or creates one at a new or empty location", path=storage.where(MANIFEST_NAME),
            rule="FILE_MISSING")
    else:
        old = None  # a new root: the first source's schema
    if not allow_duplicates:
        _refuse_duplicates(root, storage_options, old, sources, source_options)
    write_id = uuid.uuid4().hex
    prefix = f"append-{write_id[:12]}-"
    added: list[_Added] = []
    try:
        return _append_all(storage, sources, old, base, write_id, prefix, added,
                           source_options, metadata)
    except errors.DetfmtError:
        raise
    except OSError as error:  # a full disk, an I/O error: the root keeps its manifest
        code = getattr(error, "errno", None)
        kind = (errors.TargetNotWritableError if code in (errno.EROFS, errno.EACCES, errno.EPERM)
                else errors.WriteError)
        raise kind(f"append failed, nothing was added: {error.strerror or error}",
                   path=error.filename or storage.url, errno=code) from error


def _append_all(storage: Storage, sources: Sequence[str | os.PathLike[str]],
                old: Manifest | None, base: str | None, write_id: str, prefix: str,
                added: list[_Added], source_options: Mapping[str, Any] | None,
                metadata: Mapping[str, str] | None) -> Manifest:
    schema: Schema | None = old.schema if old is not None else None
    with begin_write(storage, base=base):
        try:
            for source in sources:
                done = len(added)
                _add_source(storage, source, schema, prefix, added, source_options)
                for entry in added[done:]:
                    schema = _merged(schema or entry.schema, entry.schema, os.fspath(source))
            if schema is None:
                raise errors.UsageError("the sources hold no shards: nothing to append")
            shards = (list(old.shards) if old else []) + list_shards(
                [(a.info.path, a.info.key, a.info.num_samples, a.info.bytes, a.info.xxh3_64,
                  a.info.max_boxes) for a in added],
                first=old.num_samples if old else 0)
            version, features = manifest_identity(
                [*(old.required_features if old else []),
                 *(f for entry in added for f in entry.features)])
            manifest = Manifest(
                format="detfmt", version=version, required_features=features,
                write_id=write_id, num_samples=sum(s.num_samples for s in shards),
                schema=schema, shards=shards, writer=writer_name(),
                metadata={**(old.metadata if old else {}), **dict(metadata or {})})
            publish(storage, manifest, base)
        except BaseException:
            for entry in added:  # never listed: ours to remove
                with contextlib.suppress(OSError):
                    storage.delete(entry.info.path)
            raise
    return manifest


def _refuse_duplicates(root: str | os.PathLike[str], storage_options: Mapping[str, Any] | None,
                       old: Manifest | None, sources: Sequence[str | os.PathLike[str]],
                       source_options: Mapping[str, Any] | None) -> None:
    """Refuse samples whose payload is already in the root or in an earlier source (from the
    indexes: nothing is decoded; a remote root's shards are read through the cache)."""
    from detfmt.reading.duplicates import describe, find_duplicates
    from detfmt.reading.opener import is_sharded_root, open_dataset

    with contextlib.ExitStack() as stack:
        datasets = []
        if old is not None and old.num_samples:
            options = {"storage_options": storage_options} if storage_options else {}
            datasets.append(stack.enter_context(open_dataset(os.fspath(root), **options)))
        first_new = len(datasets)
        for source in sources:
            text = os.fspath(source)
            options = ({"storage_options": source_options}
                       if source_options and is_sharded_root(text) else {})
            datasets.append(stack.enter_context(open_dataset(text, **options)))
        classes = {tuple((c.name, c.source_id) for c in ds.schema.classes) for ds in datasets}
        if len(classes) > 1:  # incompatible: the schema check names that first
            return
        found = find_duplicates(datasets, first_new=first_new, within=False)
    if found:
        raise IncompatibleDatasetsError(
            f"{len(found)} sample(s) to append have the same image bytes as a sample already "
            f"in the root or in an earlier source ({'; '.join(describe(found, 3))}): appending "
            "them would add the same data twice; leave them out of the source, or pass "
            "allow_duplicates=True to append them anyway",
            rule="DUPLICATE_SAMPLES", path=found[0].location)


class _Added(msgspec.Struct, frozen=True):
    info: ShardInfo
    schema: Schema
    features: tuple[str, ...] = ()  # what the shard's header requires (ragged_labels)


def _add_source(storage: Storage, source: str | os.PathLike[str], schema: Schema | None,
                prefix: str, added: list[_Added], options: Mapping[str, Any] | None) -> None:
    """Publish the source's new shards, recording each in ``added`` as soon as it exists."""
    text = os.fspath(source)
    src = open_storage(text, options)
    if src.exists(MANIFEST_NAME):
        _add_sharded(storage, src, schema, prefix, added)
    elif src.is_local and src.exists(spec.HEADER_FILE):
        _add_directory(storage, text, schema, prefix, added)
    else:
        raise errors.DatasetNotFoundError(
        "no detfmt dataset here (neither manifest.json nor header.json)", path=text)


def _add_directory(storage: Storage, source: str, schema: Schema | None, prefix: str,
                   added: list[_Added]) -> None:
    """A 1.0 directory becomes one shard: its members (checked against the header's
    checksums) packed as they are."""
    with Dataset(source) as ds:
        header = ds.header
    src_schema = schema_of(header, schema.codec if schema else _single_codec(header))
    _merged(schema or src_schema, src_schema, source)  # refuse before copying anything
    for name, info in header.files.items():
        found = file_digest(os.path.join(source, name))
        if found != Digest(info.size, info.xxh3_64):
            raise errors.IntegrityError(
                f"member {name} has {found.size} bytes, xxh3 {found.xxh3_64}; its header says "
                f"{info.size}, {info.xxh3_64}: refusing to append a damaged dataset",
                path=os.path.join(source, name), rule="FILE_CHECKSUM")
    key = f"{prefix}{len(added):05d}"
    rel = shard_path(key)
    tmp = os.path.join(storage.staging_dir(rel), temp_name(f"part-{key}.detfmt"))
    try:
        with open(tmp, "xb") as f:
            pack_directory(source, f, names=[spec.HEADER_FILE, *header.files])
        digest = file_digest(tmp)
        _publish_new(storage, tmp, rel)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    info = ShardInfo(path=rel, key=key, num_samples=header.num_samples, first_index=0,
                     bytes=digest.size, xxh3_64=digest.xxh3_64, max_boxes=header.max_boxes)
    added.append(_Added(info, src_schema, tuple(header.required_features)))


def _add_sharded(storage: Storage, src: Storage, schema: Schema | None, prefix: str,
                 added: list[_Added]) -> None:
    """A sharded source: each of its shards copied whole, checked against its manifest."""
    data = src.read(MANIFEST_NAME, MAX_MANIFEST_BYTES)
    manifest = decode_manifest(data, src.where(MANIFEST_NAME))
    _merged(schema or manifest.schema, manifest.schema, src.url)
    for shard in manifest.shards:
        key = f"{prefix}{len(added):05d}"
        rel = shard_path(key)
        tmp = os.path.join(storage.staging_dir(rel), temp_name(f"part-{key}.detfmt"))
        try:
            with open(tmp, "xb") as dst, src.open_read(shard.path) as f:
                got = copy_digest(f, dst, limit=shard.bytes)
            if got != Digest(shard.bytes, shard.xxh3_64):
                raise ShardChecksumError(
                    f"source shard has {got.size} bytes, xxh3 {got.xxh3_64}; its manifest says "
                    f"{shard.bytes}, {shard.xxh3_64}", path=src.where(shard.path))
            _publish_new(storage, tmp, rel)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        info = msgspec.structs.replace(shard, path=rel, key=key, first_index=0)
        added.append(_Added(info, manifest.schema, tuple(manifest.required_features)))


def _writer_entry(entry: StoredEntry) -> bool:
    """What a new root may already hold: the shard directory and write leases."""
    return (entry.rel == SHARD_DIR and entry.is_dir) or bool(LEASE_PATTERN.match(entry.rel))


def _single_codec(header: Header) -> str:
    used = [name for name, count in header.image.codecs.items() if count]
    return used[0] if len(used) == 1 else "mixed"


def _publish_new(storage: Storage, tmp: str, rel: str) -> None:
    """Create shard ``rel`` from the complete file ``tmp``; never adopt an existing file (the
    append removes what it created if it fails, and only that)."""
    if not storage.put_file(tmp, rel, exclusive=True, move=True):
        raise errors.TargetExistsError(f"shard {rel} already exists", path=storage.url)


def _merged(schema: Schema, other: Schema, source: str) -> Schema:
    """The root's schema after adding a source of schema ``other`` (S-8 must hold for every
    shard): equal classes, fields and max side; codec and fixed shape kept only if equal."""
    names, theirs = [c.name for c in schema.classes], [c.name for c in other.classes]
    if names != theirs:
        missing = [n for n in theirs if n not in names]
        lacking = [n for n in names if n not in theirs]
        hint = (f"classes {missing} are not in the root" if missing
                else f"the source lacks {lacking}" if lacking
                else "the same classes in another order")
        raise IncompatibleDatasetsError(
            f"classes differ from the root's ({hint}): the root has {names}, the source "
            f"{theirs}; give the source the root's class list first (detfmt remap SRC NEW "
            "--classes-from ROOT)", path=source)
    ids = [(c.name, c.source_id) for c in schema.classes]
    if ids != [(c.name, c.source_id) for c in other.classes]:
        raise IncompatibleDatasetsError(
            "classes have the same names but other source ids than the root's", path=source)
    for what in ("box_fields", "image_fields", "max_side"):
        if getattr(schema, what) != getattr(other, what):
            raise IncompatibleDatasetsError(
                f"{what} differ: the root has {getattr(schema, what)}, the source "
                f"{getattr(other, what)}", path=source)
    return msgspec.structs.replace(
        schema,
        codec=schema.codec if schema.codec == other.codec else "mixed",
        fixed_shape=schema.fixed_shape if schema.fixed_shape == other.fixed_shape else None,
    )
