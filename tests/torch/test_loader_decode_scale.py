"""``Delivery(decode_scale=)``: the Loader decodes JPEG samples at 1/2, 1/4, 1/8 in the DCT
domain, with the same pixels, sizes and boxes as ``ds.batch(decode_scale=)`` (issue 27 item 1),
on a directory and a sharded root, with and without a transform."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from detfmt import errors
from detfmt.torch import Delivery, Loader
from tests.datasets import make_dataset, make_sharded_root

SHAPES = [(40, 64), (31, 50), (64, 40), (48, 48), (20, 90), (70, 30), (33, 33), (80, 56)]


def _epoch(loader):
    return [b for b in loader]


@pytest.mark.parametrize("kind", ["directory", "sharded"])
@pytest.mark.parametrize("scale", [2, 4])
def test_loader_batches_equal_ds_batch_at_the_scale(tmp_path, kind, scale):
    make = make_dataset if kind == "directory" else make_sharded_root
    ds = make(tmp_path / kind, SHAPES, codec="jpeg")
    loader = Loader(ds, 4, shuffle=False,
                    delivery=Delivery(num_threads=1, decode_scale=scale, layout="HWC"))
    batches = _epoch(loader)
    assert len(batches) == 2
    for k, got in enumerate(batches):
        want = ds.batch(range(4 * k, 4 * k + 4), decode_scale=scale)
        assert got.sizes.tolist() == want.sizes.tolist()
        assert got.sizes.tolist() == [[-(-h // scale), -(-w // scale)]
                                      for h, w in SHAPES[4 * k: 4 * k + 4]]
        assert np.array_equal(got.images.numpy(), want.images)
        # the boxes follow the pixels: the stored boxes times the decoded / stored size
        full = ds.batch(range(4 * k, 4 * k + 4))
        factors = (want.sizes / full.sizes)[:, ::-1]  # (fx, fy)
        expected = full.boxes * np.tile(factors, 2)[:, None, :].astype(np.float32)
        assert torch.allclose(got.boxes, torch.from_numpy(expected), atol=1e-5)
        assert torch.equal(got.boxes, torch.from_numpy(want.boxes))


def test_scale_one_is_the_default_and_the_stored_pixels(tmp_path):
    ds = make_dataset(tmp_path / "d", SHAPES, codec="jpeg")
    a = _epoch(Loader(ds, 4, shuffle=False, delivery=Delivery(num_threads=1)))
    b = _epoch(Loader(ds, 4, shuffle=False, delivery=Delivery(num_threads=1, decode_scale=1)))
    for x, y in zip(a, b, strict=True):
        assert torch.equal(x.images, y.images) and torch.equal(x.boxes, y.boxes)
    assert a[0].images.shape[2:] == (64, 64)  # the largest of the first four, unscaled


def test_a_transform_sees_the_scaled_batch(tmp_path):
    """A transform gets the smaller images with boxes inside them (the Letterbox to a size
    twice the decoded one maps them back onto the stored geometry's scale)."""
    from detfmt.augment import Letterbox

    ds = make_dataset(tmp_path / "d", SHAPES, codec="jpeg")
    loader = Loader(ds, 4, transform=Letterbox(48),
                    delivery=Delivery(num_threads=1, decode_scale=2))
    for batch in loader:
        assert batch.images.shape[-2:] == (48, 48)
        valid = batch.boxes[batch.mask]
        assert len(valid) and (valid >= 0).all() and (valid <= 48).all()


def test_settings_are_checked_where_they_are_given(tmp_path):
    for bad in (3, 0, True, 2.0):
        with pytest.raises(errors.UsageError, match="decode_scale must be"):
            Delivery(decode_scale=bad)
    with pytest.raises(errors.UsageError, match="gpu_decode"):
        Delivery(decode_scale=2, gpu_decode=True)
    raw = make_dataset(tmp_path / "raw", SHAPES[:4])
    with pytest.raises(errors.UsageError, match="needs JPEG-stored samples"):
        _epoch(Loader(raw, 4, delivery=Delivery(num_threads=1, decode_scale=2)))
    with pytest.raises(TypeError, match="decode_scale"):  # only inside Delivery: one way
        Loader(raw, 4, decode_scale=2)
