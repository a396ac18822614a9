"""DataLoader compatibility: DetectionDataset + collate, DistributedSampler, RingDataLoader."""

from __future__ import annotations

import gc
import itertools
import multiprocessing
import pickle

import numpy as np
import pytest
import torch
import torch.utils.data as tud
from test_loader import check_batch, expected_order

from detfmt.torch import DetectionDataset, Loader, RingDataLoader, collate
from tests.datasets import varied_shapes


def flat(rows) -> list[int]:
    return list(itertools.chain.from_iterable(rows))


def test_dataset_pickles_path_only(make_any):
    ds = make_any(varied_shapes(6))
    dataset = DetectionDataset(ds)
    dataset[0]  # opened
    data = pickle.dumps(dataset)
    assert len(data) < 1000
    clone = pickle.loads(data)
    assert clone._source._ds is None  # nothing re-opened until the first item
    assert torch.equal(clone[3]["image"], dataset[3]["image"])


@pytest.mark.slow
def test_dataloader_workers_and_collate(make_ds):
    ds = make_ds(varied_shapes(13))
    loader = tud.DataLoader(DetectionDataset(ds.path), batch_size=4, num_workers=2,
                            collate_fn=collate)
    batches = list(loader)
    assert flat(b.indices.tolist() for b in batches) == list(range(13))
    for batch in batches:
        check_batch(batch, ds)


def test_distributed_sampler_shares(make_any):
    ds = make_any(varied_shapes(11))
    dataset = DetectionDataset(ds)
    seen = []
    for rank in range(2):
        sampler = tud.DistributedSampler(dataset, num_replicas=2, rank=rank, shuffle=True, seed=3)
        loader = tud.DataLoader(dataset, batch_size=3, sampler=sampler, collate_fn=collate)
        seen.append(flat(b.indices.tolist() for b in loader))
    assert len(seen[0]) == len(seen[1]) == 6
    assert set(seen[0]) | set(seen[1]) == set(range(11))


def live_children() -> list:
    return multiprocessing.active_children()


@pytest.mark.slow
def test_ring_dataloader_matches_loader_and_is_safe(make_any):
    ds = make_any(varied_shapes(40))
    ring = RingDataLoader(ds, 4, num_workers=2, seed=5, prefetch_factor=2)
    reference = [b.indices.tolist() for b in Loader(ds, 4, seed=5)]
    batches = list(ring)  # hold them all: slots run out, the rest take the fallback path
    ptrs = [b.images.untyped_storage().data_ptr() for b in batches]
    assert len(set(ptrs)) == len(ptrs)  # no held batch shares a buffer with another
    assert [b.indices.tolist() for b in batches] == reference
    for batch in batches:
        check_batch(batch, ds)
    assert flat(reference) == expected_order(ds, 5, 0)
    del batches
    gc.collect()
    # next epoch, recycling the ring; stop early and resume in a new loader
    it = iter(ring)
    first = [next(it).indices.tolist() for _ in range(3)]
    state = ring.state_dict()
    it.close()
    assert not live_children()
    other = RingDataLoader(ds, 4, num_workers=1, seed=0)
    other.load_state_dict(state)
    rest = [b.indices.tolist() for b in other]
    assert flat(first + rest) == expected_order(ds, 5, 1)
    again = [b.indices.tolist() for b in other]  # persistent workers serve the next epoch
    assert flat(again) == expected_order(ds, 5, 2)
    other.close()
    assert not live_children()


@pytest.mark.slow
def test_ring_dataloader_recycles_without_fallback(make_ds):
    ds = make_ds([(16, 16)] * 64)
    ring = RingDataLoader(ds, 4, num_workers=2, prefetch_factor=2, layout="HWC")
    count = 0
    slot_ptrs = {slot.tensor.data_ptr() for slot in ring.ring.slots}
    for batch in ring:
        assert batch.images.shape == (4, 16, 16, 3)
        assert batch.images.untyped_storage().data_ptr() in slot_ptrs  # no fallback copy
        check_batch(batch, ds, layout="HWC")
        count += 1
    assert count == 16
    assert len(ring.ring.slots) == 2 * 2 + 2
    ring.close()


@pytest.mark.slow
@pytest.mark.parametrize("pad_value", [0, 114])
def test_ring_dataloader_clears_only_stale_padding_and_all_after_in_place_writes(make_any,
                                                                                pad_value):
    """Recycled slots of one canvas clear just what their last batch wrote outside the new
    images; a batch written in place through torch gets its slot's padding rewritten in full."""
    ds = make_any(varied_shapes(40, seed=4))
    ring = RingDataLoader(ds, 4, num_workers=2, prefetch_factor=1, ring=3, layout="HWC",
                          canvas=(40, 40), pad_value=pad_value)
    for epoch in range(2):
        for k, batch in enumerate(ring):
            for j, i in enumerate(batch.indices.tolist()):
                h, w = ds.image_shape(i)[:2]
                image = batch.images[j].numpy()
                np.testing.assert_array_equal(image[:h, :w], ds[i].image)
                assert (image[h:] == pad_value).all() and (image[:h, w:] == pad_value).all()
            if (k + epoch) % 3 == 0:
                batch.images.fill_(255)  # an in-place augmentation
            del batch
    ring.close()


def test_items_are_the_readers_samples(make_any):
    """Items come from ds[i] (global indices of a sharded root), through pickling too."""
    ds = make_any(varied_shapes(27))
    dd = DetectionDataset(ds.location)
    assert len(dd) == 27
    clone = pickle.loads(pickle.dumps(dd))
    for i in (0, 6, 7, 20, 26):
        for d in (dd, clone):
            item = d[i]
            sample = ds[i]
            np.testing.assert_array_equal(item["image"].numpy(), sample.image)
            np.testing.assert_array_equal(item["boxes"].numpy(), sample.boxes)
            np.testing.assert_array_equal(item["classes"].numpy(), sample.classes)
            assert int(item["index"]) == i
    assert DetectionDataset(ds, layout="CHW")[3]["image"].shape[0] == 3
