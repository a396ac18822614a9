"""The viewer's filters against a plain per-sample loop, on random label sets."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from detfmt.errors import UsageError
from detfmt.view.index import SIZES, LabelIndex, Query


def _random_index(seed: int, n: int = 300, classes: int = 5) -> LabelIndex:
    rng = np.random.default_rng(seed)
    counts = rng.integers(0, 6, n)
    owner = np.repeat(np.arange(n), counts)
    return LabelIndex(counts, rng.integers(0, classes, len(owner)), owner,
                      rng.choice([10.0, 500.0, 1024.0, 5000.0, 9216.0, 20000.0], len(owner)),
                      classes, [f"IMG_{i:04d}_{'day' if i % 3 else 'night'}.jpg"
                                for i in range(n)])


def _slow(index: LabelIndex, q: Query) -> list[int]:
    out = []
    for i in range(len(index)):
        mine = index.owner == i
        classes, area = set(index.classes[mine].tolist()), index.area[mine]
        if q.any_of and not classes & set(q.any_of):
            continue
        if q.all_of and not set(q.all_of) <= classes:
            continue
        if classes & set(q.none_of):
            continue
        if q.min_boxes is not None and index.counts[i] < q.min_boxes:
            continue
        if q.max_boxes is not None and index.counts[i] > q.max_boxes:
            continue
        if q.size is not None:
            low, high = SIZES[q.size]
            if not ((area >= low) & (area < high)).any():
                continue
        if q.name and q.name.lower() not in index.names[i].lower():
            continue
        out.append(i)
    return out


QUERIES = [
    Query(), Query(any_of=(1,)), Query(any_of=(0, 4)), Query(all_of=(1, 2)),
    Query(none_of=(3,)), Query(any_of=(2,), none_of=(0, 1)), Query(min_boxes=4),
    Query(max_boxes=0), Query(min_boxes=1, max_boxes=2), Query(size="small"),
    Query(size="medium", any_of=(1,)), Query(size="large", all_of=(0, 3)),
    Query(name="NIGHT"), Query(name="_01"), Query(name="0299_night.jpg"), Query(name="x"),
    Query(name="\n"),
]


@pytest.mark.parametrize(("seed", "q"), list(itertools.product(range(3), QUERIES)))
def test_select_matches_a_plain_loop(seed, q):
    index = _random_index(seed)
    assert index.select(q).tolist() == _slow(index, q)


def test_sorts_by_box_count():
    index = _random_index(7)
    most = index.select(Query(sort="most-boxes"))
    assert sorted(most.tolist()) == list(range(len(index)))
    assert np.all(np.diff(index.counts[most]) <= 0)
    fewest = index.select(Query(any_of=(1,), sort="fewest-boxes"))
    assert np.all(np.diff(index.counts[fewest]) >= 0)
    assert sorted(fewest.tolist()) == index.select(Query(any_of=(1,))).tolist()


def test_bad_queries_are_usage_errors():
    index = _random_index(0)
    for q in (Query(any_of=(5,)), Query(none_of=(-1,)), Query(size="tiny"),  # type: ignore
              Query(sort="worst")):
        with pytest.raises(UsageError):
            index.select(q)


def test_without_file_names_a_name_filter_matches_nothing():
    index = LabelIndex(np.array([1, 0]), np.array([0]), np.array([0]), np.array([4.0]), 1)
    assert index.select(Query(name="a")).tolist() == []
    assert index.select(Query()).tolist() == [0, 1]
