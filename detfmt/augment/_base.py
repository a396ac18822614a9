"""The module protocol: draw parameters, then apply them; parameters can be replayed; and the
capabilities a module may declare so `Compose` and the `Loader` fuse it with its neighbours."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from detfmt.augment._random import new_generator
from detfmt.errors import UsageError
from detfmt.torch.batch import Batch

if TYPE_CHECKING:
    from detfmt.augment.tiles import TiledSource

Params = dict[str, Any]


class Augmentation(nn.Module):
    """Base of every detfmt.augment module: ``module(batch) -> batch``.

    ``forward(batch, params=None)`` draws parameters with ``sample`` (from the module's own
    generator) unless ``params`` is given, applies them with ``apply`` and keeps them in
    ``last_params``, so passing ``last_params`` back replays the batch exactly.

    Fusion capabilities (all off by default; a module declares one by overriding it, and must
    then give the same outputs on the fused path as through ``apply``, see docs/augment.md):

    - ``accepts_stored_samples``: a `Loader` may hand the module the stored samples instead of
      a gathered batch (`Batch.samples`; a `Compose` takes them when its first step does).
    - ``can_defer`` / ``apply_deferred``: the module (a mix such as `Mosaic`) describes its
      output canvas as tiles (`detfmt.augment.tiles.TiledSource`) instead of building it, and
      the geometric warp that follows in a `Compose` reads the tiles directly.
    - ``recolours_in_warp`` / ``hsv_gains``: the module (a colour step such as `RandomHSV`) is a
      per-sample HSV gain, which the geometric warp before it in a `Compose` applies to each
      sample as it writes it (OpenCV backend).
    """

    def __init__(self, generator: torch.Generator | None = None) -> None:
        super().__init__()
        if generator is not None and not isinstance(generator, torch.Generator):
            raise UsageError(f"generator must be a torch.Generator, got {type(generator)!r}")
        self.generator = generator if generator is not None else new_generator()
        self.has_own_generator = generator is not None
        self.last_params: Params | None = None

    @property
    def history(self) -> int:
        """How many of the most recent samples this module was given, besides the batch, its
        output depends on (0: each batch on its own). A loader that resumes mid-stream feeds the
        module that many preceding samples again (`reset_history`, then the same batches) so the
        resumed batches equal the uninterrupted run's."""
        return 0

    def reset_history(self) -> None:
        """Forget what earlier batches left behind (nothing, unless ``history`` > 0)."""

    # -- fusion capabilities -------------------------------------------------------------------

    @property
    def accepts_stored_samples(self) -> bool:
        """Whether a `Loader` may hand this module the stored samples instead of a gathered
        batch: ``batch.samples`` (read-only HWC arrays of the valid regions, as stored) with
        ``images`` a placeholder of the batch's shape that holds only the pad value. Declare it
        only if every path of the module reads pixels through ``batch.samples`` when set, or
        calls ``batch.materialized()`` first. The loader hands samples only to a CPU transform
        of memory-mapped CHW batches without a canvas; otherwise the batch is gathered."""
        return False

    def can_defer(self, batch: Batch) -> bool:
        """Whether `apply_deferred` can describe this batch's output canvas instead of building
        it (asked by `Compose` when a geometric warp follows on the OpenCV backend)."""
        return False

    def apply_deferred(
        self, batch: Batch, params: Params
    ) -> tuple[Batch, TiledSource, Callable[[], None]]:
        """`apply` without the canvas, for the warp that follows (where ``can_defer``).

        Returns the batch (labels and sizes as `apply` gives them; ``images`` a placeholder of
        the canvas shape that is never read), the canvas as a `TiledSource` (HWC uint8 tiles),
        and ``finish``, which `Compose` calls once the warp has read the tiles.
        """
        raise NotImplementedError(f"{type(self).__name__} does not defer its canvas")

    @property
    def recolours_in_warp(self) -> bool:
        """Whether this module is a per-sample HSV gain (`hsv_gains`), which the geometric warp
        before it in a `Compose` may apply to each sample as it writes it, instead of a pass
        of its own over the warped batch."""
        return False

    def hsv_gains(self, params: Params) -> torch.Tensor:
        """(B, 3) float64 gains r_h, r_s, r_v this module applies with ``params``, as Ultralytics'
        HSV LUTs (`detfmt.augment.color.apply_hsv_gains`: hue shifted by r_h * 180 modulo 180,
        saturation and value scaled by 1 + r); asked where ``recolours_in_warp``."""
        raise NotImplementedError(f"{type(self).__name__} is not an HSV gain")

    # -- the protocol ----------------------------------------------------------------------------

    def sample(self, batch: Batch) -> Params:
        """Draw this call's parameters (tensors with a leading batch dimension where per-sample)."""
        return {}

    def apply(self, batch: Batch, params: Params) -> Batch:
        """Apply the given parameters; deterministic."""
        raise NotImplementedError

    def forward(self, batch: Batch, params: Params | None = None) -> Batch:
        if not isinstance(batch, Batch):
            raise UsageError(f"expected a detfmt.torch.Batch, got {type(batch)!r}")
        if params is None:
            params = self.sample(batch)
        self.last_params = params
        return self.apply(batch, params)


def check_probability(name: str, p: float) -> float:
    """Return ``p`` as float after checking 0 <= p <= 1."""
    if not 0.0 <= float(p) <= 1.0:
        raise UsageError(f"{name} must be in [0, 1], got {p!r}")
    return float(p)


def check_non_negative(name: str, value: float) -> float:
    """Return ``value`` as float after checking it is >= 0."""
    if float(value) < 0.0:
        raise UsageError(f"{name} must be >= 0, got {value!r}")
    return float(value)


def as_size(name: str, size: int | tuple[int, int]) -> tuple[int, int]:
    """(height, width) from an int or a pair; both >= 1."""
    if isinstance(size, int):
        size = (size, size)
    if len(size) != 2 or any(int(s) < 1 for s in size):
        raise UsageError(f"{name} must be an int or (height, width) >= 1, got {size!r}")
    return int(size[0]), int(size[1])


def fill_for(images: torch.Tensor, fill: float) -> float:
    """``fill`` is given on the uint8 scale; float images are on [0, 1]."""
    return float(fill) if images.dtype == torch.uint8 else float(fill) / 255.0


def image_hw(images: torch.Tensor) -> tuple[int, int]:
    """(height, width) of a (B, C, H, W) batch."""
    if images.ndim != 4 or images.shape[1] not in (1, 3):
        raise UsageError(
            f"detfmt.augment needs (B, 3, H, W) images, got shape {tuple(images.shape)}; "
            "permute HWC batches with images.permute(0, 3, 1, 2)"
        )
    return int(images.shape[-2]), int(images.shape[-1])
