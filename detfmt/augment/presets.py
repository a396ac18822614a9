"""Ready-made pipelines that reproduce a trainer's default augmentation.

`yolo_train` is Ultralytics' detection training pipeline (``v8_transforms`` with the defaults
of ``cfg/default.yaml``): 2x2 `Mosaic` of images resized so their long side is ``imgsz``
(``load_image``; Mosaic's ``resize``) with partners from recent images, `RandomAffine` back
to ``imgsz`` (border ``-imgsz / 2``), optional `MixUp`, vertical and horizontal flips of the
whole canvas, and `RandomHSV`. With ``mosaic=0`` (Ultralytics' ``close_mosaic`` epochs) the
image is letterboxed to ``imgsz`` and then goes through the same affine, as Ultralytics'
``RandomPerspective`` pre-transform does. `yolo_val` is its validation letterbox.
"""

from __future__ import annotations

import inspect

import torch

from detfmt.augment.color import RandomHSV
from detfmt.augment.compose import Compose
from detfmt.augment.geometric import Letterbox, RandomAffine, RandomFlip
from detfmt.augment.mosaic import MixUp, Mosaic
from detfmt.errors import UsageError

# Ultralytics' dataset buffer holds min(n, 8 * batch, 1000) recent images.
YOLO_BUFFER_LIMIT = 1000


def yolo_train(
    imgsz: int = 640,
    *,
    mosaic: float = 1.0,
    mixup: float = 0.0,
    degrees: float = 0.0,
    translate: float = 0.1,
    scale: float = 0.5,
    shear: float = 0.0,
    perspective: float = 0.0,
    flipud: float = 0.0,
    fliplr: float = 0.5,
    hsv_h: float = 0.015,
    hsv_s: float = 0.7,
    hsv_v: float = 0.4,
    buffer_size: int = 256,
    generator: torch.Generator | None = None,
    memory_format: torch.memory_format | None = None,
) -> Compose:
    """Ultralytics' default detection training augmentation (hyperparameter names as theirs).

    Args:
        imgsz: output size (square), Ultralytics' ``imgsz``.
        mosaic: probability of a 2x2 mosaic per sample; 0 turns Mosaic off (``close_mosaic``).
        buffer_size: recent samples the mosaic partners come from, besides the batch
            (Ultralytics: ``min(n, 8 * batch, 1000)``).
        generator: one seed for the whole pipeline.
        memory_format: layout of the output images (`Compose`); None keeps the backend's.
    """
    if imgsz < 1:
        raise UsageError(f"imgsz must be >= 1, got {imgsz!r}")
    steps: list[torch.nn.Module] = []
    if mosaic > 0:
        # load_image (long side to imgsz) is Mosaic's resize: on the OpenCV backend it folds
        # into the affine's warp, one resample per output pixel.
        buffer = min(int(buffer_size), YOLO_BUFFER_LIMIT)
        steps.append(Mosaic(p=mosaic, buffer_size=buffer, resize=imgsz))
    else:
        steps.append(Letterbox(imgsz))
    steps.append(
        RandomAffine(
            degrees=degrees,
            translate=translate,
            scale=scale,
            shear=shear,
            perspective=perspective,
            size=imgsz,
        )
    )
    if mixup > 0:
        steps.append(MixUp(p=mixup))
    if flipud > 0:
        steps.append(RandomFlip(p=flipud, vertical=True, about="canvas"))
    if fliplr > 0:
        steps.append(RandomFlip(p=fliplr, about="canvas"))
    if hsv_h or hsv_s or hsv_v:
        steps.append(RandomHSV(h=hsv_h, s=hsv_s, v=hsv_v))
    return Compose(steps, generator=generator, memory_format=memory_format)


def yolo_val(imgsz: int = 640) -> Letterbox:
    """Ultralytics' validation resize: long side to ``imgsz``, centred on an ``imgsz`` square."""
    return Letterbox(imgsz)


def yolo_hyp_defaults() -> dict[str, float]:
    """Ultralytics' default augmentation hyperparameters (mosaic, translate, hsv_h, ...) as
    `yolo_train` takes them: its keyword defaults, so the two never disagree."""
    return {name: param.default for name, param in inspect.signature(yolo_train).parameters.items()
            if param.kind is inspect.Parameter.KEYWORD_ONLY
            and name not in ("buffer_size", "generator", "memory_format")}
