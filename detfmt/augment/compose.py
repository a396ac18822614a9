"""`Compose`: run modules in order, fusing consecutive geometric ones into one warp."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from detfmt.augment._base import Augmentation, Params
from detfmt.augment._geometry import GeometricTransform, apply_geometric
from detfmt.errors import UsageError
from detfmt.torch.batch import Batch


class Compose(Augmentation):
    """Apply ``transforms`` in order; consecutive geometric modules share one resample.

    ``last_params`` is the list of each module's parameters; ``compose(batch, params=that)``
    replays the batch. With ``generator``, every child that was built without its own
    generator draws from this one (one seed for the whole pipeline).
    """

    def __init__(
        self,
        transforms: Sequence[nn.Module],
        *,
        generator: torch.Generator | None = None,
        fuse: bool = True,
    ) -> None:
        super().__init__(generator)
        for t in transforms:
            if not isinstance(t, nn.Module):
                raise UsageError(f"Compose takes nn.Modules, got {type(t)!r}")
        self.transforms = nn.ModuleList(transforms)
        self.fuse = bool(fuse)
        if generator is not None:
            for t in self.transforms:
                if isinstance(t, Augmentation) and not t.has_own_generator:
                    t.generator = generator

    def _groups(self) -> list[list[int]]:
        groups: list[list[int]] = []
        for i, t in enumerate(self.transforms):
            geometric = isinstance(t, GeometricTransform) and self.fuse
            if (
                geometric
                and groups
                and isinstance(self.transforms[groups[-1][0]], GeometricTransform)
            ):
                groups[-1].append(i)
            else:
                groups.append([i])
        return groups

    def forward(self, batch: Batch, params: list[Params] | None = None) -> Batch:  # type: ignore[override]
        if params is not None and len(params) != len(self.transforms):
            raise UsageError(f"params must have {len(self.transforms)} entries, got {len(params)}")
        used: list[Params] = [{} for _ in self.transforms]
        for group in self._groups():
            first = self.transforms[group[0]]
            if self.fuse and isinstance(first, GeometricTransform) and len(group) > 1:
                steps = [self.transforms[i] for i in group]
                given = [params[i] for i in group] if params is not None else None
                batch = apply_geometric(batch, steps, given)
                for i, step in zip(group, steps, strict=True):
                    used[i] = step.last_params or {}
            else:
                given_one = params[group[0]] if params is not None else None
                batch = first(batch, given_one) if isinstance(first, Augmentation) else first(batch)
                used[group[0]] = getattr(first, "last_params", None) or {}
        self.last_params = used
        return batch
