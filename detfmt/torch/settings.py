"""What a `Loader` is told besides the dataset: in which order (`Sampling`), how to deliver
(`Delivery`).

torch splits a data pipeline into Dataset (what), Sampler (in which order) and DataLoader (how to
deliver); the loader's keywords follow the same split, so each group is read, checked and passed
on as one value. ``LEGACY_KEYWORDS`` maps the loader's former flat keywords to their group (kept
one release with a DeprecationWarning).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from detfmt.errors import UsageError
from detfmt.order import DEFAULT_SHARD_WINDOW, EpochOrder
from detfmt.reading.gather import IO_MODES, check_canvas, check_decode_scale

__all__ = ["LEGACY_KEYWORDS", "Delivery", "Sampling"]


@dataclasses.dataclass(frozen=True, eq=False)
class Sampling:
    """Which samples an epoch visits, in which order (SPEC §18).

    Args:
        order: ``"random"``, ``"quasi_random"`` (1.0 datasets: near-sequential reads, O-4),
            ``"sequential"``, or an order object (`detfmt.order.SubsetOrder`...); None: from the
            loader's ``shuffle``.
        indices: read only these samples (a subset, in place: nothing is copied), shuffled
            each epoch unless ``shuffle=False`` or ``order="sequential"``.
        repeat_threshold: repeat-factor sampling for rare classes (LVIS; SPEC O-9, O-10): an
            image whose rarest class is in a fraction f < t of the images is visited about
            sqrt(t / f) times per epoch.
        quasi_block, quasi_window: O-4's L and W; default L = samples per ~8 MiB, W = 8.
        shard_window: sharded roots: shards shuffled together (S-18's W).
    """

    order: str | EpochOrder | None = None
    indices: Sequence[int] | np.ndarray | None = None
    repeat_threshold: float | None = None
    quasi_block: int | None = None
    quasi_window: int = 8
    shard_window: int = DEFAULT_SHARD_WINDOW

    def __post_init__(self) -> None:
        if self.indices is not None and (
            not (self.order is None or self.order in ("random", "sequential"))
            or self.repeat_threshold is not None
        ):
            raise UsageError("indices= takes order 'random' or 'sequential' only (no order "
                             "object, quasi_random or repeat_threshold)")
        if self.repeat_threshold is not None and not isinstance(self.order, (str, type(None))):
            raise UsageError("repeat_threshold= builds the order: it does not combine with "
                             "an order object")


@dataclasses.dataclass(frozen=True)
class Delivery:
    """How batches are made and handed out.

    Args:
        num_threads: gather threads (each fills whole batches); default min(4, cores).
        prefetch: batches gathered ahead of the consumer; default 2 * num_threads.
        pin_memory: gather into page-locked buffers (default: when ``device`` is CUDA).
        device: move each batch there (non-blocking from pinned buffers).
        layout: ``"CHW"`` (a channels_last view) or ``"HWC"``.
        canvas: (H, W): place every image at the top-left of a fixed canvas (a larger image is
            an error) instead of padding to the batch maximum.
        io: ``"mmap"`` (fastest when the data is in the page cache) or ``"pread"`` (no page
            faults; use on a cold cache, ideally with ``Sampling(order="quasi_random")``).
        pad_value: value of padding pixels.
        gpu_decode: decode JPEG samples with torchvision.io.decode_jpeg on ``device``.
        prefetch_shards: remote roots: shards fetched ahead of the batches in flight.
        transform_threads: torch and OpenCV-backend threads of each loader thread (default:
            all cores, at most 8), independent of the trainer's ``torch.set_num_threads``.
        torch_threads: torch's intra-op threads of each loader thread, where they should differ
            from ``transform_threads`` (default: the same). 1 suits a transform whose pixel work
            is the OpenCV backend's per-sample pool: its torch ops are then bookkeeping on a few
            hundred numbers, where OpenMP's idle threads spin between them and cost CPU.
        transform_reseed: re-seed the transform's generators from (seed, epoch, batch position)
            so a resumed run repeats the same augmentation parameters (default True).
        decode_scale: 2, 4 or 8 decodes JPEG-stored samples at that fraction of their stored
            size in the DCT domain (libjpeg's scaled decode, ``ds.batch(decode_scale=)``):
            ``sizes`` and boxes follow, images are smaller. For training well below the stored
            size (stored at 1280, training at 640). 1 (default): the stored pixels. Every
            sample must be JPEG-stored; not with ``gpu_decode``.
    """

    num_threads: int | None = None
    prefetch: int | None = None
    pin_memory: bool | None = None
    device: torch.device | str | None = None
    layout: str = "CHW"
    canvas: tuple[int, int] | None = None
    io: str = "mmap"
    pad_value: int = 0
    gpu_decode: bool = False
    prefetch_shards: int = 2
    transform_threads: int | None = None
    torch_threads: int | None = None
    transform_reseed: bool = True
    decode_scale: int = 1

    def __post_init__(self) -> None:
        if self.layout not in ("CHW", "HWC"):
            raise UsageError(f"layout must be 'CHW' or 'HWC', got {self.layout!r}")
        if self.io not in IO_MODES:
            raise UsageError(f"io must be one of {IO_MODES}, got {self.io!r}")
        for name, low in (("num_threads", 1), ("prefetch", 1), ("prefetch_shards", 0),
                          ("transform_threads", 1), ("torch_threads", 1)):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                      or value < low):
                raise UsageError(f"{name} must be an int >= {low}, got {value!r}")
        if self.canvas is not None:
            object.__setattr__(self, "canvas", check_canvas(self.canvas))
        object.__setattr__(self, "decode_scale", check_decode_scale(self.decode_scale))
        if self.decode_scale != 1 and self.gpu_decode:
            raise UsageError("decode_scale is the CPU decoder's (libjpeg's scaled decode); "
                             "gpu_decode decodes at the stored size: pass one of them")


# The loader's former flat keywords: the settings that existed before the groups (a setting
# added since is only spelt inside its group).
LEGACY_KEYWORDS: dict[str, type] = {
    **{field.name: Sampling for field in dataclasses.fields(Sampling)},
    **{field.name: Delivery for field in dataclasses.fields(Delivery)
       if field.name != "decode_scale"},
}


def from_legacy(keywords: dict[str, Any], sampling: Sampling | None,
                delivery: Delivery | None) -> tuple[Sampling | None, Delivery | None]:
    """``sampling`` and ``delivery`` built from the loader's former flat keywords (which must
    not be combined with the groups they now belong to)."""
    unknown = sorted(set(keywords) - set(LEGACY_KEYWORDS))
    if unknown:
        raise TypeError(f"Loader() got an unexpected keyword argument {unknown[0]!r}")
    groups: dict[type, dict[str, Any]] = {Sampling: {}, Delivery: {}}
    for name, value in keywords.items():
        groups[LEGACY_KEYWORDS[name]][name] = value
    if groups[Sampling] and sampling is not None:
        raise UsageError(f"{sorted(groups[Sampling])} belong in sampling=Sampling(...); "
                         "pass them there, not beside it")
    if groups[Delivery] and delivery is not None:
        raise UsageError(f"{sorted(groups[Delivery])} belong in delivery=Delivery(...); "
                         "pass them there, not beside it")
    if groups[Sampling]:
        sampling = Sampling(**groups[Sampling])
    if groups[Delivery]:
        delivery = Delivery(**groups[Delivery])
    return sampling, delivery
