"""Loader: contents, order, resume, buffer reuse and shutdown, on a 1.0 directory and on a
sharded root alike (the `kind` fixture runs each test on both)."""

from __future__ import annotations

import gc
import itertools
import threading

import numpy as np
import pytest
import torch

import detfmt
from detfmt.errors import DecodeError, UsageError
from detfmt.order import epoch_permutation, quasi_random_permutation, sharded_epoch_order
from detfmt.torch import Batch, Delivery, Loader, Sampling
from tests.datasets import (
    corrupt_payload,
    make_sharded_root,
    sample_image,
    sample_labels,
    varied_shapes,
)


def flat(rows) -> list[int]:
    return list(itertools.chain.from_iterable(rows))


def loader_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("detfmt-loader")]


def expected_order(ds, seed: int, epoch: int, window: int = 4) -> list[int]:
    """The bit-exact order of SPEC §18 (1.0: O-3) or S-18 (sharded), from the spec functions."""
    if isinstance(ds, detfmt.ShardedDataset):
        counts = [s.num_samples for s in ds.shards]
        return sharded_epoch_order(counts, seed=seed, epoch=epoch, window=window).tolist()
    return epoch_permutation(seed, epoch, len(ds)).tolist()


def check_batch(batch: Batch, ds, max_boxes=3, layout="CHW", exact=True):
    images = batch.images if layout == "HWC" else batch.images.permute(0, 2, 3, 1)
    assert images.dtype == torch.uint8
    if layout == "CHW":
        assert batch.images.shape[1] == 3
        assert batch.images.is_contiguous(memory_format=torch.channels_last)
    sizes = batch.sizes.numpy()
    assert batch.mask.dtype == torch.bool and batch.boxes.dtype == torch.float32
    for j, i in enumerate(batch.indices.tolist()):
        h, w = ds.image_shape(i)[:2]
        assert tuple(sizes[j]) == (h, w)
        img = images[j].numpy()
        if exact:
            np.testing.assert_array_equal(img[:h, :w], sample_image(i, h, w))
        assert not img[h:].any() and not img[:h, w:].any()
        boxes, classes = sample_labels(i, h, w, max_boxes)
        k = len(boxes)
        assert batch.mask[j].sum() == k and batch.mask[j, :k].all()
        np.testing.assert_array_equal(batch.boxes[j, :k].numpy(), boxes)
        np.testing.assert_array_equal(batch.classes[j, :k].numpy(), classes)
        assert not batch.boxes[j, k:].any() and (batch.classes[j, k:] == -1).all()
    assert batch.boxes.shape[1] == batch.mask.shape[1] == int(batch.mask.sum(1).max())


def assert_same_as_reader(batch: Batch, ds, layout="CHW"):
    images = batch.images if layout == "HWC" else batch.images.permute(0, 2, 3, 1)
    want = ds.batch(batch.indices.numpy())
    got = {"images": images.numpy(), "sizes": batch.sizes.numpy(), "boxes": batch.boxes.numpy(),
           "classes": batch.classes.numpy(), "mask": batch.mask.numpy(),
           "indices": batch.indices.numpy()}
    for name, value in got.items():
        assert value.shape == getattr(want, name).shape, name
        np.testing.assert_array_equal(value, getattr(want, name), err_msg=name)


@pytest.mark.parametrize("threads", [1, 3])
def test_contents_and_order(make_any, threads):
    ds = make_any(varied_shapes(37))
    loader = Loader(ds, 5, seed=4, delivery=Delivery(num_threads=threads, prefetch=3))
    batches = list(loader)
    assert len(batches) == len(loader) == 8
    got = np.concatenate([b.indices.numpy() for b in batches])
    assert got.tolist() == expected_order(ds, 4, 0)
    for batch in batches:  # every held batch is still intact after the whole epoch
        check_batch(batch, ds)
    assert len(batches[-1]) == 2


@pytest.mark.parametrize("codec", ["raw", "zstd", "png"])
@pytest.mark.parametrize("drop_last", [True, False])
def test_batches_are_the_plan_and_match_ds_batch(make_any, codec, drop_last):
    ds = make_any(varied_shapes(27), codec=codec)
    loader = Loader(
        ds,
        4,
        seed=5,
        drop_last=drop_last,
        sampling=Sampling(shard_window=2),
        delivery=Delivery(num_threads=2),
    )
    plan = ds.plan(seed=5, epoch=0, batch_size=4, shard_window=2, drop_last=drop_last)
    batches = list(loader)  # held all at once: the buffer-reuse contract keeps each intact
    assert len(batches) == len(loader) == len(plan) == (6 if drop_last else 7)
    for batch, want in zip(batches, plan.batches(), strict=True):
        assert batch.indices.tolist() == want.tolist()
        assert_same_as_reader(batch, ds)
    for batch in batches:
        check_batch(batch, ds)


def test_hwc_layout_and_sequential(make_any):
    ds = make_any(varied_shapes(10))
    batches = list(Loader(ds, 4, shuffle=False, delivery=Delivery(num_threads=2, layout="HWC")))
    assert [b.indices.tolist() for b in batches] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    for batch in batches:
        check_batch(batch, ds, layout="HWC")
        assert_same_as_reader(batch, ds, layout="HWC")


def test_labels_repadded_across_shards(tmp_path):
    """A batch spanning shards of different max_boxes (0, 1, 3) is re-padded to its own maximum
    (S-12), with exact padding."""
    ds = make_sharded_root(tmp_path / "r", varied_shapes(12), shard_sizes=(1, 4, 7))
    assert [ds.shard(k).max_boxes for k in range(3)] == [0, 3, 3]
    batch = next(iter(Loader(ds, 12, shuffle=False, delivery=Delivery(num_threads=1))))
    counts = batch.mask.sum(1)
    assert batch.boxes.shape[1] == int(counts.max()) == 3
    assert (batch.classes[~batch.mask] == -1).all() and not batch.boxes[~batch.mask].any()
    check_batch(batch, ds)


def test_epochs_advance_and_set_epoch(make_any):
    ds = make_any(varied_shapes(12))
    loader = Loader(ds, 4, seed=1, delivery=Delivery(num_threads=2))
    e0 = [b.indices.tolist() for b in loader]
    assert loader.state_dict()["samples_seen"] == 12 and loader.epoch == 0
    e1 = [b.indices.tolist() for b in loader]
    assert loader.epoch == 1
    assert flat(e0) == expected_order(ds, 1, 0)
    assert flat(e1) == expected_order(ds, 1, 1)
    loader.set_epoch(0)
    assert [b.indices.tolist() for b in loader] == e0
    loader.set_epoch(0)  # a finished epoch set again runs again, the position after each batch
    positions = []
    for _ in loader:
        positions.append(loader.state_dict()["samples_seen"])
    assert positions == [4, 8, 12]


def test_fixed_shape_and_canvas(make_any):
    ds = make_any([(16, 24)] * 9, fixed=True)
    for io in ("mmap", "pread"):
        for batch in Loader(ds, 4, delivery=Delivery(num_threads=2, io=io)):
            assert batch.images.shape[1:] == (3, 16, 24)
            check_batch(batch, ds)
    ds2 = make_any(varied_shapes(9))
    for batch in Loader(ds2, 4, delivery=Delivery(num_threads=2, canvas=(40, 48))):
        assert batch.images.shape[1:] == (3, 40, 48)
        check_batch(batch, ds2)
    with pytest.raises(UsageError):  # an image larger than the canvas
        list(Loader(ds2, 4, delivery=Delivery(canvas=(8, 8))))
    with pytest.raises(UsageError):
        Loader(ds2, 4, delivery=Delivery(canvas=(0, 8)))


def test_pread_matches_mmap(make_any):
    ds = make_any(varied_shapes(21))
    a = list(Loader(ds, 4, delivery=Delivery(num_threads=2, io="pread")))
    b = list(Loader(ds, 4, delivery=Delivery(num_threads=2, io="mmap")))
    for x, y in zip(a, b, strict=True):
        assert torch.equal(x.images, y.images) and torch.equal(x.indices, y.indices)
        check_batch(x, ds)


@pytest.mark.parametrize("io", ["mmap", "pread"])
@pytest.mark.parametrize("codec", ["zstd", "jpeg", "png"])
def test_compressed_codecs(make_any, codec, io):
    ds = make_any(varied_shapes(9), codec=codec)
    for batch in Loader(ds, 4, delivery=Delivery(num_threads=2, io=io)):
        check_batch(batch, ds, exact=codec != "jpeg")
        for j, i in enumerate(batch.indices.tolist()):
            h, w = ds.image_shape(i)[:2]
            expected = np.empty((h, w, 3), np.uint8)
            ds.decode_into(i, expected)
            np.testing.assert_array_equal(batch.images[j].permute(1, 2, 0)[:h, :w].numpy(),
                                          expected)


@pytest.mark.parametrize("split", [0, 1, 3, 7])
def test_resume_mid_epoch_exact(make_any, split):
    ds = make_any(varied_shapes(30))
    full = Loader(ds, 4, seed=9, delivery=Delivery(num_threads=1))
    full.set_epoch(2)
    expected = [b.indices.tolist() for b in full]
    first = Loader(ds, 4, seed=9, delivery=Delivery(num_threads=3))
    first.set_epoch(2)
    it = iter(first)
    seen = [next(it).indices.tolist() for _ in range(split)]
    state = first.state_dict()
    it.close()
    # other threads, seed comes from the state
    second = Loader(ds, 4, seed=0, delivery=Delivery(num_threads=2))
    second.load_state_dict(state)
    second.set_epoch(2)  # the usual training loop calls this: it keeps the position
    rest = [b.indices.tolist() for b in second]
    assert seen + rest == expected
    assert second.state_dict()["epoch"] == 2
    nxt = [b.indices.tolist() for b in second]  # then the next epoch
    assert flat(nxt) == expected_order(ds, 9, 3)


@pytest.mark.parametrize("drop_last", [True, False])
def test_resume_one_rank_on_two_ranks_with_another_batch_size(make_any, drop_last):
    """Stop a 1-rank epoch after k batches, resume on 2 ranks with another per-rank batch size:
    every remaining sample exactly once, none repeated."""
    ds = make_any(varied_shapes(27))
    one = Loader(ds, 4, seed=3, delivery=Delivery(num_threads=2))
    one.set_epoch(1)
    it = iter(one)
    head = flat(next(it).indices.tolist() for _ in range(3))
    state = one.state_dict()
    it.close()
    assert state["samples_seen"] == 12
    two = [Loader(
        ds,
        3,
        seed=0,
        rank=r,
        world_size=2,
        drop_last=drop_last,
        delivery=Delivery(num_threads=1),
    )
           for r in range(2)]
    for loader in two:
        loader.load_state_dict(state)
    per_rank = [[b.indices.tolist() for b in loader] for loader in two]
    assert len(per_rank[0]) == len(per_rank[1])
    tail = [i for t in range(len(per_rank[0])) for r in range(2) for i in per_rank[r][t]]
    order = expected_order(ds, 3, 1)
    left = 27 - 12
    if drop_last:  # 15 left: two whole global batches of 6, the rest dropped
        assert head + tail == order[:24]
    else:  # 15 left, wrap-padded to three global batches of 6
        assert head + tail[:left] == order and tail[left:] == order[: 18 - left]
    assert len(set(head + tail[:left])) == len(head + tail[:left])
    assert two[0].state_dict()["samples_seen"] == 27  # the epoch is finished on every rank


@pytest.mark.parametrize("drop_last", [True, False])
def test_world_sizes_1_2_4_same_global_sequence(make_any, drop_last):
    ds = make_any(varied_shapes(27))
    sequences = {}
    for world in (1, 2, 4):
        loaders = [Loader(
            ds,
            8 // world,
            seed=7,
            rank=r,
            world_size=world,
            drop_last=drop_last,
            delivery=Delivery(num_threads=1),
        ) for r in range(world)]
        per_rank = [[b.indices.tolist() for b in loader] for loader in loaders]
        assert len({len(r) for r in per_rank}) == 1  # every rank runs the same number of steps
        sequences[world] = [i for t in range(len(per_rank[0])) for r in per_rank for i in r[t]]
    order = expected_order(ds, 7, 0)
    if drop_last:
        assert sequences[1] == sequences[2] == sequences[4] == order[:24]
    else:  # O-5: one rank keeps a short last batch; several ranks wrap-pad to whole batches
        assert sequences[1] == order
        assert sequences[2] == sequences[4] == order + order[:5]


def test_ranks_disjoint_equal_covering(make_any):
    ds = make_any(varied_shapes(23))
    for drop_last in (True, False):
        shares = [[b.indices.tolist() for b in Loader(
            ds,
            3,
            seed=1,
            rank=r,
            world_size=3,
            drop_last=drop_last,
            delivery=Delivery(num_threads=1),
        )]
                  for r in range(3)]
        assert len({len(s) for s in shares}) == 1
        assert all(len(b) == 3 for s in shares for b in s)
        every = flat(flat(shares))
        if drop_last:
            assert len(every) == len(set(every)) == 18
        else:
            assert set(every) == set(range(23)) and len(every) == 27
    default = [len(list(Loader(
        ds,
        4,
        seed=1,
        rank=r,
        world_size=3,
        delivery=Delivery(num_threads=1),
    )))
               for r in range(3)]
    assert default == [1, 1, 1]  # distributed default: drop_last=True


def test_buffer_reuse_never_overwrites_held_batch(make_any):
    ds = make_any(varied_shapes(64))
    loader = Loader(ds, 4, seed=3, delivery=Delivery(num_threads=2, prefetch=2))
    held, held_copy, view, view_copy = None, None, None, None
    for k, batch in enumerate(loader):
        if k == 1:
            held, held_copy = batch, batch.images.clone()
        if k == 2:
            view, view_copy = batch.images[1, 2], batch.images[1, 2].clone()  # a view alone
        del batch
    assert torch.equal(held.images, held_copy)
    assert torch.equal(view, view_copy)
    check_batch(held, ds)
    # without holding, buffers are recycled: the ring stays small
    assert len(loader.ring.slots) <= loader.prefetch + 6


def test_ring_recycles_released_buffers(make_any):
    ds = make_any([(16, 16)] * 200)
    loader = Loader(ds, 2, delivery=Delivery(num_threads=2, prefetch=2))
    for _ in loader:
        pass
    assert len(loader.ring.slots) <= 5
    batches = list(loader)  # holding everything grows the ring instead of overwriting
    assert len(loader.ring.slots) >= len(batches)
    for batch in batches:
        check_batch(batch, ds)


def test_ring_buffers_are_huge_page_aligned_and_held_views_keep_them(make_any):
    """CPU ring buffers start on a 2 MiB boundary (numpy asks for transparent huge pages on
    them); a batch's images view the buffer, so holding it keeps the slot from reuse."""
    from detfmt.torch._ring import HUGE_PAGE

    ds = make_any([(16, 16)] * 8)
    loader = Loader(ds, 4, delivery=Delivery(num_threads=1, prefetch=1))
    held = next(iter(loader))
    held_ptr = held.images.untyped_storage().data_ptr()
    slot = next(s for s in loader.ring.slots
                if s.tensor.untyped_storage().data_ptr() == held_ptr)
    assert slot.tensor.data_ptr() % HUGE_PAGE == 0
    assert slot.referenced()
    del held
    assert not slot.referenced()


def test_early_stop_and_errors_leave_no_threads(make_any):
    ds = make_any(varied_shapes(50))
    loader = Loader(ds, 2, delivery=Delivery(num_threads=3, prefetch=4))
    for k, _ in enumerate(loader):
        if k == 2:
            break
    gc.collect()
    assert not loader_threads()

    calls = {"n": 0}
    original = loader.engine.fill

    def failing(job, out, pad_value=0, **kwargs):
        calls["n"] += 1
        if calls["n"] == 4:
            raise RuntimeError("disk on fire")
        return original(job, out, pad_value, **kwargs)

    loader.engine.fill = failing
    loader.set_epoch(5)
    try:
        with pytest.raises(RuntimeError, match="disk on fire"):
            for _ in loader:
                pass
        assert not loader_threads()
        assert not any(slot.busy for slot in loader.ring.slots)  # the failed job released it
    finally:
        del loader.engine.fill
    it = iter(loader)
    next(it)
    del it
    gc.collect()
    assert not loader_threads()


def test_usage_errors(make_any):
    ds = make_any(varied_shapes(4))
    for kwargs in [dict(batch_size=0), dict(batch_size=2, delivery=lambda: Delivery(layout="NCHW")),
                   dict(batch_size=2, rank=2, world_size=2), dict(batch_size=2, rank=0),
                   dict(batch_size=2, sampling=lambda: Sampling(order="bogus")),
                   dict(batch_size=2, delivery=lambda: Delivery(io="bogus")),
                   dict(batch_size=2, delivery=lambda: Delivery(num_threads=0)),
                   dict(batch_size=2, sampling=lambda: Sampling(shard_window=0)),
                   dict(batch_size=2, delivery=lambda: Delivery(prefetch_shards=-1)),
                   dict(batch_size=2, sampling=lambda: Sampling(quasi_window=0)),
                   dict(batch_size=2, open_options={"cache_dir": "/tmp"}),
                   *([dict(batch_size=2, delivery=lambda: Delivery(pin_memory=True))]
                     if not torch.cuda.is_available() else [])]:
        with pytest.raises(UsageError):  # groups are checked when built or when used
            Loader(ds, **{k: v() if callable(v) else v for k, v in kwargs.items()})
    with pytest.raises(UsageError):
        Loader(object(), 2)
    if not torch.cuda.is_available():  # the error names the argument the user passed
        with pytest.raises(UsageError, match="device='cuda'") as info:
            Loader(ds, 2, device="cuda")
        assert "pin_memory" not in str(info.value)
    loader = Loader(ds, 2)
    with pytest.raises(UsageError):
        loader.load_state_dict({"version": 99})
    for bad in ({"samples_seen": 5}, {"num_samples": 3}):
        with pytest.raises(UsageError):
            loader.load_state_dict({**loader.state_dict(), **bad})


def test_states_do_not_cross_datasets(make_ds, tmp_path):
    flat_ds = make_ds([(8, 8)] * 4)
    sharded = make_sharded_root(tmp_path / "s", varied_shapes(27))
    with pytest.raises(UsageError):
        Loader(sharded, 2).load_state_dict(Loader(flat_ds, 2).state_dict())
    with pytest.raises(UsageError):
        Loader(flat_ds, 2).load_state_dict(Loader(sharded, 2).state_dict())
    with pytest.raises(UsageError):  # quasi_random is O-4, for 1.0 datasets only
        Loader(sharded, 2, sampling=Sampling(order="quasi_random"))


def test_gpu_decode_says_why_not(make_any):
    ds = make_any(varied_shapes(4), codec="jpeg")
    with pytest.raises(UsageError, match="gpu_decode"):
        Loader(ds, 2, delivery=Delivery(gpu_decode=True))
    if not torch.cuda.is_available():
        with pytest.raises(UsageError, match=r"CUDA|torchvision"):
            Loader(ds, 2, delivery=Delivery(device="cuda", gpu_decode=True))


def test_quasi_random_order_in_loader(make_ds):
    ds = make_ds([(8, 8)] * 50)
    loader = Loader(
        ds,
        5,
        sampling=Sampling(order="quasi_random", quasi_block=4, quasi_window=2),
        delivery=Delivery(io="pread"),
    )
    got = flat(b.indices.tolist() for b in loader)
    assert got == quasi_random_permutation(0, 0, 50, 4, 2).tolist()


def test_import_detfmt_does_not_import_torch():
    import subprocess
    import sys

    code = "import sys, detfmt, detfmt.order; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("io", ["mmap", "pread"])
@pytest.mark.parametrize("codec", ["jpeg", "zstd"])
def test_corrupt_payload_is_a_decode_error(make_any, codec, io):
    ds = make_any(varied_shapes(6), codec=codec)
    corrupt_payload(ds, 3)
    location = ds.location
    ds.close()
    fresh = detfmt.open(location)
    with pytest.raises(DecodeError) as info:
        for _ in Loader(fresh, 6, shuffle=False, delivery=Delivery(num_threads=2, io=io)):
            pass
    local = fresh.locate(3)[1] if isinstance(fresh, detfmt.ShardedDataset) else 3
    assert info.value.index == local  # a shard's error names the shard file and local index
    assert not loader_threads()


def test_reused_buffers_keep_padding_clean(make_any):
    """Buffers are reused with partial clearing; every batch must still be exact, also after
    the user wrote into a batch in place (torch bumps the version counter the loader checks)."""
    shapes = [(40, 12), (12, 40), (40, 40), (8, 8), (33, 17), (17, 33)] * 8
    ds = make_any(shapes)
    loader = Loader(ds, 3, seed=1, delivery=Delivery(num_threads=2, prefetch=1))
    seen = 0
    for epoch in range(3):
        loader.set_epoch(epoch)
        for k, batch in enumerate(loader):
            check_batch(batch, ds)
            if k % 4 == 1:
                batch.images.fill_(255)  # in place, through torch
            if k % 4 == 2:
                batch.images[:, :, -1, :] = 7  # through an indexing view
            seen += 1
            del batch
    assert seen == 3 * 16
    assert len(loader.ring.slots) <= 6


def test_loader_over_one_packed_shard_file(tmp_path):
    """One shard file opens as a 1.0 dataset (a packed member source) and loads like any other,
    pread included (positional reads at the member's offset in the shard file)."""
    ds = make_sharded_root(tmp_path / "r", varied_shapes(27))
    shard = ds.shard(2)
    first = ds.shards[2].first_index
    for io in ("mmap", "pread"):
        batches = list(Loader(shard, 2, shuffle=False, delivery=Delivery(num_threads=1, io=io)))
        assert sum(len(b.indices) for b in batches) == len(shard)
        for b in batches:
            for j, i in enumerate(b.indices.tolist()):
                h, w = shard[i].image.shape[:2]
                np.testing.assert_array_equal(
                    b.images[j, :, :h, :w].permute(1, 2, 0).numpy(), shard[i].image)
                np.testing.assert_array_equal(shard[i].image, ds[first + i].image)


def test_indices_read_a_subset_in_place(make_any):
    """Loader(ds, indices=...): exactly the subset each epoch, reshuffled per epoch (the same
    for the same seed), in the given order with shuffle=False; nothing is copied."""
    ds = make_any(varied_shapes(30))
    subset = [3, 17, 4, 29, 8, 11, 0]
    loader = Loader(
        ds,
        3,
        seed=6,
        sampling=Sampling(indices=subset),
        delivery=Delivery(num_threads=2),
    )
    epochs = []
    for epoch in range(2):
        loader.set_epoch(epoch)
        batches = list(loader)
        for batch in batches:
            check_batch(batch, ds)
        epochs.append(np.concatenate([b.indices.numpy() for b in batches]).tolist())
    assert sorted(epochs[0]) == sorted(epochs[1]) == sorted(subset)
    assert epochs[0] != epochs[1]  # reshuffled (7! orders: equal by chance 1 in 5040)
    again = Loader(ds, 3, seed=6, sampling=Sampling(indices=subset))
    assert np.concatenate([b.indices.numpy() for b in again]).tolist() == epochs[0]
    fixed = Loader(ds, 3, shuffle=False, sampling=Sampling(indices=subset))
    assert np.concatenate([b.indices.numpy() for b in fixed]).tolist() == subset
    with pytest.raises(detfmt.UsageError):
        Loader(ds, 3, sampling=Sampling(indices=[0, 30]))
    with pytest.raises(detfmt.UsageError):
        Loader(ds, 3, sampling=Sampling(order="quasi_random", indices=subset))
