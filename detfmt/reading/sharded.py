"""`ShardedDataset`: a sharded root (SPEC §19), local or remote, as one `DatasetLike`.

The manifest is the only source of truth (S-2): it gives the shards, their order, sizes and
checksums. Each shard is a 1.0 dataset read through a `PackedSource`, so every 1.0 rule applies
inside it; global index ``i`` lives in the shard whose range holds it (S-5), and batches across
shards go through the one gather engine, re-padded to the batch's own maximum (S-12). Local roots
map shards in place; remote roots (any fsspec URL) fetch whole shards into a node-local cache that
follows the known epoch order (the next shards prefetched and pinned, never evicted while needed).
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from detfmt import errors
from detfmt.format import spec
from detfmt.format.manifest import Manifest, decode_manifest
from detfmt.format.records import DatasetSchema, Sample, sample_index
from detfmt.format.schema import BoxField, ClassInfo
from detfmt.order import DEFAULT_SHARD_WINDOW, OrderSpec
from detfmt.reading.dataset import Dataset
from detfmt.reading.gather import Gather, Parts
from detfmt.reading.protocol import EpochIteration
from detfmt.reading.sources import PackedSource
from detfmt.storage import Storage, open_storage, shard_lstat

__all__ = ["ShardWorkingSet", "ShardedDataset", "check_shard_files"]


class ShardedDataset(EpochIteration):
    """A sharded (1.1) dataset. Use :func:`detfmt.open`.

    Args:
        root: local directory or fsspec URL (``s3://bucket/ds``, ``http://host/ds``...).
        storage_options: passed to fsspec for remote roots.
        cache_dir: node-local shard cache for remote roots (default: the per-user
            `detfmt.reading.cache.default_cache_dir`; it must be private to the user).
        cache_limit: byte bound of that cache (LRU; shards the plan needs next are kept).
        max_open: shards kept open at once (remote default 32; local: all). An evicted cache
            file stays readable (and on disk) while a reader holds it.
        check_files: local roots: stat every shard file at open (S-2 FILE_MISSING, a regular
            file, S-7 SHARD_SIZE), one ``lstat`` per shard, so a damaged root fails here rather
            than at its first batch from that shard.
    """

    def __init__(self, root: str | os.PathLike[str], *,
                 storage_options: Mapping[str, Any] | None = None,
                 cache_dir: str | os.PathLike[str] | None = None, cache_limit: int | None = None,
                 max_open: int | None = None, check_files: bool = True) -> None:
        self._options = dict(storage_options=dict(storage_options or {}),
                             cache_dir=os.fspath(cache_dir) if cache_dir is not None else None,
                             cache_limit=cache_limit, max_open=max_open)
        self.storage: Storage = open_storage(root, storage_options)
        local = self.storage.is_local
        self.root = self.storage.local_path("") if local else self.storage.url
        self.manifest: Manifest = read_manifest(self.storage)
        self.shards = self.manifest.shards  # counts bounded by sizes (S-5, in check_manifest)
        self._cache = None
        if local:
            self._max_open = max_open or max(1, len(self.shards))
            if check_files:
                check_shard_files(self.storage, self.shards)
        else:
            from detfmt.reading.cache import ShardCache

            self._cache = ShardCache(self.storage, cache_dir, cache_limit=cache_limit)
            self._max_open = max_open or 32
        self.starts = np.array([s.first_index for s in self.shards], dtype=np.int64)
        self._open: OrderedDict[int, Dataset] = OrderedDict()
        self._lock = threading.Lock()
        schema = self.manifest.schema
        self.schema = DatasetSchema(
            classes=[ClassInfo(name=c.name, source_id=c.source_id) for c in schema.classes],
            box_fields=[BoxField(name=f.name, dtype=f.dtype) for f in schema.box_fields],
            image_fields=list(schema.image_fields),
            fixed_shape=tuple(schema.fixed_shape) if schema.fixed_shape else None,  # type: ignore[arg-type]
            max_side=schema.max_side, codec=schema.codec)
        fields = [(f.name, f.dtype) for f in schema.box_fields]
        self.engine = Gather(Parts(len(self), self.starts, self.shard, fields), self.root)

    # ------------------------------------------------------------------ shards

    def __len__(self) -> int:
        return self.manifest.num_samples

    @property
    def location(self) -> str:
        return self.root

    @property
    def class_names(self) -> list[str]:
        return self.schema.class_names

    @property
    def format_version(self) -> str:
        return self.manifest.version

    def codec_counts(self) -> dict[str, int]:
        """Samples per codec (opens every shard)."""
        total: dict[str, int] = {}
        for k in range(len(self.shards)):
            for name, count in self.shard(k).codec_counts().items():
                total[name] = total.get(name, 0) + count
        return total

    def disk_usage(self) -> dict[str, int]:
        files = {info.path: int(info.bytes) for info in self.shards}
        files[spec.MANIFEST_FILE] = self.storage.size(spec.MANIFEST_FILE)
        return files

    @property
    def metadata(self) -> dict[str, str]:
        return dict(self.manifest.metadata)

    @property
    def is_remote(self) -> bool:
        """True for a URL root read through the node-local shard cache."""
        return self._cache is not None

    def locate(self, index: int) -> tuple[int, int]:
        """(shard number, local index) of global sample ``index`` (S-5)."""
        i = sample_index(index, len(self), self.root)
        k = int(np.searchsorted(self.starts, i, side="right")) - 1
        return k, i - int(self.starts[k])

    def shard(self, k: int) -> Dataset:
        """Shard ``k`` opened as a 1.0 dataset (fetched into the cache first for remote roots)."""
        reader = self._open.get(k)  # lock-free hit: dict reads are atomic
        if reader is not None:
            if self._cache is not None:
                with self._lock:
                    if k in self._open:
                        self._open.move_to_end(k)
            return reader
        reader = self._open_shard(k)
        with self._lock:
            self._open[k] = reader
            self._open.move_to_end(k)
            while len(self._open) > self._max_open:
                self._open.popitem(last=False)
        return reader

    def shard_file(self, k: int) -> str:
        """The local path of shard ``k``'s file (for a remote root: its verified cached copy,
        downloaded if needed)."""
        info = self.shards[k]
        if self._cache is not None:
            return self._cache.fetch(info)
        return self.storage.local_path(info.path)  # type: ignore[return-value]

    def _open_shard(self, k: int) -> Dataset:
        info = self.shards[k]
        tries = 3 if self._cache is not None else 1
        # remote: pinned from the fetch until the reader holds the file, so no process of the
        # node evicts it in between (cache.py)
        for attempt in range(tries):
            path = (self.shard_file(k) if self._cache is None
                    else self._cache.fetch(info, pin=True))
            try:
                _check_size(path, info.bytes)
                reader = Dataset(PackedSource(path))
                if self._cache is not None:
                    reader.pread_fd()  # the file, not its name: later eviction cannot hurt
                break
            except (FileNotFoundError, errors.DatasetNotFoundError) as error:
                if attempt == tries - 1:
                    raise errors.LayoutError(f"shard {info.path} is missing", rule="FILE_MISSING",
                                             path=path) from error
            finally:
                if self._cache is not None:
                    self._cache.unpin(info)
        check_shard_schema(reader, self.manifest, k)
        return reader

    # ------------------------------------------------------------------ whole-dataset tables

    def _concat(self, get: Any, empty: np.ndarray) -> np.ndarray:
        parts = [get(self.shard(k)) for k in range(len(self.shards)) if self.shards[k].num_samples]
        return np.concatenate(parts) if parts else empty

    @property
    def sizes(self) -> np.ndarray:
        """(N, 2) int32 stored (height, width) of every image (opens every shard: for remote
        roots that downloads them all)."""
        return self._concat(lambda s: s.sizes, np.zeros((0, 2), np.int32))

    @property
    def counts(self) -> np.ndarray:
        """(N,) int32 box count of every sample (opens every shard, like ``sizes``)."""
        def checked(s: Dataset) -> np.ndarray:
            s.validate_index()
            return np.asarray(s.counts)

        return self._concat(checked, np.zeros(0, np.int32))

    def image_field(self, name: str) -> np.ndarray:
        """Per-image field ``name`` of every sample (opens every shard)."""
        if name not in self.schema.image_fields or name in spec.STRING_FIELDS:
            raise errors.UsageError(f"the dataset has no per-image array field {name!r}",
                                    path=self.root)
        dtype, tail = spec.IMAGE_FIELD_ARRAYS[name]
        return self._concat(lambda s: np.asarray(s.image_field(name)),
                            np.zeros((0, *tail), np.dtype(dtype)))

    def string_field(self, name: str, index: int) -> str:
        k, j = self.locate(index)
        return self.shard(k).string_field(name, j)

    # ------------------------------------------------------------------ samples

    def __getitem__(self, index: int) -> Sample:  # type: ignore[override]
        if isinstance(index, slice):
            raise errors.UsageError("use ds.batch(indices) to read several samples")
        k, j = self.locate(index)
        sample = self.shard(k)[j]
        return Sample(index=int(self.starts[k]) + j, image=sample.image, boxes=sample.boxes,
                      classes=sample.classes, fields=sample.fields)

    def image_shape(self, index: int) -> tuple[int, int, int]:
        k, j = self.locate(index)
        return self.shard(k).image_shape(j)

    def decode_into(self, index: int, out: np.ndarray) -> None:
        k, j = self.locate(index)
        self.shard(k).decode_into(j, out)

    def codec(self, index: int) -> str:
        k, j = self.locate(index)
        return self.shard(k).codec(j)

    def payload(self, index: int) -> memoryview:
        k, j = self.locate(index)
        return self.shard(k).payload(j)

    def payload_checksum(self, index: int) -> int:
        k, j = self.locate(index)
        return self.shard(k).payload_checksum(j)

    def part_ranges(self) -> list[tuple[int, int]]:
        return [(int(s.first_index), int(s.first_index) + int(s.num_samples))
                for s in self.shards if s.num_samples]

    # ------------------------------------------------------------------ epoch order

    def order_spec(self, order: str = "random", *, shard_window: int = DEFAULT_SHARD_WINDOW,
                   quasi_block: int | None = None, quasi_window: int = 8) -> OrderSpec:
        """The elastic order of this root (S-18): shards shuffled, samples shuffled within
        windows of ``shard_window`` shards (``order="random"``), or ``"sequential"``."""
        return OrderSpec(len(self), order, tuple(int(s.num_samples) for s in self.shards),
                         shard_window, quasi_block or 32, quasi_window)

    def follow(self, batches: Sequence[np.ndarray], ahead: int = 2) -> ShardFollower:
        """Keep the node cache in step with ``batches``: call ``.step(t)`` before batch t."""
        return ShardFollower(self, batches, ahead)

    def keep_shards(self, shards: Iterable[int]) -> None:
        """Remote roots: pin exactly these shards in the node cache (eviction skips them) and
        start downloading the missing ones in the background. Local roots: nothing to do."""
        if self._cache is None:
            return
        infos = [self.shards[int(k)] for k in shards]
        self._cache.protect(infos)
        self._cache.prefetch(infos)

    # ------------------------------------------------------------------ lifecycle

    def close(self) -> None:
        with self._lock:
            self._open.clear()
        if self._cache is not None:
            self._cache.close()

    def __enter__(self) -> ShardedDataset:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __reduce__(self):
        return (_reopen, (self.storage.url, self._options, self.manifest.write_id))

    def __repr__(self) -> str:
        return (f"detfmt.ShardedDataset({self.root!r}, samples={len(self)}, "
                f"shards={len(self.shards)}, classes={len(self.schema.classes)})")


def read_manifest(storage: Storage) -> Manifest:
    """Read and check a root's manifest, S-1 first (SPEC §19.4's check order)."""
    where = storage.where(spec.MANIFEST_FILE)
    if storage.exists(spec.HEADER_FILE):
        raise errors.RootLayoutError(
            "the root holds both manifest.json and header.json; a root is either a 1.0 dataset "
            "or a 1.1 sharded dataset", path=storage.where(""))
    try:
        data = storage.read(spec.MANIFEST_FILE, spec.MAX_MANIFEST_BYTES)
    except (FileNotFoundError, NotADirectoryError) as error:
        raise errors.DatasetNotFoundError("no manifest.json", path=where) from error
    except OSError as error:
        raise errors.UnsafePathError(f"cannot read the manifest ({error})", path=where) from error
    return decode_manifest(data, where)


def check_shard_schema(reader: Dataset, manifest: Manifest, k: int) -> None:
    """S-8: the shard's own header must agree with the manifest's schema and its entry."""
    h, s, info = reader.header, manifest.schema, manifest.shards[k]
    problems = []
    if [(c.name, c.source_id) for c in h.classes] != [(c.name, c.source_id) for c in s.classes]:
        problems.append("classes")
    if [(f.name, f.dtype) for f in h.box_fields] != [(f.name, f.dtype) for f in s.box_fields]:
        problems.append("box_fields")
    if list(h.image_fields) != list(s.image_fields):
        problems.append("image_fields")
    if s.fixed_shape is not None and list(h.image.fixed_shape or []) != s.fixed_shape:
        problems.append("fixed_shape")
    if h.image.max_side != s.max_side:
        problems.append("max_side")
    used = {name: count for name, count in h.image.codecs.items() if count}
    if s.codec != "mixed" and h.num_samples and used != {s.codec: h.num_samples}:
        problems.append("codec")
    if h.num_samples != info.num_samples or h.max_boxes != info.max_boxes:
        problems.append("num_samples/max_boxes")
    if set(h.required_features) - set(manifest.required_features):
        problems.append("required_features")
    if problems:
        raise errors.SchemaMismatchError(
            f"shard disagrees with the manifest: {', '.join(problems)}", path=reader.location)


def check_shard_files(storage: Storage, shards: Sequence[Any]) -> None:
    """S-2 and S-7 for a local root: every listed shard exists, is a regular file reached
    without a symbolic link in any path component, and has the manifest's size (SPEC §19.4
    step 9). One ``lstat`` per path component, nothing read."""
    for info in shards:
        path = storage.local_path(info.path)
        st = shard_lstat(storage.local_path(""), info.path)
        if st.st_size != info.bytes:
            raise errors.ShardChecksumError(
                f"shard is {st.st_size} bytes, manifest says {info.bytes}", rule="SHARD_SIZE",
                path=path)


def _check_size(path: str, expected: int) -> None:
    """S-7 before use: the shard file's size against the manifest entry. FileNotFoundError for
    a missing file (the caller may re-fetch); other errors are typed."""
    try:
        size = os.stat(path).st_size
    except FileNotFoundError:
        raise
    except NotADirectoryError as error:  # a path component is a file: the shard is not there
        raise FileNotFoundError(str(error)) from error
    except OSError as error:  # ELOOP, ENAMETOOLONG, EACCES...
        raise errors.UnsafePathError(f"cannot stat shard ({error.strerror})", path=path) from error
    if size != expected:
        raise errors.ShardChecksumError(f"shard is {size} bytes, manifest says {expected}",
                                        rule="SHARD_SIZE", path=path)


class ShardWorkingSet:
    """Which shards a sequence of batches needs at each step: the ones in use, and the next
    ``ahead`` shards by first use (to prefetch).

    Built with a few whole-array operations, not a loop per batch: a remote epoch waits for it
    before its first batch, and a 1M-sample epoch has some 30,000 batches."""

    def __init__(self, batches: Sequence[np.ndarray], starts: np.ndarray, ahead: int = 2) -> None:
        steps = len(batches)
        num_shards = len(starts)
        parts = [np.asarray(b, np.int64).ravel() for b in batches]
        flat = np.concatenate(parts) if parts else np.zeros(0, np.int64)
        step = np.repeat(np.arange(steps, dtype=np.int64), [len(p) for p in parts])
        ks = np.searchsorted(starts, flat, side="right") - 1
        self.first = np.full(num_shards, steps, np.int64)
        self.last = np.full(num_shards, -1, np.int64)
        np.minimum.at(self.first, ks, step)
        np.maximum.at(self.last, ks, step)
        order = np.argsort(self.first, kind="stable")
        self._order = order[self.last[order] >= 0]
        self._first_sorted = self.first[self._order]  # nondecreasing
        self.by_first = [int(k) for k in self._order]
        self.rank_of = {k: r for r, k in enumerate(self.by_first)}
        self.ahead = int(ahead)

    def wanted(self, lo: int, hi: int | None = None) -> list[int]:
        """Shards used by any step in [lo, hi], then the next ``ahead`` ones not started by hi."""
        hi = lo if hi is None else hi
        started = int(np.searchsorted(self._first_sorted, hi, side="right"))
        ranks = np.flatnonzero(self.last[self._order[:started]] >= lo)  # by rank of first use
        active = [self.by_first[r] for r in ranks]
        top = int(ranks[-1]) if len(ranks) else -1
        nxt = self.by_first[top + 1 : top + 1 + self.ahead]
        return active + [k for k in nxt if self.first[k] > hi]


class ShardFollower:
    """Pins and prefetches, for a remote root, the shards the next batches need (a no-op for
    local roots); the working set changes once per shard, not per batch."""

    def __init__(self, ds: ShardedDataset, batches: Sequence[np.ndarray], ahead: int) -> None:
        self.ds = ds
        self.working = (ShardWorkingSet(batches, ds.starts, ahead)
                        if ds.is_remote and len(batches) else None)
        self._pinned: list[int] | None = None

    def step(self, t: int, t_last: int | None = None) -> None:
        """Batches t .. t_last (default t) are about to be gathered."""
        if self.working is None:
            return
        wanted = self.working.wanted(t, t_last)
        if wanted != self._pinned:
            self._pinned = wanted
            self.ds.keep_shards(wanted)


def _reopen(root: str, options: dict, write_id: str) -> ShardedDataset:
    ds = ShardedDataset(root, **options)
    if ds.manifest.write_id != write_id:
        raise errors.DatasetChangedError("the manifest was republished since pickling", path=root)
    return ds
