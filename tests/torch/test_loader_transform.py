"""Loader(transform=, convert=): augmentation in the gather threads, in epoch order; per-batch
seeds that a resumed run repeats; thread budgets owned by the loader; the buffer-reuse contract
with transforms that return new tensors or write in place."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

from detfmt.torch import Batch, Delivery, Loader
from detfmt.torch.threads import thread_budget
from tests.datasets import varied_shapes
from tests.torch.test_loader import assert_same_as_reader, check_batch


def flip(batch: Batch) -> Batch:
    """A deterministic transform that returns new tensors."""
    return batch.replace(images=batch.images.flip(-1).contiguous(), boxes=batch.boxes + 1)


class Noisy(torch.nn.Module):
    """Draws from its own generator (as every detfmt.augment module does)."""

    def __init__(self) -> None:
        super().__init__()
        self.generator = torch.Generator().manual_seed(12345)

    def forward(self, batch: Batch) -> Batch:
        draw = torch.randint(0, 1 << 30, (len(batch),), generator=self.generator)
        return batch.replace(extras={**batch.extras, "draw": draw})


def test_transform_runs_in_the_loader_threads_in_epoch_order(make_any):
    ds = make_any(varied_shapes(29))
    seen: list[tuple[str, list[int]]] = []

    def record(batch: Batch) -> Batch:
        seen.append((threading.current_thread().name, batch.indices.tolist()))
        return flip(batch)

    plain = [b.indices.tolist() for b in Loader(ds, 3, seed=2, delivery=Delivery(num_threads=3))]
    loader = Loader(ds, 3, seed=2, delivery=Delivery(num_threads=3, prefetch=6), transform=record)
    out = list(loader)
    assert [b.indices.tolist() for b in out] == plain == [rows for _, rows in seen]
    assert all(name.startswith("detfmt-loader") for name, _ in seen)
    for batch in out:
        want = ds.batch(batch.indices.numpy())
        np.testing.assert_array_equal(batch.images.permute(0, 2, 3, 1).numpy(),
                                      want.images[:, :, ::-1])
        np.testing.assert_array_equal(batch.boxes.numpy(), want.boxes + 1)


def test_convert_yields_its_result_and_state_counts_delivered_batches(make_any):
    ds = make_any(varied_shapes(20))
    loader = Loader(
        ds,
        4,
        seed=1,
        delivery=Delivery(num_threads=2, prefetch=4),
        convert=lambda b: {"n": len(b), "idx": b.indices.tolist()},
    )
    it = iter(loader)
    first = next(it)
    assert set(first) == {"n", "idx"} and first["n"] == 4
    assert loader.state_dict()["samples_seen"] == 4  # prefetched batches do not count
    it.close()
    resumed = Loader(ds, 4, delivery=Delivery(num_threads=1), convert=lambda b: b.indices.tolist())
    resumed.load_state_dict(loader.state_dict())
    rest = list(resumed)
    assert [first["idx"], *rest] == [b.indices.tolist() for b in Loader(ds, 4, seed=1)]


def test_thread_counts_are_the_loaders_not_the_trainers(make_any):
    ds = make_any(varied_shapes(12))
    seen = []

    def probe(batch: Batch) -> Batch:
        from detfmt.augment._backend import pool_threads

        seen.append((torch.get_num_threads(), thread_budget(), pool_threads()))
        return batch

    before = torch.get_num_threads()
    torch.set_num_threads(1)  # what Ultralytics does on the training thread
    try:
        list(Loader(ds, 4, delivery=Delivery(num_threads=2, transform_threads=3), transform=probe))
        assert seen and set(seen) == {(3, 3, 3)}
        assert torch.get_num_threads() == 1 and thread_budget() is None  # the trainer's own
        seen.clear()  # torch's own count apart from the per-sample pool's
        list(Loader(
            ds,
            4,
            delivery=Delivery(num_threads=2, transform_threads=3, torch_threads=2),
            transform=probe,
        ))
        assert seen and set(seen) == {(2, 3, 3)}
        assert torch.get_num_threads() == 1 and thread_budget() is None
    finally:
        torch.set_num_threads(before)


def test_a_transform_returning_new_tensors_frees_the_buffer_at_once(make_any):
    ds = make_any(varied_shapes(40))
    loader = Loader(ds, 4, seed=3, delivery=Delivery(num_threads=2, prefetch=2), transform=flip)
    held = list(loader)  # all ten outputs held: none of them references a ring buffer
    assert len(held) == 10
    assert len(loader.ring.slots) <= loader.prefetch + loader.num_threads
    plain = Loader(ds, 4, seed=3, delivery=Delivery(num_threads=2, prefetch=2))
    held_plain = list(plain)  # without a transform every held batch keeps its buffer
    assert len(plain.ring.slots) >= len(held_plain)


@pytest.mark.parametrize("canvas", [None, (40, 40)])
def test_in_place_transforms_keep_held_batches_and_padding_exact(make_any, canvas):
    """A transform that scribbles over the whole buffer through a numpy view (invisible to
    torch's version counter): batches held stay as the transform left them, and a reused buffer
    still gets exact padding before the next transform sees it (on a fixed canvas the buffer
    keeps its shape, so only the loader's bookkeeping can tell it was written)."""
    ds = make_any(varied_shapes(36, seed=5))
    bad_inputs = []

    def scribble(batch: Batch) -> Batch:
        hwc = batch.images.permute(0, 2, 3, 1).numpy()  # a view of the ring buffer
        for j, (h, w) in enumerate(batch.sizes.tolist()):
            if hwc[j, h:].any() or hwc[j, :, w:].any():  # padding must be pad_value (0)
                bad_inputs.append(batch.indices[j].item())
        hwc[...] = (batch.indices.numpy() % 251 + 1).astype(np.uint8)[:, None, None, None]
        return batch

    loader = Loader(
        ds,
        3,
        seed=4,
        delivery=Delivery(num_threads=2, prefetch=2, canvas=canvas),
        transform=scribble,
    )
    held = []
    for epoch in range(2):
        for k, batch in enumerate(loader):
            if epoch == 0 and k % 3 == 0:
                held.append(batch)  # the others are dropped: their buffers are reused
    assert bad_inputs == []
    for batch in held:
        want = (batch.indices % 251 + 1).to(torch.uint8)
        assert (batch.images == want[:, None, None, None]).all()


def test_transform_without_stage_state_matches_reader(make_any):
    ds = make_any(varied_shapes(15))
    identity = Loader(ds, 4, delivery=Delivery(num_threads=2), transform=lambda b: b)  # in place
    for batch in identity:
        check_batch(batch, ds)
        assert_same_as_reader(batch, ds)


def test_per_batch_seeds_replay_after_a_resume(make_any):
    """The parameters a transform draws depend on (seed, epoch, batch position) only: a run
    resumed mid-epoch, with other threads, draws what the uninterrupted run drew."""
    ds = make_any(varied_shapes(26))

    def draws(loader):
        return [(b.indices.tolist(), b.extras["draw"].tolist()) for b in loader]

    full = Loader(ds, 4, seed=8, delivery=Delivery(num_threads=1), transform=Noisy())
    full.set_epoch(1)
    expected = draws(full)
    assert len({tuple(d) for _, d in expected}) == len(expected)  # each batch its own draws
    first = Loader(ds, 4, seed=8, delivery=Delivery(num_threads=3), transform=Noisy())
    first.set_epoch(1)
    it = iter(first)
    seen = [next(it) for _ in range(3)]
    state = first.state_dict()
    it.close()
    second = Loader(ds, 4, delivery=Delivery(num_threads=2), transform=Noisy())
    second.load_state_dict(state)
    got = [(b.indices.tolist(), b.extras["draw"].tolist()) for b in seen] + draws(second)
    assert got == expected
    again = Loader(ds, 4, seed=8, delivery=Delivery(num_threads=2), transform=Noisy())
    again.set_epoch(2)
    assert draws(again) != expected  # another epoch, other draws
    unseeded = Loader(
        ds,
        4,
        seed=8,
        delivery=Delivery(num_threads=1, transform_reseed=False),
        transform=Noisy(),
    )
    unseeded.set_epoch(1)
    assert draws(unseeded) != expected


def test_augment_pipeline_replays_after_a_resume(make_any):
    augment = pytest.importorskip("detfmt.augment")
    ds = make_any(varied_shapes(20))

    def pipeline():  # fresh generators (seeded by the OS): the loader re-seeds them
        return augment.Compose([augment.RandomFlip(p=0.5), augment.RandomHSV(),
                                augment.RandomAffine(size=32, degrees=10, scale=0.3)])

    full = [b for b in Loader(
        ds,
        4,
        seed=3,
        delivery=Delivery(num_threads=2),
        transform=pipeline(),
    )]
    first = Loader(ds, 4, seed=3, delivery=Delivery(num_threads=2), transform=pipeline())
    it = iter(first)
    head = [next(it) for _ in range(2)]
    state = first.state_dict()
    it.close()
    second = Loader(ds, 4, delivery=Delivery(num_threads=1), transform=pipeline())
    second.load_state_dict(state)
    for a, b in zip(full, head + list(second), strict=True):
        assert torch.equal(a.images, b.images) and torch.equal(a.boxes, b.boxes)


def test_a_failing_transform_raises_at_its_batch_and_the_loader_recovers(make_any):
    ds = make_any(varied_shapes(16))
    calls = {"n": 0}

    def fails_on_third(batch: Batch) -> Batch:
        calls["n"] += 1
        if calls["n"] == 3:
            raise RuntimeError("boom")
        return flip(batch)

    loader = Loader(ds, 4, seed=1, delivery=Delivery(num_threads=2), transform=fails_on_third)
    got = []
    with pytest.raises(RuntimeError, match="boom"):
        for batch in loader:
            got.append(batch.indices.tolist())
    assert len(got) == 2 and loader.state_dict()["samples_seen"] == 8
    assert not [t for t in threading.enumerate() if t.name.startswith("detfmt-loader")]
    rest = [b.indices.tolist() for b in loader]  # continues after the last delivered batch
    assert got + rest == [b.indices.tolist() for b in Loader(ds, 4, seed=1)]


def test_transform_can_be_swapped_between_epochs(make_any):
    ds = make_any(varied_shapes(8))
    loader = Loader(ds, 4, shuffle=False, delivery=Delivery(num_threads=1), transform=flip)
    flipped = [b.images.clone() for b in loader]
    loader.transform = None
    plain = [b.images.clone() for b in loader]
    assert len(flipped) == len(plain) == 2
    assert all(torch.equal(a, b.flip(-1)) for a, b in zip(flipped, plain, strict=True))
    with pytest.raises(Exception, match="callable"):
        loader.transform = 3


def test_stage_processes_in_order_whatever_order_items_arrive():
    from detfmt.torch._stage import TransformStage

    order: list[int] = []
    stop = threading.Event()
    stage = TransformStage(lambda t, item: order.append(t) or item * 10, lambda item: None, stop)
    futures = [stage.expect(t) for t in range(6)]
    arrivals = [3, 5, 0, 4, 2, 1]
    threads = [threading.Thread(target=stage.offer, args=(t, t)) for t in arrivals]
    for thread in threads:  # one at a time: each arrival sees the previous ones waiting
        thread.start()
        thread.join()
    assert order == list(range(6))
    assert [f.result(timeout=5) for f in futures] == [0, 10, 20, 30, 40, 50]
    released: list[int] = []
    stage2 = TransformStage(lambda t, item: item, released.append, stop)
    first, second = stage2.expect(0), stage2.expect(1)
    stage2.offer(1, 7)  # waits for 0
    assert not second.done()
    stage2.offer(0, error=RuntimeError("gather failed"))  # a failed gather, in its turn
    with pytest.raises(RuntimeError, match="gather failed"):
        first.result(timeout=5)
    assert second.result(timeout=5) == 7
    stop.set()
    stage3 = TransformStage(lambda t, item: item, released.append, stop)
    stage3.expect(0)
    stage3.offer(0, 9)  # stopped: never processed, freed by abandon
    stage3.abandon()
    assert released == [9]


def test_stopping_early_while_transforms_run_leaves_nothing_behind(make_any):
    import time

    ds = make_any(varied_shapes(40))

    def slow(batch: Batch) -> Batch:
        time.sleep(0.02)
        return flip(batch)

    loader = Loader(ds, 2, seed=5, delivery=Delivery(num_threads=3, prefetch=6), transform=slow)
    for _ in range(3):
        it = iter(loader)
        next(it)
        it.close()  # gathers in flight, a transform running, batches waiting in the stage
        assert not [t for t in threading.enumerate() if t.name.startswith("detfmt-loader")]
        assert not any(slot.busy for slot in loader.ring.slots)  # every buffer given back
    rest = [b.indices.tolist() for b in loader]
    assert len(rest) == len(loader) - 3  # continues after the three delivered batches


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_transform_runs_on_the_loader_stream_and_matches_cpu(make_any):
    ds = make_any(varied_shapes(18))
    streams = []

    def on_device(batch: Batch) -> Batch:
        assert batch.images.is_cuda
        streams.append(torch.cuda.current_stream().cuda_stream)
        return flip(batch)

    cpu = [b for b in Loader(ds, 4, seed=2, delivery=Delivery(num_threads=2), transform=flip)]
    gpu = [b for b in Loader(
        ds,
        4,
        seed=2,
        delivery=Delivery(num_threads=2, device="cuda"),
        transform=on_device,
    )]
    assert len(set(streams)) == 1 and streams[0] != torch.cuda.default_stream().cuda_stream
    for a, b in zip(cpu, gpu, strict=True):
        assert torch.equal(a.images, b.images.cpu()) and torch.equal(a.boxes, b.boxes.cpu())
