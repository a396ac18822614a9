"""Ultralytics validation through detfmt equals Ultralytics' own default validation.

Ultralytics' ``model.val()`` and its trainer validate on rect batches (images sorted by aspect
ratio, each batch letterboxed to its own stride-aligned canvas) of images resized with
``ceil`` (``BaseDataset.load_image``). The same weights validated by `DetfmtValidator` on the
detfmt copy of a dataset and by Ultralytics' own validator on the image files give the same
batches, the same predictions per image and the same mAP. The validation set mixes landscape,
portrait and square crops of the bundled chess sample, so the rect batches differ in shape and
the ceil rounding matters (428 x 640 at 192 is 129 rows, not 128).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("ultralytics")

import cv2  # an Ultralytics dependency
from ultralytics import YOLO
from ultralytics.cfg import get_cfg
from ultralytics.data import build_yolo_dataset
from ultralytics.models.yolo.detect import DetectionValidator
from ultralytics.utils.metrics import box_iou

import detfmt
from detfmt.convert import from_coco
from detfmt.integrations import ultralytics as du

from .conftest import CHESS

IMGSZ = 192  # 428 x 640 images: 129 rows (ceil), not 128 (round)
BATCH = 4
# Crops (x0, y0, x1, y1) of each 640 x 428 chess image: landscape (whole), portrait, square,
# and a slightly portrait one, so that the rect batches get different canvases.
CROPS = ((0, 0, 640, 428), (170, 0, 470, 428), (100, 0, 528, 428), (200, 14, 500, 428))


def _mixed_aspect_sample(root: Path) -> tuple[Path, Path]:
    """The chess images cut into ``CROPS``, as PNG files with a COCO JSON (for detfmt) and
    YOLO labels (for Ultralytics); boxes kept where they lie inside the crop."""
    coco = json.loads((CHESS / "annotations.coco.json").read_text())
    images_dir = root / "images" / "val"
    labels_dir = root / "labels" / "val"
    images_dir.mkdir(parents=True)
    labels_dir.mkdir(parents=True)
    by_image: dict[int, list[dict]] = {}
    for ann in coco["annotations"]:
        by_image.setdefault(ann["image_id"], []).append(ann)
    cat_ids = sorted(c["id"] for c in coco["categories"])
    images, annotations = [], []
    for image in coco["images"]:
        pixels = cv2.imread(str(CHESS / image["file_name"]))
        for k, (x0, y0, x1, y1) in enumerate(CROPS[: 1 + image["id"] % len(CROPS)]):
            name = f"{Path(image['file_name']).stem}_{k}.png"
            cv2.imwrite(str(images_dir / name), pixels[y0:y1, x0:x1])
            w, h = x1 - x0, y1 - y0
            image_id = len(images)
            images.append({"id": image_id, "file_name": name, "width": w, "height": h})
            lines = []
            for ann in by_image.get(image["id"], []):
                bx, by, bw, bh = ann["bbox"]
                if bx < x0 or by < y0 or bx + bw > x1 or by + bh > y1:
                    continue
                box = [bx - x0, by - y0, bw, bh]
                annotations.append({**ann, "id": len(annotations), "image_id": image_id,
                                    "bbox": box})
                cls = cat_ids.index(ann["category_id"])
                cx, cy = (box[0] + bw / 2) / w, (box[1] + bh / 2) / h
                lines.append(f"{cls} {cx:.10f} {cy:.10f} {bw / w:.10f} {bh / h:.10f}")
            (labels_dir / f"{Path(name).stem}.txt").write_text("\n".join(lines))
    json_path = root / "val.json"
    json_path.write_text(json.dumps({**coco, "images": images, "annotations": annotations}))
    return json_path, images_dir


@pytest.fixture(scope="session")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The mixed-aspect validation set as a detfmt dataset and as an Ultralytics data YAML."""
    root = tmp_path_factory.mktemp("mixed")
    json_path, images_dir = _mixed_aspect_sample(root / "yolo")
    dataset = root / "detfmt" / "val"
    from_coco(json_path, images_dir, dataset, codec="raw")  # lossless: the pixels of the PNGs
    (dataset.parent / "train").symlink_to(dataset.name)  # a split root: train/ and val/
    names = detfmt.open(dataset).class_names
    yaml = root / "data.yaml"
    yaml.write_text(json.dumps({"path": str(root / "yolo"), "train": "images/val",
                                "val": "images/val", "names": dict(enumerate(names))}))
    return {"detfmt": dataset, "yaml": yaml}


@pytest.fixture(scope="session")
def weights(chess_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """yolov8n trained a few epochs on the chess sample (once per session, CPU)."""
    project = tmp_path_factory.mktemp("train")
    torch.manual_seed(0)
    YOLO("yolov8n.yaml").train(
        data=str(chess_root), trainer=du.DetfmtTrainer, epochs=20, imgsz=IMGSZ, batch=4,
        device="cpu", workers=1, warmup_epochs=0, optimizer="AdamW", lr0=0.005, nbs=4,
        amp=False, mosaic=0.0, seed=0, verbose=False, plots=False, val=False,
        project=str(project), name="run", exist_ok=True,
    )
    return project / "run" / "weights" / "last.pt"


class _Recording:
    """Keeps each image's predictions in original-image pixels, by file name."""

    def update_metrics(self, preds, batch):
        self.recorded = getattr(self, "recorded", {})
        for si, pred in enumerate(preds):
            pbatch = self._prepare_batch(si, batch)
            scaled = self.scale_preds(pred, pbatch)
            self.recorded[Path(pbatch["im_file"]).name] = (
                scaled["bboxes"].detach().cpu().clone(), scaled["cls"].detach().cpu().clone())
        return super().update_metrics(preds, batch)


class RecordingValidator(_Recording, DetectionValidator):
    pass


class RecordingDetfmtValidator(_Recording, du.DetfmtValidator):
    pass


def _val(weights: Path, data: Path, validator: type, project: Path, **options):
    model = YOLO(weights)
    captured = {}

    def keep(v):
        captured["validator"] = v

    model.add_callback("on_val_end", keep)
    # conf below the default 0.001: 20 epochs on 8 images leave most scores under it (the same
    # for both validators)
    metrics = model.val(data=str(data), validator=validator, imgsz=IMGSZ, batch=BATCH,
                        conf=1e-4, device="cpu", workers=0, plots=False, verbose=False,
                        project=str(project), name="val", exist_ok=True, **options)
    return metrics, captured["validator"].recorded


def test_loader_batches_are_ultralytics_val_batches(mixed):
    """Our validation batches, image by image, are the ones Ultralytics' own val dataset makes
    (rect canvases, ceil-rounded content, ratio_pad, targets); pixels within one grey level
    (an affine warp against cv2.resize)."""
    cfg = get_cfg(overrides={"imgsz": IMGSZ, "rect": True})
    data = {"names": dict(enumerate(detfmt.open(mixed["detfmt"]).class_names)), "channels": 3}
    images = Path(json.loads(mixed["yaml"].read_text())["path"]) / "images" / "val"
    theirs = build_yolo_dataset(cfg, str(images), BATCH, data, mode="val", stride=32)
    ours = du.DetfmtYoloLoader(du.DetfmtYoloDataset(mixed["detfmt"], augment=False, hyp=cfg),
                               BATCH, imgsz=IMGSZ, augment=False, rect=True, stride=32)
    reference = {Path(theirs.im_files[i]).name: theirs[i] for i in range(len(theirs))}
    canvases, seen = set(), 0
    for out in ours:
        for i, im_file in enumerate(out["im_file"]):
            ref = reference[Path(im_file).name]
            assert tuple(out["img"].shape[-2:]) == tuple(ref["img"].shape[-2:]), im_file
            assert out["ori_shape"][i] == tuple(ref["ori_shape"])
            assert out["ratio_pad"][i] == ref["ratio_pad"], im_file
            diff = (out["img"][i].int() - ref["img"].int()).abs()
            assert int(diff.max()) <= 1 and float(diff.float().mean()) < 0.25, im_file
            rows = out["batch_idx"] == i
            assert torch.equal(out["cls"][rows].flatten(), ref["cls"].flatten())
            torch.testing.assert_close(out["bboxes"][rows], ref["bboxes"], rtol=0, atol=1e-5)
            canvases.add(tuple(out["img"].shape[-2:]))
            seen += 1
    assert seen == len(theirs)
    assert len(canvases) >= 3  # landscape, portrait and square batches


def test_validation_equals_ultralytics_default_val(weights, mixed, tmp_path):
    """The acceptance of issue 29 (16, 17): same weights, DetfmtValidator on the detfmt copy
    and Ultralytics' own validator on the files, both with Ultralytics' defaults (rect):
    mAP50-95 within 1e-3 and the predictions of every image matched (median IoU > 0.999)."""
    theirs, their_preds = _val(weights, mixed["yaml"], RecordingValidator, tmp_path / "u")
    ours, our_preds = _val(weights, mixed["detfmt"].parent, RecordingDetfmtValidator,
                           tmp_path / "d")
    assert set(our_preds) == set(their_preds)
    ious, counts = [], []
    for name, (their_boxes, their_cls) in their_preds.items():
        our_boxes, our_cls = our_preds[name]
        counts.append((len(our_boxes), len(their_boxes)))
        if len(our_boxes) == 0 or len(their_boxes) == 0:
            continue
        iou = box_iou(our_boxes, their_boxes) * (our_cls[:, None] == their_cls[None, :])
        ious.extend(iou.max(dim=1).values.tolist())
    assert sum(n for n, _ in counts) > 0, "the trained weights predict nothing"
    print(f"median IoU {np.median(ious):.6f} over {len(ious)} predictions; mAP50-95 "
          f"{ours.box.map:.6f} (detfmt) {theirs.box.map:.6f} (Ultralytics)")
    assert float(np.median(ious)) > 0.999, (np.median(ious), counts)
    assert math.isclose(ours.box.map, theirs.box.map, abs_tol=1e-3), (ours.box.map,
                                                                      theirs.box.map)
    assert math.isclose(ours.box.map50, theirs.box.map50, abs_tol=1e-3)


@pytest.mark.parametrize(("batch", "imgsz"), [(7, 640), (16, 192), (1, 96), (300, 320)])
def test_rect_batches_are_ultralytics_set_rectangle(batch, imgsz):
    """yolo_rect_batches gives each sample the canvas Ultralytics' ``set_rectangle`` gives
    it (random sizes, ties included), and the same batch order by aspect."""
    from types import SimpleNamespace

    from ultralytics.data.base import BaseDataset

    from detfmt.augment.presets import yolo_rect_batches

    rng = np.random.default_rng(batch)
    sizes = rng.integers(20, 900, size=(203, 2))
    sizes[::9] = sizes[0]  # equal aspect ratios: ties in the sort
    fake = SimpleNamespace(ni=len(sizes), batch_size=batch, imgsz=imgsz, stride=32, pad=0.5,
                           labels=[{"shape": tuple(s), "i": i} for i, s in enumerate(sizes)],
                           im_files=[str(i) for i in range(len(sizes))])
    BaseDataset.set_rectangle(fake)
    order, canvases = yolo_rect_batches(sizes, batch, imgsz, stride=32)
    assert [label["i"] for label in fake.labels] == order.tolist()
    theirs = fake.batch_shapes[fake.batch]  # in their sorted order
    assert canvases[order].tolist() == theirs.tolist()


@pytest.mark.parametrize(("n", "batch", "world"), [(20, 4, 3), (8, 16, 3), (101, 8, 4), (5, 2, 8)])
def test_validation_shares_are_ultralytics_contiguous_sampler(n, batch, world, monkeypatch):
    """Each rank's validation share is Ultralytics' ContiguousDistributedSampler's: whole
    batches (a rect batch never spans two ranks), all samples once."""
    from ultralytics.data.build import ContiguousDistributedSampler

    order = np.arange(n)[::-1].copy()
    got = []
    for rank in range(world):
        monkeypatch.setattr(du, "_rank_and_world", lambda rank=rank: (rank, world))
        share = du._validation_order(order, batch).indices.tolist()
        sampler = ContiguousDistributedSampler(list(range(n)), num_replicas=world,
                                               batch_size=batch, rank=rank)
        assert share == [int(order[i]) for i in sampler], rank
        got.extend(share)
    assert sorted(got) == list(range(n))
