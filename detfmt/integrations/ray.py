"""Ray Data integration: ``DetfmtDatasink`` (distributed write with one commit) and ``read_detfmt``.

The sink follows Ray's Datasink contract: ``on_write_start`` runs on the driver before any task
(validate options, fix the write id), each ``write`` task rolls its rows into shards at the byte
target and returns their metadata, ``on_write_complete`` publishes the manifest (the only step
that makes data visible), ``on_write_failed`` removes what the failed write left. Shard keys are
``<task index>-<seq>``, so a retried task rewrites its own files (never duplicates them) and the
result equals a Dask or multiprocessing write of the same partitioning, byte for byte. The driver
holds the write's session from start to commit: its lease keeps `gc` away from the tasks'
shards however long the write takes, and the commit is a compare-and-swap on the manifest the
write started from (another job's commit in between is a `CommitConflictError`, not a loss).

Importing this module imports ray (the ``scale`` extra); ``import detfmt`` never does.
"""

from __future__ import annotations

import os
import uuid
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import msgspec
import numpy as np
import ray
import ray.data
from ray.data import Datasink
from ray.data.block import BlockAccessor

from detfmt import errors
from detfmt.format.manifest import Manifest
from detfmt.reading.opener import open_dataset
from detfmt.shard.gc import collect
from detfmt.shard.session import WriteSession, adopt, begin_write
from detfmt.shard.write import DEFAULT_SHARD_BYTES, ShardMeta, commit, write_partition
from detfmt.storage import is_remote, open_storage
from detfmt.writing.options import WriteOptions

__all__ = ["DetfmtDatasink", "read_detfmt"]

_REQUIRED_COLUMNS = ("image", "boxes", "classes")


def _rows(blocks: Iterable[Any]) -> Iterable[dict[str, Any]]:
    for block in blocks:
        yield from BlockAccessor.for_block(block).iter_rows(public_row_format=True)


class DetfmtDatasink(Datasink):
    """Write a Ray Dataset of samples (``image``, ``boxes``, ``classes``, ...) as a 1.1 root.

    Args:
        root: directory (local or shared filesystem) or fsspec URL (``s3://...``) of the root.
        classes: class names / ClassInfo, as for `detfmt.write`.
        shard_bytes: target shard size, estimated from the input rows (default 128 MiB).
        write_id: manifest write id (default: a new uuid4 hex per write).
        to_sample: optional function row -> sample mapping (default: the row itself).
        metadata: manifest metadata.
        storage_options: fsspec options for a URL root (credentials, endpoint).
        write_options: `detfmt.write` options (codec, max_side, fixed_size, clip, box_fields...).
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        classes: Sequence[Any],
        shard_bytes: int = DEFAULT_SHARD_BYTES,
        write_id: str | None = None,
        to_sample: Callable[[dict[str, Any]], Mapping[str, Any]] | None = None,
        metadata: Mapping[str, str] | None = None,
        storage_options: Mapping[str, Any] | None = None,
        **write_options: Any,
    ) -> None:
        text = os.fspath(root)
        self.root = text if is_remote(text) else os.path.abspath(text)
        self.storage_options = dict(storage_options or {})
        self.classes = list(classes)
        self.shard_bytes = shard_bytes
        self.write_id = write_id
        self.to_sample = to_sample
        self.metadata = dict(metadata or {})
        self.write_options = write_options
        self.manifest: Manifest | None = None
        self._session: WriteSession | None = None
        self._session_state: dict[str, Any] | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_session"] = None  # the driver's lease thread stays on the driver
        return state

    # ------------------------------------------------------------------ driver side

    def on_write_start(self, schema: Any = None) -> None:
        """Fail before any task runs if options, input columns or the target are wrong."""
        options = {k: v for k, v in self.write_options.items() if k not in ("workers", "progress")}
        WriteOptions.from_kwargs(**options).check_classes(self.classes)  # the writer's checks
        if self.shard_bytes < 1:
            raise errors.UsageError("shard_bytes must be >= 1")
        names = list(getattr(schema, "names", None) or [])
        if names and self.to_sample is None:
            missing = [c for c in _REQUIRED_COLUMNS if c not in names]
            if missing:
                raise errors.UsageError(f"input rows lack columns {missing}", rule="SCHEMA")
        storage = open_storage(self.root, self.storage_options)
        if storage.exists("header.json"):
            raise errors.TargetExistsError("root holds a 1.0 dataset", path=self.root)
        if self.write_id is None:
            self.write_id = uuid.uuid4().hex
        self._session = begin_write(storage)
        self._session_state = self._session.state()

    def on_write_complete(self, write_result: Any) -> None:
        """Check row counts, then publish the manifest (the commit)."""
        returns = [r for r in write_result.write_returns if r is not None]
        metas = [msgspec.convert(m, ShardMeta) for r in returns for m in r["shards"]]
        rows_in = sum(int(r["rows"]) for r in returns)
        rows_out = sum(m.num_samples for m in metas)
        if rows_in != rows_out or rows_in != int(write_result.num_rows):
            raise errors.WriteError(
                f"row count mismatch: Ray wrote {write_result.num_rows} rows, tasks read "
                f"{rows_in}, shards hold {rows_out}; refusing to commit",
                path=self.root,
            )
        self.manifest = commit(
            self.root,
            metas,
            write_id=self.write_id,
            metadata=self.metadata,
            storage_options=self.storage_options,
            base=self._session_state["base"] if self._session_state else None,
        )
        if self._session is not None:
            self._session.close()

    def on_write_failed(self, error: Exception) -> None:
        """Remove shards and temporaries no manifest lists (the previous manifest stays valid),
        unless another write to the root is in progress (its lease keeps them), then release
        this write's lease.

        Best effort: a cleanup problem must never hide the error that failed the write.
        """
        session, self._session = self._session, None
        if session is None:
            return  # on_write_start failed: this write created nothing
        try:
            collect(session.storage, grace_seconds=0, ignore_lease=session.token)
        except Exception as cleanup_error:
            warnings.warn(
                f"detfmt: cleanup after a failed write failed: {cleanup_error}", stacklevel=2
            )
        finally:
            session.close()

    # ------------------------------------------------------------------ task side

    def write(self, blocks: Iterable[Any], ctx: Any) -> dict[str, Any]:
        rows = 0

        def samples() -> Iterable[Mapping[str, Any]]:
            nonlocal rows
            for row in _rows(blocks):
                rows += 1
                yield self.to_sample(row) if self.to_sample else row

        storage = open_storage(self.root, self.storage_options)
        with adopt(self._session_state or {}, storage):  # the driver keeps the lease
            metas = write_partition(
                samples(),
                self.root,
                int(ctx.task_idx),
                classes=self.classes,
                shard_bytes=self.shard_bytes,
                storage_options=self.storage_options or None,
                **self.write_options,
            )
        return {"rows": rows, "shards": [msgspec.to_builtins(m) for m in metas]}

    @property
    def supports_distributed_writes(self) -> bool:
        return True

    def get_name(self) -> str:
        return "Detfmt"


def read_detfmt(root: str | os.PathLike[str], *, block_size: int = 1024,
                **open_options: Any) -> ray.data.Dataset:
    """A Ray Dataset of any detfmt dataset's samples (a 1.0 directory, a sharded root or its
    URL), one read task per block of at most ``block_size`` samples of one shard, order kept.

    Rows: ``index`` (global), ``image`` (H, W, 3) uint8, ``boxes`` (K, 4), ``classes`` (K,).
    """
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
        raise errors.UsageError(f"block_size must be a positive int, got {block_size!r}")
    spans: list[tuple[int, int]] = []
    with open_dataset(root, **open_options) as ds:
        for start, stop in ds.part_ranges():
            spans += [(lo, min(stop, lo + block_size)) for lo in range(start, stop, block_size)]
    if not spans:
        return ray.data.from_items([])
    root_text = os.fspath(root)

    def read_block(row: dict[str, Any]) -> list[dict[str, Any]]:
        with open_dataset(root_text, **open_options) as ds:
            out = []
            for i in range(int(row["start"]), int(row["stop"])):
                s = ds[i]
                out.append({"index": i, "image": np.array(s.image), "boxes": s.boxes,
                            "classes": s.classes.astype("int64")})
        return out

    items = [{"start": lo, "stop": hi} for lo, hi in spans]
    return ray.data.from_items(items, override_num_blocks=len(items)).flat_map(read_block)
