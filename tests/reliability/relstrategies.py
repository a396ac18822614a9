"""Hypothesis strategies for mutating a valid dataset, and the CI / nightly settings.

A mutation is plain data, ``{"file", "op", "params"}``, so a failing example prints as a
readable reproducer and the fuzz harness in ``tools/`` can reuse ``apply_mutation``.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

import relharness
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

PROFILE = os.environ.get("DETFMT_FUZZ_PROFILE", "ci")
MAX_EXAMPLES = {"ci": 150, "nightly": 3000}[PROFILE]

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
def st_mutation(draw: st.DrawFn, files: list[str], sizes: dict[str, int]) -> dict[str, Any]:
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
            fld = draw(st.sampled_from(HEADER_INT_KEYS))
        elif file == "index.npy":
            fld = draw(st.sampled_from((*relharness.INDEX_FIELDS, "shape.0")))
        elif file.endswith(".npy"):
            fld = draw(st.sampled_from(("shape.0", "shape.1", "shape.2")))
        else:  # a non-structured file: fall back to overwriting 8 bytes with the integer
            return {"file": file, "op": "splice",
                    "params": {"pos": pos, "data": (value % 2**64).to_bytes(8, "little")}}
        params = {"field": fld, "value": value, "index": draw(st.integers(0, 7))}
    return {"file": file, "op": op, "params": params}


def st_mutations(ds: Path, *, max_count: int = 3) -> st.SearchStrategy[list[dict[str, Any]]]:
    files = list(relharness.iter_files(ds))
    sizes = {f: (ds / f).stat().st_size for f in files}
    return st.lists(st_mutation(files, sizes), min_size=1, max_size=max_count)


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
