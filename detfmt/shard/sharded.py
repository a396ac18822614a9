"""``ShardedDataset``: a 1.1 dataset over many packed shards, with the 1.0 ``ds[i]``/``batch`` API.

Global index i maps to (shard, local index) by the manifest's prefix sums (S-5). Local roots map
shards in place; remote roots (any fsspec URL) fetch whole shards into a node-local cache that
follows the known epoch order (prefetch the next shards, never evict them).
"""

from __future__ import annotations

import dataclasses
import os
import stat
import threading
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from detfmt import errors, validate
from detfmt.reader import NumpyBatch, Sample, SampleIndexError, normalize_index
from detfmt.shard.errors import SchemaMismatchError, ShardChecksumError
from detfmt.shard.manifest import (
    MANIFEST_NAME,
    MAX_MANIFEST_BYTES,
    Manifest,
    check_root_layout,
    decode_manifest,
)
from detfmt.shard.order import DEFAULT_SHARD_WINDOW, EpochPlan, OrderState, ShardWorkingSet
from detfmt.shard.packed import PackedDataset
from detfmt.spec import INDEX_DTYPE
from detfmt.storage import is_remote, open_storage

__all__ = ["ShardedDataset", "is_sharded", "open_sharded"]


def is_sharded(path: str | os.PathLike[str]) -> bool:
    """True for a remote URL or a local directory holding manifest.json (S-1)."""
    text = os.fspath(path)
    if is_remote(text):
        return True
    return os.path.isfile(os.path.join(text, MANIFEST_NAME))


class ShardedDataset(Sequence):
    """A sharded (1.1) dataset. Use :func:`detfmt.open` or :func:`open_sharded`.

    Args:
        root: local directory or fsspec URL (``s3://bucket/ds``, ``http://host/ds``...).
        storage_options: passed to fsspec for remote roots.
        cache_dir: node-local shard cache for remote roots (default: the per-user
            `detfmt.shard.cache.default_cache_dir`; it must be private to the user).
        cache_limit: byte bound of that cache (LRU; shards the plan needs next are kept).
        max_open: shards kept mapped at once (remote default 32; local: all). An evicted cache
            file stays readable (and on disk) while its reader is open.
        check_files: local roots: stat every shard file at open (S-2 FILE_MISSING, a regular
            file, S-7 SHARD_SIZE), one ``lstat`` per shard, so a damaged root fails here rather
            than at its first batch from that shard. `verify` turns it off to list every problem.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        storage_options: Mapping[str, Any] | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        cache_limit: int | None = None,
        max_open: int | None = None,
        check_files: bool = True,
    ) -> None:
        self.root = os.fspath(root)
        self._options = dict(
            storage_options=dict(storage_options or {}),
            cache_dir=os.fspath(cache_dir) if cache_dir is not None else None,
            cache_limit=cache_limit,
            max_open=max_open,
        )
        self.remote = is_remote(self.root)
        self._cache = None
        self._files_checked = False
        if self.remote:
            import fsspec  # an extra: only remote roots need it

            self._fs, self._fs_root = fsspec.core.url_to_fs(self.root, **(storage_options or {}))
            self._fs_root = self._fs_root.rstrip("/")
            where = f"{self.root}/{MANIFEST_NAME}"
            try:
                data = self._fs.cat_file(f"{self._fs_root}/{MANIFEST_NAME}")
            except FileNotFoundError as error:
                raise errors.DatasetNotFoundError("no manifest.json", path=where) from error
            self.manifest: Manifest = decode_manifest(data, where)
            from detfmt.shard.cache import ShardCache

            self._cache = ShardCache(
                open_storage(self.root, storage_options), cache_dir, cache_limit=cache_limit
            )
            self._max_open = max_open or 32
        else:
            if self.root.startswith("file://"):
                self.root = self.root[len("file://") :]
            where = os.path.join(self.root, MANIFEST_NAME)
            try:
                with open(where, "rb") as f:
                    data = f.read(MAX_MANIFEST_BYTES + 1)
            except FileNotFoundError as error:
                raise errors.DatasetNotFoundError("no manifest.json", path=where) from error
            check_root_layout(self.root)  # S-1: never both a 1.0 and a 1.1 root
            self.manifest = decode_manifest(data, where)
            self._max_open = max_open or max(1, len(self.manifest.shards))
            if check_files:
                check_shard_files(self.root, self.manifest.shards)
            self._files_checked = check_files
        self.shards = self.manifest.shards
        self.schema = self.manifest.schema
        for k, info in enumerate(self.shards):
            if info.num_samples * INDEX_DTYPE.itemsize > info.bytes:
                # a shard holds an index record per sample (S-11): a count its size cannot
                # hold fails S-8 once the shard is opened; refuse it before plan() or a batch
                # sizes arrays by it
                raise SchemaMismatchError(
                    f"shards[{k}] claims {info.num_samples} samples in {info.bytes} bytes",
                    path=where,
                )
        self._starts = np.array([s.first_index for s in self.shards], dtype=np.int64)
        self._counts = np.array([s.num_samples for s in self.shards], dtype=np.int64)
        self._open: OrderedDict[int, tuple] = OrderedDict()
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ shards

    def __len__(self) -> int:
        return self.manifest.num_samples

    @property
    def class_names(self) -> list[str]:
        return [c.name for c in self.schema.classes]

    @property
    def sizes(self) -> np.ndarray:
        """(N, 2) int32 stored (height, width) of every image (opens every shard: for remote
        roots that downloads them all)."""
        parts = [self._entry(k) for k in range(len(self.shards))]
        if not parts:
            return np.zeros((0, 2), np.int32)
        return np.concatenate([np.stack([e[1], e[2]], axis=1) for e in parts]).astype(np.int32)

    @property
    def counts(self) -> np.ndarray:
        """(N,) int32 box count of every sample (opens every shard, like ``sizes``)."""
        parts = [np.asarray(self.shard(k).counts) for k in range(len(self.shards))]
        return np.concatenate(parts).astype(np.int32) if parts else np.zeros(0, np.int32)

    def locate(self, index: int) -> tuple[int, int]:
        """(shard number, local index) of global sample ``index`` (S-5)."""
        i = self._check_index(index)
        k = int(np.searchsorted(self._starts, i, side="right")) - 1
        return k, i - int(self._starts[k])

    def _check_index(self, index: int) -> int:
        return normalize_index(index, len(self), self.root)

    def shard(self, k: int) -> PackedDataset:
        """The opened reader of shard ``k`` (fetched into the cache first for remote roots)."""
        return self._entry(k)[0]

    def _entry(self, k: int) -> tuple[PackedDataset, np.ndarray, np.ndarray, np.ndarray | None]:
        """(reader, heights, widths, fixed images or None) of shard ``k``, opened once."""
        entry = self._open.get(k)  # lock-free hit: dict reads are atomic
        if entry is not None:
            if self._cache is not None:
                with self._lock:
                    if k in self._open:
                        self._open.move_to_end(k)
            return entry
        ds = self._open_shard(k)
        entry = (ds, ds.index["height"], ds.index["width"], ds.fixed_images)
        with self._lock:
            self._open[k] = entry
            self._open.move_to_end(k)
            while len(self._open) > self._max_open:
                self._open.popitem(last=False)
        return entry

    def _open_shard(self, k: int) -> PackedDataset:
        info = self.shards[k]
        tries = 3 if self._cache is not None else 1
        # another process on the node may evict a cached shard between fetch and open: re-fetch
        for attempt in range(tries):
            if self._cache is not None:
                path = self._cache.fetch(info)
            else:
                path = os.path.join(self.root, *info.path.split("/"))
            try:
                _check_size(path, info.bytes)
                ds = PackedDataset(path)
                break
            except (FileNotFoundError, errors.DatasetNotFoundError) as error:
                if attempt == tries - 1:
                    raise errors.LayoutError(
                        f"shard {info.path} is missing", rule="FILE_MISSING", path=path
                    ) from error
        self._check_schema(ds, k)
        return ds

    def _check_schema(self, ds: PackedDataset, k: int) -> None:
        """S-8: the shard's own header must agree with the manifest."""
        h, s, info = ds.header, self.schema, self.shards[k]
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
        if s.codec != "mixed" and set(h.image.codecs) - {s.codec}:
            problems.append("codec")
        if h.num_samples != info.num_samples or h.max_boxes != info.max_boxes:
            problems.append("num_samples/max_boxes")
        if problems:
            raise SchemaMismatchError(
                f"shard disagrees with the manifest: {', '.join(problems)}", path=str(ds.path)
            )

    def verify_checksums(self) -> None:
        """Hash every local shard against the manifest (S-7); raises `ShardChecksumError`."""
        import xxhash

        for k, info in enumerate(self.shards):
            path = self._cache.fetch(info) if self._cache else os.path.join(self.root, info.path)
            digest = xxhash.xxh3_64()
            with open(path, "rb") as f:
                while chunk := f.read(8 << 20):
                    digest.update(chunk)
            if digest.hexdigest() != info.xxh3_64:
                raise ShardChecksumError(
                    f"shard {k} xxh3 {digest.hexdigest()}, manifest says {info.xxh3_64}", path=path
                )

    # ------------------------------------------------------------------ samples

    def __getitem__(self, index: int) -> Sample:  # type: ignore[override]
        if isinstance(index, slice):
            raise errors.UsageError("use ds.batch(indices) to read several samples")
        k, j = self.locate(index)
        return dataclasses.replace(self.shard(k)[j], index=int(self._starts[k]) + j)

    def image_shape(self, index: int) -> tuple[int, int, int]:
        k, j = self.locate(index)
        return self.shard(k).image_shape(j)

    def decode_into(self, index: int, out: np.ndarray) -> None:
        k, j = self.locate(index)
        self.shard(k).decode_into(j, out)

    def batch_buffer(self, batch_size: int) -> np.ndarray:
        """A reusable, page-aligned ``out=`` buffer for batches of up to ``batch_size`` samples
        (see `detfmt.Dataset.batch_buffer`)."""
        from detfmt._buffers import batch_buffer

        return batch_buffer(self.sizes, batch_size)

    def batch(
        self, indices: Sequence[int] | np.ndarray, out: np.ndarray | None = None, pad_value: int = 0
    ) -> NumpyBatch:
        """Gather samples from any shards into one batch, re-padded to its own maximum (S-12)."""
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        n = len(self)
        if idx.size and (idx.min() < -n or idx.max() >= n):
            raise SampleIndexError(f"batch index out of range for {n} samples", path=self.root)
        idx = np.where(idx < 0, idx + n, idx)
        ks = np.searchsorted(self._starts, idx, side="right") - 1
        local = idx - self._starts[ks]
        b = idx.size
        if b and ks[0] == ks[-1] and (ks == ks[0]).all():  # the common case: one shard
            groups = [(int(ks[0]), np.arange(b))]
        else:
            groups = [(int(k), np.flatnonzero(ks == k)) for k in np.unique(ks)]
        heights = np.zeros(b, np.int64)
        widths = np.zeros(b, np.int64)
        counts = np.zeros(b, np.int64)
        entries = {}
        for k, pos in groups:
            entry = entries[k] = self._entry(k)
            loc = local[pos]
            ensure = getattr(entry[0], "_ensure_valid", None)  # readers that check lazily
            if ensure is not None:
                ensure(loc)
            heights[pos] = entry[1][loc]
            widths[pos] = entry[2][loc]
            counts[pos] = entry[0].counts[loc]
        readers = {k: e[0] for k, e in entries.items()}
        hmax = int(heights.max()) if b else 0
        wmax = int(widths.max()) if b else 0
        m = int(counts.max()) if b else 0
        images = PackedDataset._batch_buffer(out, b, hmax, wmax)
        boxes = np.zeros((b, m, 4), np.float32)
        classes = np.full((b, m), -1, np.int32)
        fields_ = {f.name: np.zeros((b, m), np.dtype(f.dtype)) for f in self.schema.box_fields}
        for k, pos in groups:
            ds = readers[k]
            loc = local[pos]
            mk = min(m, ds.boxes.shape[1])
            boxes[pos, :mk] = ds.boxes[loc, :mk]
            classes[pos, :mk] = ds.classes[loc, :mk]
            for name, arr in fields_.items():
                arr[pos, :mk] = ds.box_fields[name][loc, :mk]
            fixed = entries[k][3]
            for j, li in zip(pos.tolist(), loc.tolist(), strict=True):
                h, w = int(heights[j]), int(widths[j])
                if fixed is not None and h == hmax and w == wmax:
                    np.copyto(images[j], fixed[li])  # one contiguous copy, no decode dispatch
                    continue
                ds.decode_into(li, images[j, :h, :w])
                if h < hmax:
                    images[j, h:] = pad_value
                if w < wmax:
                    images[j, :h, w:] = pad_value
        self._check_labels(
            idx, readers, groups, local, heights, widths, boxes, classes, counts, fields_
        )
        mask = np.arange(m) < counts[:, None]
        sizes = np.stack([heights, widths], axis=1).astype(np.int32)
        return NumpyBatch(
            images=images,
            sizes=sizes,
            boxes=boxes,
            classes=classes,
            mask=mask,
            indices=idx,
            fields=fields_,
        )

    def _check_labels(
        self, idx, readers, groups, local, heights, widths, boxes, classes, counts, fields_
    ) -> None:
        """One vectorized label check per batch; on a violation, redo it per shard so the
        error names the shard file and its local sample index."""
        clean = not any(
            True
            for _ in validate.check_labels(
                boxes=boxes,
                classes=classes,
                counts=counts,
                heights=heights,
                widths=widths,
                num_classes=len(self.schema.classes),
                indices=idx,
                paths=(self.root, self.root),
                box_fields={name: (self.root, arr) for name, arr in fields_.items()},
            )
        )
        if clean:
            return
        for k, pos in groups:
            readers[k].check_labels(
                local[pos],
                boxes[pos],
                classes[pos],
                counts[pos],
                {name: arr[pos] for name, arr in fields_.items()},
            )

    # ------------------------------------------------------------------ epoch order

    def plan(
        self,
        *,
        seed: int,
        epoch: int,
        batch_size: int,
        world_size: int = 1,
        rank: int = 0,
        window: int = DEFAULT_SHARD_WINDOW,
        shuffle: bool = True,
        samples_seen: int = 0,
        drop_last: bool = True,
    ) -> EpochPlan:
        """This rank's batches of one epoch in the elastic global order (S-18..S-20).

        ``drop_last`` (default True) drops the tail shorter than a global batch; False keeps it:
        wrap-around padding to whole global batches when ``world_size > 1`` (every rank runs
        the same number of equal batches, O-5), a short last batch with one rank.
        """
        if self._cache is None and not self._files_checked:
            # the plan is sized by the manifest's counts, which S-7 ties to the shard sizes
            # (__init__ bounds each count by its entry's bytes): check those once
            check_shard_files(self.root, self.shards)
            self._files_checked = True
        return EpochPlan.build(
            self._counts.tolist(),
            OrderState(seed, epoch, samples_seen),
            world_size=world_size,
            rank=rank,
            batch_size=batch_size,
            window=window,
            shuffle=shuffle,
            drop_last=drop_last,
        )

    def iter_batches(
        self, plan: EpochPlan, *, prefetch_shards: int = 2, out: np.ndarray | None = None
    ) -> Iterator[NumpyBatch]:
        """Yield ``plan``'s batches; remote shards are prefetched and pinned ahead of use.

        A shard is pinned in the cache from ``prefetch_shards`` shards before its first use
        until its last use in this plan, so eviction never removes what the order needs next.
        """
        batches = list(plan.batches())
        working = None
        if self._cache is not None and batches:
            working = ShardWorkingSet(batches, plan.shard_of, len(self.shards), prefetch_shards)
        pinned: list[int] | None = None
        for t, batch in enumerate(batches):
            if working is not None:
                wanted = working.wanted(t)
                if wanted != pinned:  # the working set changes once per shard, not per batch
                    pinned = wanted
                    self.keep_shards(wanted)
            yield self.batch(batch, out=out)

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
        return (_reopen, (self.root, self._options, self.manifest.write_id))

    def keep_shards(self, shards: Sequence[int]) -> None:
        """Remote roots: pin exactly these shards in the node cache (eviction skips them) and
        start downloading the missing ones in the background. Local roots: nothing to do.

        Readers that follow a plan call it whenever their working set changes (use
        `EpochPlan.working_set` / `ShardWorkingSet.wanted`): the shards in use plus the next
        few by first use.
        """
        if self._cache is None:
            return
        infos = [self.shards[int(k)] for k in shards]
        self._cache.protect(infos)
        self._cache.prefetch(infos)

    @property
    def is_remote(self) -> bool:
        """True for a URL root read through the node-local shard cache."""
        return self._cache is not None

    def __repr__(self) -> str:
        return (
            f"detfmt.ShardedDataset({self.root!r}, samples={len(self)}, "
            f"shards={len(self.shards)}, classes={len(self.schema.classes)})"
        )


def check_shard_files(root: str, shards: Sequence[Any]) -> None:
    """S-2 and S-7 for a local root: every listed shard exists, is a regular file (not a link,
    directory or FIFO) and has the manifest's size. One ``lstat`` per shard, nothing read."""
    for info in shards:
        path = os.path.join(root, *info.path.split("/"))
        try:
            st = os.lstat(path)
        except (FileNotFoundError, NotADirectoryError) as error:
            raise errors.LayoutError(
                f"shard {info.path} listed by the manifest is missing", rule="FILE_MISSING",
                path=path,
            ) from error
        except OSError as error:  # ELOOP, ENAMETOOLONG, EACCES...
            raise errors.UnsafePathError(f"cannot stat shard ({error.strerror})",
                                         path=path) from error
        if not stat.S_ISREG(st.st_mode):
            raise errors.UnsafePathError("a shard must be a regular file", path=path)
        if st.st_size != info.bytes:
            raise ShardChecksumError(
                f"shard is {st.st_size} bytes, manifest says {info.bytes}", rule="SHARD_SIZE",
                path=path,
            )


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
        raise ShardChecksumError(
            f"shard is {size} bytes, manifest says {expected}", rule="SHARD_SIZE", path=path
        )


def _reopen(root: str, options: dict, write_id: str) -> ShardedDataset:
    ds = ShardedDataset(root, **options)
    if ds.manifest.write_id != write_id:
        raise errors.DatasetChangedError("the manifest was republished since pickling", path=root)
    return ds


def open_sharded(root: str | os.PathLike[str], **options: Any) -> ShardedDataset:
    """Open a sharded (1.1) dataset, local or remote; see `ShardedDataset` for options."""
    return ShardedDataset(root, **options)
