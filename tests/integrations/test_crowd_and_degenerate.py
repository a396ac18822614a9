"""Crowd and zero-area boxes in `to_torchvision` and `to_hf_detection`: dropped by default, as
torchvision's reference COCO preparation and transformers' processors drop them, counted per
image; kept when asked. Needs neither framework (the main suite runs it)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import detfmt
from detfmt.errors import UsageError
from detfmt.integrations.torchvision import to_torchvision
from detfmt.integrations.transformers import HFDetectionCollator, to_hf_detection
from detfmt.torch import Batch, DetectionDataset, Loader

# Sample 0: a crowd box, a zero-width box, a crowd zero-area box and a plain one; sample 1: a
# point and a plain box.
BOXES = torch.tensor([
    [[1.0, 1, 5, 5], [6, 2, 6, 9], [3, 3, 3, 3], [2, 4, 9, 8]],
    [[4.0, 4, 4, 4], [0, 0, 3, 2], [0, 0, 0, 0], [0, 0, 0, 0]],
])
CLASSES = torch.tensor([[0, 1, 2, 3], [4, 5, -1, -1]])
MASK = torch.tensor([[True, True, True, True], [True, True, False, False]])
CROWD = torch.tensor([[1, 0, 1, 0], [0, 0, 0, 0]], dtype=torch.uint8)


def crowd_batch() -> Batch:
    return Batch(
        images=torch.zeros((2, 3, 10, 12), dtype=torch.uint8),
        boxes=BOXES,
        classes=CLASSES,
        mask=MASK,
        sizes=torch.tensor([[10, 12], [8, 9]], dtype=torch.int32),
        indices=torch.tensor([7, 8]),
        extras={"iscrowd": CROWD, "ann_id": torch.arange(8, dtype=torch.int32).view(2, 4)},
        box_fields=("iscrowd", "ann_id"),
    )


def _torchvision(batch, **options):
    _, targets = to_torchvision(batch, label_offset=0, **options)
    return [(t["labels"], t["boxes"], t["iscrowd"], t["removed_crowd"], t["removed_degenerate"])
            for t in targets]


def _hf(batch, **options):
    out = to_hf_detection(batch, **options)
    height, width = out["pixel_mask"].shape[1:]
    scale = torch.tensor([width, height, width, height])
    rows = []
    for t in out["labels"]:
        cx, cy, w, h = (t["boxes"] * scale).unbind(-1)
        xyxy = torch.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], dim=-1)
        rows.append((t["class_labels"], xyxy, t["iscrowd"], t["removed_crowd"],
                     t["removed_degenerate"]))
    return rows


@pytest.mark.parametrize("convert", [_torchvision, _hf], ids=["torchvision", "transformers"])
@pytest.mark.parametrize(
    ("options", "kept", "removed"),
    [
        ({}, [[3], [1]], [(2, 1), (0, 1)]),  # crowd first, then zero-area among the rest
        ({"drop_crowd": False}, [[0, 3], [1]], [(0, 2), (0, 1)]),
        ({"drop_degenerate": False}, [[1, 3], [0, 1]], [(2, 0), (0, 0)]),
        ({"drop_crowd": False, "drop_degenerate": False}, [[0, 1, 2, 3], [0, 1]], [(0, 0)] * 2),
    ],
)
def test_crowd_and_zero_area_boxes_are_dropped_by_default_and_counted(
    convert, options, kept, removed
):
    """``kept``: the slots whose boxes each image's targets hold, in order."""
    for i, (labels, boxes, iscrowd, n_crowd, n_degenerate) in enumerate(
        convert(crowd_batch(), **options)
    ):
        assert labels.tolist() == CLASSES[i][kept[i]].tolist()
        torch.testing.assert_close(boxes, BOXES[i][kept[i]], rtol=0, atol=1e-5)
        assert iscrowd.dtype == torch.int64
        assert iscrowd.tolist() == CROWD[i][kept[i]].tolist()
        assert (int(n_crowd), int(n_degenerate)) == removed[i]
        assert len(labels) + int(n_crowd) + int(n_degenerate) == int(MASK[i].sum())


@pytest.mark.parametrize("convert", [_torchvision, _hf], ids=["torchvision", "transformers"])
def test_an_undeclared_iscrowd_extra_is_refused(convert):
    batch = crowd_batch().replace(box_fields=("ann_id",))
    with pytest.raises(UsageError, match="iscrowd"):
        convert(batch)
    plain = crowd_batch().replace(extras={}, box_fields=())  # no crowd field: nothing is crowd
    assert [len(row[0]) for row in convert(plain, drop_degenerate=False)] == [4, 2]


def test_without_crowd_and_zero_area_boxes_the_targets_are_every_valid_box():
    batch = crowd_batch()
    batch = batch.replace(extras={**batch.extras, "iscrowd": torch.zeros_like(CROWD)},
                          boxes=torch.tensor([[[1.0, 1, 5, 5]] * 4, [[0.0, 0, 3, 2]] * 4]))
    _, targets = to_torchvision(batch)
    labels = to_hf_detection(batch)["labels"]
    for i in range(2):
        assert len(targets[i]["boxes"]) == len(labels[i]["boxes"]) == int(MASK[i].sum())
        assert int(targets[i]["removed_crowd"]) == int(targets[i]["removed_degenerate"]) == 0


def _crowd_dataset(path):
    """Objects numbered k over the dataset: class k % 3, iscrowd when k % 4 == 1."""
    rng = np.random.default_rng(1)
    samples, k = [], 0
    for _ in range(6):
        count = int(rng.integers(1, 6))
        ids = np.arange(k, k + count)
        k += count
        xy = rng.uniform(0, 20, (count, 2))
        samples.append({
            "image": rng.integers(0, 255, (32, 40, 3), dtype=np.uint8),
            "boxes": np.concatenate([xy, xy + 6], 1).astype(np.float32),
            "classes": (ids % 3).astype(np.int32),
            "iscrowd": (ids % 4 == 1).astype(np.uint8),
        })
    detfmt.write(samples, path, classes=["a", "b", "c"], box_fields={"iscrowd": "uint8"})
    return detfmt.open(path), samples


def test_the_collator_leaves_out_the_crowd_boxes_of_dataset_items(tmp_path):
    ds, samples = _crowd_dataset(tmp_path / "ds")
    items = [DetectionDataset(ds, layout="CHW")[i] for i in range(len(ds))]
    out = HFDetectionCollator(dataset=ds)(items)
    for sample, target in zip(samples, out["labels"], strict=True):
        plain = sample["iscrowd"] == 0
        assert target["class_labels"].tolist() == sample["classes"][plain].tolist()
        assert int(target["removed_crowd"]) == int((~plain).sum())
    kept = HFDetectionCollator(dataset=ds, drop_crowd=False)(items)
    for sample, target in zip(samples, kept["labels"], strict=True):
        assert target["iscrowd"].tolist() == sample["iscrowd"].tolist()


def test_loader_batches_after_mosaic_drop_exactly_their_crowd_boxes(tmp_path):
    """The crowd flags follow their boxes through Mosaic and MixUp (4M, 2M slots) into the
    converters: what is removed is what the batch flags as crowd."""
    import detfmt.augment as A

    ds, _ = _crowd_dataset(tmp_path / "ds")
    pipeline = A.Compose([A.Mosaic(buffer_size=4), A.RandomAffine(size=32, box_filter=None),
                          A.MixUp(p=0.5)], generator=torch.Generator().manual_seed(2))
    for batch in Loader(ds, batch_size=3, seed=0, transform=pipeline):
        crowd = batch.extras["iscrowd"].bool() & batch.mask
        labels = to_hf_detection(batch)["labels"]
        _, targets = to_torchvision(batch)
        for i in range(len(batch)):
            assert int(labels[i]["removed_crowd"]) == int(crowd[i].sum())
            assert int(targets[i]["removed_crowd"]) == int(crowd[i].sum())
            plain = batch.mask[i] & ~crowd[i]
            assert labels[i]["class_labels"].tolist() == batch.classes[i][plain].tolist()
