"""`Loader`'s keywords in torch's split: what to read, ``sampling=Sampling(...)`` (in which order),
``delivery=Delivery(...)`` (how batches are made). The former flat keywords still give the same
batches for one release, with a DeprecationWarning; the grouped form warns about nothing."""

from __future__ import annotations

import inspect
import warnings

import pytest
import torch

from detfmt.errors import UsageError
from detfmt.torch import Delivery, Loader, Sampling
from tests.datasets import varied_shapes

# (former flat keywords, the same in groups)
CASES = [
    ({"num_threads": 2, "prefetch": 3}, {"delivery": Delivery(num_threads=2, prefetch=3)}),
    ({"order": "sequential", "layout": "HWC", "pad_value": 7},
     {"sampling": Sampling(order="sequential"), "delivery": Delivery(layout="HWC", pad_value=7)}),
    ({"order": "quasi_random", "quasi_block": 3, "quasi_window": 2, "io": "pread",
      "num_threads": 1},
     {"sampling": Sampling(order="quasi_random", quasi_block=3, quasi_window=2),
      "delivery": Delivery(io="pread", num_threads=1)}),
    ({"indices": [1, 4, 5, 9, 12], "canvas": (40, 48)},
     {"sampling": Sampling(indices=[1, 4, 5, 9, 12]), "delivery": Delivery(canvas=(40, 48))}),
    ({"repeat_threshold": 0.5, "transform_threads": 1, "torch_threads": 1,
      "transform_reseed": False, "prefetch_shards": 0},
     {"sampling": Sampling(repeat_threshold=0.5),
      "delivery": Delivery(transform_threads=1, torch_threads=1, transform_reseed=False,
                           prefetch_shards=0)}),
]


def _batches(ds, **keywords):
    loader = Loader(ds, 3, seed=11, **keywords)
    return [b for _ in range(2) for b in loader]  # two epochs


def _same(a, b) -> None:
    assert len(a) == len(b) > 0
    for x, y in zip(a, b, strict=True):
        for name in ("images", "boxes", "classes", "mask", "sizes", "indices"):
            assert torch.equal(getattr(x, name), getattr(y, name)), name
        assert x.images.stride() == y.images.stride()


@pytest.mark.parametrize("case", range(len(CASES)))
def test_former_keywords_give_the_same_batches_and_warn(make_ds, case):
    flat, grouped = CASES[case]
    ds = make_ds(varied_shapes(17))
    with pytest.warns(DeprecationWarning, match="sampling=Sampling") as caught:
        old = _batches(ds, **flat)
    assert all(name in str(caught[0].message) for name in flat)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the grouped form warns about nothing
        new = _batches(ds, **grouped)
    _same(old, new)


def test_the_warning_points_at_the_callers_line(make_ds):
    ds = make_ds(varied_shapes(4))
    with pytest.warns(DeprecationWarning) as caught:
        Loader(ds, 2, num_threads=1)
    assert caught[0].filename == __file__


def test_the_constructor_has_at_most_15_parameters():
    parameters = inspect.signature(Loader.__init__).parameters
    assert len(parameters) - 1 <= 15  # without self


def test_a_former_keyword_beside_its_group_is_refused(make_ds):
    ds = make_ds(varied_shapes(4))
    with pytest.raises(UsageError, match="belong in delivery"):
        Loader(ds, 2, delivery=Delivery(), num_threads=2)
    with pytest.raises(UsageError, match="belong in sampling"):
        Loader(ds, 2, sampling=Sampling(), order="sequential")


def test_an_unknown_keyword_is_a_type_error(make_ds):
    ds = make_ds(varied_shapes(4))
    with pytest.raises(TypeError, match="num_thread"):
        Loader(ds, 2, num_thread=2)


def test_groups_are_checked_when_built():
    with pytest.raises(UsageError, match="layout"):
        Delivery(layout="NCHW")
    with pytest.raises(UsageError, match="io must be"):
        Delivery(io="aio")
    with pytest.raises(UsageError, match="num_threads"):
        Delivery(num_threads=0)
    with pytest.raises(UsageError, match="canvas"):
        Delivery(canvas=(0, 8))
    with pytest.raises(UsageError, match="indices"):
        Sampling(indices=[0, 1], order="quasi_random")


def test_a_group_of_the_wrong_type_is_refused(make_ds):
    ds = make_ds(varied_shapes(4))
    with pytest.raises(UsageError, match=r"delivery must be a detfmt\.torch\.Delivery"):
        Loader(ds, 2, delivery={"num_threads": 2})


def test_the_loader_shows_its_groups(make_ds):
    ds = make_ds(varied_shapes(4))
    delivery = Delivery(num_threads=1, layout="HWC")
    loader = Loader(ds, 2, delivery=delivery)
    assert loader.delivery is delivery and isinstance(loader.sampling, Sampling)
    assert (loader.num_threads, loader.layout) == (1, "HWC")


def test_ring_data_loader_from_its_former_module_warns():
    import detfmt.torch as dt

    with pytest.warns(DeprecationWarning, match="import it from detfmt.torch"):
        from detfmt.torch.dataset import RingDataLoader
    assert RingDataLoader is dt.RingDataLoader
