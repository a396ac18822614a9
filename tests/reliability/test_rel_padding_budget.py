"""Property 6 (resources are bounded): one huge image among small ones never makes a read path
allocate gigabytes of padding. ``ds.batch``, the Loader and the DataLoader ring refuse such a
batch with a typed error naming the sample (rule PADDING_BUDGET) before allocating anything;
a batch whose images are themselves that large is the caller's choice and is not refused."""

from __future__ import annotations

import numpy as np
import pytest

import detfmt
from detfmt.reading.gather import PADDING_FACTOR, PADDING_LIMIT, check_padding

BIG = 7  # the index of the 4096x4096 image among 16x16 ones


@pytest.fixture(scope="module")
def lopsided(tmp_path_factory):
    path = tmp_path_factory.mktemp("pad") / "ds"
    samples = []
    for i in range(32):
        side = 4096 if i == BIG else 16
        samples.append({"image": np.full((side, side, 3), i, np.uint8),
                        "boxes": np.zeros((0, 4), np.float32), "classes": []})
    detfmt.write(samples, path, classes=["x"], codec="png")  # flat: a few KB on disk
    return path


def test_batch_refuses_gigabytes_of_padding(lopsided):
    with detfmt.open(lopsided) as ds:
        with pytest.raises(detfmt.UsageError) as caught:
            ds.batch(np.arange(32))
        assert caught.value.rule == "PADDING_BUDGET" and caught.value.index == BIG
        small = ds.batch([i for i in range(32) if i != BIG])  # the rest reads as usual
        assert small.images.shape == (31, 16, 16, 3)
        alone = ds.batch([BIG])  # the big image on its own is no padding at all
        assert alone.images.shape == (1, 4096, 4096, 3)


def test_loader_and_ring_refuse_it_too(lopsided):
    torch = pytest.importorskip("torch")  # noqa: F841
    from detfmt.torch import Delivery, Loader, RingDataLoader

    with pytest.raises(detfmt.UsageError) as caught:
        for _ in Loader(lopsided, 32, shuffle=False, delivery=Delivery(num_threads=1)):
            pass
    assert caught.value.rule == "PADDING_BUDGET" and caught.value.index == BIG
    with pytest.raises(detfmt.UsageError) as caught:
        RingDataLoader(lopsided, 32, num_workers=1, shuffle=False)
    assert caught.value.rule == "PADDING_BUDGET"


def test_the_budget_allows_large_images_and_small_padding():
    side = 4096
    image = side * side * 3
    check_padding(32, side, side, 32 * image, "ds")  # 1.5 GiB of images: their own choice
    check_padding(4, side, side, image, "ds")  # under the absolute limit
    with pytest.raises(detfmt.UsageError):
        check_padding(32, side, side, image, "ds")
    assert PADDING_LIMIT == 1 << 30 and PADDING_FACTOR == 8
