"""Resuming a Loader whose transform carries samples across batches (Mosaic's ring buffer):
stop at batch k, save, build a fresh loader and a fresh transform, load, and batches k, k+1...
equal the uninterrupted run's bit for bit (images, boxes, classes, mask, sizes), at 1 and 2
gather threads, mid-epoch and across an epoch boundary."""

from __future__ import annotations

import threading
import warnings

import pytest
import torch

import detfmt.augment as A
from detfmt.torch import Batch, Delivery, Loader
from tests.datasets import varied_shapes

BATCH = 4
EPOCHS = 3
FIELDS = ("images", "boxes", "classes", "mask", "sizes", "indices")


@pytest.fixture
def ds(make_ds):
    # 22 samples of varied shapes and 0..5 boxes: batches differ in canvas and box slots, and
    # the last batch of an epoch is short (22 = 5 * 4 + 2)
    return make_ds(varied_shapes(22, seed=7), max_boxes=5)


def yolo() -> A.Compose:
    """Ultralytics' pipeline (resized mosaic fused into the affine warp, flips, HSV) with a
    buffer of 7 samples: it spans two batches and, early in an epoch, the previous epoch."""
    return A.presets.yolo_train(32, buffer_size=7, mixup=0.3, generator=torch.Generator())


def plain_mosaic() -> A.Compose:
    """Mosaic without resize (canvas by slices), then a letterbox."""
    return A.Compose([A.Mosaic(p=0.8, buffer_size=6), A.Letterbox(40)],
                     generator=torch.Generator())


PIPELINES = {"yolo_train": yolo, "mosaic+letterbox": plain_mosaic}


def snapshot(batch: Batch) -> tuple[torch.Tensor, ...]:
    return tuple(getattr(batch, name).clone() for name in FIELDS)


def run(loader: Loader, passes: int) -> list[tuple[torch.Tensor, ...]]:
    return [snapshot(b) for _ in range(passes) for b in loader]


def assert_same(got: list, want: list) -> None:
    assert len(got) == len(want)
    for k, (a, b) in enumerate(zip(got, want, strict=True)):
        for name, x, y in zip(FIELDS, a, b, strict=True):
            assert x.shape == y.shape and torch.equal(x, y), f"batch {k}: {name} differs"


def first_batches(loader: Loader, k: int) -> tuple[list, dict]:
    """The first k batches of ``loader`` (across epochs) and the state saved right after them."""
    got: list = []
    while len(got) < k:
        it = iter(loader)
        for batch in it:
            got.append(snapshot(batch))
            if len(got) == k:
                it.close()  # batches gathered (and augmented) ahead are dropped
                break
    return got, loader.state_dict()


def stopped_at(ds, make, threads: int, k: int) -> tuple[list, dict]:
    """The first k batches of a run and the state saved right after them."""
    return first_batches(
        Loader(
            ds,
            BATCH,
            seed=5,
            delivery=Delivery(num_threads=threads, prefetch=3),
            transform=make(),
        ), k)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("pipeline", sorted(PIPELINES))
def test_buffered_mosaic_run_is_reproducible_at_any_thread_count(ds, pipeline, threads):
    """Same seed twice, and 1 thread against 2: the same augmented batches (the buffer is
    pushed in batch order whichever thread gathered a batch)."""
    make = PIPELINES[pipeline]
    first = run(Loader(ds, BATCH, seed=5, delivery=Delivery(num_threads=threads),
                       transform=make()), EPOCHS)
    again = run(Loader(ds, BATCH, seed=5, delivery=Delivery(num_threads=threads),
                       transform=make()), EPOCHS)
    other = run(Loader(
        ds,
        BATCH,
        seed=5,
        delivery=Delivery(num_threads=3 - threads),
        transform=make(),
    ), EPOCHS)
    assert_same(again, first)
    assert_same(other, first)


# 6 batches per epoch: stop mid-epoch 0, at the end of epoch 0 (the buffer is all epoch 0's
# tail), one batch into epoch 1 (the buffer spans the epoch boundary), mid-epoch 2
@pytest.mark.parametrize("k", [3, 6, 7, 14])
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("pipeline", sorted(PIPELINES))
def test_resume_with_a_fresh_loader_and_transform_equals_the_uninterrupted_run(
        ds, pipeline, threads, k):
    make = PIPELINES[pipeline]
    whole = run(Loader(ds, BATCH, seed=5, delivery=Delivery(num_threads=threads),
                       transform=make()), EPOCHS)
    head, state = stopped_at(ds, make, threads, k)
    assert_same(head, whole[:k])
    resumed = Loader(ds, BATCH, seed=0, delivery=Delivery(num_threads=threads), transform=make())
    resumed.load_state_dict(state)
    passes = EPOCHS - k // 6  # the rest of the stopped epoch, then the following ones
    assert_same(run(resumed, passes), whole[k:])


class RanAhead(torch.nn.Module):
    """Wraps a transform; ``ahead`` is set once it has run on ``count`` batches."""

    def __init__(self, inner: torch.nn.Module, count: int) -> None:
        super().__init__()
        self.inner = inner
        self.count = count
        self.calls = 0
        self.ahead = threading.Event()

    def forward(self, batch: Batch) -> Batch:
        out = self.inner(batch)
        self.calls += 1
        if self.calls >= self.count:
            self.ahead.set()
        return out


def test_the_same_loader_continues_exactly_after_a_pass_stopped_early(ds):
    """A pass stopped while batches ran ahead through the transform: the next pass of the same
    loader refills the transform rather than keep what the dropped batches pushed."""
    whole = run(Loader(ds, BATCH, seed=5, delivery=Delivery(num_threads=2), transform=yolo()), 2)
    transform = RanAhead(yolo(), count=4)
    loader = Loader(
        ds,
        BATCH,
        seed=5,
        delivery=Delivery(num_threads=2, prefetch=4),
        transform=transform,
    )
    it = iter(loader)
    head = [snapshot(next(it)) for _ in range(2)]
    assert transform.ahead.wait(timeout=30)  # batches 2 and 3 went through the transform
    it.close()
    assert_same(head + run(loader, 2), whole)


def test_a_state_without_batching_still_loads_and_resumes(ds):
    whole = run(Loader(ds, BATCH, seed=5, delivery=Delivery(num_threads=2), transform=yolo()), 2)
    head, state = stopped_at(ds, yolo, 2, 7)
    del state["batching"]  # a state saved before the field existed
    resumed = Loader(ds, BATCH, delivery=Delivery(num_threads=2), transform=yolo())
    resumed.load_state_dict(state)
    assert_same(head + run(resumed, 1), whole)


def test_other_batching_resumes_the_order_and_warns_that_the_history_differs(ds):
    _, state = stopped_at(ds, yolo, 1, 3)
    order = [b.indices.tolist() for b in Loader(ds, 2, seed=5)]
    resumed = Loader(ds, 2, delivery=Delivery(num_threads=1), transform=yolo())
    resumed.load_state_dict(state)
    with pytest.warns(RuntimeWarning, match="batching"):
        rest = [b.indices.tolist() for b in resumed]
    assert rest == order[6:]
    plain = Loader(ds, 2, delivery=Delivery(num_threads=1), transform=A.RandomFlip(p=0.5))
    plain.load_state_dict(state)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no history, nothing to warn about
        assert [b.indices.tolist() for b in plain] == order[6:]


class Counting(torch.nn.Module):
    """A transform without history that counts its calls."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = A.Compose([A.RandomFlip(p=0.5), A.RandomHSV()])
        self.calls = 0

    def forward(self, batch: Batch) -> Batch:
        self.calls += 1
        return self.inner(batch)


@pytest.mark.parametrize("threads", [1, 2])
def test_a_transform_without_history_is_not_replayed(ds, threads):
    whole = run(Loader(
        ds,
        BATCH,
        seed=5,
        delivery=Delivery(num_threads=threads),
        transform=Counting(),
    ), 2)
    head, state = stopped_at(ds, Counting, threads, 4)
    transform = Counting()
    resumed = Loader(ds, BATCH, delivery=Delivery(num_threads=threads), transform=transform)
    resumed.load_state_dict(state)
    rest = run(resumed, 2)
    assert_same(head + rest, whole)
    assert transform.calls == len(rest)  # only the batches handed out


@pytest.mark.parametrize("k", [1, 3])
def test_each_rank_refills_from_its_own_share(ds, k):
    """Rank 1 of 2 (2 global batches of 8 per epoch, the tail dropped): its buffer holds its
    own earlier batches, mid-epoch and across the epoch boundary."""
    def make_loader(seed: int = 5) -> Loader:
        return Loader(
            ds,
            BATCH,
            seed=seed,
            rank=1,
            world_size=2,
            delivery=Delivery(num_threads=2),
            transform=yolo(),
        )

    whole = run(make_loader(), EPOCHS)
    head, state = first_batches(make_loader(), k)
    resumed = make_loader(seed=0)
    resumed.load_state_dict(state)
    assert_same(head + run(resumed, EPOCHS - k // 2), whole)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("pipeline", sorted(PIPELINES))
def test_mosaic_holding_views_of_the_loaders_buffers_equals_one_holding_copies(
        ds, pipeline, threads):
    """In the loader, the ring buffer holds views of the loader's batch buffers (it reuses a
    buffer only once nothing references it): the batches equal the same transform run outside
    the loader on copies, where the buffer copies."""
    inside = PIPELINES[pipeline]()
    inside.generator.manual_seed(11)
    got = run(Loader(
        ds,
        BATCH,
        seed=5,
        delivery=Delivery(num_threads=threads, prefetch=3, transform_reseed=False),
        transform=inside,
    ), EPOCHS)
    mosaic = inside.transforms[0]
    assert any(view is not None for view in mosaic.buffer.views)
    outside = PIPELINES[pipeline]()
    outside.generator.manual_seed(11)
    plain = Loader(ds, BATCH, seed=5, delivery=Delivery(num_threads=threads))
    want = [snapshot(outside(b.replace(images=b.images.clone())))
            for _ in range(EPOCHS) for b in plain]
    assert not any(view is not None for view in outside.transforms[0].buffer.views)
    assert_same(got, want)
