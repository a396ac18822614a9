"""Fixtures of the torch adapter tests: datasets of each kind (see tests/datasets.py)."""

from __future__ import annotations

import pytest

from tests.datasets import (  # noqa: F401  (re-exported for the test modules)
    corrupt_payload,
    make_dataset,
    make_sharded_root,
    part_of,
    sample_image,
    sample_labels,
    varied_shapes,
)


@pytest.fixture
def make_ds(tmp_path):
    counter = iter(range(1000))

    def make(shapes, codec="raw", max_boxes=3, fixed=False):
        return make_dataset(tmp_path / f"ds{next(counter)}", shapes, codec, max_boxes, fixed)

    return make


KINDS = ("dir", "sharded", "ragged")


@pytest.fixture(params=KINDS)
def kind(request) -> str:
    """Every read-path test runs on a 1.0 directory, a sharded root, and a sharded root whose
    shards store ragged labels (SPEC §10.2)."""
    return request.param


@pytest.fixture
def make_any(tmp_path, kind):
    counter = iter(range(1000))

    def make(shapes, codec="raw", max_boxes=3, fixed=False):
        path = tmp_path / f"ds{next(counter)}"
        if kind == "dir":
            return make_dataset(path, shapes, codec, max_boxes, fixed)
        labels = "ragged" if kind == "ragged" else "padded"
        return make_sharded_root(path, shapes, codec, max_boxes, fixed, labels=labels)

    return make
