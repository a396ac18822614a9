"""ds.batch(canvas=, max_boxes=): fixed-shape numpy batches (JAX, tf.data), on both kinds."""

from __future__ import annotations

import numpy as np
import pytest

import detfmt
from tests.datasets import make_dataset, make_sharded_root, sample_image, varied_shapes


@pytest.fixture(params=["dir", "sharded"])
def ds(request, tmp_path):
    make = make_dataset if request.param == "dir" else make_sharded_root
    return make(tmp_path / "ds", varied_shapes(20, seed=2), max_boxes=3)


def test_fixed_shapes_whatever_the_samples(ds):
    for indices in ([0, 5, 7], [1], [19, 2, 3, 4]):
        batch = ds.batch(indices, canvas=(48, 48), max_boxes=6)
        assert batch.images.shape == (len(indices), 48, 48, 3)
        assert batch.boxes.shape == (len(indices), 6, 4) and batch.classes.shape[1] == 6
        for j, i in enumerate(indices):
            h, w = batch.sizes[j]
            np.testing.assert_array_equal(batch.images[j, :h, :w], sample_image(i, h, w))
            assert not batch.images[j, h:].any() and not batch.images[j, :h, w:].any()
            k = int(ds[i].boxes.shape[0])
            assert batch.mask[j].sum() == k
            np.testing.assert_array_equal(batch.boxes[j, :k], ds[i].boxes)
            assert (batch.classes[j, k:] == -1).all() and not batch.boxes[j, k:].any()


def test_a_cap_that_would_cut_boxes_is_an_error(ds):
    crowded = next(i for i in range(len(ds)) if len(ds[i].boxes) == 3)
    with pytest.raises(detfmt.TooManyBoxesError) as info:
        ds.batch([0, crowded], max_boxes=2)
    assert (info.value.count, info.value.max_boxes, info.value.index) == (3, 2, crowded)
    with pytest.raises(detfmt.UsageError):  # an image larger than the canvas
        ds.batch([0, 1], canvas=(8, 8))
