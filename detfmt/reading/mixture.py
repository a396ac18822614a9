"""`Mixture`: several detfmt datasets read as one, sampled by weight (SPEC §18.11-18.13).

A mixture is a dataset whose index space is its sources concatenated in order (source k's
sample j is index ``offsets[k] + j``), so everything that takes a dataset takes a mixture:
``mix[i]``, ``mix.batch(indices)``, the torch `Loader`. Its epoch order is the weighted one of
O-12 (`detfmt.order.MixtureOrder`): each source contributes a fixed share of an epoch of
``epoch_length`` samples, read pass by pass through its own shuffled order (with repeat-factor
sampling inside a source when asked), the sources interleaved by one permutation.
``Batch.indices`` are the mixture's indices; `locate` gives the source and local index.

Class ids mean class names: sources must have the same class names in the same order, or the
mixture maps them by name (``class_names=``, after optional renames ``class_map=``); anything
else is a `ClassNamesMismatchError`. Batches go through the one gather engine over the sources'
parts (every label check of the sources applies); a mapping rewrites class ids after the gather.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from detfmt.errors import ClassNamesMismatchError, UsageError
from detfmt.format.records import DatasetSchema, Sample, sample_index
from detfmt.format.schema import ClassInfo
from detfmt.order import DEFAULT_SHARD_WINDOW, MixtureOrder, MixtureSource, factors_for
from detfmt.reading import opener as api
from detfmt.reading.gather import Gather, Job, Parts
from detfmt.reading.protocol import DatasetLike, EpochIteration

__all__ = ["Mixture"]

ClassMap = Mapping[str, str] | Sequence[Mapping[str, str] | None]


def _open(source: Any) -> tuple[DatasetLike, bool]:
    """(dataset, opened here) for a dataset, a path or a URL."""
    if isinstance(source, (str, os.PathLike)):
        return api.open_dataset(source), True
    if not isinstance(source, DatasetLike):
        raise UsageError(f"a mixture source must be a detfmt dataset, a path or a URL, got "
                         f"{type(source).__name__}")
    return source, False


def _reopen(sources: list[tuple[Any, tuple]], options: dict[str, Any]) -> Mixture:
    mix = Mixture([opener(*args) for opener, args in sources], **options)
    mix._owned = list(mix.sources)  # opened here: closed with the mixture
    return mix


def _renames(class_map: ClassMap | None, count: int) -> list[Mapping[str, str]]:
    if class_map is None:
        return [{} for _ in range(count)]
    if isinstance(class_map, Mapping):
        return [class_map] * count
    renames = list(class_map)
    if len(renames) != count:
        raise UsageError(f"class_map has {len(renames)} entries for {count} datasets")
    return [m or {} for m in renames]


class MixtureGather(Gather):
    """The gather engine over the sources' parts; class ids are mapped onto the mixture's
    names after the (checked) label gather."""

    def __init__(self, parts: Parts, where: str, part_source: np.ndarray,
                 class_maps: list[np.ndarray | None]) -> None:
        super().__init__(parts, where)
        self.part_source = part_source
        self.class_maps = class_maps

    def labels(self, job: Job, max_boxes: int | None = None
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[str, np.ndarray]]:
        boxes, classes, mask, fields = super().labels(job, max_boxes)
        if not any(m is not None for m in self.class_maps) or not len(job):
            return boxes, classes, mask, fields
        classes = np.array(classes, dtype=np.int32)  # a copy: never write into a mapping
        source = self.part_source[job.part]
        for k, mapping in enumerate(self.class_maps):
            if mapping is None:
                continue
            rows = np.flatnonzero(source == k)
            if not rows.size:
                continue
            block = classes[rows]
            valid = block >= 0
            block[valid] = mapping[block[valid]]
            classes[rows] = block
        return boxes, classes, mask, fields


class Mixture(EpochIteration):
    """Several datasets as one, sampled by ``weights`` (SPEC O-11, O-12).

    Args:
        sources: datasets, paths or URLs (1.0 directories and sharded roots alike).
        weights: each source's share of an epoch (any non-negative numbers, normalised);
            default: proportional to the sources' sizes (one pass over each per epoch).
        epoch_length: samples per epoch; default: all sources' samples together. A source
            whose share exceeds its size is read in whole passes (no sample repeats within a
            pass); a smaller share reads part of a pass, a different part each epoch.
        class_names: the mixture's class names: each source's classes are mapped onto them by
            name. Default: the first source's names, which every source must then have, in
            the same order.
        class_map: renames applied to source class names before that (one mapping for all
            sources, or one per source), e.g. ``{"automobile": "car"}``.
        repeat_threshold: repeat-factor sampling inside each source (O-9, O-10), a threshold
            for all sources or one per source (None: plain passes); also ``Loader(...,
            sampling=Sampling(repeat_threshold=...))``.
    """

    def __init__(self, sources: Sequence[Any], weights: Sequence[float] | None = None, *,
                 epoch_length: int | None = None, class_names: Sequence[str] | None = None,
                 class_map: ClassMap | None = None,
                 repeat_threshold: float | Sequence[float | None] | None = None) -> None:
        if isinstance(sources, (str, os.PathLike)) or not isinstance(sources, Sequence):
            raise UsageError("a mixture takes a list of datasets, paths or URLs")
        if not sources:
            raise UsageError("a mixture needs at least one dataset")
        opened = [_open(s) for s in sources]
        self.sources: list[DatasetLike] = [ds for ds, _ in opened]
        self._owned = [ds for ds, mine in opened if mine]
        self.sizes_per_source = [len(ds) for ds in self.sources]
        self.offsets = np.concatenate([[0], np.cumsum(self.sizes_per_source)]).astype(np.int64)
        self.weights = None if weights is None else list(weights)
        self.epoch_length = epoch_length
        self.repeat_threshold = repeat_threshold
        self._factors: dict[tuple[int, float], np.ndarray] = {}
        self._options = {"weights": self.weights, "epoch_length": epoch_length,
                         "class_names": None if class_names is None else list(class_names),
                         "class_map": class_map, "repeat_threshold": repeat_threshold}
        self.class_names, self.class_maps = self._map_classes(class_names, class_map)
        self._check_box_fields()
        self.schema = self._schema()
        self.engine = self._engine()
        self.order_spec()  # weights, length and thresholds are checked now, not at first use

    # ------------------------------------------------------------------ construction

    def _map_classes(self, class_names: Sequence[str] | None, class_map: ClassMap | None
                     ) -> tuple[list[str], list[np.ndarray | None]]:
        renames = _renames(class_map, len(self.sources))
        named = [[rename.get(n, n) for n in ds.class_names]
                 for ds, rename in zip(self.sources, renames, strict=True)]
        if class_names is None:
            expected = named[0]
            for k, names in enumerate(named):
                if names != expected:
                    raise ClassNamesMismatchError(
                        f"dataset {k} has classes {names}, dataset 0 has {expected}: mixed "
                        "datasets need the same class names in the same order; pass "
                        "class_names=[...] to map them by name (class_map= renames first)",
                        source=k, names=names, expected=expected,
                        path=self.sources[k].location)
            return list(expected), [None] * len(self.sources)  # same names, same ids
        expected = [str(n) for n in class_names]
        if len(set(expected)) != len(expected):
            raise UsageError(f"class_names has duplicates: {expected}")
        ids = {name: c for c, name in enumerate(expected)}
        maps = []
        for k, names in enumerate(named):
            missing = [n for n in names if n not in ids]
            if missing:
                raise ClassNamesMismatchError(
                    f"dataset {k} has classes {missing} that class_names does not name; add "
                    "them, or rename them with class_map=",
                    source=k, names=names, expected=expected, path=self.sources[k].location)
            mapping = np.array([ids[n] for n in names], dtype=np.int32)
            identity = np.array_equal(mapping, np.arange(len(names)))
            maps.append(None if identity else mapping)
        return expected, maps

    def _check_box_fields(self) -> None:
        first = [(f.name, f.dtype) for f in self.sources[0].schema.box_fields]
        for k, ds in enumerate(self.sources[1:], start=1):
            fields = [(f.name, f.dtype) for f in ds.schema.box_fields]
            if fields != first:
                raise UsageError(f"dataset {k} has per-box fields {fields}, dataset 0 has "
                                 f"{first}: mixed datasets need the same per-box fields",
                                 path=ds.location)

    def _schema(self) -> DatasetSchema:
        schemas = [ds.schema for ds in self.sources]
        source_ids: dict[str, int | None] = {}
        for ds in self.sources:
            for info in ds.schema.classes:
                source_ids.setdefault(info.name, info.source_id)
        image_fields = [f for f in schemas[0].image_fields
                        if all(f in s.image_fields for s in schemas)]
        shapes = {s.fixed_shape for s in schemas}
        codecs = {s.codec for s in schemas}
        sides = [s.max_side for s in schemas]
        return DatasetSchema(
            classes=[ClassInfo(name=n, source_id=source_ids.get(n)) for n in self.class_names],
            box_fields=list(schemas[0].box_fields), image_fields=image_fields,
            fixed_shape=shapes.pop() if len(shapes) == 1 else None,
            max_side=max(sides) if None not in sides else None,  # type: ignore[type-var]
            codec=codecs.pop() if len(codecs) == 1 else "mixed")

    def _engine(self) -> MixtureGather:
        starts: list[np.ndarray] = []
        owners: list[tuple[int, int]] = []  # (source, its part number) of each mixture part
        for k, ds in enumerate(self.sources):
            parts = ds.engine.parts
            starts.append(parts.starts + self.offsets[k])
            owners.extend((k, j) for j in range(len(parts.starts)))
        source_parts = [ds.engine.parts for ds in self.sources]

        def open_part(p: int) -> Any:
            k, j = owners[p]
            return source_parts[k].open_part(j)

        fields = [(f.name, f.dtype) for f in self.schema.box_fields]
        parts = Parts(len(self), np.concatenate(starts), open_part, fields)
        part_source = np.array([k for k, _ in owners], dtype=np.int64)
        return MixtureGather(parts, self.location, part_source, self.class_maps)

    # ------------------------------------------------------------------ sources

    def __len__(self) -> int:
        return int(self.offsets[-1])

    @property
    def location(self) -> str:
        return "mixture(" + ", ".join(ds.location for ds in self.sources) + ")"

    @property
    def format_version(self) -> str:
        versions = {ds.format_version for ds in self.sources}
        return versions.pop() if len(versions) == 1 else "mixed"

    @property
    def metadata(self) -> dict[str, str]:
        return {}

    def locate(self, indices: Sequence[int] | np.ndarray | int
               ) -> tuple[np.ndarray, np.ndarray]:
        """(source number, index in that source) of mixture indices (e.g. ``batch.indices``)."""
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        if idx.size and (idx.min() < 0 or idx.max() >= len(self)):
            raise UsageError(f"mixture index out of range for {len(self)} samples",
                             path=self.location)
        source = np.searchsorted(self.offsets, idx, side="right") - 1
        return source, idx - self.offsets[source]

    def _one(self, index: int) -> tuple[DatasetLike, int, int]:
        i = sample_index(index, len(self), self.location)
        k = int(np.searchsorted(self.offsets, i, side="right")) - 1
        return self.sources[k], k, i - int(self.offsets[k])

    def codec_counts(self) -> dict[str, int]:
        total: dict[str, int] = {}
        for ds in self.sources:
            for name, count in ds.codec_counts().items():
                total[name] = total.get(name, 0) + count
        return total

    def disk_usage(self) -> dict[str, int]:
        return {f"{k}:{name}": size for k, ds in enumerate(self.sources)
                for name, size in ds.disk_usage().items()}

    @property
    def sizes(self) -> np.ndarray:
        return np.concatenate([ds.sizes for ds in self.sources]).astype(np.int32)

    @property
    def counts(self) -> np.ndarray:
        return np.concatenate([ds.counts for ds in self.sources]).astype(np.int32)

    def image_field(self, name: str) -> np.ndarray:
        if name not in self.schema.image_fields:
            raise UsageError(f"not every mixed dataset has the per-image field {name!r}",
                             path=self.location)
        return np.concatenate([np.asarray(ds.image_field(name)) for ds in self.sources])

    def string_field(self, name: str, index: int) -> str:
        ds, _, j = self._one(index)
        return ds.string_field(name, j)

    # ------------------------------------------------------------------ samples

    def __getitem__(self, index: int) -> Sample:  # type: ignore[override]
        if isinstance(index, slice):
            raise UsageError("use mix.batch(indices) to read several samples")
        ds, k, j = self._one(index)
        sample = ds[j]
        classes = sample.classes
        mapping = self.class_maps[k]
        if mapping is not None:
            classes = mapping[np.asarray(classes, dtype=np.int64)].astype(classes.dtype)
        return Sample(index=int(self.offsets[k]) + j, image=sample.image, boxes=sample.boxes,
                      classes=classes, fields=sample.fields)

    def image_shape(self, index: int) -> tuple[int, int, int]:
        ds, _, j = self._one(index)
        return ds.image_shape(j)

    def decode_into(self, index: int, out: np.ndarray) -> None:
        ds, _, j = self._one(index)
        ds.decode_into(j, out)

    def codec(self, index: int) -> str:
        ds, _, j = self._one(index)
        return ds.codec(j)

    def payload(self, index: int) -> memoryview:
        ds, _, j = self._one(index)
        return ds.payload(j)

    def payload_checksum(self, index: int) -> int:
        ds, _, j = self._one(index)
        return ds.payload_checksum(j)

    def part_ranges(self) -> list[tuple[int, int]]:
        return [(int(self.offsets[k]) + lo, int(self.offsets[k]) + hi)
                for k, ds in enumerate(self.sources) for lo, hi in ds.part_ranges()]

    # ------------------------------------------------------------------ epoch order

    def _thresholds(self, repeat_threshold: float | Sequence[float | None] | None
                    ) -> list[float | None]:
        if repeat_threshold is None or isinstance(repeat_threshold, (int, float)):
            return [repeat_threshold] * len(self.sources)  # type: ignore[list-item]
        thresholds = list(repeat_threshold)
        if len(thresholds) != len(self.sources):
            raise UsageError(f"{len(thresholds)} repeat thresholds for {len(self.sources)} "
                             "datasets")
        return thresholds

    def order_spec(self, order: str = "random", *, shard_window: int = DEFAULT_SHARD_WINDOW,
                   quasi_block: int | None = None, quasi_window: int = 8,
                   repeat_threshold: float | Sequence[float | None] | None = None
                   ) -> MixtureOrder:
        """The weighted order of O-12 (``order`` must be ``"random"``: a mixture is sampled by
        weight; read a source on its own for a sequential pass). ``repeat_threshold`` (or the
        mixture's own) turns on repeat-factor sampling inside the sources (O-9, O-10)."""
        if order not in ("random", "mixture"):
            raise UsageError(f"a mixture is sampled by weight (order 'random'), not {order!r}; "
                             "read a dataset on its own for a sequential pass")
        if repeat_threshold is None:
            repeat_threshold = self.repeat_threshold
        sources = []
        for k, (ds, t) in enumerate(zip(self.sources, self._thresholds(repeat_threshold),
                                        strict=True)):
            if t is None or not len(ds):
                sources.append(MixtureSource(len(ds)))
                continue
            key = (k, float(t))
            if key not in self._factors:  # one pass over the labels per source and threshold
                self._factors[key] = factors_for(ds, t, self.class_maps[k])
            factors = self._factors[key]
            sources.append(MixtureSource(len(ds), factors, float(t)))
        return MixtureOrder(sources, self.weights, self.epoch_length)

    def follow(self, batches: Sequence[np.ndarray], ahead: int = 2) -> _MixtureFollower:
        """Each source's follower over its own part of the batches (remote shards fetched and
        pinned ahead of use)."""
        return _MixtureFollower(self, batches, ahead)

    # ------------------------------------------------------------------ lifecycle

    def __reduce__(self) -> tuple[Any, tuple]:
        """Pickled as its sources' identities and its options: re-opened in the process that
        unpickles it (DataLoader workers, spawn), never with the parent's mappings."""
        return _reopen, ([ds.__reduce__() for ds in self.sources], self._options)

    def close(self) -> None:
        """Close the sources this mixture opened from paths (not those passed in open)."""
        for ds in self._owned:
            ds.close()

    def __enter__(self) -> Mixture:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"detfmt.Mixture(sources={len(self.sources)}, samples={len(self)}, "
                f"weights={self.weights}, classes={len(self.class_names)})")


class _MixtureFollower:
    def __init__(self, mix: Mixture, batches: Sequence[np.ndarray], ahead: int) -> None:
        per_source: list[list[np.ndarray]] = [[] for _ in mix.sources]
        for b in batches:
            source, local = mix.locate(b)
            for k in range(len(mix.sources)):
                per_source[k].append(local[source == k])
        self.followers = [ds.follow(sub, ahead)  # type: ignore[attr-defined]
                          for ds, sub in zip(mix.sources, per_source, strict=True)
                          if hasattr(ds, "follow") and any(len(x) for x in sub)]

    def step(self, t: int, t_last: int | None = None) -> None:
        for follower in self.followers:
            follower.step(t, t_last)
