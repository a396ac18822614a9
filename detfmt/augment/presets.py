"""Ready-made pipelines that reproduce a trainer's default augmentation.

`yolo_train` is Ultralytics' detection training pipeline (``v8_transforms`` with the defaults
of ``cfg/default.yaml``): 2x2 `Mosaic` of images resized so their long side is ``imgsz``
(``load_image``; Mosaic's ``resize``) with partners from recent images, `RandomAffine` back
to ``imgsz`` (border ``-imgsz / 2``), optional `MixUp`, vertical and horizontal flips of the
whole canvas, and `RandomHSV`. With ``mosaic=0`` (Ultralytics' ``close_mosaic`` epochs) the
image is letterboxed to ``imgsz`` and then goes through the same affine, as Ultralytics'
``RandomPerspective`` pre-transform does. `yolo_val` is its validation letterbox, on the
``imgsz`` square or on rect batches (`yolo_rect_batches`). Every resize rounds the content size
up, as Ultralytics' ``load_image`` does (`Letterbox`'s ``rounding="ceil"``).
"""

from __future__ import annotations

import inspect
from typing import NamedTuple

import numpy as np
import torch

from detfmt.augment import _matrix as mx
from detfmt.augment._base import Augmentation, Params, image_hw
from detfmt.augment.color import RandomHSV
from detfmt.augment.compose import Compose
from detfmt.augment.geometric import Letterbox, RandomAffine, RandomFlip, Warp
from detfmt.augment.mosaic import MixUp, Mosaic
from detfmt.errors import UsageError
from detfmt.torch.batch import Batch

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
        steps.append(Mosaic(p=mosaic, buffer_size=buffer, resize=imgsz, resize_rounding="ceil"))
    else:
        steps.append(Letterbox(imgsz, rounding="ceil"))
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


def yolo_val(imgsz: int = 640, *, canvases: np.ndarray | None = None) -> YoloValLetterbox:
    """Ultralytics' validation geometry: long side to ``imgsz`` (rounded up, as its
    ``load_image``), centred on an ``imgsz`` square, or with ``canvases`` (`yolo_rect_batches`)
    on the canvas of the sample's rect batch (Ultralytics' default validation)."""
    return YoloValLetterbox(imgsz, canvases=canvases)


def yolo_rect_batches(
    sizes: np.ndarray, batch_size: int, imgsz: int, *, stride: int = 32, pad: float = 0.5
) -> tuple[np.ndarray, np.ndarray]:
    """Ultralytics' rect batches (``BaseDataset.set_rectangle``; its trainer's and ``model.val``'s
    validation): samples sorted by aspect ratio h / w, batch k being ``order[k*B:(k+1)*B]``, each
    batch on a canvas of the long side ``imgsz`` at the batch's most extreme aspect, rounded up to
    a multiple of ``stride`` with ``pad`` strides to spare (0.5 for validation).

    Args:
        sizes: (N, 2) stored (height, width) of every sample.

    Returns:
        ``order`` (N,) dataset indices in batch order, and ``canvases`` (N, 2) int64: the (height,
        width) canvas of each sample's batch, indexed by dataset index.
    """
    if batch_size < 1 or imgsz < 1 or stride < 1:
        raise UsageError(f"batch_size, imgsz and stride must be >= 1, got "
                         f"{(batch_size, imgsz, stride)}")
    s = np.asarray(sizes, dtype=np.int64).reshape(-1, 2)
    n = len(s)
    if n == 0:
        return np.zeros(0, np.int64), np.zeros((0, 2), np.int64)
    # The same numpy operations as Ultralytics', so the same ties and float roundings.
    bi = np.floor(np.arange(n) / batch_size).astype(int)
    ar = s[:, 0] / s[:, 1]
    order = ar.argsort()
    ar = ar[order]
    shapes = [[1, 1]] * (int(bi[-1]) + 1)
    for i in range(len(shapes)):
        ari = ar[bi == i]
        mini, maxi = ari.min(), ari.max()
        if maxi < 1:
            shapes[i] = [maxi, 1]
        elif mini > 1:
            shapes[i] = [1, 1 / mini]
    batch_shapes = np.ceil(np.array(shapes) * imgsz / stride + pad).astype(int) * stride
    canvases = np.empty((n, 2), np.int64)
    canvases[order] = batch_shapes[bi]
    return order.astype(np.int64), canvases


class YoloPlacement(NamedTuple):
    """Where `YoloValLetterbox` puts each image: float64 (B, 3, 3) matrices, content (B,)
    heights and widths, left and top padding (B,)."""

    matrix: torch.Tensor
    height: torch.Tensor
    width: torch.Tensor
    left: torch.Tensor
    top: torch.Tensor


class YoloValLetterbox(Augmentation):
    """Ultralytics' validation geometry in one resample: the long side to ``imgsz`` with its
    ``load_image`` rounding (``min(ceil(w0 r), imgsz)``), then centred (``floor(pad / 2)``, its
    ``LetterBox(scaleup=False)``) on the batch's canvas: the ``imgsz`` square, or with
    ``canvases`` ((N, 2), by dataset index, from `yolo_rect_batches`) the canvas of the rect
    batch, which the batch's samples must share (read them in `yolo_rect_batches`' order)."""

    def __init__(self, imgsz: int, *, canvases: np.ndarray | None = None,
                 fill: float = 114.0) -> None:
        super().__init__()
        if imgsz < 1:
            raise UsageError(f"imgsz must be >= 1, got {imgsz!r}")
        self.imgsz = int(imgsz)
        self.fit = Letterbox(self.imgsz, center=False, rounding="ceil")
        self.canvases = None if canvases is None else np.asarray(canvases, np.int64)
        self.fill = float(fill)

    def canvas(self, batch: Batch) -> tuple[int, int]:
        """The (height, width) this batch is placed on."""
        if self.canvases is None:
            return self.imgsz, self.imgsz
        if batch.indices is None:
            raise UsageError("rect validation needs batch.indices (the Loader sets them)")
        shapes = np.unique(self.canvases[batch.indices.cpu().numpy()], axis=0)
        if len(shapes) != 1:
            raise UsageError(f"the batch's samples belong to rect batches of different canvases "
                             f"{shapes.tolist()}: read them in yolo_rect_batches' order")
        return int(shapes[0, 0]), int(shapes[0, 1])

    def place(self, sizes: torch.Tensor, canvas: tuple[int, int]) -> YoloPlacement:
        """Where images of stored (B, 2) ``sizes`` go on ``canvas``."""
        h, w = sizes.to(torch.float64).unbind(-1)
        fit = self.fit.fit(h, w)
        left = torch.floor((canvas[1] - fit.width) / 2)
        top = torch.floor((canvas[0] - fit.height) / 2)
        matrix = mx.translation(left, top) @ fit.matrix
        return YoloPlacement(matrix, fit.height, fit.width, left, top)

    def sample(self, batch: Batch) -> Params:
        return {}

    def apply(self, batch: Batch, params: Params) -> Batch:
        canvas = self.canvas(batch)
        sizes = batch.sizes
        if sizes is None:
            sizes = torch.tensor(image_hw(batch.images)).expand(len(batch), 2)
        matrix = self.place(sizes.cpu(), canvas).matrix.to(torch.float32)
        return Warp(matrix.to(batch.images.device), size=canvas, fill=self.fill)(batch)


def yolo_hyp_defaults() -> dict[str, float]:
    """Ultralytics' default augmentation hyperparameters (mosaic, translate, hsv_h, ...) as
    `yolo_train` takes them: its keyword defaults, so the two never disagree."""
    return {name: param.default for name, param in inspect.signature(yolo_train).parameters.items()
            if param.kind is inspect.Parameter.KEYWORD_ONLY
            and name not in ("buffer_size", "generator", "memory_format")}
