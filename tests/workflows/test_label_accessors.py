"""Issue 29 item 20: one way to read every label of a dataset that works on both label layouts
and every kind of dataset: ``ds.ragged_labels()`` (rows with offsets) and ``ds.labels()``
(padded arrays, materialised on request); ``ds.boxes`` on ragged labels names them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import detfmt
from detfmt.shard.append import append


@pytest.fixture(scope="module")
def kinds(coco128, tmp_path_factory) -> dict[str, Path | list[Path]]:
    """Real coco128 (converted: the auto layout is ragged), the same samples written padded,
    a sharded root of both, and a mixture of both."""
    base = tmp_path_factory.mktemp("kinds")
    with detfmt.open(coco128) as ds:
        assert ds.ragged  # what the converter chose on real data
        samples = [{"image": s.image, "boxes": s.boxes, "classes": s.classes, **s.fields}
                   for s in (ds[i] for i in range(len(ds)))]
        classes, max_side = list(ds.schema.classes), ds.schema.max_side
    detfmt.write(samples, base / "padded", classes=classes, labels="padded", codec="raw",
                 max_side=max_side)
    append(base / "sharded", [coco128, base / "padded"])
    return {"ragged": coco128, "padded": base / "padded", "sharded": base / "sharded",
            "mixture": [coco128, base / "padded"]}


def _open(where):
    return detfmt.Mixture(where) if isinstance(where, list) else detfmt.open(where)


@pytest.mark.parametrize("kind", ["ragged", "padded", "sharded", "mixture"])
def test_every_label_through_one_accessor(kinds, kind):
    ds = _open(kinds[kind])
    n = len(ds)
    rows = ds.ragged_labels()
    padded = ds.labels()
    assert len(rows) == len(padded) == n
    assert rows.offsets[0] == 0 and rows.offsets[-1] == len(rows.boxes) == len(rows.classes)
    assert np.array_equal(rows.counts, padded.mask.sum(axis=1))
    total = 0
    for i in range(n):
        sample = ds[i]
        boxes, classes = rows.of(i)
        assert np.array_equal(boxes, sample.boxes) and np.array_equal(classes, sample.classes)
        k = len(sample.boxes)
        assert np.array_equal(padded.boxes[i, :k], sample.boxes)
        assert np.array_equal(padded.classes[i, :k], sample.classes)
        assert not padded.mask[i, k:].any()
        total += k
    assert total == len(rows.boxes) > 0
    small = ds.ragged_labels(slots=8)  # gathered in many small blocks: the same rows
    assert np.array_equal(small.boxes, rows.boxes) and np.array_equal(small.offsets, rows.offsets)
    some = np.array([n - 1, 3, 3, 0])  # any order, repeats
    picked = ds.ragged_labels(some)
    for k, i in enumerate(some.tolist()):
        assert np.array_equal(picked.of(k)[0], ds[i].boxes)


def test_the_stored_arrays_name_the_accessors_on_ragged_labels(kinds):
    """Where ``ds.boxes`` (the stored padded array) cannot be served, the error remains and
    the accessors it points to work on that very dataset."""
    with detfmt.open(kinds["ragged"]) as ds:
        for name in ("boxes", "classes", "box_fields"):
            with pytest.raises(detfmt.UsageError) as caught:
                getattr(ds, name)
            assert caught.value.rule == "RAGGED_LABELS"
            named = [call for call in ("ragged_labels()", "labels()")
                     if f"ds.{call}" in str(caught.value)]
            assert named
            for call in named:
                assert len(getattr(ds, call[:-2])()) == len(ds)
    with detfmt.open(kinds["padded"]) as ds:  # the padded layout keeps its zero-copy arrays
        assert ds.boxes.shape[:2] == ds.classes.shape
        assert np.array_equal(ds.ragged_labels().boxes, ds.boxes[ds.classes >= 0])
