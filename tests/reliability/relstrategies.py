"""Hypothesis strategies for mutating a valid dataset, and the CI / nightly settings.

A mutation is plain data, ``{"file", "op", "params"}``, so a failing example prints as a
readable reproducer and the fuzz harness in ``tools/`` can reuse ``apply_mutation``.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import relharness
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

PROFILE = os.environ.get("DETFMT_FUZZ_PROFILE", "ci")
MAX_EXAMPLES = {"ci": 150, "nightly": 3000}[PROFILE]
#: the time budget of a nightly run (tools/fuzz_nightly.py sets it; never used in CI): once the
#: clock passes it, `within_budget` skips the rest of each fuzz test, unless a failure was seen
#: (then Hypothesis shrinks and reports it, however long that takes)
DEADLINE = float(os.environ.get("DETFMT_FUZZ_DEADLINE", "inf")) if PROFILE == "nightly" \
    else float("inf")
FAILURES = {"seen": False}


def within_budget() -> None:
    """Call first in a fuzz test's body: past the nightly deadline, end the test (skipped)."""
    if float("inf") != DEADLINE and time.time() >= DEADLINE and not FAILURES["seen"]:
        pytest.skip("nightly fuzzing: time budget spent")

# deterministic in CI: the same examples on every run, no deadline on a shared 2-core runner
FUZZ_SETTINGS = settings(
    max_examples=MAX_EXAMPLES,
    derandomize=PROFILE == "ci",
    deadline=None,
    database=None if PROFILE == "ci" else settings.default.database,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                           HealthCheck.data_too_large],
)

# one example there mutates every file once (about 15 checks), so it needs fewer examples
PER_FILE_SETTINGS = settings(FUZZ_SETTINGS, max_examples=max(10, MAX_EXAMPLES // 8))

EXTREMES = (-1, 0, 1, 63, 64, 65, 2**31 - 1, 2**31, 2**32, 2**32 + 1, 2**63 - 1, 2**63,
            2**64 - 1)
HEADER_INT_KEYS = ("num_samples", "max_boxes", "image/max_side", "image/channels",
                   "files/images.bin/size", "files/index.npy/size", "files/boxes.npy/size",
                   "arrays/boxes.npy/shape/0", "arrays/boxes.npy/shape/1",
                   "arrays/index.npy/shape/0")
MUTATION_MISFIT = (KeyError, ValueError, AssertionError, SyntaxError, IndexError, TypeError,
          ZeroDivisionError)
OPS = ("bitflip", "truncate", "append", "splice", "set_int")


@st.composite
def st_mutation(draw: st.DrawFn, files: list[str], sizes: dict[str, int],
                header_keys: tuple[str, ...] = HEADER_INT_KEYS) -> dict[str, Any]:
    """One mutation of one file: bit flip, truncate, append, splice or an extreme integer."""
    file = draw(st.sampled_from(files))
    size = sizes[file]
    op = draw(st.sampled_from(OPS))
    pos = draw(st.integers(0, max(0, size - 1)))
    params: dict[str, Any]
    if op == "bitflip":
        params = {"pos": pos, "bit": draw(st.integers(0, 7))}
    elif op == "truncate":
        params = {"size": draw(st.integers(0, max(0, size - 1)))}
    elif op == "append":
        params = {"data": draw(st.binary(min_size=1, max_size=130))}
    elif op == "splice":
        params = {"pos": pos, "data": draw(st.binary(min_size=1, max_size=64)),
                  "insert": draw(st.booleans())}
    else:
        value = draw(st.sampled_from((*EXTREMES, size, size + 1, size - 1)))
        if file == "header.json":
            fld = draw(st.sampled_from(header_keys))
        elif file == "index.npy":
            fld = draw(st.sampled_from((*relharness.INDEX_FIELDS, "shape.0")))
        elif file.endswith(".npy"):
            fld = draw(st.sampled_from(("shape.0", "shape.1", "shape.2")))
        else:  # a non-structured file: fall back to overwriting 8 bytes with the integer
            return {"file": file, "op": "splice",
                    "params": {"pos": pos, "data": (value % 2**64).to_bytes(8, "little")}}
        params = {"field": fld, "value": value, "index": draw(st.integers(0, 7))}
    return {"file": file, "op": op, "params": params}


def st_mutations(ds: Path, *, max_count: int = 3, header_keys: tuple[str, ...] = HEADER_INT_KEYS
                 ) -> st.SearchStrategy[list[dict[str, Any]]]:
    files = list(relharness.iter_files(ds))
    sizes = {f: (ds / f).stat().st_size for f in files}
    return st.lists(st_mutation(files, sizes, header_keys), min_size=1, max_size=max_count)


# ---------------------------------------------------------------------------------------------
# ragged labels (SPEC §10.2, format 1.2): (T, 4) boxes, (T,) classes and box fields, counts
# ---------------------------------------------------------------------------------------------

RAGGED_HEADER_INT_KEYS = (*HEADER_INT_KEYS, "num_boxes", "arrays/classes.npy/shape/0",
                          "arrays/counts.npy/shape/0", "arrays/box_iscrowd.npy/shape/0")
RAGGED_ROW_FILES = ("boxes.npy", "classes.npy", "box_iscrowd.npy")


@st.composite
def st_ragged_mutation(draw: st.DrawFn, n: int, t: int, m: int) -> dict[str, Any]:
    """One mutation aimed at the ragged layout of a dataset with ``n`` samples, ``t`` boxes and
    at most ``m`` per sample. ``header``: a header value a ragged reader depends on (``num_boxes``,
    the feature, the version, padded shapes, ``max_boxes``); ``count_add``: one count changed,
    resealed (the counts no longer add up to T: R-49 must refuse it); ``count_shift``: a count
    moved from one sample to another, resealed (the sum may still hold); ``rows``: a
    label array one row short or long, resealed, with or without its header shape."""
    kind = draw(st.sampled_from(("header", "header", "count_add", "count_shift", "rows")))
    if kind == "header":
        path, value = draw(st.sampled_from((
            *(("num_boxes", v) for v in (t - 1, t + 1, 0, -1, 2**56, 2**56 + 1, 2**63, 2**64)),
            ("num_boxes", "6"), ("num_boxes", None), ("num_boxes", 6.0),
            ("required_features", []), ("required_features", ["ragged_labels"] * 2),
            ("required_features", ["ragged_labels", "sharded"]), ("required_features", ["x"]),
            ("version", "1.0"), ("version", "1.1"), ("version", "1.3"), ("version", "2.2"),
            ("arrays/boxes.npy/shape", [n, m, 4]), ("arrays/classes.npy/shape", [n, m]),
            ("arrays/box_iscrowd.npy/shape", [n, m]), ("arrays/boxes.npy/shape", [t, 4, 1]),
            ("max_boxes", 0), ("max_boxes", max(0, m - 1)), ("max_boxes", 2**16 + 1),
            ("num_samples", n - 1), ("num_samples", n + 1))))
        return {"op": "header", "params": {"path": path, "value": value}}
    if kind in ("count_add", "count_shift"):
        delta = draw(st.sampled_from((1, 2, m + 1, 2**31 - 1, 2**31, 2**32 - 1)))
        i, j = draw(st.integers(0, n - 1)), draw(st.integers(0, n - 1))
        if kind == "count_add":
            delta = delta * draw(st.sampled_from((1, -1)))
            return {"op": "count_add", "params": {"i": i, "delta": delta}}
        return {"op": "count_shift", "params": {"i": i, "j": j, "delta": delta}}
    return {"op": "rows", "params": {"file": draw(st.sampled_from(RAGGED_ROW_FILES)),
                                     "extra": draw(st.sampled_from((-1, 1))),
                                     "header_too": draw(st.booleans())}}


def ragged_labels_consistent(ds: Path) -> bool:
    """Whether the ragged labels of ``ds`` still hold together as SPEC §10.2 asks (counts in
    0..max_boxes adding up to num_boxes, each label array num_boxes rows long, as its header
    entry says). When they do not, a reader must refuse the dataset (R-49 and the shape checks)."""
    header = relharness.read_header(ds)
    t, m = header.get("num_boxes"), header.get("max_boxes")
    if type(t) is not int or type(m) is not int:
        return False
    counts = relharness.load_npy(ds, "counts.npy").astype(np.int64)
    if (counts.size and (counts.min() < 0 or counts.max() > m)) or int(counts.sum()) != t:
        return False
    for name in RAGGED_ROW_FILES:
        rows = relharness.load_npy(ds, name)
        if rows.shape[:1] != (t,) or list(rows.shape) != header["arrays"][name]["shape"]:
            return False
    return True


def apply_ragged_mutation(ds: Path, mutation: dict[str, Any]) -> None:
    """Apply a mutation of `st_ragged_mutation` (resealing what it changes, but the header)."""
    params = mutation["params"]

    def wrap(value: int) -> int:  # int32 arithmetic, as a raw write would store it
        return (value + 2**31) % 2**32 - 2**31

    if mutation["op"] == "header":
        header = relharness.read_header(ds)
        set_json_path(header, params["path"], params["value"])
        relharness.write_header(ds, header)
    elif mutation["op"] in ("count_add", "count_shift"):
        def edit(counts: np.ndarray) -> None:
            i = params["i"] % len(counts)
            counts[i] = wrap(int(counts[i]) + params["delta"])
            if mutation["op"] == "count_shift":
                j = params["j"] % len(counts)
                counts[j] = wrap(int(counts[j]) - params["delta"])

        relharness.edit_npy(ds, "counts.npy", edit)
    else:
        name = params["file"]
        rows = relharness.load_npy(ds, name)
        rows = rows[:-1] if params["extra"] < 0 else np.concatenate([rows, rows[-1:]])
        relharness.save_npy(ds, name, rows)
        if params["header_too"]:
            header = relharness.read_header(ds)
            header["arrays"][name]["shape"] = list(rows.shape)
            relharness.write_header(ds, header)


def apply_mutation(ds: Path, mutation: dict[str, Any]) -> None:
    """Apply a mutation; one that does not apply to the file's current bytes is a no-op."""
    # e.g. set_int on an npy file that an earlier mutation already broke
    with contextlib.suppress(*MUTATION_MISFIT):
        relharness.mutate(ds, mutation["file"], mutation["op"], **mutation["params"])


JSON_SCALARS = (st.none() | st.booleans() | st.integers(-(2**70), 2**70)
                | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=12))
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner,
                                                                 max_size=3),
    max_leaves=8,
)
HEADER_PATHS = ("format", "version", "num_samples", "max_boxes", "classes", "classes/0",
                "classes/0/name", "classes/0/source_id", "image", "image/fixed_shape",
                "image/max_side", "image/codecs", "files", "files/images.bin",
                "files/images.bin/xxh3_64", "arrays", "arrays/index.npy/dtype",
                "arrays/boxes.npy/shape", "box_fields", "box_fields/0/name",
                "box_fields/0/dtype", "image_fields", "required_features", "extensions",
                "writer", "metadata")


def set_json_path(header: dict[str, Any], path: str, value: Any) -> None:
    """Replace the value at ``path`` ("a/b/0") in a decoded header, creating dict levels."""
    node: Any = header
    keys = path.split("/")
    for key in keys[:-1]:
        if isinstance(node, list):
            if not node:
                return
            node = node[int(key) % len(node)]
        elif isinstance(node, dict):
            node = node.setdefault(key, {})
        else:
            return
    last = keys[-1]
    if isinstance(node, list) and node:
        node[int(last) % len(node)] = value
    elif isinstance(node, dict):
        node[last] = value


# ---------------------------------------------------------------------------------------------
# sharded (1.1) roots: manifest.json plus packed shard files
# ---------------------------------------------------------------------------------------------

SHARD_REGIONS = ("prefix", "toc", "padding", "member", "tail", "anywhere")
SHARD_BYTE_OPS = ("bitflip", "truncate", "append", "splice", "zero")
SHARD_FILE_OPS = ("delete", "swap", "duplicate")
MANIFEST_JSON_PATHS = ("format", "version", "required_features", "required_features/0",
                       "write_id", "num_samples", "schema", "schema/codec", "schema/classes",
                       "schema/classes/0/name", "schema/classes/0/source_id", "schema/box_fields",
                       "schema/box_fields/0/dtype", "schema/image_fields", "schema/fixed_shape",
                       "schema/max_side", "shards", "shards/0", "shards/1/path", "shards/1/key",
                       "shards/0/num_samples", "shards/3/first_index", "shards/1/bytes",
                       "shards/2/bytes", "shards/0/xxh3_64", "shards/3/max_boxes", "extensions",
                       "writer", "metadata", "unknown_key")
TOC_NAMES = ("header.json", "images.bin", "index.npy", "boxes.npy", "classes.npy", "x", "",
             "../header.json", "a/b", 0, None)
MANIFEST_INT_PATHS = ("num_samples", "shards/0/num_samples", "shards/1/first_index",
                      "shards/0/bytes", "shards/3/bytes", "shards/1/max_boxes",
                      "schema/max_side", "schema/fixed_shape/0")


def shard_regions(path: Path) -> dict[str, list[tuple[int, int]]]:
    """Byte ranges [start, end) of a valid packed shard by role (prefix, TOC, zero padding,
    member bodies, the last 64 bytes), so mutations can aim at each part of S-9/S-10."""
    from detfmt.format.spec import PACK_PREFIX as PREFIX
    from detfmt.reading.sources import PackedSource

    size = path.stat().st_size
    members = PackedSource(path).entries.values()
    toc_end = PREFIX + int.from_bytes(path.read_bytes()[12:16], "little")
    regions: dict[str, list[tuple[int, int]]] = {
        "prefix": [(0, PREFIX)], "toc": [(PREFIX, toc_end)], "padding": [], "member": [],
        "tail": [(max(0, size - 64), size)], "anywhere": [(0, size)]}
    pos = toc_end
    for m in members:
        if m.offset > pos:
            regions["padding"].append((pos, m.offset))
        if m.size:
            regions["member"].append((m.offset, m.offset + m.size))
        pos = m.offset + m.size
    return {k: v for k, v in regions.items() if v}


@st.composite
def st_sharded_mutation(draw: st.DrawFn, files: list[str],
                        regions: dict[str, dict[str, list[tuple[int, int]]]],
                        sizes: dict[str, int]) -> dict[str, Any]:
    """One mutation of a sharded root (plain data, like ``st_mutation``)."""
    file = draw(st.sampled_from(files))
    shards = [f for f in files if f != "manifest.json"]
    if file == "manifest.json":
        kind = draw(st.sampled_from(("bytes", "bytes", "json", "int", "count")))
        if kind == "json":
            return {"file": file, "op": "set_json",
                    "params": {"path": draw(st.sampled_from(MANIFEST_JSON_PATHS)),
                               "value": draw(JSON_VALUES)}}
        if kind == "int":
            return {"file": file, "op": "set_json",
                    "params": {"path": draw(st.sampled_from(MANIFEST_INT_PATHS)),
                               "value": draw(st.sampled_from(EXTREMES))}}
        if kind == "count":
            return {"file": file, "op": "set_count",
                    "params": {"shard": draw(st.integers(0, 7)),
                               "value": draw(st.sampled_from((0, 1, 2, 4, 5, 2**20, 2**40,
                                                              2**62, 2**63 - 1, 2**64 - 1)))}}
        lo, hi = 0, sizes[file]
    else:
        if draw(st.integers(0, 5)) == 0 and len(shards) > 1:
            op = draw(st.sampled_from(SHARD_FILE_OPS))
            other = draw(st.sampled_from([f for f in shards if f != file]))
            return {"file": file, "op": op, "params": {"other": other}}
        if draw(st.integers(0, 4)) == 0:  # structured: prefix integers, TOC fields
            if draw(st.booleans()):
                return {"file": file, "op": "set_u32",
                        "params": {"pos": draw(st.sampled_from((8, 12))),
                                   "value": draw(st.sampled_from(EXTREMES)),
                                   "reseal": draw(st.booleans())}}
            fld = draw(st.sampled_from(("offset", "size", "name")))
            value = (draw(st.sampled_from(TOC_NAMES)) if fld == "name"
                     else draw(st.sampled_from((*EXTREMES, 0, 64, 4096))))
            return {"file": file, "op": "set_toc",
                    "params": {"index": draw(st.integers(0, 7)), "field": fld, "value": value,
                               "reseal": draw(st.booleans())}}
        region = draw(st.sampled_from(sorted(regions[file])))
        lo, hi = draw(st.sampled_from(regions[file][region]))
    reseal = file != "manifest.json" and draw(st.booleans())
    pos = draw(st.integers(lo, max(lo, hi - 1)))
    op = draw(st.sampled_from(SHARD_BYTE_OPS))
    params: dict[str, Any]
    if op == "bitflip":
        params = {"pos": pos, "bit": draw(st.integers(0, 7))}
    elif op == "truncate":
        params = {"size": pos}
    elif op == "append":
        params = {"data": draw(st.binary(min_size=1, max_size=130))}
    elif op == "zero":
        params = {"pos": pos, "size": draw(st.integers(1, max(1, hi - pos)))}
    else:
        params = {"pos": pos, "data": draw(st.binary(min_size=1, max_size=64)),
                  "insert": draw(st.booleans())}
    params["reseal"] = reseal
    return {"file": file, "op": op, "params": params}


def st_sharded_mutations(root: Path, *, max_count: int = 3
                         ) -> st.SearchStrategy[list[dict[str, Any]]]:
    files = relharness.sharded_files(root)
    sizes = {f: (root / f).stat().st_size for f in files}
    regions = {f: shard_regions(root / f) for f in files if f != "manifest.json"}
    return st.lists(st_sharded_mutation(files, regions, sizes), min_size=1, max_size=max_count)


def apply_sharded_mutation(root: Path, mutation: dict[str, Any]) -> None:
    """Apply a sharded mutation; one that does not apply any more (its file was deleted by an
    earlier one, the manifest is no longer JSON...) is a no-op."""
    with contextlib.suppress(*MUTATION_MISFIT, FileNotFoundError, OSError):
        relharness.mutate_sharded(root, mutation["file"], mutation["op"],
                                  **mutation["params"])
