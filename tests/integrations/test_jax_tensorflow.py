"""JAX (DLPack, zero-copy) and tf.data recipes: fixed-shape batches equal the reader's, the
hand-over to JAX shares memory, and the recipes' training loss falls."""

from __future__ import annotations

import numpy as np
import pytest

import detfmt
from detfmt.errors import TooManyBoxesError

from ._recipes import falling, run_recipe


@pytest.fixture(scope="module")
def helper():
    return run_recipe("fixed-batch")["fixed_batch"]


def test_fixed_batch_is_the_reader_batch_on_a_fixed_canvas(chess_train, helper):
    ds = detfmt.open(chess_train)
    indices = [5, 0, 3]
    images, boxes, classes, mask, sizes = helper(ds, indices, (440, 650), 20)
    assert np.array_equal(sizes, ds.sizes[indices])
    ref = ds.batch(indices)
    assert images.shape == (3, 440, 650, 3) and boxes.shape == (3, 20, 4)
    for i, k in enumerate(indices):
        h, w = ds.sizes[k]
        n = int(ds.counts[k])
        assert np.array_equal(images[i, :h, :w], ref.images[i, :h, :w])
        assert not images[i, h:].any() and not images[i, :, w:].any()
        sample = ds[k]
        assert np.array_equal(boxes[i, :n], sample.boxes) and mask[i].sum() == n
        assert np.array_equal(classes[i, :n], sample.classes)
    with pytest.raises(TooManyBoxesError):
        helper(ds, indices, (440, 650), int(ds.counts[indices].max()) - 1)


def test_jax_takes_the_batch_without_a_copy(chess_train, helper):
    jnp = pytest.importorskip("jax.numpy")
    ds = detfmt.open(chess_train)
    images, *_ = helper(ds, [0, 1], (428, 640), 16)
    x = jnp.from_dlpack(images)
    assert x.unsafe_buffer_pointer() == images.ctypes.data  # the same memory
    assert np.array_equal(np.asarray(x), images)


def test_jax_recipe_trains_and_the_loss_falls(chess_train, helper):
    pytest.importorskip("jax")
    losses = run_recipe("jax", train_path=chess_train, STEPS=4, fixed_batch=helper)["losses"]
    assert len(losses) == 8 and falling(losses), losses


def test_tensorflow_recipe_trains_and_the_loss_falls(chess_train, helper):
    pytest.importorskip("tensorflow")
    losses = run_recipe("tensorflow", train_path=chess_train, STEPS=4, fixed_batch=helper)["losses"]
    assert len(losses) == 8 and falling(losses), losses
