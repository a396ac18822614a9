"""Per-box extras (``Batch.box_fields``: the loader's ``iscrowd``, ``ann_id``...) stay with their
boxes through every module that reorders, widens, drops or filters box slots.

Every object gets a unique class id k, ``ann_id`` 10000 + 7k and ``iscrowd`` k % 2, so a
surviving box whose extras came from another object (or from nowhere: 0) is visible.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import detfmt
import detfmt.augment as A
from detfmt.errors import UsageError
from detfmt.torch import Batch, Loader

from .test_real_loaders import loader_like

FIELDS = ("ann_id", "iscrowd")



def ann_id_of(k: torch.Tensor) -> torch.Tensor:
    return 10000 + 7 * k.to(torch.int64)


def tagged(batch: Batch, first: int) -> tuple[Batch, int]:
    """``batch`` with objects numbered from ``first`` (class k, ann_id, iscrowd per object)."""
    count = int(batch.mask.sum())
    k = torch.zeros(batch.mask.shape, dtype=torch.int64)
    k[batch.mask] = torch.arange(first, first + count)
    ann_id = torch.where(batch.mask, ann_id_of(k), 0)
    iscrowd = torch.where(batch.mask, k % 2, 0).to(torch.uint8)
    out = batch.replace(
        classes=torch.where(batch.mask, k, -1).to(batch.classes.dtype),
        extras={"ann_id": ann_id, "iscrowd": iscrowd, "per_image": torch.arange(len(batch))},
        box_fields=FIELDS,
    )
    return out, first + count


def assert_aligned(out: Batch) -> None:
    """Each valid slot's extras belong to the object its class names; padding slots hold 0."""
    assert out.box_fields == FIELDS
    ann_id, iscrowd = out.extras["ann_id"], out.extras["iscrowd"]
    assert ann_id.shape == out.mask.shape and iscrowd.shape == out.mask.shape
    k = out.classes[out.mask].to(torch.int64)
    assert torch.equal(ann_id[out.mask], ann_id_of(k))
    assert torch.equal(iscrowd[out.mask], (k % 2).to(torch.uint8))
    assert not ann_id[~out.mask].any() and not iscrowd[~out.mask].any()


# (B, H, W, M): canvas and box slots change from batch to batch, as from a real loader.
STREAM = [(4, 48, 64, 3), (5, 64, 56, 7), (3, 40, 40, 2), (4, 72, 80, 5), (4, 48, 64, 1)]


def modules() -> dict[str, object]:
    g = torch.Generator().manual_seed(11)
    return {
        "mosaic": A.Mosaic(p=0.8, generator=g),
        "mosaic-buffer": A.Mosaic(buffer_size=9, generator=g),
        "mosaic-resize-buffer": A.Mosaic(buffer_size=6, resize=40, generator=g),
        # On the OpenCV backend the affine reads Mosaic's tiles directly (the deferred path).
        "mosaic-deferred-affine": A.Compose(
            [A.Mosaic(buffer_size=6, resize=40), A.RandomAffine(degrees=10, size=40)], generator=g
        ),
        "mixup": A.MixUp(p=0.7, generator=g),
        "letterbox": A.Letterbox((40, 56)),
        "affine": A.RandomAffine(degrees=15, translate=0.3, shear=3, generator=g),
        "perspective": A.RandomAffine(perspective=1e-3, scale=0.3, generator=g),
        "flip-valid": A.RandomFlip(p=0.5, generator=g),
        "flip-canvas": A.RandomFlip(p=0.5, vertical=True, about="canvas", generator=g),
        "iou-crop": A.RandomIoUCrop(generator=g),
        "warp": A.Warp(torch.tensor([[1.5, 0.0, -20.0], [0.0, 1.5, -10.0], [0.0, 0.0, 1.0]])),
        "multiscale": A.MultiScaleResize(imgsz=48, stride=8, generator=g),
        "sanitize": A.SanitizeBoxes(A.TorchvisionSanitize(min_size=8.0)),
        "hsv": A.RandomHSV(generator=g),
        "compact": lambda batch: A.compact(batch, max_boxes=12),
        "compact-count": lambda batch: A.compact(batch, max_boxes=2, overflow="count"),
        "yolo_train": A.presets.yolo_train(48, mixup=0.5, buffer_size=8, generator=g),
        "yolo_train-no-mosaic": A.presets.yolo_train(48, mosaic=0.0, mixup=0.5, generator=g),
        "chain-compact": A.Compose(
            [A.Mosaic(buffer_size=4), A.RandomAffine(size=48), A.MixUp(p=0.5), A.RandomFlip()],
            generator=g,
        ),
    }


@pytest.mark.parametrize("name", list(modules()))
def test_per_box_extras_describe_the_same_object_after_every_module(name, backend):
    module = modules()[name]
    first, seen, older = 0, 0, 0
    for step, (b, h, w, m) in enumerate(STREAM):
        batch, after = tagged(loader_like(b, h, w, m, seed=step), first)
        out = module(batch)
        if name == "chain-compact":
            out = A.compact(out)
        assert_aligned(out)
        assert torch.equal(out.extras["per_image"], torch.arange(b))  # per-image: untouched
        seen += int(out.mask.sum())
        # Boxes of objects from earlier batches: Mosaic's ring buffer supplied partners.
        older += int((out.classes[out.mask] < first).sum())
        first = after
    assert seen > 0  # boxes survived, so the check above compared something
    if "buffer" in name or name in ("yolo_train", "chain-compact", "mosaic-deferred-affine"):
        assert older > 0


def test_a_per_image_extra_with_as_many_entries_as_box_slots_is_not_moved():
    """A (B, 2) per-image extra in a batch with 2 box slots is left alone: only the declared
    fields are per-box."""
    batch, _ = tagged(loader_like(4, 32, 32, 2, seed=3), 0)
    pair = torch.arange(8).view(4, 2)
    batch = batch.replace(extras={**batch.extras, "pair": pair})
    g = torch.Generator().manual_seed(0)
    for module in (A.Mosaic(generator=g), A.MixUp(generator=g), A.compact):
        out = module(batch)
        assert_aligned(out)
        assert torch.equal(out.extras["pair"], pair)


def test_a_declared_field_that_does_not_follow_the_boxes_is_an_error():
    batch, _ = tagged(loader_like(3, 32, 32, 4, seed=5), 0)
    with pytest.raises(UsageError, match="ann_id"):
        batch.replace(mask=torch.cat([batch.mask, batch.mask], dim=1))  # slots widened alone
    with pytest.raises(UsageError, match="missing"):
        batch.replace(box_fields=("missing",))
    moved = batch.to("cpu")
    assert moved.box_fields == FIELDS


def test_mosaic_buffer_refuses_batches_with_other_per_box_fields():
    mosaic = A.Mosaic(buffer_size=4, generator=torch.Generator().manual_seed(0))
    batch, _ = tagged(loader_like(3, 32, 32, 4, seed=5), 0)
    mosaic(batch)
    plain = batch.replace(box_fields=())
    with pytest.raises(UsageError, match="per-box fields"):
        mosaic(plain)


def _dataset(path, n: int = 12):
    """Objects numbered over the whole dataset: class k % 40, ann_id 10000 + 7k, iscrowd k % 2."""
    rng = np.random.default_rng(0)
    samples, k = [], 0
    for _ in range(n):
        h, w = int(rng.integers(30, 60)), int(rng.integers(30, 60))
        count = int(rng.integers(0, 6))
        xy = rng.uniform(0, [w - 8, h - 8], (count, 2))
        wh = rng.uniform(4, 8, (count, 2))
        ids = np.arange(k, k + count)
        k += count
        samples.append({
            "image": rng.integers(0, 255, (h, w, 3), dtype=np.uint8),
            "boxes": np.concatenate([xy, xy + wh], 1).astype(np.float32),
            "classes": (ids % 40).astype(np.int32),
            "ann_id": (10000 + 7 * ids).astype(np.int32),
            "iscrowd": (ids % 2).astype(np.uint8),
        })
    detfmt.write(samples, path, classes=[f"c{c}" for c in range(40)],
                 box_fields={"ann_id": "int32", "iscrowd": "uint8"})
    return detfmt.open(path)


@pytest.mark.parametrize("mosaic", [1.0, 0.0])
def test_loader_declares_per_box_fields_and_yolo_train_keeps_them_aligned(
    tmp_path, backend, mosaic
):
    ds = _dataset(tmp_path / "ds")
    pipeline = A.presets.yolo_train(48, mosaic=mosaic, mixup=0.5, buffer_size=6)
    loader = Loader(ds, batch_size=4, shuffle=True, seed=1, transform=pipeline)
    seen = 0
    for _ in range(2):
        for batch in loader:
            assert set(batch.box_fields) == set(FIELDS)
            ann_id = batch.extras["ann_id"][batch.mask].to(torch.int64)
            k = (ann_id - 10000) // 7
            assert torch.equal(10000 + 7 * k, ann_id)  # a real object's id
            assert torch.equal(batch.classes[batch.mask].to(torch.int64), k % 40)
            assert torch.equal(batch.extras["iscrowd"][batch.mask].to(torch.int64), k % 2)
            seen += len(ann_id)
    assert seen > 0
