"""transformers: targets as DETR's and RT-DETR's own image processors make them from the same
images and boxes; the recipe trains a small random-init DETR and its loss falls."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")

import detfmt  # noqa: E402
import detfmt.augment as A  # noqa: E402
from detfmt.integrations.pipeline import AugmentedBatches  # noqa: E402
from detfmt.integrations.transformers import HFDetectionCollator, to_hf_detection  # noqa: E402
from detfmt.torch import DetectionDataset, Loader  # noqa: E402

from ._recipes import falling, run_recipe  # noqa: E402


def _augmented_batches(path, count=2):
    augment = A.Compose(
        [A.Letterbox((192, 224), center=False), A.RandomAffine(degrees=3), A.RandomFlip()],
        generator=torch.Generator().manual_seed(5),
    )
    batches = AugmentedBatches(Loader(path, batch_size=3, seed=4), augment)
    return [b for _, b in zip(range(count), batches, strict=False)]


def _processor_inputs(batch):
    """The same images (each cropped to its extent) and boxes as COCO annotations."""
    images, annotations = [], []
    for i in range(len(batch)):
        h, w = batch.sizes[i].tolist()
        images.append(batch.images[i, :, :h, :w].contiguous())
        keep = batch.mask[i]
        objects = []
        for (x1, y1, x2, y2), c in zip(
            batch.boxes[i][keep].tolist(), batch.classes[i][keep].tolist(), strict=True
        ):
            objects.append(
                {"bbox": [x1, y1, x2 - x1, y2 - y1], "category_id": c, "area": 1.0, "iscrowd": 0}
            )
        annotations.append({"image_id": int(batch.indices[i]), "annotations": objects})
    return images, annotations


@pytest.mark.parametrize(
    ("processor_class", "normalize"),
    [("DetrImageProcessor", True), ("RTDetrImageProcessor", False)],
)
def test_targets_match_transformers_processors(chess_train, processor_class, normalize):
    processor = getattr(transformers, processor_class)(
        do_resize=False, do_pad=True, do_normalize=normalize
    )
    for batch in _augmented_batches(chess_train):
        ours = to_hf_detection(batch, normalize=normalize)
        images, annotations = _processor_inputs(batch)
        theirs = processor(images=images, annotations=annotations, return_tensors="pt")
        assert torch.equal(ours["pixel_mask"], theirs["pixel_mask"])
        torch.testing.assert_close(ours["pixel_values"], theirs["pixel_values"])
        for mine, ref in zip(ours["labels"], theirs["labels"], strict=True):
            assert torch.equal(mine["class_labels"], ref["class_labels"])
            torch.testing.assert_close(mine["boxes"], ref["boxes"], rtol=0, atol=1e-6)
            # the processors set "size" only when they resize or pad that image; ours always is
            # the canvas (the loss does not read it)
            assert mine["size"].tolist() == list(ref.get("size", ours["pixel_mask"].shape[1:]))
            assert mine["orig_size"].tolist() == list(ref["orig_size"])
            assert mine["image_id"].tolist() == ref["image_id"].tolist()
            assert torch.equal(mine["iscrowd"], ref["iscrowd"])


def test_boxes_denormalise_to_the_batch_boxes(chess_train):
    for batch in _augmented_batches(chess_train):
        out = to_hf_detection(batch)
        height, width = out["pixel_values"].shape[-2:]
        for i, target in enumerate(out["labels"]):
            cx, cy, w, h = (target["boxes"] * torch.tensor([width, height] * 2)).unbind(-1)
            xyxy = torch.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], dim=-1)
            torch.testing.assert_close(xyxy, batch.boxes[i][batch.mask[i]], rtol=0, atol=1e-4)


def test_collator_for_dataloader_items_fills_orig_size(chess_train):
    ds = detfmt.open(chess_train)
    items = [DetectionDataset(chess_train, layout="CHW")[i] for i in (0, 3, 5)]
    collate = HFDetectionCollator(A.Letterbox(128), dataset=ds)
    out = collate(items)
    assert out["pixel_values"].shape[0] == 3
    for k, target in zip((0, 3, 5), out["labels"], strict=True):
        assert target["orig_size"].tolist() == list(ds.sizes[k])
        assert len(target["class_labels"]) == int(ds.counts[k])


def test_recipe_trains_detr_and_the_loss_falls(chess_train):
    torch.manual_seed(0)
    losses = run_recipe("transformers", train_path=chess_train, STEPS=5)["losses"]
    assert len(losses) == 10
    assert falling(losses), losses


def test_crowd_and_zero_area_boxes_are_left_out_as_transformers_processors_do():
    """transformers' ``prepare_coco_detection_annotation`` drops crowd annotations, then boxes
    without positive width and height: ours hold the same objects, and count the rest."""
    from .test_crowd_and_degenerate import MASK, crowd_batch

    batch = crowd_batch()
    batch = batch.replace(images=torch.randint(0, 255, batch.images.shape, dtype=torch.uint8))
    ours = to_hf_detection(batch)
    images, annotations = _processor_inputs(batch)
    for i, image in enumerate(annotations):
        for slot, obj in enumerate(image["annotations"]):
            obj["iscrowd"] = int(batch.extras["iscrowd"][i][slot])
    processor = transformers.DetrImageProcessor(do_resize=False, do_pad=True)
    theirs = processor(images=images, annotations=annotations, return_tensors="pt")
    for i, (mine, ref) in enumerate(zip(ours["labels"], theirs["labels"], strict=True)):
        assert torch.equal(mine["class_labels"], ref["class_labels"])
        torch.testing.assert_close(mine["boxes"], ref["boxes"], rtol=0, atol=1e-6)
        assert torch.equal(mine["iscrowd"], ref["iscrowd"])
        removed = int(mine["removed_crowd"]) + int(mine["removed_degenerate"])
        assert len(ref["class_labels"]) + removed == int(MASK[i].sum())
    assert sum(int(t["removed_crowd"]) for t in ours["labels"]) == 2


def _small_detr_config(num_labels):
    """The recipes' DETR config (docs/integrations.md), random weights, no download."""
    from transformers import DetrConfig, ResNetConfig

    return DetrConfig(
        use_timm_backbone=False, use_pretrained_backbone=False,
        backbone_config=ResNetConfig(embedding_size=16, hidden_sizes=[16, 32, 64, 128],
                                     depths=[1, 1, 1, 1], out_features=["stage4"]),
        num_labels=num_labels, d_model=64, encoder_layers=1, decoder_layers=1,
        encoder_ffn_dim=128, decoder_ffn_dim=128, encoder_attention_heads=4,
        decoder_attention_heads=4, num_queries=30,
    )


@pytest.fixture(scope="module")
def shrunk(tmp_path_factory):
    """The chess sample converted with max_side=320: stored 214 x 320, orig_size 428 x 640."""
    from detfmt.convert import from_coco

    from .conftest import CHESS

    path = tmp_path_factory.mktemp("shrunk") / "train"
    from_coco(CHESS / "annotations.coco.json", CHESS, path, max_side=320)
    return path


def test_collator_orig_size_is_the_image_before_the_converter_shrank_it(shrunk):
    """Issue 29 (18): ``orig_size`` is the dataset's ``orig_size`` field (the source image),
    not the stored size, with the dataset given as itself, its path or the DetectionDataset."""
    ds = detfmt.open(shrunk)
    assert tuple(int(v) for v in ds.sizes[0]) == (214, 320)
    original = [tuple(int(v) for v in row) for row in ds.image_field("orig_size")]
    assert original[0] == (428, 640)
    items = DetectionDataset(shrunk, layout="CHW")
    picked = [items[i] for i in (0, 3, 5)]
    for source in (ds, shrunk, items):
        out = HFDetectionCollator(A.Letterbox(128), dataset=source)(picked)
        assert [tuple(t["orig_size"].tolist()) for t in out["labels"]] == [
            original[i] for i in (0, 3, 5)]
    # without a dataset: the stored size, not the letterboxed extent
    out = HFDetectionCollator(A.Letterbox(128))(picked)
    assert [tuple(t["orig_size"].tolist()) for t in out["labels"]] == [(214, 320)] * 3


def _varied_items(path):
    """Chess items cut to different sizes (boxes kept where inside), as CHW uint8."""
    items = []
    for k, (h, w) in enumerate([(428, 640), (300, 640), (428, 350), (200, 260)]):
        item = DetectionDataset(path, layout="CHW")[k]
        boxes = item["boxes"]
        inside = (boxes[:, 2] <= w) & (boxes[:, 3] <= h)
        items.append({**item, "image": item["image"][:, :h, :w].contiguous(),
                      "boxes": boxes[inside], "classes": item["classes"][inside],
                      "size": torch.tensor([h, w], dtype=torch.int32),
                      "box_fields": {n: v[inside] for n, v in item["box_fields"].items()}})
    return items


@pytest.mark.parametrize(("shortest", "longest"), [(160, 256), (200, 1333), (500, 700)])
def test_shortest_edge_resize_is_detr_processors(chess_train, shortest, longest):
    """ShortestEdgeResize + the collator give DetrImageProcessor's own resize: same sizes,
    masks and boxes, pixels within one grey level (antialiased both)."""
    items = _varied_items(chess_train)
    ours = HFDetectionCollator(A.ShortestEdgeResize(shortest, longest))(items)
    processor = transformers.DetrImageProcessor(
        do_resize=True, size={"shortest_edge": shortest, "longest_edge": longest}, do_pad=True)
    images = [item["image"] for item in items]
    annotations = [
        {"image_id": int(item["index"]), "annotations": [
            {"bbox": [x1, y1, x2 - x1, y2 - y1], "category_id": int(c), "area": 1.0,
             "iscrowd": 0}
            for (x1, y1, x2, y2), c in zip(item["boxes"].tolist(), item["classes"].tolist(),
                                           strict=True)]}
        for item in items
    ]
    theirs = processor(images=images, annotations=annotations, return_tensors="pt")
    assert ours["pixel_values"].shape == theirs["pixel_values"].shape
    assert torch.equal(ours["pixel_mask"], theirs["pixel_mask"])
    level = 1 / 255 / min(transformers.DetrImageProcessor().image_std)  # one grey level
    diff = (ours["pixel_values"] - theirs["pixel_values"]).abs()
    assert float(diff.max()) <= level * 1.01 and float(diff.mean()) < level / 4
    for mine, ref in zip(ours["labels"], theirs["labels"], strict=True):
        assert torch.equal(mine["class_labels"], ref["class_labels"])
        torch.testing.assert_close(mine["boxes"], ref["boxes"], rtol=0, atol=1e-5)
        assert mine["orig_size"].tolist() == list(ref["orig_size"])


def test_dataloader_recipe_trains_detr(chess_train):
    torch.manual_seed(0)
    names = detfmt.open(chess_train).class_names
    ns = run_recipe("transformers-dataloader", train_path=chess_train, STEPS=3,
                    config=_small_detr_config(len(names)))
    losses = ns["losses"]
    assert len(losses) == 6 and all(torch.isfinite(torch.tensor(losses)))
    assert falling(losses, window=2), losses


def test_trainer_recipe_trains_detr(chess_train, tmp_path, monkeypatch):
    pytest.importorskip("accelerate")
    # this repository's tests/datasets.py is importable as `datasets` under pytest, which
    # transformers takes for Hugging Face's datasets package (not installed here)
    monkeypatch.setattr("transformers.trainer.is_datasets_available", lambda: False)
    torch.manual_seed(0)
    names = detfmt.open(chess_train).class_names
    ns = run_recipe("transformers-trainer", train_path=chess_train, STEPS=6,
                    output_dir=str(tmp_path), config=_small_detr_config(len(names)))
    losses = ns["losses"]
    assert len(losses) == 6 and all(torch.isfinite(torch.tensor(losses)))
    assert ns["trainer"].state.global_step == 6
