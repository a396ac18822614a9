"""Mosaic never reads a sample outside its valid region (``sizes``), in the batch or held in
its ring buffer: so the buffer copies only those regions, and what lies beyond them (the
loader's padding, or stale pixels of an older sample in a reused ring slot) cannot change a
mosaic, on any path (rectangle copies, static-shape gather, the warp that reads the tiles).
"""

from __future__ import annotations

import pytest
import torch

import detfmt.augment as A
from detfmt.augment import _backend

from ._helpers import make_batch

SIZES = [[40, 52], [21, 52], [40, 30], [13, 17], [40, 40]]


def _batches(garbage: bool) -> list:
    """Five batches whose samples fill part of the canvas; beyond it zeros or noise."""
    out = []
    for k in range(5):
        batch = make_batch(5, 40, 52, 3 + k % 3, seed=70 + k, smooth=True)
        sizes = torch.tensor(SIZES).roll(k, 0)
        rows = torch.arange(40)[None, :, None] < sizes[:, 0, None, None]
        cols = torch.arange(52)[None, None, :] < sizes[:, 1, None, None]
        valid = (rows & cols)[:, None]
        g = torch.Generator().manual_seed(90 + k)
        beyond = torch.randint(0, 256, batch.images.shape, dtype=torch.uint8, generator=g)
        if not garbage:
            beyond = torch.zeros_like(beyond)
        images = torch.where(valid, batch.images, beyond)
        if k % 2:
            images = images.contiguous(memory_format=torch.channels_last)
        boxes = torch.minimum(batch.boxes, sizes.flip(-1).repeat(1, 2)[:, None].float())
        out.append(batch.replace(images=images, boxes=boxes, sizes=sizes.to(torch.int32)))
    return out


def _pipeline(kind: str) -> tuple[A.Compose, A.Mosaic]:
    g = torch.Generator().manual_seed(5)
    resize = 48 if kind in ("resized", "resized-torch", "resized-gather") else None
    mosaic = A.Mosaic(p=0.8, buffer_size=7, resize=resize, generator=g)
    mosaic._force_gather = kind.endswith("gather")
    steps = [A.RandomAffine(degrees=10, shear=2, size=resize or (40, 52)), A.RandomFlip()]
    return A.Compose([mosaic, *steps], generator=g), mosaic


@pytest.mark.parametrize(
    "kind", ["slices", "gather", "resized", "resized-torch", "resized-gather"]
)
def test_mosaics_do_not_depend_on_what_lies_beyond_the_valid_regions(kind):
    backend = "torch" if kind.endswith("torch") or kind.endswith("gather") else "auto"
    if backend == "auto" and not _backend.cv2_available():
        pytest.skip("needs OpenCV")
    previous = A.get_cpu_backend()
    A.set_cpu_backend(backend)
    try:
        outputs = []
        for garbage in (False, True):
            pipeline, mosaic = _pipeline(kind)
            outs = [pipeline(batch) for batch in _batches(garbage)]
            assert mosaic.buffer is not None and mosaic.buffer.filled == 7
            outputs.append(outs)
    finally:
        A.set_cpu_backend(previous)
    for clean, noisy in zip(*outputs, strict=True):
        assert torch.equal(clean.images, noisy.images)
        assert torch.equal(clean.boxes, noisy.boxes) and torch.equal(clean.mask, noisy.mask)
        assert torch.equal(clean.classes, noisy.classes)
        assert torch.equal(clean.sizes, noisy.sizes)
    params = pipeline.last_params[0]
    read_held = bool((params["tiles"][params["apply"]] >= 5).any())
    assert read_held  # the last batch's mosaics read held samples


@pytest.mark.parametrize("layout", [torch.contiguous_format, torch.channels_last])
def test_ring_buffer_holds_each_valid_region(layout):
    """Each held sample's valid region is the pushed one, pixel for pixel, whatever the ring
    slot held before (a larger sample, other padding)."""
    mosaic = A.Mosaic(buffer_size=4, generator=torch.Generator().manual_seed(3))
    pushed = []
    for batch in _batches(garbage=True)[:3]:
        batch = batch.replace(images=batch.images.contiguous(memory_format=layout))
        mosaic(batch)
        pushed += [(batch.images[j], batch.sizes[j].tolist()) for j in range(len(batch))]
    buf = mosaic.buffer
    assert buf is not None and buf.filled == 4
    for k, (image, (h, w)) in enumerate(pushed[-4:]):
        slot = int(buf.physical(k))
        assert buf.sizes[slot].tolist() == [h, w]
        assert torch.equal(buf.images[slot, :, :h, :w], image[:, :h, :w])


def _run(kind: str, stable: bool, switch_to_gather_at: int | None = None) -> list:
    """The pipeline over the batches (their own copies), inside `stable_batches` or not."""
    from detfmt.torch.threads import stable_batches

    pipeline, mosaic = _pipeline(kind)
    outs = []
    for k, batch in enumerate(_batches(garbage=True)):
        if k == switch_to_gather_at:
            mosaic._force_gather = True  # the next call reads the held pixels from the buffer
        batch = batch.replace(images=batch.images.clone())
        if stable:
            with stable_batches():
                outs.append(pipeline(batch))
        else:
            outs.append(pipeline(batch))
    assert mosaic.buffer is not None
    held_views = sum(v is not None for v in mosaic.buffer.views)
    return outs, held_views


def _assert_same(a: list, b: list) -> None:
    for x, y in zip(a, b, strict=True):
        assert torch.equal(x.images, y.images) and torch.equal(x.boxes, y.boxes)
        assert torch.equal(x.mask, y.mask) and torch.equal(x.sizes, y.sizes)


@pytest.mark.parametrize("kind", ["slices", "resized"])
def test_held_views_of_stable_batches_give_the_copies_mosaics(kind):
    """Batches a caller will not write again (the loader's, `stable_batches`): the buffer holds
    views of their pixels instead of copies, with the same mosaics; a later path that reads the
    buffer's own storage (the static-shape gather) copies them in first."""
    if not _backend.cv2_available():
        pytest.skip("needs OpenCV")
    copies, none_held = _run(kind, stable=False)
    views, held = _run(kind, stable=True)
    assert none_held == 0 and held == 7
    _assert_same(copies, views)
    copies, _ = _run(kind, stable=False, switch_to_gather_at=4)
    views, held = _run(kind, stable=True, switch_to_gather_at=4)
    assert held == 0  # copied in by the gather, and the last batch pushed as copies
    _assert_same(copies, views)


def test_a_batch_written_after_the_call_changes_no_later_mosaic():
    """Outside `stable_batches` (a user's own batches, refilled in place as a DataLoader's
    pinned buffers are), the buffer copies: writing a batch after the call changes nothing."""
    if not _backend.cv2_available():
        pytest.skip("needs OpenCV")
    want, _ = _run("slices", stable=False)
    pipeline, _ = _pipeline("slices")
    got = []
    for batch in _batches(garbage=True):
        batch = batch.replace(images=batch.images.clone())
        got.append(pipeline(batch))
        batch.images.numpy()[:] = 7  # through numpy: torch's version counter does not see it
    _assert_same(want, got)
