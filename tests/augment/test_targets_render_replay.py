"""Converters, compaction, rendering, and determinism (explicit generators, replay)."""

from __future__ import annotations

import numpy as np
import torch
from PIL import Image

import detfmt.augment as A
from detfmt.torch import Batch

from ._helpers import make_batch


def _tiny() -> Batch:
    images = torch.zeros(2, 3, 20, 40, dtype=torch.uint8)
    boxes = torch.tensor(
        [
            [[0.0, 0.0, 10.0, 20.0], [0.0, 0.0, 0.0, 0.0], [20.0, 5.0, 40.0, 15.0]],
            [[0.0, 0.0, 0.0, 0.0], [10.0, 10.0, 30.0, 20.0], [0.0, 0.0, 0.0, 0.0]],
        ]
    )
    mask = torch.tensor([[True, False, True], [False, True, False]])
    classes = torch.tensor([[3, -1, 1], [-1, 2, -1]])
    return Batch(
        images=images,
        boxes=boxes,
        classes=classes,
        mask=mask,
        sizes=torch.tensor([[20, 40], [20, 20]], dtype=torch.int32),
    )


def test_to_ultralytics_flat_targets():
    t = A.to_ultralytics(_tiny())
    assert t["batch_idx"].tolist() == [0.0, 0.0, 1.0]
    assert t["cls"].tolist() == [[3.0], [1.0], [2.0]]
    expected = [[0.125, 0.5, 0.25, 1.0], [0.75, 0.5, 0.5, 0.5], [0.5, 0.75, 0.5, 0.5]]
    assert torch.allclose(t["bboxes"], torch.tensor(expected))


def test_to_detr_normalises_by_valid_size():
    t = A.to_detr(_tiny())
    assert t[0]["labels"].tolist() == [3, 1] and t[1]["labels"].tolist() == [2]
    assert torch.allclose(
        t[0]["boxes"], torch.tensor([[0.125, 0.5, 0.25, 1.0], [0.75, 0.5, 0.5, 0.5]])
    )
    assert torch.allclose(t[1]["boxes"], torch.tensor([[1.0, 0.75, 1.0, 0.5]]))  # w = 20


def test_compact_moves_valid_boxes_first():
    out = A.compact(_tiny(), max_boxes=2)
    assert out.mask.tolist() == [[True, True], [True, False]]
    assert out.classes.tolist() == [[3, 1], [2, -1]]
    assert out.boxes[1, 0].tolist() == [10.0, 10.0, 30.0, 20.0]
    wider = A.compact(_tiny(), max_boxes=5)
    assert wider.boxes.shape == (2, 5, 4) and wider.mask.sum() == 3


def test_render_batch_draws_box_outlines(tmp_path):
    batch = _tiny()
    path = tmp_path / "batch.png"
    sheet = A.render_batch(batch, path, class_names=["a", "b", "c", "d"], columns=2)
    assert path.exists()
    png = np.asarray(Image.open(path))
    assert png.shape == (20, 80, 3) and sheet.size == (80, 20)
    # Box [20, 40) x [5, 15) of sample 0: its outline is on columns 20 and 39.
    assert png[10, 20].any() and png[10, 39].any() and not png[10, 30].any()
    # Sample 1 sits at x offset 40; its box [10, 30) x [10, 20) has its left edge at x = 50.
    assert png[15, 50].any()


def test_same_seed_same_output_and_global_rng_untouched():
    batch = make_batch(4, 48, 48, 4, seed=61)

    def pipeline(seed: int) -> A.Compose:
        return A.Compose(
            [
                A.Mosaic(),
                A.RandomAffine(degrees=10, size=48),
                A.RandomFlip(),
                A.RandomHSV(),
                A.MixUp(p=0.5),
            ],
            generator=torch.Generator().manual_seed(seed),
        )

    state = torch.get_rng_state()
    a, b, c = pipeline(7)(batch), pipeline(7)(batch), pipeline(8)(batch)
    assert torch.equal(torch.get_rng_state(), state)
    assert torch.equal(a.images, b.images) and torch.equal(a.boxes, b.boxes)
    assert not torch.equal(a.images, c.images)


def test_params_replay_a_batch_exactly():
    batch = make_batch(4, 48, 48, 4, seed=62)
    pipe = A.Compose(
        [
            A.RandomAffine(degrees=20, shear=5),
            A.RandomFlip(),
            A.RandomIoUCrop(),
            A.ColorJitter(brightness=0.3, hue=0.1),
        ],
        generator=torch.Generator().manual_seed(9),
    )
    first = pipe(batch)
    params = pipe.last_params
    pipe(batch)  # a fresh draw in between
    again = pipe(batch, params=params)
    assert torch.equal(first.images, again.images)
    assert torch.equal(first.boxes, again.boxes) and torch.equal(first.mask, again.mask)


def test_float_images_flow_through_and_fp16_out():
    batch = make_batch(2, 32, 32, 3, seed=63)
    pipe = A.Compose(
        [
            A.ToFloat(dtype=torch.float32),
            A.RandomAffine(degrees=5),
            A.RandomHSV(),
            A.ToFloat(dtype=torch.float16),
        ],
        generator=torch.Generator().manual_seed(10),
    )
    out = pipe(batch)
    assert out.images.dtype == torch.float16
    assert out.images.min() >= 0 and out.images.max() <= 1


def test_compose_generator_does_not_override_explicit_ones():
    own = torch.Generator().manual_seed(5)
    flip = A.RandomFlip(generator=own)
    hsv = A.RandomHSV()
    shared = torch.Generator().manual_seed(6)
    A.Compose([flip, hsv], generator=shared)
    assert flip.generator is own and hsv.generator is shared
