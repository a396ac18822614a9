"""The module protocol: draw parameters, then apply them; parameters can be replayed."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from detfmt.augment._random import new_generator
from detfmt.errors import UsageError
from detfmt.torch.batch import Batch

Params = dict[str, Any]


class Augmentation(nn.Module):
    """Base of every detfmt.augment module: ``module(batch) -> batch``.

    ``forward(batch, params=None)`` draws parameters with ``sample`` (from the module's own
    generator) unless ``params`` is given, applies them with ``apply`` and keeps them in
    ``last_params``, so passing ``last_params`` back replays the batch exactly.
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
