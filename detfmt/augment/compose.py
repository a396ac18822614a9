"""`Compose`: run modules in order, fusing consecutive geometric ones into one warp."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import torch
from torch import nn

from detfmt.augment import _backend
from detfmt.augment._base import Augmentation, Params
from detfmt.augment._geometry import GeometricTransform, apply_geometric
from detfmt.errors import UsageError
from detfmt.torch.batch import Batch, accepts_stored_samples

if TYPE_CHECKING:
    from detfmt.augment.tiles import TiledSource


class Compose(Augmentation):
    """Apply ``transforms`` in order; consecutive geometric modules share one resample.

    ``last_params`` is the list of each module's parameters; ``compose(batch, params=that)``
    replays the batch. With ``generator``, every child that was built without its own
    generator draws from this one (one seed for the whole pipeline). ``memory_format``: the
    layout of the images returned (None: whatever the last step gives; e.g.
    ``torch.contiguous_format`` for a consumer that wants planar batches, which the OpenCV
    warp then writes directly instead of a later copy).
    """

    def __init__(
        self,
        transforms: Sequence[nn.Module],
        *,
        generator: torch.Generator | None = None,
        fuse: bool = True,
        memory_format: torch.memory_format | None = None,
    ) -> None:
        super().__init__(generator)
        if memory_format not in (None, torch.contiguous_format, torch.channels_last):
            raise UsageError(
                "memory_format must be None, torch.contiguous_format or torch.channels_last, "
                f"got {memory_format!r}"
            )
        self.memory_format = memory_format
        for t in transforms:
            if not isinstance(t, nn.Module):
                raise UsageError(f"Compose takes nn.Modules, got {type(t)!r}")
        self.transforms = nn.ModuleList(transforms)
        self.fuse = bool(fuse)
        if generator is not None:
            for t in self.transforms:
                if isinstance(t, Augmentation) and not t.has_own_generator:
                    t.generator = generator

    @property
    def accepts_stored_samples(self) -> bool:
        """Whether a `Loader` may hand this pipeline the stored samples instead of a gathered
        batch (`Batch.samples`): its first step accepts them (`Mosaic`), and no later step sees
        them (that step's output has new images)."""
        return bool(self.transforms) and accepts_stored_samples(self.transforms[0])

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

    def _warps_once(self, group: list[int]) -> bool:
        """Whether this group goes through `apply_geometric` (a fused run, or one plain step)."""
        first = self.transforms[group[0]]
        if not isinstance(first, GeometricTransform):
            return False
        return (self.fuse and len(group) > 1) or type(first).apply is GeometricTransform.apply

    def forward(self, batch: Batch, params: list[Params] | None = None) -> Batch:  # type: ignore[override]
        if params is not None and len(params) != len(self.transforms):
            raise UsageError(f"params must have {len(self.transforms)} entries, got {len(params)}")
        if not isinstance(batch, Batch):
            raise UsageError(f"expected a detfmt.torch.Batch, got {type(batch)!r}")
        used: list[Params] = [{} for _ in self.transforms]
        groups = self._groups()
        deferred: tuple[TiledSource, Callable[[], None]] | None = None
        recolored = -1  # index of a recolouring step already applied inside the warp before it

        def given(i: int) -> Params | None:
            return params[i] if params is not None else None

        for k, group in enumerate(groups):
            first = self.transforms[group[0]]
            if group[0] == recolored:
                used[group[0]] = first.last_params or {}
                continue
            following = groups[k + 1] if k + 1 < len(groups) else None
            if (
                isinstance(first, Augmentation)
                and following is not None
                and self._warps_once(following)
                and first.can_defer(batch)
            ):
                # The warp that follows reads the tiles: the (2H, 2W) canvas is never built.
                with _backend.small_ops(batch.images):
                    mosaic_params = given(group[0])
                    if mosaic_params is None:
                        mosaic_params = first.sample(batch)
                    first.last_params = mosaic_params
                    batch, *pending = first.apply_deferred(batch, mosaic_params)
                deferred = (pending[0], pending[1])
                used[group[0]] = mosaic_params
                continue
            after = group[-1] + 1
            recolor = None
            if (
                self._warps_once(group)
                and after < len(self.transforms)
                and _recolours_in_warp(self.transforms[after])
                and batch.images.shape[1] == 3
                and (deferred is not None or _backend.use_opencv(batch.images))
            ):
                # OpenCV recolours each warped sample before writing it out.
                recolor = (self.transforms[after], given(after))
            if deferred is not None or recolor is not None or len(group) > 1:
                steps = [self.transforms[i] for i in group]
                if recolor is not None:
                    recolored = after
                source, finish = deferred if deferred is not None else (None, None)
                deferred = None
                # The last step that writes images writes them in the layout asked for; an
                # earlier one keeps its own (the steps after it read that one fastest).
                tail = groups[k + 1 :]
                last = not tail or (recolor is not None and tail == [[after]])
                batch = apply_geometric(
                    batch,
                    steps,
                    [given(i) for i in group],
                    source=source,
                    recolor=recolor,
                    memory_format=self.memory_format if last else None,
                )
                if finish is not None:
                    finish()
                for i, step in zip(group, steps, strict=True):
                    used[i] = step.last_params or {}
                continue
            batch = (
                first(batch, given(group[0])) if isinstance(first, Augmentation) else first(batch)
            )
            used[group[0]] = getattr(first, "last_params", None) or {}
        self.last_params = used
        if self.memory_format is not None:
            batch = batch.replace(images=to_memory_format(batch.images, self.memory_format))
        return batch


def _recolours_in_warp(module: nn.Module) -> bool:
    return isinstance(module, Augmentation) and module.recolours_in_warp is True


def to_memory_format(images: torch.Tensor, memory_format: torch.memory_format) -> torch.Tensor:
    """``images`` (B, C, H, W) in ``memory_format`` (themselves when already so): uint8 CPU
    channels_last to planar by OpenCV's per-sample split where the OpenCV backend is in use,
    several times faster than torch's strided copy."""
    if images.is_contiguous(memory_format=memory_format):
        return images
    if (
        memory_format == torch.contiguous_format
        and images.is_contiguous(memory_format=torch.channels_last)
        and _backend.use_opencv(images)
    ):
        from detfmt.augment._opencv import planar_copy  # cv2 and numpy on demand

        return planar_copy(images)
    return images.contiguous(memory_format=memory_format)
