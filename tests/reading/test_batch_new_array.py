"""``ds.batch`` into a new array (issue 27 item 3): the array is uninitialised and only its
padding is cleared, so the padding must be cleared everywhere, whatever the allocator returned,
on every fill path (one thread, several)."""

from __future__ import annotations

import numpy as np
import pytest

from detfmt.reading import buffers, gather
from tests.datasets import make_dataset, varied_shapes

_ALIGNED_EMPTY = buffers.aligned_empty
_CALLS: list[tuple[int, ...]] = []


def _dirty_empty(shape, dtype=np.uint8, align=buffers.PAGE):
    _CALLS.append(shape)
    out = _ALIGNED_EMPTY(shape, dtype, align)
    out.view(np.uint8).reshape(-1).fill(0xAB)  # what a reused heap block may hold
    return out


@pytest.mark.parametrize("threads", [None, 1, 3])
def test_new_array_padding_is_zero_whatever_the_memory_held(tmp_path, monkeypatch, threads):
    ds = make_dataset(tmp_path / "ds", varied_shapes(10, seed=4))
    monkeypatch.setattr(buffers, "aligned_empty", _dirty_empty)
    _CALLS.clear()
    batch = ds.batch(list(range(10)), num_threads=threads)
    assert [batch.images.shape] == _CALLS  # the images went into the dirty, uninitialised block
    for j, (h, w) in enumerate(batch.sizes.tolist()):
        assert np.array_equal(batch.images[j, :h, :w], ds.read_image(j))
        assert not batch.images[j, h:].any() and not batch.images[j, :h, w:].any()


def test_a_failing_share_is_raised_after_every_share_has_finished():
    done = []

    def work(share):
        if share == 0:
            raise ValueError("boom")
        done.append(share)

    with pytest.raises(ValueError, match="boom"):
        gather._split(work, [0, 1, 2])
    assert sorted(done) == [1, 2]  # nothing still writing once the error surfaces
