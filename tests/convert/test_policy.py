"""Property tests of the shared box policy and the report's accounting."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from detfmt.convert.boxes import apply_box_policy
from detfmt.convert.report import ConversionReport

coordinate = st.one_of(st.floats(-50, 150, allow_nan=False), st.just(float("nan")),
                       st.just(float("inf")))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(coordinate, coordinate, coordinate, coordinate), max_size=12),
       st.integers(1, 100), st.integers(1, 100))
def test_every_box_is_kept_fixed_or_dropped(boxes, width, height):
    report = ConversionReport("test", "src", "dst")
    array = np.array(boxes, dtype=np.float64).reshape(-1, 4)
    clipped, keep = apply_box_policy(array, width, height, report, "x")
    kept = clipped[keep]
    assert keep.sum() + sum(report.boxes_dropped.values()) == len(array)
    assert sum(report.boxes_fixed.values()) <= keep.sum()
    assert np.isfinite(kept).all()
    assert (kept[:, 0] >= 0).all() and (kept[:, 2] <= width).all()
    assert (kept[:, 1] >= 0).all() and (kept[:, 3] <= height).all()
    assert (kept[:, 2] > kept[:, 0]).all() and (kept[:, 3] > kept[:, 1]).all()
    inside = keep & (clipped == array).all(axis=1)
    np.testing.assert_array_equal(clipped[inside], array[inside])  # valid boxes untouched


def test_empty_source_gives_an_empty_dataset_when_allowed(tmp_path):
    import detfmt
    from detfmt.convert import from_coco
    from tests.convert.conftest import write_coco

    (tmp_path / "img").mkdir()
    js = write_coco(tmp_path / "a.json", [], [], [{"id": 1, "name": "x"}])
    report = from_coco(js, tmp_path / "img", tmp_path / "ds", allow_empty=True)
    assert report.balanced and report.images_kept == 0 and report.codec == "raw"
    with detfmt.open(tmp_path / "ds") as ds:
        assert len(ds) == 0 and [c.name for c in ds.header.classes] == ["x"]
