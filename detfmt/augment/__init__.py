"""Batched detection augmentation as ``torch.nn.Module``s on `detfmt.torch.Batch`.

Every module is called as ``module(batch) -> batch``, runs on any device, draws per-sample
parameters from its own ``torch.Generator`` (never the global RNG) and keeps them in
``last_params`` so ``module(batch, params=...)`` replays a batch exactly.

Coordinates: continuous pixel xyxy, pixel i spans [i, i + 1) (x2 exclusive); a matrix maps
source points to output points and the image warp samples output pixel centres (u + 0.5,
v + 0.5) through its inverse, so boxes and pixels move together. Padding slots hold boxes 0,
class -1, mask False, and no module turns a slot from False to True. See docs/augment.md.

A module of your own subclasses `Augmentation` (``sample`` then ``apply``) and may declare the
fusion capabilities on it (stored samples from the loader, a canvas deferred to the next warp,
a colour step applied inside the warp); `detfmt.augment.tiles` holds what a deferred canvas is.
"""

from detfmt.augment import presets
from detfmt.augment._backend import get_cpu_backend, set_cpu_backend
from detfmt.augment._base import Augmentation
from detfmt.augment._kernels import use_compiled_kernels
from detfmt.augment.color import ColorJitter, Normalize, RandomHSV, ToFloat
from detfmt.augment.compose import Compose, to_memory_format
from detfmt.augment.geometric import (
    Letterbox,
    MultiScaleResize,
    RandomAffine,
    RandomFlip,
    RandomIoUCrop,
    ResizePad,
    Warp,
)
from detfmt.augment.mosaic import MixUp, Mosaic
from detfmt.augment.render import render_batch
from detfmt.augment.resize import ShortestEdgeResize
from detfmt.augment.sanitize import (
    AlbumentationsFilter,
    AllOf,
    BoxChange,
    BoxRule,
    CenterInImage,
    SanitizeBoxes,
    TorchvisionSanitize,
    UltralyticsCandidates,
)
from detfmt.augment.targets import compact, normalized_cxcywh, to_detr, to_ultralytics

__all__ = [
    "AlbumentationsFilter",
    "AllOf",
    "Augmentation",
    "BoxChange",
    "BoxRule",
    "CenterInImage",
    "ColorJitter",
    "Compose",
    "Letterbox",
    "MixUp",
    "Mosaic",
    "MultiScaleResize",
    "Normalize",
    "RandomAffine",
    "RandomFlip",
    "RandomHSV",
    "RandomIoUCrop",
    "ResizePad",
    "SanitizeBoxes",
    "ShortestEdgeResize",
    "ToFloat",
    "TorchvisionSanitize",
    "UltralyticsCandidates",
    "Warp",
    "compact",
    "get_cpu_backend",
    "normalized_cxcywh",
    "presets",
    "render_batch",
    "set_cpu_backend",
    "to_detr",
    "to_memory_format",
    "to_ultralytics",
    "use_compiled_kernels",
]
