"""Stored samples instead of a gathered batch (`Batch.samples`): a `Loader` hands a pipeline that
starts with `Mosaic` the raw samples where they are mapped, and every output equals the one
from a gathered batch; whatever reads pixels from ``images`` gets real ones."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

from detfmt.augment import Compose, Mosaic, RandomAffine, RandomHSV
from detfmt.augment.presets import yolo_train
from detfmt.errors import UsageError
from detfmt.torch import Batch, Delivery, Loader
from tests.datasets import varied_shapes


def _outputs(ds, make_transform, *, samples: bool, pad_value: int = 0,
             threads: int = 1) -> tuple[list[Batch], list[Batch]]:
    """Every batch through the loader, the transform declaring ``samples`` or not (and the
    batches it was given)."""
    transform = make_transform()
    assert transform.accepts_stored_samples  # what the wrapper below declares instead
    given: list[Batch] = []

    def run(batch: Batch) -> Batch:
        given.append(batch)
        return transform(batch)

    run.accepts_stored_samples = samples  # type: ignore[attr-defined]
    loader = Loader(
        ds,
        4,
        seed=3,
        delivery=Delivery(num_threads=threads, pad_value=pad_value),
        transform=run,
    )
    out = [b for _ in range(2) for b in loader]  # two epochs: the ring holds earlier samples
    return out, given


def _assert_same(a: list[Batch], b: list[Batch]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        for name in ("images", "boxes", "classes", "mask", "sizes", "indices"):
            torch.testing.assert_close(getattr(x, name), getattr(y, name), rtol=0, atol=0,
                                       msg=name)


PIPELINES = {
    "yolo_train": lambda: yolo_train(48, buffer_size=6, generator=torch.Generator()),
    "mosaic_then_affine": lambda: Compose(
        [Mosaic(buffer_size=5), RandomAffine(degrees=10, scale=0.3, size=40)],
        generator=torch.Generator()),
    "mosaic_alone": lambda: Mosaic(buffer_size=5, generator=torch.Generator()),
    "mosaic_then_hsv": lambda: Compose([Mosaic(p=0.5), RandomHSV()],
                                       generator=torch.Generator()),
}


@pytest.mark.parametrize("pipeline", sorted(PIPELINES))
def test_stored_samples_give_the_gathered_batches_outputs(make_any, pipeline):
    ds = make_any(varied_shapes(18, seed=4))
    make = PIPELINES[pipeline]
    gathered, plain_in = _outputs(ds, make, samples=False)
    stored, stored_in = _outputs(ds, make, samples=True)
    assert all(b.samples is None for b in plain_in)
    assert all(b.samples is not None for b in stored_in)  # the path under test ran
    assert all(b.samples is None for b in stored)  # never handed out
    _assert_same(gathered, stored)


def test_stored_samples_at_two_threads_and_a_pad_value(make_ds):
    ds = make_ds(varied_shapes(18, seed=5))
    make = PIPELINES["mosaic_then_hsv"]
    gathered, _ = _outputs(ds, make, samples=False, pad_value=7,
                           threads=2)
    stored, _ = _outputs(ds, make, samples=True, pad_value=7,
                         threads=2)
    _assert_same(gathered, stored)


def test_samples_are_read_only_views_of_the_mapping(make_ds):
    ds = make_ds(varied_shapes(6, seed=6))
    loader = Loader(ds, 3, seed=0)
    job = loader.engine.job(np.array([4, 1, 2]))
    stored = loader.engine.stored_images(job)
    assert stored is not None and len(stored) == 3
    for index, array in zip([4, 1, 2], stored, strict=True):
        np.testing.assert_array_equal(array, ds[index].image)
        assert not array.flags.writeable
        assert array.base is not None  # a view, not a copy


def test_a_job_that_needs_decoding_is_gathered(make_ds):
    ds = make_ds(varied_shapes(8, seed=7), codec="png")
    loader = Loader(ds, 4, seed=0)
    assert loader.engine.stored_images(loader.engine.job(np.arange(4))) is None
    _, given = _outputs(ds, PIPELINES["mosaic_alone"], samples=True)
    assert given and all(b.samples is None for b in given)


def _sample_batch(pad: int = 9) -> tuple[Batch, list[np.ndarray]]:
    rng = np.random.default_rng(0)
    arrays = [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for h, w in [(5, 7), (8, 3)]]
    placeholder = torch.full((1, 1, 1, 1), pad, dtype=torch.uint8).expand(2, 3, 8, 7)
    batch = Batch(images=placeholder, boxes=torch.zeros(2, 1, 4), classes=torch.full((2, 1), -1),
                  mask=torch.zeros(2, 1, dtype=torch.bool),
                  sizes=torch.tensor([[5, 7], [8, 3]], dtype=torch.int32), samples=arrays)
    return batch, arrays


def test_batch_samples_describe_their_images():
    batch, arrays = _sample_batch()
    want = np.full((2, 8, 7, 3), 9, np.uint8)
    want[0, :5, :7] = arrays[0]
    want[1, :8, :3] = arrays[1]
    real = batch.materialized()
    assert real.samples is None
    np.testing.assert_array_equal(real.images.permute(0, 2, 3, 1).numpy(), want)
    moved = batch.to("cpu")
    assert moved.samples is None
    np.testing.assert_array_equal(moved.images.permute(0, 2, 3, 1).numpy(), want)
    assert batch.replace(boxes=batch.boxes + 1).samples is not None  # same images
    assert batch.replace(images=real.images).samples is None  # new images: not theirs
    with pytest.raises(UsageError, match="one per sample"):
        Batch(images=batch.images, boxes=batch.boxes, classes=batch.classes, mask=batch.mask,
              samples=arrays[:1])


def test_mosaic_paths_that_read_images_get_the_samples_pixels(monkeypatch):
    batch, _ = _sample_batch()
    batch = batch.replace(boxes=torch.tensor([[[1.0, 1.0, 4.0, 3.0]], [[0.0, 2.0, 2.0, 7.0]]]),
                          classes=torch.tensor([[1], [2]]), mask=torch.ones(2, 1, dtype=torch.bool))
    for force_gather in (False, True):
        monkeypatch.setattr(Mosaic, "_force_gather", force_gather)
        want = Mosaic(generator=torch.Generator().manual_seed(1))(batch.materialized())
        got = Mosaic(generator=torch.Generator().manual_seed(1))(batch)
        torch.testing.assert_close(got.images, want.images, rtol=0, atol=0)
        torch.testing.assert_close(got.boxes, want.boxes, rtol=0, atol=0)


def test_a_transform_replaced_after_the_batch_was_made_gets_real_images(make_ds):
    """`DetfmtYoloLoader.reset` swaps the pipeline (close_mosaic): a batch made for a pipeline
    that took the stored samples reaches the new one with real images."""
    ds = make_ds(varied_shapes(6, seed=8))
    loader = Loader(
        ds,
        3,
        seed=0,
        delivery=Delivery(pad_value=5),
        transform=PIPELINES["mosaic_alone"](),
    )
    batch, slot = loader._job(np.array([0, 4, 2]), threading.Event())
    assert slot is None and batch.samples is not None
    seen: list[Batch] = []
    loader.transform = lambda b: seen.append(b) or b
    loader._run_transform(batch)
    assert seen[0].samples is None
    want = np.full((3, *batch.images.shape[-2:], 3), 5, np.uint8)
    for k, index in enumerate([0, 4, 2]):
        image = ds[index].image
        want[k, :image.shape[0], :image.shape[1]] = image
    np.testing.assert_array_equal(seen[0].images.permute(0, 2, 3, 1).numpy(), want)
