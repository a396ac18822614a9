"""Render one training batch per integration from that integration's own targets.

Each picture is drawn from what the framework receives (YOLO's normalised xywh + batch_idx,
torchvision's cropped images + xyxy targets, transformers' pixel_values + normalised cxcywh
labels), not from the detfmt batch, so a wrong conversion shows. Run in the integrations
environment:

    python tools/render_integrations.py --data DATASET --out docs/integrations
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np
import torch
from PIL import Image, ImageDraw

import detfmt
import detfmt.augment as A
from detfmt.integrations.pipeline import AugmentedBatches
from detfmt.torch import Loader

PALETTE = [
    (255, 56, 56),
    (72, 249, 10),
    (0, 194, 255),
    (255, 178, 29),
    (132, 56, 255),
    (255, 55, 199),
    (52, 69, 147),
    (146, 204, 23),
    (207, 210, 49),
    (255, 157, 151),
]


def sheet(
    tiles: list[tuple[np.ndarray, list[tuple[float, float, float, float, int]]]],
    names: list[str],
    path: Path,
    scale: float = 1.0,
) -> None:
    """Tiles of (HWC uint8 image, [(x1, y1, x2, y2, class)]) into one PNG."""
    cols = math.ceil(math.sqrt(len(tiles)))
    rows = math.ceil(len(tiles) / cols)
    h = max(t[0].shape[0] for t in tiles)
    w = max(t[0].shape[1] for t in tiles)
    out = Image.new("RGB", (int(cols * w * scale), int(rows * h * scale)), (40, 40, 40))
    draw = ImageDraw.Draw(out)
    for k, (image, boxes) in enumerate(tiles):
        ox, oy = (k % cols) * w * scale, (k // cols) * h * scale
        tile = Image.fromarray(image)
        if scale != 1.0:
            tile = tile.resize((int(image.shape[1] * scale), int(image.shape[0] * scale)))
        out.paste(tile, (int(ox), int(oy)))
        for x1, y1, x2, y2, c in boxes:
            color = PALETTE[c % len(PALETTE)]
            draw.rectangle(
                [ox + x1 * scale, oy + y1 * scale, ox + x2 * scale - 1, oy + y2 * scale - 1],
                outline=color,
                width=2,
            )
            draw.text((ox + x1 * scale + 2, oy + y1 * scale + 1), names[c], fill=color)
    out.convert("P", palette=Image.Palette.ADAPTIVE, colors=128).save(path, optimize=True)


def hwc(image: torch.Tensor) -> np.ndarray:
    x = image.detach()
    if x.dtype != torch.uint8:
        x = (x * 255).round().clamp(0, 255).to(torch.uint8)
    return x.permute(1, 2, 0).contiguous().numpy()


def yolo(data: Path, names: list[str], out: Path, imgsz: int) -> None:
    from types import SimpleNamespace

    from detfmt.augment.presets import yolo_hyp_defaults
    from detfmt.integrations.ultralytics import DetfmtYoloDataset, DetfmtYoloLoader

    hyp = SimpleNamespace(**yolo_hyp_defaults())
    dataset = DetfmtYoloDataset(data, augment=True, hyp=hyp)
    loader = DetfmtYoloLoader(dataset, 4, imgsz=imgsz, augment=True, seed=3)
    batches = iter(loader)
    next(batches)
    batch = next(batches)  # the second batch draws mosaic partners from the buffer too
    img = batch["img"]
    size = torch.tensor([img.shape[-1], img.shape[-2]] * 2)
    tiles = []
    for i in range(img.shape[0]):
        rows = batch["batch_idx"] == i
        cx, cy, w, h = (batch["bboxes"][rows] * size).unbind(-1)
        boxes = [
            (a, b, c, d, int(k))
            for a, b, c, d, k in zip(
                (cx - w / 2).tolist(),
                (cy - h / 2).tolist(),
                (cx + w / 2).tolist(),
                (cy + h / 2).tolist(),
                batch["cls"][rows, 0].tolist(),
                strict=True,
            )
        ]
        tiles.append((hwc(img[i]), boxes))
    sheet(tiles, names, out / "ultralytics.png")


def torchvision_batch(data: Path, names: list[str], out: Path) -> None:
    from detfmt.integrations.torchvision import to_torchvision

    augment = A.Compose(
        [A.Letterbox(320), A.RandomAffine(degrees=5), A.RandomFlip(), A.RandomHSV()],
        generator=torch.Generator().manual_seed(1),
    )
    images, targets = next(
        iter(AugmentedBatches(Loader(data, batch_size=4, seed=1), augment, to_torchvision))
    )
    tiles = [
        (
            hwc(im),
            [
                (*b, int(c) - 1)
                for b, c in zip(t["boxes"].tolist(), t["labels"].tolist(), strict=True)
            ],
        )
        for im, t in zip(images, targets, strict=True)
    ]
    sheet(tiles, names, out / "torchvision.png")


def transformers_batch(data: Path, names: list[str], out: Path) -> None:
    from detfmt.integrations.transformers import IMAGENET_MEAN, IMAGENET_STD, to_hf_detection

    augment = A.Compose(
        [A.Letterbox(320, center=False), A.RandomAffine(degrees=5), A.RandomFlip()],
        generator=torch.Generator().manual_seed(2),
    )
    inputs = next(
        iter(AugmentedBatches(Loader(data, batch_size=4, seed=2), augment, to_hf_detection))
    )
    pixels = (
        inputs["pixel_values"] * torch.tensor(IMAGENET_STD)[:, None, None]
        + torch.tensor(IMAGENET_MEAN)[:, None, None]
    )
    tiles = []
    for image, mask, target in zip(pixels, inputs["pixel_mask"], inputs["labels"], strict=True):
        h, w = target["size"].tolist()
        cx, cy, bw, bh = (target["boxes"] * torch.tensor([w, h, w, h])).unbind(-1)
        boxes = [
            (a, b, c, d, int(k))
            for a, b, c, d, k in zip(
                (cx - bw / 2).tolist(),
                (cy - bh / 2).tolist(),
                (cx + bw / 2).tolist(),
                (cy + bh / 2).tolist(),
                target["class_labels"].tolist(),
                strict=True,
            )
        ]
        shown = image.clamp(0, 1) * (0.4 + 0.6 * mask[None])  # padding (mask 0) shown darker
        tiles.append((hwc(shown), boxes))
    sheet(tiles, names, out / "transformers.png")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--out", type=Path, default=Path("docs/integrations"))
    parser.add_argument("--imgsz", type=int, default=320)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    names = list(detfmt.open(args.data).class_names)
    yolo(args.data, names, args.out, args.imgsz)
    torchvision_batch(args.data, names, args.out)
    transformers_batch(args.data, names, args.out)


if __name__ == "__main__":
    main()
