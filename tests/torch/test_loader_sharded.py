"""Loader over sharded (1.1) datasets: the elastic plan's batches, resume, padding, shutdown."""

from __future__ import annotations

import gc
import pickle
import threading

import numpy as np
import pytest
import torch

import detfmt
from detfmt.errors import DecodeError, LabelError, UsageError
from detfmt.shard.order import epoch_order
from detfmt.shard.write import commit, write_shard
from detfmt.torch import DetectionDataset, Loader, RingDataLoader
from detfmt.torch.loader import ShardedLoader
from tests.torch.conftest import sample_image, sample_labels

CLASSES = ["a", "b", "c"]
# (samples, max boxes) per shard: box padding differs per shard (S-12), one shard is empty
LAYOUT = [(7, 1), (0, 0), (9, 5), (5, 3), (6, 2)]
N = sum(n for n, _ in LAYOUT)  # 27


def loader_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("detfmt-loader")]


def shard_samples(first: int, n: int, max_boxes: int, seed: int):
    rng = np.random.default_rng(seed)
    out = []
    for i in range(first, first + n):
        h, w = (int(v) for v in rng.integers(8, 40, 2))
        boxes, classes = sample_labels(i, h, w, max_boxes)
        out.append({"image": sample_image(i, h, w), "boxes": boxes, "classes": classes})
    return out


def make_sharded(root, codec="raw", layout=LAYOUT):
    metas, first = [], 0
    for k, (n, max_boxes) in enumerate(layout):
        samples = shard_samples(first, n, max_boxes, seed=k)
        metas.append(write_shard(samples, root, f"{k:05d}", classes=CLASSES, codec=codec))
        first += n
    commit(root, metas, write_id="0" * 32)
    return detfmt.open(root)


@pytest.fixture
def sharded(tmp_path):
    return make_sharded(tmp_path / "ds")


def as_numpy(batch, layout="CHW"):
    images = batch.images if layout == "HWC" else batch.images.permute(0, 2, 3, 1)
    return {
        "images": images.numpy(),
        "sizes": batch.sizes.numpy(),
        "boxes": batch.boxes.numpy(),
        "classes": batch.classes.numpy(),
        "mask": batch.mask.numpy(),
        "indices": batch.indices.numpy(),
    }


def assert_same_as_reader(batch, ds, layout="CHW"):
    got = as_numpy(batch, layout)
    want = ds.batch(got["indices"])
    for name in ("images", "sizes", "boxes", "classes", "mask", "indices"):
        assert got[name].shape == getattr(want, name).shape, name
        np.testing.assert_array_equal(got[name], getattr(want, name), err_msg=name)


def global_sequence(loaders):
    per_rank = [[b.indices.tolist() for b in loader] for loader in loaders]
    assert len({len(r) for r in per_rank}) == 1  # every rank runs the same number of batches
    return [i for t in range(len(per_rank[0])) for r in per_rank for i in r[t]]


@pytest.mark.parametrize("codec", ["raw", "zstd", "png"])
@pytest.mark.parametrize("drop_last", [True, False])
def test_batches_are_the_plan_and_match_ds_batch(tmp_path, codec, drop_last):
    ds = make_sharded(tmp_path / codec, codec)
    loader = Loader(ds, 4, seed=5, drop_last=drop_last, shard_window=2, num_threads=2)
    assert isinstance(loader, ShardedLoader) and isinstance(loader, Loader)
    plan = ds.plan(seed=5, epoch=0, batch_size=4, window=2, drop_last=drop_last)
    batches = list(loader)  # held all at once: the buffer-reuse contract keeps each intact
    assert len(batches) == len(loader) == len(plan) == (6 if drop_last else 7)
    for batch, want in zip(batches, plan.batches(), strict=True):
        assert batch.indices.tolist() == want.tolist()
        assert batch.images.is_contiguous(memory_format=torch.channels_last)
        assert_same_as_reader(batch, ds)
    for batch in batches:  # still intact after the whole epoch, pixels identify the sample
        for j, i in enumerate(batch.indices.tolist()):
            h, w = (int(v) for v in batch.sizes[j])
            img = batch.images[j].permute(1, 2, 0).numpy()
            np.testing.assert_array_equal(img[:h, :w], sample_image(i, h, w))
            assert not img[h:].any() and not img[:h, w:].any()


def test_hwc_sequential_and_repadding_across_shards(sharded):
    loader = Loader(sharded, 9, shuffle=False, layout="HWC", num_threads=2)
    batches = list(loader)
    assert [b.indices.tolist() for b in batches] == [list(range(k, min(k + 9, N)))
                                                   for k in range(0, N, 9)]
    # batch 0 spans shards 0 (max_boxes 1) and 2 (max_boxes 5): labels re-padded to its own max
    first = batches[0]
    counts = first.mask.sum(1)
    assert first.boxes.shape[1] == int(counts.max()) > 1
    assert (first.classes[~first.mask] == -1).all() and not first.boxes[~first.mask].any()
    for batch in batches:
        assert_same_as_reader(batch, sharded, layout="HWC")
        for j, i in enumerate(batch.indices.tolist()):
            h, w = (int(v) for v in batch.sizes[j])
            boxes, classes = sample_labels(i, h, w, max_boxes_of(i))
            k = len(boxes)
            np.testing.assert_array_equal(batch.boxes[j, :k].numpy(), boxes)
            np.testing.assert_array_equal(batch.classes[j, :k].numpy(), classes)


def max_boxes_of(i: int) -> int:
    first = 0
    for n, max_boxes in LAYOUT:
        if i < first + n:
            return max_boxes
        first += n
    raise AssertionError(i)


@pytest.mark.parametrize("drop_last", [True, False])
def test_world_sizes_1_2_4_same_global_sequence(sharded, drop_last):
    sequences = {}
    for world in (1, 2, 4):
        loaders = [Loader(sharded, 8 // world, seed=7, rank=r, world_size=world,
                          drop_last=drop_last, num_threads=1) for r in range(world)]
        sequences[world] = global_sequence(loaders)
    order = epoch_order([n for n, _ in LAYOUT], seed=7, epoch=0, window=4).tolist()
    if drop_last:
        assert sequences[1] == sequences[2] == sequences[4] == order[:24]
    else:  # O-5: one rank keeps a short last batch; several ranks wrap-pad to whole batches
        assert sequences[1] == order
        assert sequences[2] == sequences[4] == order + order[:5]


def test_wrap_padding_equal_counts_and_full_coverage(sharded):
    shares = [[b.indices.tolist() for b in Loader(sharded, 4, seed=1, rank=r, world_size=3,
                                                  drop_last=False, num_threads=2)]
              for r in range(3)]
    assert [len(s) for s in shares] == [3, 3, 3]  # ceil(27 / 12) global batches each
    assert all(len(b) == 4 for s in shares for b in s)
    every = [i for s in shares for b in s for i in b]
    assert set(every) == set(range(N)) and len(every) == 36
    default = [len(list(Loader(sharded, 4, seed=1, rank=r, world_size=3, num_threads=1)))
               for r in range(3)]
    assert default == [2, 2, 2]  # distributed default: drop_last=True (S-19 as before)


@pytest.mark.parametrize("drop_last", [True, False])
def test_resume_mid_epoch_on_another_world_size(sharded, drop_last):
    order = epoch_order([n for n, _ in LAYOUT], seed=3, epoch=2, window=2).tolist()
    first = [Loader(sharded, 3, seed=3, rank=r, world_size=2, drop_last=drop_last,
                    shard_window=2, num_threads=2) for r in range(2)]
    seen = []
    for loader in first:
        loader.set_epoch(2)
        it = iter(loader)
        seen.append([next(it).indices.tolist() for _ in range(2)])
        del it
    states = [loader.state_dict() for loader in first]
    assert states[0] == states[1] and states[0]["samples_seen"] == 12
    head = [i for t in range(2) for r in range(2) for i in seen[r][t]]
    assert head == order[:12]

    second = [Loader(sharded, 2, seed=0, rank=r, world_size=4, drop_last=drop_last,
                     num_threads=1) for r in range(4)]  # seed and window come from the state
    for loader in second:
        loader.load_state_dict(states[0])
        loader.set_epoch(2)  # the usual loop: same unfinished epoch keeps its position
    tail = global_sequence(second)
    if drop_last:
        assert head + tail == order[:20]  # no duplicates or gaps; 15 left: one step of 8
    else:
        assert (head + tail)[:N] == order and len(tail) == 16  # 15 left, padded to 2 x 8
    assert second[0].state_dict()["samples_seen"] == N  # finished: the next iter is epoch 3
    again = next(iter(second[0]))
    assert second[0].epoch == 3 and again.indices.tolist() == epoch_order(
        [n for n, _ in LAYOUT], seed=3, epoch=3, window=2).tolist()[:2]


def test_epochs_advance_and_state_after_each_batch(sharded):
    loader = Loader(sharded, 5, seed=2, num_threads=2)
    first = [b.indices.tolist() for b in loader]
    assert loader.state_dict()["samples_seen"] == N and loader.epoch == 0
    second = [b.indices.tolist() for b in loader]
    assert loader.epoch == 1 and first != second
    loader.set_epoch(1)  # a finished epoch run again from the start
    positions = []
    for _ in loader:
        positions.append(loader.state_dict()["samples_seen"])
    assert positions == [5, 10, 15, 20, 25, 27]


def test_early_stop_and_errors_leave_no_threads(sharded):
    loader = Loader(sharded, 2, num_threads=3, prefetch=4)
    for k, _ in enumerate(loader):
        if k == 2:
            break
    gc.collect()
    assert not loader_threads()

    calls = {"n": 0}
    original = loader.gather.fill

    def failing(job, out, pad_value=0, **kwargs):
        calls["n"] += 1
        if calls["n"] == 4:
            raise RuntimeError("disk on fire")
        return original(job, out, pad_value, **kwargs)

    loader.gather.fill = failing
    loader.set_epoch(5)
    with pytest.raises(RuntimeError, match="disk on fire"):
        for _ in loader:
            pass
    assert not loader_threads()
    assert not any(slot.busy for slot in loader.ring.slots)  # the failed job released its slot
    loader.gather.fill = original
    it = iter(loader)
    next(it)
    del it
    gc.collect()
    assert not loader_threads()


def test_ring_reuses_buffers_when_batches_are_dropped(sharded):
    loader = Loader(sharded, 3, num_threads=2, prefetch=2)
    for _ in range(3):
        for batch in loader:
            assert_same_as_reader(batch, sharded)
    assert len(loader.ring.slots) <= 2 + 2 + 1


def test_corrupt_shard_payload_is_a_decode_error(tmp_path):
    ds = make_sharded(tmp_path / "z", "zstd", layout=[(6, 2), (5, 1)])
    path = tmp_path / "z" / ds.shards[1].path
    blob = ds.shard(1).toc.get("images.bin")
    data = bytearray(path.read_bytes())
    data[blob.offset + 8 : blob.offset + 40] = b"\x00" * 32
    path.write_bytes(bytes(data))
    fresh = detfmt.open(tmp_path / "z")
    with pytest.raises(DecodeError):
        for _ in Loader(fresh, 4, shuffle=False, num_threads=2):
            pass
    assert not loader_threads()


def test_label_violation_names_the_shard(tmp_path):
    ds = make_sharded(tmp_path / "l", layout=[(4, 2), (4, 2)])
    path = tmp_path / "l" / ds.shards[1].path
    classes = ds.shard(1).toc.get("classes.npy")
    data = bytearray(path.read_bytes())
    start = classes.offset + classes.size - 4 * 2 * 4  # the 4 x 2 int32 values at the end
    data[start + 8 : start + 12] = np.int32(7).tobytes()  # sample 5 (local 1), box 0: class 7
    path.write_bytes(bytes(data))
    fresh = detfmt.open(tmp_path / "l")
    with pytest.raises(LabelError) as info:
        for _ in Loader(fresh, 8, shuffle=False, num_threads=1):
            pass
    assert ds.shards[1].path.split("/")[-1] in str(info.value)


def test_canvas(sharded):
    batches = list(Loader(sharded, 4, canvas=(40, 48), num_threads=2))
    assert all(b.images.shape[2:] == (40, 48) for b in batches)
    for batch in batches:
        for j, i in enumerate(batch.indices.tolist()):
            h, w = (int(v) for v in batch.sizes[j])
            img = batch.images[j].permute(1, 2, 0).numpy()
            np.testing.assert_array_equal(img[:h, :w], sample_image(i, h, w))
            assert not img[h:].any() and not img[:h, w:].any()
    with pytest.raises(UsageError):
        Loader(sharded, 4, canvas=(8, 8))


def test_path_and_usage_errors(sharded, make_ds):
    root = sharded.root
    assert isinstance(Loader(root, 4), ShardedLoader)
    for kwargs in [dict(order="quasi_random"), dict(io="pread"), dict(quasi_block=8),
                   dict(gpu_decode=True), dict(shard_window=0), dict(batch_size=0),
                   dict(prefetch_shards=-1)]:
        args = {"batch_size": 4, **kwargs}
        with pytest.raises(UsageError):
            Loader(sharded, **args)
    flat = make_ds([(8, 8)] * 4)
    with pytest.raises(UsageError):
        Loader(flat, 2, shard_window=2)
    with pytest.raises(UsageError):
        Loader(flat, 2, prefetch_shards=1)
    with pytest.raises(UsageError):
        ShardedLoader(flat, 2)
    with pytest.raises(UsageError):
        RingDataLoader(sharded, 2)
    flat_state = Loader(flat, 2).state_dict()
    loader = Loader(sharded, 2)
    with pytest.raises(UsageError):
        loader.load_state_dict(flat_state)
    with pytest.raises(UsageError):
        Loader(flat, 2).load_state_dict(loader.state_dict())
    with pytest.raises(UsageError):
        loader.load_state_dict({**loader.state_dict(), "samples_seen": N + 1})
    with pytest.raises(UsageError):
        loader.load_state_dict({**loader.state_dict(), "num_samples": 3})


def test_detection_dataset_on_a_sharded_root(sharded):
    dd = DetectionDataset(sharded.root)
    assert len(dd) == N
    clone = pickle.loads(pickle.dumps(dd))
    for i in (0, 6, 7, 20, N - 1):
        for d in (dd, clone):
            item = d[i]
            sample = sharded[i]
            np.testing.assert_array_equal(item["image"].numpy(), sample.image)
            np.testing.assert_array_equal(item["boxes"].numpy(), sample.boxes)
            np.testing.assert_array_equal(item["classes"].numpy(), sample.classes)
            assert int(item["index"]) == i
    from_object = DetectionDataset(sharded, layout="CHW")
    assert from_object[3]["image"].shape[0] == 3


def test_reader_public_gather_api(make_ds):
    ds = make_ds([(8, 9), (10, 12)], codec="zstd")
    assert ds.blob.dtype == np.uint8 and not ds.blob.flags.writeable
    assert ds.blob_path.endswith("images.bin")
    start, size = int(ds.index["offset"][1]), int(ds.index["nbytes"][1])
    out = np.empty((10, 12, 3), np.uint8)
    ds.decode_payload_into(1, ds.blob[start : start + size].copy(), out)
    np.testing.assert_array_equal(out, ds[1].image)
    with pytest.raises(DecodeError):
        ds.decode_payload_into(1, np.zeros(size, np.uint8), out)
    idx = np.array([0, 1])
    boxes = np.array(ds.boxes[idx])
    classes = np.array(ds.classes[idx])
    counts = np.array(ds.counts[idx])
    ds.check_labels(idx, boxes, classes, counts)  # clean
    classes[1, 0] = 9
    with pytest.raises(LabelError):
        ds.check_labels(idx, boxes, classes, counts)


def test_loader_over_one_packed_shard_file(sharded):
    """A single shard (PackedDataset) loads through its reader's mapping; pread is refused."""
    shard = sharded.shard(1)
    batches = list(Loader(shard, 2, shuffle=False, num_threads=1))
    assert sum(len(b.indices) for b in batches) == len(shard)
    for b in batches:
        for j, i in enumerate(b.indices.tolist()):
            h, w = shard[i].image.shape[:2]
            np.testing.assert_array_equal(b.images[j, :, :h, :w].permute(1, 2, 0).numpy(),
                                          shard[i].image)
    with pytest.raises(UsageError, match="pread"):
        Loader(shard, 2, io="pread")
