"""Ultralytics: YOLO trains and validates from detfmt split roots with Ultralytics' own trainer
and validator; batches are Ultralytics' format and equal the augmented batch's boxes; the
validation geometry maps back to the stored boxes."""

from __future__ import annotations

import csv
import re
import shutil
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

pytest.importorskip("ultralytics")

from ultralytics.utils import ops

import detfmt
from detfmt.augment.presets import yolo_hyp_defaults
from detfmt.errors import UsageError
from detfmt.integrations import ultralytics as du

from ._recipes import run_recipe

HYP = SimpleNamespace(**yolo_hyp_defaults())


def _train_loader(path, batch_size=4, hyp=HYP):
    dataset = du.DetfmtYoloDataset(path, augment=True, hyp=hyp)
    return du.DetfmtYoloLoader(dataset, batch_size, imgsz=96, augment=True, seed=1, threads=1)


def test_batches_are_ultralytics_format_and_the_augmented_boxes(chess_train):
    loader = _train_loader(chess_train)
    pairs = loader.batches
    pairs.convert = lambda b: (b, loader.to_batch_dict(b))  # keep the augmented Batch too
    count = 0
    for _ in range(2):  # the second pass draws mosaic partners from the buffer
        for batch, out in pairs:
            assert set(out) >= {
                "img",
                "cls",
                "bboxes",
                "batch_idx",
                "im_file",
                "ori_shape",
                "resized_shape",
                "ratio_pad",
            }
            assert out["img"].dtype == torch.uint8 and out["img"].shape[-2:] == (96, 96)
            assert out["img"].is_contiguous()  # Ultralytics' collate: contiguous NCHW
            assert torch.equal(out["img"], batch.images)
            size = torch.tensor([96.0, 96.0] * 2)
            cx, cy, w, h = (out["bboxes"] * size).unbind(-1)
            xyxy = torch.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], -1)
            rows = torch.nonzero(batch.mask)
            assert torch.equal(out["batch_idx"], rows[:, 0].float())
            assert torch.equal(out["cls"][:, 0], batch.classes[batch.mask].float())
            torch.testing.assert_close(xyxy, batch.boxes[batch.mask], rtol=0, atol=1e-4)
            count += len(rows)
    assert count > 0


def test_val_targets_map_back_to_the_stored_boxes(chess_train):
    ds = detfmt.open(chess_train)
    dataset = du.DetfmtYoloDataset(chess_train, augment=False, hyp=HYP)
    loader = du.DetfmtYoloLoader(dataset, 3, imgsz=160, augment=False)
    seen = []
    for out in loader:
        for i, index in enumerate(range(len(seen), len(seen) + len(out["im_file"]))):
            rows = out["batch_idx"] == i
            boxes = ops.xywh2xyxy(out["bboxes"][rows]) * 160
            back = ops.scale_boxes((160, 160), boxes, out["ori_shape"][i], out["ratio_pad"][i])
            stored = torch.tensor(np.asarray(ds[index].boxes, dtype=np.float32))
            torch.testing.assert_close(back, stored, rtol=0, atol=0.51)  # round() of the pad
            assert out["ori_shape"][i] == tuple(int(v) for v in ds.sizes[index])
            seen.append(index)
    assert seen == list(range(len(ds)))  # every sample once, in order


def test_validation_shares_of_ranks_cover_each_sample_once(chess_train, monkeypatch):
    ds = detfmt.open(chess_train)
    shares = []
    for rank in range(3):
        monkeypatch.setattr(du, "_rank_and_world", lambda rank=rank: (rank, 3))
        dataset = du.DetfmtYoloDataset(chess_train, augment=False, hyp=HYP)
        loader = du.DetfmtYoloLoader(dataset, 2, imgsz=64, augment=False, threads=2)
        files = [f for out in loader for f in out["im_file"]]
        assert len(files) == loader.samples_per_rank
        shares.extend(dataset.im_files.index(f) for f in files)
    assert shares == list(range(len(ds)))  # each sample once, the ranks' shares in order


@pytest.mark.parametrize("mosaic", [0.0, 1.0])
def test_training_batches_replay_after_a_resume(chess_train, mosaic):
    """Augmentation runs in the loader's threads, re-seeded per batch: a loader resumed from a
    state saved mid-epoch yields the batches the uninterrupted run yields, with Mosaic's
    buffer of earlier samples too (refilled from the batches before the resume point)."""
    hyp = SimpleNamespace(**{**vars(HYP), "mosaic": mosaic})
    full = _train_loader(chess_train, hyp=hyp)
    expected = [(out["img"].clone(), out["bboxes"].clone()) for out in full]
    first = _train_loader(chess_train, hyp=hyp)
    it = iter(first)
    out = next(it)
    head = [(out["img"].clone(), out["bboxes"].clone())]
    state = first.state_dict()
    it.close()
    second = _train_loader(chess_train, hyp=hyp)
    second.load_state_dict(state)
    got = head + [(out["img"], out["bboxes"]) for out in second]
    assert len(got) == len(expected) > 1
    for (img, boxes), (want_img, want_boxes) in zip(got, expected, strict=True):
        assert torch.equal(img, want_img) and torch.equal(boxes, want_boxes)


def test_close_mosaic_rebuilds_the_pipeline_without_mosaic(chess_train):
    loader = _train_loader(chess_train)
    kinds = [type(t).__name__ for t in loader.batches.transform.transforms]
    assert "Mosaic" in kinds
    loader.dataset.close_mosaic(HYP)
    loader.reset()
    kinds = [type(t).__name__ for t in loader.batches.transform.transforms]
    assert "Mosaic" not in kinds and kinds[0] == "Letterbox"


def test_data_resolution(chess_root, tmp_path):
    data = du.resolve_data(chess_root)
    assert data["train"].endswith("train") and data["val"].endswith("val")
    assert data["nc"] == len(detfmt.open(chess_root / "train").class_names)
    (tmp_path / "d.yaml").write_text(f"path: {chess_root}\ntrain: train\nval: val\n")
    assert du.resolve_data(tmp_path / "d.yaml")["names"] == data["names"]
    assert du.resolve_data(chess_root / "train")["val"] == data["train"]  # one dataset: both
    with pytest.raises(UsageError, match="train/ and val/"):
        du.resolve_data(tmp_path)


def _rows(path):
    with open(path, newline="") as f:
        return [{k.strip(): float(v) for k, v in row.items()} for row in csv.DictReader(f)]


def test_recipe_trains_and_validates_from_a_split_root(chess_root, tmp_path):
    torch.manual_seed(0)
    # nbs=4: an optimizer step per batch (the default nominal batch of 64 accumulates 16
    # batches, more than 5 epochs of the 8-image sample hold: the weights would never move)
    options = dict(
        device="cpu", workers=1, warmup_epochs=0, optimizer="SGD", lr0=0.02, nbs=4, amp=False,
        seed=0, verbose=False,
    )
    ns = run_recipe(
        "ultralytics",
        root=str(chess_root),
        project=str(tmp_path),
        EPOCHS=5,
        IMGSZ=96,
        OPTIONS=options,
    )
    run = tmp_path / "run"
    rows = _rows(run / "results.csv")
    assert len(rows) == 5
    assert rows[-1]["train/cls_loss"] < rows[0]["train/cls_loss"], rows
    assert {"metrics/mAP50(B)", "val/box_loss"} <= set(rows[0])
    for plot in ("labels.jpg", "train_batch0.jpg", "results.png", "val_batch0_labels.jpg"):
        assert (run / plot).is_file(), plot
    metrics = ns["metrics"]
    val = detfmt.open(chess_root / "val")
    assert int(metrics.nt_per_class.sum()) == int(np.sum(val.counts))  # every val box counted
    assert 0.0 <= metrics.box.map50 <= 1.0


def test_preset_defaults_are_ultralytics_defaults():
    """yolo_train's defaults (yolo_hyp_defaults) are the installed Ultralytics' own."""
    from ultralytics.cfg import get_cfg

    cfg = get_cfg()
    assert {name: getattr(cfg, name) for name in yolo_hyp_defaults()} == yolo_hyp_defaults()


def test_crowd_boxes_are_left_out_of_the_targets(chess_train):
    """A per-box ``iscrowd`` (COCO conversions carry one) keeps crowd boxes out of the loss's
    targets, as Ultralytics' own COCO conversion keeps them out of its label files."""
    loader = _train_loader(chess_train)
    pairs = loader.batches
    pairs.convert = lambda b: b
    batch = next(iter(pairs))
    assert int(batch.mask.sum()) >= 2
    crowd = torch.zeros(batch.mask.shape, dtype=torch.uint8)
    first = batch.mask.nonzero()[0]
    crowd[first[0], first[1]] = 1  # one valid box marked crowd
    extras = {k: v for k, v in batch.extras.items() if k not in batch.box_fields}
    fields = {k: batch.extras[k] for k in batch.box_fields}
    marked = batch.replace(extras={**extras, **fields, "iscrowd": crowd},
                           box_fields=tuple(dict.fromkeys((*batch.box_fields, "iscrowd"))))
    plain = loader.to_batch_dict(batch)
    out = loader.to_batch_dict(marked)
    assert len(out["cls"]) == len(plain["cls"]) - 1
    kept = torch.ones(len(plain["cls"]), dtype=torch.bool)
    kept[0] = False  # the first valid box, in slot order
    assert torch.equal(out["bboxes"], plain["bboxes"][kept])
    assert torch.equal(out["cls"], plain["cls"][kept])


README = Path(__file__).resolve().parents[2] / "README.md"


def _readme_ultralytics_snippet() -> str:
    """The README's Ultralytics one-liner as printed: a python block that names
    ``DetfmtTrainer``, else the inline code span that does."""
    text = README.read_text(encoding="utf-8")
    for block in re.findall(r"```python\n(.*?)```", text, re.S):
        if "trainer=DetfmtTrainer" in block:
            return block
    spans = [s for s in re.findall(r"`([^`\n]+)`", text) if "trainer=DetfmtTrainer" in s]
    assert spans, "the README shows no Ultralytics snippet (trainer=DetfmtTrainer)"
    return spans[0]


def test_readme_snippet_runs_as_printed_on_a_relative_path(chess_root, tmp_path, monkeypatch):
    """Issue 29 (11): the README's snippet, exactly its text, from the folder holding its
    relative ``data/split`` (a split root). Ultralytics' defaults (100 epochs at 640) are made
    small for the test through its default config, not by editing the snippet."""
    from ultralytics.utils import DEFAULT_CFG

    snippet = _readme_ultralytics_snippet()
    match = re.search(r"data=[\"']([^\"']+)[\"']", snippet)
    assert match and not Path(match.group(1)).is_absolute(), snippet
    shutil.copytree(chess_root, tmp_path / match.group(1))
    monkeypatch.chdir(tmp_path)
    small = dict(epochs=1, imgsz=64, batch=4, device="cpu", workers=1, amp=False, plots=False,
                 verbose=False, project=str(tmp_path / "runs"))  # Ultralytics' tests/tmp else
    for name, value in small.items():
        monkeypatch.setattr(DEFAULT_CFG, name, value)
    from ultralytics import YOLO

    # The names the README's import line brings (the snippet's own imports, if printed, rerun)
    namespace = {"YOLO": YOLO, "DetfmtTrainer": du.DetfmtTrainer}
    exec(compile(snippet, str(README), "exec"), namespace)
    runs = list(tmp_path.glob("runs/*/weights/last.pt"))
    assert len(runs) == 1, runs


@pytest.mark.parametrize("augment", [True, False])
def test_single_cls_makes_every_label_class_0(chess_train, augment):
    """Ultralytics' ``single_cls`` (a 1-class model): its datasets set every label's class to 0,
    for the loss and for validation; so do ours (labels and batches)."""
    hyp = SimpleNamespace(**{**vars(HYP), "single_cls": True})
    dataset = du.DetfmtYoloDataset(chess_train, augment=augment, hyp=hyp)
    assert all(not label["cls"].any() for label in dataset.labels)
    assert sum(len(label["cls"]) for label in dataset.labels) == int(np.sum(dataset.ds.counts))
    loader = du.DetfmtYoloLoader(dataset, 4, imgsz=96, augment=augment, threads=1)
    counts = [len(out["cls"]) for out in loader]
    assert sum(counts) > 0
    assert all(not out["cls"].any() for out in loader)
