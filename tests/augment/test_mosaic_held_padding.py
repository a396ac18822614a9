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
