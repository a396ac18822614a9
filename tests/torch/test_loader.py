"""Loader: contents, order, resume, buffer reuse and shutdown."""

from __future__ import annotations

import gc
import itertools
import threading

import numpy as np
import pytest
import torch

import detfmt
from detfmt.errors import DecodeError, UsageError
from detfmt.order import epoch_permutation
from detfmt.torch import Batch, Loader
from tests.torch.conftest import sample_image, sample_labels, varied_shapes


def flat(rows) -> list[int]:
    return list(itertools.chain.from_iterable(rows))


def loader_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("detfmt-loader")]


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


@pytest.mark.parametrize("threads", [1, 3])
def test_contents_and_order(make_ds, threads):
    ds = make_ds(varied_shapes(37))
    loader = Loader(ds, 5, seed=4, num_threads=threads, prefetch=3)
    batches = list(loader)
    assert len(batches) == len(loader) == 8
    got = np.concatenate([b.indices.numpy() for b in batches])
    np.testing.assert_array_equal(got, epoch_permutation(4, 0, 37))
    for batch in batches:  # every held batch is still intact after the whole epoch
        check_batch(batch, ds)
    assert len(batches[-1]) == 2


def test_hwc_layout_and_sequential(make_ds):
    ds = make_ds(varied_shapes(10))
    batches = list(Loader(ds, 4, shuffle=False, layout="HWC", num_threads=2))
    assert [b.indices.tolist() for b in batches] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    for batch in batches:
        check_batch(batch, ds, layout="HWC")


def test_epochs_advance_and_set_epoch(make_ds):
    ds = make_ds(varied_shapes(12))
    loader = Loader(ds, 4, seed=1, num_threads=2)
    e0 = [b.indices.tolist() for b in loader]
    e1 = [b.indices.tolist() for b in loader]
    assert flat(e0) == epoch_permutation(1, 0, 12).tolist()
    assert flat(e1) == epoch_permutation(1, 1, 12).tolist()
    loader.set_epoch(0)
    assert [b.indices.tolist() for b in loader] == e0
    loader.set_epoch(0)  # a finished epoch set again runs again
    assert [b.indices.tolist() for b in loader] == e0


def test_fixed_shape_and_canvas(make_ds):
    ds = make_ds([(16, 24)] * 9, fixed=True)
    for io in ("mmap", "pread"):
        for batch in Loader(ds, 4, io=io, num_threads=2):
            assert batch.images.shape[1:] == (3, 16, 24)
            check_batch(batch, ds)
    ds2 = make_ds(varied_shapes(9))
    for batch in Loader(ds2, 4, canvas=(40, 48), num_threads=2):
        assert batch.images.shape[1:] == (3, 40, 48)
        check_batch(batch, ds2)
    with pytest.raises(UsageError):
        Loader(ds2, 4, canvas=(8, 8))


def test_pread_matches_mmap(make_ds):
    ds = make_ds(varied_shapes(21))
    a = list(Loader(ds, 4, io="pread", num_threads=2))
    b = list(Loader(ds, 4, io="mmap", num_threads=2))
    for x, y in zip(a, b, strict=True):
        assert torch.equal(x.images, y.images) and torch.equal(x.indices, y.indices)
        check_batch(x, ds)


@pytest.mark.parametrize("io", ["mmap", "pread"])
@pytest.mark.parametrize("codec", ["zstd", "jpeg", "png"])
def test_compressed_codecs(make_ds, codec, io):
    ds = make_ds(varied_shapes(9), codec=codec)
    for batch in Loader(ds, 4, num_threads=2, io=io):
        check_batch(batch, ds, exact=codec != "jpeg")
        for j, i in enumerate(batch.indices.tolist()):
            h, w = ds.image_shape(i)[:2]
            expected = np.empty((h, w, 3), np.uint8)
            ds.decode_into(i, expected)
            np.testing.assert_array_equal(batch.images[j].permute(1, 2, 0)[:h, :w].numpy(),
                                          expected)


@pytest.mark.parametrize("split", [0, 1, 3, 7])
def test_resume_mid_epoch_exact(make_ds, split):
    ds = make_ds(varied_shapes(30))
    full = Loader(ds, 4, seed=9, num_threads=1)
    full.set_epoch(2)
    expected = [b.indices.tolist() for b in full]
    first = Loader(ds, 4, seed=9, num_threads=3)
    first.set_epoch(2)
    it = iter(first)
    seen = [next(it).indices.tolist() for _ in range(split)]
    state = first.state_dict()
    it.close()
    second = Loader(ds, 4, seed=0, num_threads=2)  # other threads, seed comes from the state
    second.load_state_dict(state)
    second.set_epoch(2)  # the usual training loop calls this: it keeps the position
    rest = [b.indices.tolist() for b in second]
    assert seen + rest == expected
    assert second.state_dict()["epoch"] == 2
    nxt = [b.indices.tolist() for b in second]  # then the next epoch
    assert flat(nxt) == epoch_permutation(9, 3, 30).tolist()


def test_resume_with_other_world_size_same_global_batch(make_ds):
    ds = make_ds(varied_shapes(40))
    two = [Loader(ds, 4, seed=2, rank=r, world_size=2, num_threads=1) for r in range(2)]
    its = [iter(x) for x in two]
    done = [[next(it).indices.tolist() for _ in range(2)] for it in its]
    state = two[0].state_dict()
    assert state == two[1].state_dict()
    for it in its:
        it.close()
    one = Loader(ds, 8, seed=2, drop_last=True, num_threads=2)
    one.load_state_dict(state)
    rest = [b.indices.tolist() for b in one]
    seen = [done[0][k] + done[1][k] for k in range(2)]
    order = epoch_permutation(2, 0, 40).tolist()
    assert flat(seen + rest) == order


def test_buffer_reuse_never_overwrites_held_batch(make_ds):
    ds = make_ds(varied_shapes(64))
    loader = Loader(ds, 4, seed=3, num_threads=2, prefetch=2)
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
    assert len(loader.ring.slots) <= loader.prefetch + 3


def test_ring_recycles_released_buffers(make_ds):
    ds = make_ds([(16, 16)] * 200)
    loader = Loader(ds, 2, num_threads=2, prefetch=2)
    for _ in loader:
        pass
    assert len(loader.ring.slots) <= 5
    batches = list(loader)  # holding everything grows the ring instead of overwriting
    assert len(loader.ring.slots) >= len(batches)
    for batch in batches:
        check_batch(batch, ds)


def test_early_stop_and_errors_leave_no_threads(make_ds):
    ds = make_ds(varied_shapes(50))
    loader = Loader(ds, 2, num_threads=3, prefetch=4)
    for k, _ in enumerate(loader):
        if k == 2:
            break
    gc.collect()
    assert not loader_threads()

    calls = {"n": 0}
    original = loader.gather.fill

    def failing(indices, out, pad_value=0, **kwargs):
        calls["n"] += 1
        if calls["n"] == 4:
            raise RuntimeError("disk on fire")
        return original(indices, out, pad_value, **kwargs)

    loader.gather.fill = failing
    loader.set_epoch(5)
    with pytest.raises(RuntimeError, match="disk on fire"):
        for _ in loader:
            pass
    assert not loader_threads()
    loader.gather.fill = original
    it = iter(loader)
    next(it)
    del it
    gc.collect()
    assert not loader_threads()


def test_ranks_disjoint_equal_covering(make_ds):
    ds = make_ds(varied_shapes(23))
    for drop_last in (True, False):
        shares = [[b.indices.tolist() for b in Loader(ds, 3, seed=1, rank=r, world_size=3,
                                                      drop_last=drop_last, num_threads=1)]
                  for r in range(3)]
        assert len({len(s) for s in shares}) == 1
        assert all(len(b) == 3 for s in shares for b in s)
        every = flat(flat(shares))
        if drop_last:
            assert len(every) == len(set(every)) == 18
        else:
            assert set(every) == set(range(23)) and len(every) == 27


def test_usage_errors(make_ds):
    ds = make_ds(varied_shapes(4))
    for kwargs in [dict(batch_size=0), dict(batch_size=2, layout="NCHW"),
                   dict(batch_size=2, rank=2, world_size=2), dict(batch_size=2, rank=0),
                   dict(batch_size=2, order="bogus"), dict(batch_size=2, io="bogus"),
                   dict(batch_size=2, num_threads=0),
                   *([dict(batch_size=2, pin_memory=True)] if not torch.cuda.is_available()
                     else [])]:
        with pytest.raises(UsageError):
            Loader(ds, **kwargs)
    loader = Loader(ds, 2)
    with pytest.raises(UsageError):
        loader.load_state_dict({"version": 99})
    other = Loader(ds, 3)
    with pytest.raises(UsageError):
        other.load_state_dict(loader.state_dict())


def test_gpu_decode_says_why_not(make_ds):
    ds = make_ds(varied_shapes(4), codec="jpeg")
    with pytest.raises(UsageError, match="gpu_decode"):
        Loader(ds, 2, gpu_decode=True)
    if not torch.cuda.is_available():
        with pytest.raises(UsageError, match=r"CUDA|torchvision"):
            Loader(ds, 2, gpu_decode=True, device="cuda")


def test_quasi_random_order_in_loader(make_ds):
    ds = make_ds([(8, 8)] * 50)
    loader = Loader(ds, 5, order="quasi_random", quasi_block=4, quasi_window=2, io="pread")
    got = flat(b.indices.tolist() for b in loader)
    from detfmt.order import quasi_random_permutation

    assert got == quasi_random_permutation(0, 0, 50, 4, 2).tolist()


def test_import_detfmt_does_not_import_torch():
    import subprocess
    import sys

    code = "import sys, detfmt, detfmt.order; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("io", ["mmap", "pread"])
@pytest.mark.parametrize("codec", ["jpeg", "zstd"])
def test_corrupt_payload_is_a_decode_error(make_ds, codec, io):
    ds = make_ds(varied_shapes(6), codec=codec)
    start, size = int(ds.index["offset"][3]), int(ds.index["nbytes"][3])
    path = ds.path / "images.bin"
    data = bytearray(path.read_bytes())
    data[start + size // 3 : start + size] = b"\x00" * (size - size // 3)  # same size, bad bytes
    path.write_bytes(bytes(data))
    fresh = detfmt.open(ds.path)
    with pytest.raises(DecodeError) as info:
        for _ in Loader(fresh, 6, shuffle=False, io=io, num_threads=2):
            pass
    assert info.value.index == 3
    assert not loader_threads()


def test_reused_buffers_keep_padding_clean(make_ds):
    """Buffers are reused with partial clearing; every batch must still be exact, also after
    the user wrote into a batch in place (torch bumps the version counter the loader checks)."""
    shapes = [(40, 12), (12, 40), (40, 40), (8, 8), (33, 17), (17, 33)] * 8
    ds = make_ds(shapes)
    loader = Loader(ds, 3, seed=1, num_threads=2, prefetch=1)
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
    assert len(loader.ring.slots) <= 4
