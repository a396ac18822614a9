"""A process forked after detfmt started its thread pools (a torch DataLoader worker, a
multiprocessing pool) uses them without hanging: the child has none of its parent's threads,
so it must start its own instead of queueing work on the inherited pool."""

from __future__ import annotations

import multiprocessing as mp

import numpy as np
import pytest
import torch

import detfmt
from detfmt.reading import gather
from tests.datasets import make_dataset, varied_shapes


def _batch_in_child(path: str) -> tuple[int, ...]:
    ds = detfmt.open(path)
    return tuple(ds.batch(np.arange(len(ds)), num_threads=2).images.shape)


def _augment_in_child(_: int) -> tuple[int, ...]:
    import detfmt.augment as A
    from detfmt.torch import Batch

    images = torch.full((4, 3, 32, 32), 100, dtype=torch.uint8)
    batch = Batch(images=images, boxes=torch.zeros((4, 1, 4)), classes=torch.full((4, 1), -1),
                  mask=torch.zeros((4, 1), dtype=torch.bool))
    torch.set_num_threads(2)
    out = A.RandomAffine(degrees=10.0)(batch)
    return tuple(out.images.shape)


@pytest.mark.timeout(120)
def test_a_forked_child_batches_after_the_parent_did(tmp_path):
    path = tmp_path / "ds"
    ds = make_dataset(path, varied_shapes(24))
    parent = ds.batch(np.arange(len(ds)), num_threads=2)
    assert gather._POOL is not None  # the parent's copy threads exist
    with mp.get_context("fork").Pool(2) as pool:
        shapes = pool.map_async(_batch_in_child, [str(path)] * 2).get(timeout=60)
    assert shapes == [tuple(parent.images.shape)] * 2


@pytest.mark.timeout(120)
def test_a_forked_child_augments_after_the_parent_did():
    pytest.importorskip("cv2")
    import detfmt.augment as A

    previous = A.get_cpu_backend()
    A.set_cpu_backend("opencv")
    try:
        torch.set_num_threads(2)
        want = _augment_in_child(0)  # the parent starts the per-sample pool
        with mp.get_context("fork").Pool(2) as pool:
            shapes = pool.map_async(_augment_in_child, range(2)).get(timeout=60)
        assert shapes == [want] * 2
    finally:
        A.set_cpu_backend(previous)
