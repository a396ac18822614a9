"""Mix modules: `Mosaic` (2x2, Ultralytics ``_mosaic4``) and `MixUp` (Beta(32, 32) blend).

Both widen the box slots (M -> 4M, M -> 2M) so shapes stay static; `compact` in
`detfmt.augment.targets` trims them back.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple, overload

import torch
from torch import nn

from detfmt.augment import _backend
from detfmt.augment import _random as rnd
from detfmt.augment._base import (
    Augmentation,
    Params,
    as_size,
    check_probability,
    fill_for,
    image_hw,
)
from detfmt.augment._geometry import apply_geometric
from detfmt.augment._matrix import clip_boxes, eye, transform_boxes
from detfmt.augment._memory import channels_last, empty_hwc
from detfmt.augment._slots import where_kept
from detfmt.augment.geometric import Letterbox
from detfmt.augment.sanitize import keeps_moved_box
from detfmt.errors import UsageError
from detfmt.torch.batch import Batch
from detfmt.torch.threads import batches_are_stable

if TYPE_CHECKING:
    import numpy as np

    from detfmt.augment.tiles import Tile, TiledSource

_CANVAS_CHUNK = 4
_UNSCALED = ((1.0, 1.0),) * 4  # (sx, sy) of each tile without ``resize``


class _RingBuffer(nn.Module):
    """The last ``capacity`` samples (images, boxes, classes, mask, sizes and per-box extras)
    on the batch device.

    Batches from a real loader differ in canvas size and box slots from one batch to the next:
    the buffer grows to the largest canvas and slot count seen (a sample keeps its pixels at the
    top-left of its slot, its valid region in ``sizes``; slots beyond its boxes are padding).
    Pixels beyond a held sample's valid region are undefined (an eager CPU push copies only the
    valid rows, so a reused slot keeps an older sample's pixels there): Mosaic never reads them.

    A push ``by_reference`` (eager CPU, batches the caller will not write again: the loader's,
    `detfmt.torch.threads.stable_batches`) keeps a view of each sample's pixels in `views`
    instead of copying them; the loader then leaves those buffers alone until they are evicted.
    A copying push, or a path that needs the pixels in `images` (`materialize`), replaces them.

    What Mosaic reads from it depends only on the samples held, in push order: partners are
    numbered oldest first (`physical` maps that to ring slots), and the box slots it reads are
    those the held samples' batches had (`slots_in_use`), not the most any evicted batch had.
    So pushing the same last ``capacity`` samples into an empty buffer (a resumed loader's
    refill) reproduces every later mosaic exactly.
    """

    def __init__(self, capacity: int) -> None:
        super().__init__()
        self.capacity = capacity
        self.filled = 0
        self.cursor = 0
        self.held_slots = [0] * capacity  # box slots of the batch each ring slot came with
        # (H, W, C) numpy views of pushed samples held by reference, else None (in `images`).
        self.views: list[np.ndarray | None] = [None] * capacity
        self.images: torch.Tensor | None = None
        self.boxes: torch.Tensor | None = None
        self.classes: torch.Tensor | None = None
        self.mask: torch.Tensor | None = None
        self.sizes: torch.Tensor | None = None
        self.per_box: dict[str, torch.Tensor] = {}  # (capacity, slots, ...) per-box extras

    def check_compatible(self, batch: Batch) -> None:
        """Shapes may change between batches; channels, dtypes and device may not."""
        assert self.images is not None and self.boxes is not None and self.classes is not None
        images = batch.images
        held = self.images
        if images.dim() != 4 or images.shape[1] != held.shape[1]:
            raise UsageError(
                f"Mosaic's buffer holds (N, {held.shape[1]}, H, W) images, this batch has shape "
                f"{tuple(images.shape)}: give every batch the same channel count"
            )
        if images.dtype != held.dtype or images.device != held.device:
            raise UsageError(
                f"Mosaic's buffer holds {held.dtype} images on {held.device}, this batch has "
                f"{images.dtype} on {images.device}: run Mosaic before ToFloat/Normalize and keep "
                "its batches on one device"
            )
        if batch.boxes.dtype != self.boxes.dtype or batch.classes.dtype != self.classes.dtype:
            raise UsageError(
                f"Mosaic's buffer holds {self.boxes.dtype} boxes and {self.classes.dtype} "
                f"classes, this batch has {batch.boxes.dtype} and {batch.classes.dtype}"
            )
        held_fields = {n: (v.dtype, tuple(v.shape[2:])) for n, v in self.per_box.items()}
        fields = {n: (v.dtype, tuple(v.shape[2:])) for n, v in batch.per_box().items()}
        if fields != held_fields:
            raise UsageError(
                f"Mosaic's buffer holds the per-box fields {held_fields}, this batch has "
                f"{fields}: give every batch the same per-box fields (Batch.box_fields)"
            )

    def _allocate(self, batch: Batch, height: int, width: int, slots: int) -> None:
        """(Re)allocate for a (height, width) canvas and ``slots`` boxes, keeping held samples."""
        n = self.capacity
        images = batch.images
        # Same memory layout as the batch (channels_last from the loader): the push and the tile
        # copies out of the buffer are then plain copies, not transposes (~3x faster).
        layout = (
            torch.channels_last
            if images.is_contiguous(memory_format=torch.channels_last)
            or batch.samples is not None  # HWC samples, a placeholder in `images`
            else torch.contiguous_format
        )
        if self.images is None or tuple(self.images.shape[-2:]) != (height, width):
            # Only when the canvas grows: box slots grow far more often (a batch with more
            # boxes), and the images are the large part.
            # Empty, not zeros: nothing reads a held sample beyond its valid region, and pages
            # a buffer holding views of the loader's batches never writes are never touched.
            new_images = torch.empty(
                (n, images.shape[1], height, width),
                dtype=images.dtype,
                device=images.device,
                memory_format=layout,
            )
            if self.images is not None:
                old_h, old_w = self.images.shape[-2:]
                new_images[:, :, :old_h, :old_w].copy_(self.images)
            self.images = new_images
        new_boxes = batch.boxes.new_zeros((n, slots, 4))
        new_classes = batch.classes.new_full((n, slots), -1)
        new_mask = batch.mask.new_zeros((n, slots))
        new_sizes = torch.zeros((n, 2), dtype=torch.int64, device=images.device)
        new_per_box = {
            name: value.new_zeros((n, slots, *value.shape[2:]))
            for name, value in batch.per_box().items()
        }
        if self.boxes is not None:
            assert self.classes is not None and self.mask is not None and self.sizes is not None
            old_m = self.boxes.shape[1]
            new_boxes[:, :old_m].copy_(self.boxes)
            new_classes[:, :old_m].copy_(self.classes)
            new_mask[:, :old_m].copy_(self.mask)
            new_sizes.copy_(self.sizes)
            for name, value in self.per_box.items():
                new_per_box[name][:, :old_m].copy_(value)
        self.boxes, self.classes = new_boxes, new_classes
        self.per_box = new_per_box
        self.mask, self.sizes = new_mask, new_sizes

    def push(self, batch: Batch, sizes: torch.Tensor, by_reference: bool = False) -> None:
        """Hold the batch's samples (``sizes``: their valid (h, w) regions, int64); their pixels
        as views of the batch with ``by_reference`` (see the class)."""
        height, width = batch.images.shape[-2:]
        slots = batch.boxes.shape[1]
        if self.images is None:
            self._allocate(batch, height, width, slots)
        self.check_compatible(batch)
        assert self.images is not None and self.boxes is not None and self.classes is not None
        assert self.mask is not None and self.sizes is not None
        held_h, held_w = self.images.shape[-2:]
        held_m = self.boxes.shape[1]
        if height > held_h or width > held_w or slots > held_m:
            self._allocate(batch, max(height, held_h), max(width, held_w), max(slots, held_m))
        per_box = batch.per_box()
        fields = (
            (self.boxes, batch.boxes),
            (self.classes, batch.classes),
            (self.mask, batch.mask),
            *((self.per_box[name], value) for name, value in per_box.items()),
        )
        # Sample j goes to slot (cursor + j) % capacity; only the last `capacity` samples
        # survive. At most two contiguous runs of slots: slice copies, not an index_put (for 32
        # 640x640 images on one CPU thread 4.8 ms instead of 40 ms).
        n = len(batch)
        skip = max(0, n - self.capacity)
        count = n - skip
        start = (self.cursor + skip) % self.capacity
        first = min(count, self.capacity - start)
        runs = [(lo, hi, src) for lo, hi, src in
                ((start, start + first, skip), (0, count - first, skip + first)) if hi > lo]
        rows = _held_rows(self.images, batch.images, sizes, height)
        views = rows[1] if by_reference and rows is not None else None
        if batch.samples is not None:  # the stored samples themselves: never written again
            views = list(batch.samples)
        for lo, hi, src in runs:
            taken = slice(src, src + hi - lo)
            self.sizes[lo:hi].copy_(sizes[taken])
            for store, value in fields:
                store[lo:hi, :slots].copy_(value[taken])
            # Box slots this batch does not have are padding (an older sample may have used them).
            if slots < self.boxes.shape[1]:
                self.boxes[lo:hi, slots:].fill_(0)
                self.classes[lo:hi, slots:].fill_(-1)
                self.mask[lo:hi, slots:].fill_(False)
                for value in self.per_box.values():
                    value[lo:hi, slots:].fill_(0)
            if views is not None:
                self.views[lo:hi] = list(views[taken])
            elif rows is None:
                self.views[lo:hi] = [None] * (hi - lo)
                self.images[lo:hi, :, :height, :width].copy_(batch.images[taken])
            else:
                self.views[lo:hi] = [None] * (hi - lo)
                held, stored, heights = rows
                for k in range(hi - lo):
                    h = heights[src + k]
                    held[lo + k, :h, :width] = stored[src + k, :h]
            self.held_slots[lo:hi] = [slots] * (hi - lo)
        self.cursor = (self.cursor + len(batch)) % self.capacity
        self.filled = min(self.capacity, self.filled + len(batch))

    def clear(self) -> None:
        """Forget every held sample (the storage stays allocated)."""
        self.filled = 0
        self.cursor = 0
        self.held_slots = [0] * self.capacity
        self.views = [None] * self.capacity

    def materialize(self) -> None:
        """Copy the samples held by reference into `images` (for the paths that read it)."""
        if self.images is None or not any(v is not None for v in self.views):
            return
        held = self.images.permute(0, 2, 3, 1).numpy()
        for slot, view in enumerate(self.views):
            if view is not None:
                h, w = view.shape[:2]
                held[slot, :h, :w] = view
        self.views = [None] * self.capacity

    @overload
    def physical(self, held: int) -> int: ...
    @overload
    def physical(self, held: torch.Tensor) -> torch.Tensor: ...
    def physical(self, held: int | torch.Tensor) -> int | torch.Tensor:
        """Ring slots of held samples numbered 0 (oldest) .. filled - 1 (newest)."""
        return (held + (self.cursor - self.filled)) % self.capacity

    def runs_in_order(self) -> list[tuple[int, int]]:
        """The held samples, oldest first, as at most two runs [lo, hi) of ring slots."""
        start = (self.cursor - self.filled) % self.capacity
        stop = start + self.filled
        if stop <= self.capacity:
            return [(start, stop)]
        return [(start, self.capacity), (0, stop - self.capacity)]

    def slots_in_use(self) -> int:
        """Box slots the held samples use (their batches' slot counts; at most the buffer's)."""
        used = self.held_slots[: self.capacity] if self.filled == self.capacity else [
            self.held_slots[(self.cursor - self.filled + k) % self.capacity]
            for k in range(self.filled)]
        return max(used, default=0)


def _pad_slots(value: torch.Tensor, slots: int, fill: float | bool) -> torch.Tensor:
    """``value`` (N, M, ...) widened to ``slots`` box slots with ``fill``."""
    missing = slots - value.shape[1]
    if missing <= 0:
        return value
    pad = value.new_full((value.shape[0], missing, *value.shape[2:]), fill)
    return torch.cat([value, pad], dim=1)


def _pad_hw(images: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """(N, H, W, C) images widened to (N, height, width, C) (zeros; never read as content)."""
    if images.shape[1] == height and images.shape[2] == width:
        return images
    out = images.new_zeros((images.shape[0], height, width, images.shape[3]))
    out[:, : images.shape[1], : images.shape[2]] = images
    return out


def _content_sizes(batch: Batch) -> torch.Tensor:
    if batch.sizes is not None:
        return batch.sizes.to(torch.int64)
    hw = torch.tensor(image_hw(batch.images), device=batch.images.device)
    return hw.expand(len(batch), 2).clone()


def _held_rows(
    held: torch.Tensor, images: torch.Tensor, sizes: torch.Tensor, height: int
) -> tuple[np.ndarray, np.ndarray, list[int]] | None:
    """The buffer and the batch as HWC numpy views and how many rows of each sample to copy,
    for a push of eager CPU images; None elsewhere (the whole canvases are copied there).

    Nothing reads a held sample outside its valid region (`Mosaic` places and warps each
    tile within its ``sizes``), so only those rows are copied, whole rows of the batch's
    width: one contiguous run per sample in the loader's channels_last layout (the region's
    width alone would be a strided copy, slower than the extra columns).
    """
    if (
        held.device.type != "cpu"
        or images.device.type != "cpu"
        or images.requires_grad
        or torch.compiler.is_compiling()
    ):
        return None
    heights = [min(max(h, 0), height) for h in sizes[:, 0].tolist()]
    return held.permute(0, 2, 3, 1).numpy(), images.permute(0, 2, 3, 1).numpy(), heights


class _Placement(NamedTuple):
    """Where each of a canvas's 4 tiles goes (B canvases)."""

    tiles: torch.Tensor  # (B, 4) tile indices, or the gathered images (B, 4, TH, TW, C)
    origin: torch.Tensor  # (B, 4, 2) int64 (x, y) of each tile's top-left on the canvas
    extent: torch.Tensor  # (B, 4, 2) int64 (w, h) of each tile as placed (resized)
    center: torch.Tensor  # (B, 2) int64 (xc, yc)
    chosen: torch.Tensor  # (B,) bool: a mosaic (else the sample alone)
    scale: torch.Tensor | None  # (B, 4, 2) float64 (sx, sy) of each tile's resize, or None
    stored: torch.Tensor  # (B, 2) int64 (h, w) valid region of each sample of the batch


@dataclasses.dataclass(frozen=True)
class _LayoutConstants:
    """The constant tensors of `Mosaic._layout` for one (H, W) tile frame."""

    toward: torch.Tensor  # (4, 2): which of (w, h) tile q's origin lies before the centre
    half: torch.Tensor  # (W // 2, H // 2)
    tile: torch.Tensor  # (W, H)
    canvas: torch.Tensor  # (2W, 2H)
    first: torch.Tensor  # (4,) bool: tile 0 only
    one: torch.Tensor
    nothing: torch.Tensor
    no_box: torch.Tensor
    no_class: torch.Tensor

    @staticmethod
    def make(
        height: int,
        width: int,
        device: torch.device,
        box_dtype: torch.dtype,
        class_dtype: torch.dtype,
    ) -> _LayoutConstants:
        def ints(values: list[int] | list[list[int]] | int) -> torch.Tensor:
            return torch.tensor(values, dtype=torch.int64, device=device)

        return _LayoutConstants(
            toward=ints([[1, 1], [0, 1], [1, 0], [0, 0]]),
            half=ints([width // 2, height // 2]),
            tile=ints([width, height]),
            canvas=ints([2 * width, 2 * height]),
            first=torch.tensor([True, False, False, False], device=device),
            one=ints(1),
            nothing=ints(0),
            no_box=torch.tensor(0.0, dtype=box_dtype, device=device),
            no_class=torch.tensor(-1, dtype=class_dtype, device=device),
        )


class Mosaic(Augmentation):
    """Ultralytics 2x2 mosaic on a (2H, 2W) canvas filled with 114.

    Each sample is tile 0 (top-left of the centre); three partners fill the other quadrants.
    The centre is ``int(U(W/2, 3W/2)), int(U(H/2, 3H/2))``; each tile's valid region
    (``batch.sizes``, else the whole image) touches the centre with one corner. Boxes are shifted,
    clipped to the canvas and zero-area ones dropped; follow with ``RandomAffine(size=(H, W))``
    (Ultralytics' border of -size/2). Samples not chosen (probability 1 - p) are letterboxed in
    the middle of the canvas, so the same affine reproduces Ultralytics' no-mosaic path.

    ``resize=S``: each tile is first scaled so that its long side is S (Ultralytics'
    ``load_image``; `Letterbox` (S, center=False, rounding=resize_rounding)'s matrix: pass
    ``resize_rounding="ceil"`` for Ultralytics' tile sizes) and (H, W) is (S, S). Inside
    `Compose`, before a warp on the OpenCV backend, that scale is folded into the warp: each
    output pixel is one bilinear sample of the stored image, and neither the resized images
    nor the canvas are built. Elsewhere the tiles are resized, then placed. The ring buffer then
    holds the stored (unresized) samples.

    Partners are drawn uniformly from the batch, or from the batch plus a ring buffer of the
    last ``buffer_size`` samples (Ultralytics draws from recent images). With a buffer, replay
    needs the same buffer contents: `detfmt.torch.Loader` (``transform=``) refills it on resume
    from the samples that preceded the resume point (``history``), so a resumed run's batches
    equal the uninterrupted run's.
    """

    _force_gather = False  # tests: use the static-shape gather on CPU too

    def __init__(
        self,
        *,
        p: float = 1.0,
        buffer_size: int = 0,
        fill: float = 114.0,
        resize: int | tuple[int, int] | None = None,
        resize_rounding: str = "round",
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__(generator)
        self.p = check_probability("p", p)
        if buffer_size < 0:
            raise UsageError(f"buffer_size must be >= 0, got {buffer_size!r}")
        self.fill = float(fill)
        self.buffer = _RingBuffer(int(buffer_size)) if buffer_size > 0 else None
        self.resize: Letterbox | None = None
        if resize is not None:
            self.resize = Letterbox(as_size("resize", resize), center=False, fill=fill,
                                    rounding=resize_rounding)
        self._constants_cache: dict[tuple[object, ...], _LayoutConstants] = {}

    @property
    def history(self) -> int:
        """The ring buffer's capacity: its partners come from that many recent samples."""
        return self.buffer.capacity if self.buffer is not None else 0

    def reset_history(self) -> None:
        """Empty the ring buffer."""
        if self.buffer is not None:
            self.buffer.clear()

    def _tile_hw(self, images: torch.Tensor) -> tuple[int, int]:
        """(H, W) of one tile's frame: the resize target, else the batch's images."""
        if self.resize is not None:
            image_hw(images)
            return self.resize.size
        return image_hw(images)

    def sample(self, batch: Batch) -> Params:
        bsz, dev, g = len(batch), batch.images.device, self.generator
        height, width = self._tile_hw(batch.images)
        pool = bsz + (self.buffer.filled if self.buffer is not None else 0)
        partners = rnd.randint(g, 0, pool, (bsz, 3), dev)
        xc = rnd.uniform(g, (bsz,), width / 2, 1.5 * width, dev, torch.float64)
        yc = rnd.uniform(g, (bsz,), height / 2, 1.5 * height, dev, torch.float64)
        return {
            "tiles": torch.cat([torch.arange(bsz, device=dev)[:, None], partners], dim=1),
            # int(): the cast truncates, the floor of these positive draws.
            "center": torch.stack([xc, yc], dim=1).to(torch.int64),
            "apply": rnd.bernoulli(g, (bsz,), self.p, dev),
        }

    def _gather(
        self, batch: Batch, tiles: torch.Tensor, sizes: torch.Tensor, with_images: bool
    ) -> tuple[tuple[torch.Tensor, ...], dict[str, torch.Tensor]]:
        """[images (B, 4, TH, TW, C),] boxes, classes, mask (B, 4, M, ...), sizes (B, 4, 2),
        and the per-box extras (B, 4, M, ...) by name.

        With a buffer, the batch and the buffer are widened to common box slots (and, for the
        images, a common tile canvas TH x TW): they differ when batches do. Each field is one
        index into the batch followed by the held samples oldest first (tile index order), so
        a field costs a concatenation and an index, whatever the tiles. ``sizes``: the batch's
        valid regions (`_content_sizes`).
        """
        per_box = batch.per_box()
        names = list(per_box)
        fields = [batch.boxes, batch.classes, batch.mask, sizes, *per_box.values()]
        buf = self.buffer
        if buf is None or buf.filled == 0:
            if with_images:
                fields.insert(0, batch.images.permute(0, 2, 3, 1))
            out = [f[tiles] for f in fields]
        else:
            assert buf.boxes is not None and buf.classes is not None and buf.mask is not None
            assert buf.sizes is not None
            buf.check_compatible(batch)  # before any work; the dtypes then agree
            held_m = buf.slots_in_use()
            slots = max(batch.boxes.shape[1], held_m)
            fills: list[float | bool | None] = [0.0, -1, False, None, *[0] * len(names)]
            stored = [buf.boxes, buf.classes, buf.mask, buf.sizes,
                      *(buf.per_box[name] for name in names)]
            runs = buf.runs_in_order()
            flat = tiles.reshape(-1)
            out = []
            for value, held, fill in zip(fields, stored, fills, strict=True):
                if fill is not None:
                    # Slots beyond a held sample's own are padding in the buffer too.
                    value = _pad_slots(value, slots, fill)
                    held = held.narrow(1, 0, slots) if held.shape[1] >= slots else _pad_slots(
                        held, slots, fill)
                parts = [value, *(held.narrow(0, lo, hi - lo) for lo, hi in runs)]
                pooled = torch.cat(parts).index_select(0, flat)
                out.append(pooled.view(*tiles.shape, *pooled.shape[1:]))
            if with_images:
                out.insert(0, self._gather_images(batch, tiles))
        split = len(out) - len(names)
        return tuple(out[:split]), dict(zip(names, out[split:], strict=True))

    def _gather_images(self, batch: Batch, tiles: torch.Tensor) -> torch.Tensor:
        """(B, 4, TH, TW, C) tile images from the batch and the buffer (the static-shape path:
        only the tiles' images are copied, not the whole buffer)."""
        buf = self.buffer
        assert buf is not None and buf.images is not None
        buf.materialize()
        mine = batch.images.permute(0, 2, 3, 1)
        held = buf.images[: buf.filled].permute(0, 2, 3, 1)
        tile_h = max(mine.shape[1], held.shape[1])
        tile_w = max(mine.shape[2], held.shape[2])
        mine, held = _pad_hw(mine, tile_h, tile_w), _pad_hw(held, tile_h, tile_w)
        in_batch = tiles < len(batch)
        local = tiles.clamp(max=len(batch) - 1)
        remote = buf.physical((tiles - len(batch)).clamp(min=0))
        shape = (*tiles.shape, 1, 1, 1)
        return torch.where(in_batch.view(shape), mine[local], held[remote].to(mine.dtype))

    def _hold_views(self, batch: Batch) -> bool:
        """Whether the buffer may hold views of this batch's pixels: the copy-free path reads
        them (`_rectangles`) and the caller promised not to write the batch again."""
        return self._by_slices(batch) and batches_are_stable()

    def _by_slices(self, batch: Batch) -> bool:
        """Eager CPU copies rectangles (exact, cheap); elsewhere one static-shape gather."""
        return (
            batch.images.device.type == "cpu"
            and not self._force_gather
            and not batch.images.requires_grad
            and not torch.compiler.is_compiling()
        )

    @property
    def accepts_stored_samples(self) -> bool:
        """A `Loader` may hand this module the stored samples instead of a gathered batch
        (`Batch.samples`): every path either reads tiles from them or materialises them."""
        return True

    def apply(self, batch: Batch, params: Params) -> Batch:
        if self.resize is not None and self.can_defer(batch):
            return self._resized_canvas(batch, params)
        if not self._by_slices(batch):  # the static-shape gather reads `images`
            batch = batch.materialized()
        # Elsewhere resized tiles are built by a warp of the gathered tiles, then placed.
        by_slices = self._by_slices(batch) and self.resize is None
        with _backend.small_ops(batch.images):
            out, placement = self._layout(batch, params, with_images=not by_slices)
        make = self._canvas_by_slices if by_slices else self._canvas
        canvas = make(batch, placement)
        if self.buffer is not None:
            self.buffer.push(batch, placement.stored, self._hold_views(batch))
        return out.replace(images=canvas)

    def _resized_canvas(self, batch: Batch, params: Params) -> Batch:
        """The canvas of resized tiles as the fused warp sees it: its tiles through the OpenCV
        tile warp with identity matrices (one resample per tile, the same pixels)."""
        from detfmt.augment._opencv import warp_images_opencv

        with _backend.small_ops(batch.images):
            out, source, finish = self.apply_deferred(batch, params)
            identity = eye(len(batch), batch.images.device)
            canvas = warp_images_opencv(
                out.images,
                identity,
                image_hw(out.images),
                fill=source.fill,
                affine_only=True,
                source=source,
            )
        finish()
        return out.replace(images=canvas)

    def can_defer(self, batch: Batch) -> bool:
        """Whether `apply_deferred` can describe the canvas instead of building it: eager CPU
        batches on the OpenCV backend (whose tile warp reads the tiles)."""
        return (
            self._by_slices(batch)
            and batch.images.dim() == 4
            and batch.images.shape[1] in (1, 3)
            and _backend.use_opencv(batch.images)
        )

    def apply_deferred(
        self, batch: Batch, params: Params
    ) -> tuple[Batch, TiledSource, Callable[[], None]]:
        """`apply` without the canvas, for a warp that reads the tiles directly (`Compose`).

        Returns the batch (boxes as `apply`; ``images`` a zero-stride placeholder of the canvas
        shape that must not be read), the canvas as a `TiledSource` for `warp_images_opencv`,
        and ``finish``, to call once the warp has read the tiles (it pushes the batch into the
        ring buffer, whose slots the tiles may point into). See `Augmentation.apply_deferred`.
        """
        from detfmt.augment.tiles import TiledSource

        height, width = self._tile_hw(batch.images)
        out, placement = self._layout(batch, params, with_images=False)
        # OpenCV reads HWC rows; a planar batch would be copied per tile otherwise.
        images = batch.images if batch.samples is not None else channels_last(batch.images)
        hwc, rects = self._rectangles(images, placement, batch.samples)
        placeholder = batch.images.new_zeros((1, 1, 1, 1)).expand(
            len(batch), batch.images.shape[1], 2 * height, 2 * width
        )
        source = TiledSource(
            sizes=[(2 * height, 2 * width)] * len(batch),
            tiles=rects,
            fill=fill_for(batch.images, self.fill),
            channels=int(hwc.shape[-1]),
        )

        def finish() -> None:
            if self.buffer is not None:
                self.buffer.push(batch, placement.stored, self._hold_views(batch))

        return out.replace(images=placeholder), source, finish

    def _layout(
        self, batch: Batch, params: Params, with_images: bool
    ) -> tuple[Batch, _Placement]:
        """The boxes of the mosaic, and where each tile goes.

        Returns the batch with boxes, classes, mask and sizes of the canvas (images unchanged)
        and the `_Placement` of the tiles.
        """
        height, width = self._tile_hw(batch.images)
        tiles, center, chosen = params["tiles"], params["center"], params["apply"]
        stored = _content_sizes(batch)
        gathered, per_box = self._gather(batch, tiles, stored, with_images=with_images)
        images = gathered[0] if with_images else tiles
        boxes, classes, mask, sizes = gathered[-4:]
        scale = None
        if self.resize is not None:
            images, boxes, extent, scale = self._resize_tiles(images, gathered, with_images)
        else:
            extent = sizes.flip(-1)  # (B, 4, 2) (w, h) placed
        const = self._constants(height, width, center.device, boxes.dtype, classes.dtype)
        # Tile q touches the centre with its corner: q 0 its bottom-right, 1 its bottom-left,
        # 2 its top-right, 3 its top-left.
        corner = center.unsqueeze(1) - extent * const.toward
        # Not chosen: the sample alone, letterboxed in the middle of the canvas.
        solo = const.half + torch.div(const.tile - extent.select(1, 0), 2, rounding_mode="floor")
        origin = torch.where(chosen.view(-1, 1, 1), corner, solo.unsqueeze(1))
        # Each box corner (x, y) moves by its tile's origin.
        bsz, m = boxes.shape[0], boxes.shape[2]
        shift = origin.to(boxes.dtype).view(bsz, 4, 1, 1, 2)
        shifted = (boxes.view(bsz, 4, m, 2, 2) + shift).view(bsz, 4, m, 4)
        moved = clip_boxes(shifted, 2 * height, 2 * width)
        used = chosen.view(-1, 1) | const.first  # (B, 4): tile 0 always, partners when chosen
        canvas_hw = (2 * height, 2 * width)
        keep = mask & used.view(bsz, 4, 1) & keeps_moved_box(shifted, moved, canvas_hw)
        keep = keep.reshape(bsz, 4 * m)
        moved = moved.reshape(bsz, 4 * m, 4)
        classes = classes.reshape(bsz, 4 * m)
        # Per-box extras go where their boxes go: tile q's slot j is canvas slot q * M + j.
        per_box = {
            name: value.reshape(bsz, 4 * m, *value.shape[3:]) for name, value in per_box.items()
        }
        # The real extent: the right and lower edges of the tiles placed (clipped to the canvas).
        reach = torch.minimum(origin + extent, const.canvas)
        reach = torch.where(used.view(bsz, 4, 1), reach, const.nothing).amax(dim=1)
        sizes_out = torch.maximum(reach.flip(-1), const.one).to(
            dtype=batch.sizes.dtype if batch.sizes is not None else torch.int32,
            device=batch.sizes.device if batch.sizes is not None else reach.device,
        )
        out = batch.replace(
            boxes=torch.where(keep.unsqueeze(-1), moved, const.no_box).to(batch.boxes.dtype),
            classes=torch.where(keep, classes, const.no_class),
            mask=keep,
            sizes=sizes_out,
            extras={**batch.extras, **where_kept(per_box, keep)},
        )
        return out, _Placement(images, origin, extent, center, chosen, scale, stored)

    def _constants(
        self,
        height: int,
        width: int,
        device: torch.device,
        box_dtype: torch.dtype,
        class_dtype: torch.dtype,
    ) -> _LayoutConstants:
        """The layout's constant tensors, made once per canvas, device and dtypes (each made
        per call costs as much as an op); made afresh while compiling (no Python state)."""
        key = (height, width, device, box_dtype, class_dtype)
        if not torch.compiler.is_compiling():
            found = self._constants_cache.get(key)
            if found is not None:
                return found
        const = _LayoutConstants.make(height, width, device, box_dtype, class_dtype)
        if not torch.compiler.is_compiling():
            self._constants_cache = {key: const}
        return const

    def _resize_tiles(
        self, images: torch.Tensor, gathered: tuple[torch.Tensor, ...], with_images: bool
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Each gathered tile through `Letterbox` (resize, center=False)'s matrix.

        Returns the tile images (``images`` resized to (B, 4, S, S, C) when ``with_images``;
        else ``images``, the tile indices, unchanged), boxes and (w, h) extents in the resized
        frame, and each tile's (sx, sy) (B, 4, 2): the matrix is a pure scale, so frame point x
        of a tile holds its stored image at x / sx.
        """
        assert self.resize is not None
        boxes, classes, mask, sizes = gathered[-4:]
        bsz, quads, slots = boxes.shape[:3]
        flat_sizes = sizes.reshape(bsz * quads, 2)
        flat_boxes = boxes.reshape(bsz * quads, slots, 4).to(torch.float32)
        fit = self.resize.fit(*flat_sizes.to(torch.float64).unbind(1))
        matrix = fit.matrix.to(torch.float32)  # as `Letterbox.plan` gives it
        affine = self.resize.affine_only
        moved = transform_boxes(flat_boxes, matrix, affine).to(boxes.dtype).view_as(boxes)
        # The placed extent is the content the letterbox makes, round(h r) x round(w r) (or
        # ceil, `resize_rounding`): what
        # `mapped_extent` of the float32 matrix gives too (its scale is within 2^-24 of the
        # exact ratio, far inside that function's 1e-3 tolerance below 16384 px), without
        # mapping the region's corners.
        extent = torch.stack([fit.width, fit.height], dim=-1)
        scale = torch.diagonal(matrix[:, :2, :2], dim1=1, dim2=2)  # (sx, sy)
        if with_images:
            tile_h, tile_w, channels = images.shape[2:]
            flat = Batch(
                images=images.reshape(bsz * quads, tile_h, tile_w, channels).permute(0, 3, 1, 2),
                boxes=flat_boxes,
                classes=classes.reshape(bsz * quads, slots),
                mask=mask.reshape(bsz * quads, slots),
                sizes=flat_sizes,
            )
            resized = apply_geometric(flat, [self.resize], [{}]).images
            out_h, out_w = self.resize.size
            images = resized.permute(0, 2, 3, 1).reshape(bsz, quads, out_h, out_w, channels)
        sizes_out = extent.to(sizes.dtype).view(bsz, quads, 2)
        return images, moved, sizes_out, scale.view(bsz, quads, 2).to(torch.float64)

    def _rectangles(
        self,
        images: torch.Tensor,
        placement: _Placement,
        samples: tuple[np.ndarray, ...] | None = None,
    ) -> tuple[np.ndarray, list[list[Tile]]]:
        """Each canvas as rectangles of tiles (reads the parameters on the host).

        Returns the batch's ``images`` (B, C, H, W) as a (B, H, W, C) numpy view and, per
        sample, `Tile` s: canvas ``[y0:y1, x0:x1]`` comes from
        ``array[y0 - top : y1 - top, x0 - left : x1 - left]``. ``samples`` (`Batch.samples`):
        the batch's tiles come from them instead of ``images``.
        """
        from detfmt.augment.tiles import Tile

        bsz = int(images.shape[0])
        height, width = self._tile_hw(images)
        # numpy views: a strided rectangle copy is a row memcpy there, while torch's copy_ of
        # small strided views costs several times more on CPU (and on a busy 2-core box, more).
        hwc = images.permute(0, 2, 3, 1).numpy()
        tiles, origins, extents, centres, picked = (x.tolist() for x in placement[:5])
        resized = placement.scale is not None
        scales = placement.scale.tolist() if placement.scale is not None else []
        stored = placement.stored.tolist() if resized else []
        # One numpy view of the whole buffer, indexed per tile (a torch index, permute and
        # numpy() per tile cost more than the rest of the loop).
        buf = self.buffer
        held_hwc: np.ndarray | None = None
        held_sizes: list[list[int]] = []
        views: list[np.ndarray | None] = []
        shift, capacity = 0, 1
        if buf is not None and buf.filled > 0:
            assert buf.images is not None and buf.sizes is not None
            held_hwc = buf.images.permute(0, 2, 3, 1).numpy()
            views = buf.views
            held_sizes = buf.sizes.tolist() if resized else []
            # Held sample k (tile index bsz + k, oldest first) is in ring slot (k + shift) % cap.
            shift, capacity = buf.cursor - buf.filled, buf.capacity
        right, bottom = 2 * width, 2 * height
        rects: list[list[Tile]] = []
        for b in range(bsz):
            xc, yc = centres[b]
            if picked[b]:
                # Quadrant q of the canvas: x in [0, xc) or [xc, 2W), y in [0, yc) or [yc, 2H).
                quadrants = ((0, 0, xc, yc), (xc, 0, right, yc), (0, yc, xc, bottom),
                             (xc, yc, right, bottom))
            else:
                quadrants = ((0, 0, right, bottom),)
            mine: list[Tile] = []
            placed = zip(  # not chosen: tile 0 alone, the one quadrant
                quadrants, origins[b], extents[b], tiles[b], scales[b] if resized else _UNSCALED,
                strict=False,
            )
            for (qx0, qy0, qx1, qy1), (left, top), (w, h), index, (sx, sy) in placed:
                x0, x1 = max(left, qx0), min(left + w, qx1)
                y0, y1 = max(top, qy0), min(top + h, qy1)
                if x1 <= x0 or y1 <= y0:
                    continue
                if index < bsz:
                    array = hwc[index] if samples is None else samples[index]
                    region = stored[index] if resized else None
                else:
                    assert held_hwc is not None
                    slot = (index - bsz + shift) % capacity
                    view = views[slot]
                    array = held_hwc[slot] if view is None else view
                    region = held_sizes[slot] if resized else None
                if region is None:
                    mine.append(Tile(array, x0, y0, x1, y1, left, top))
                    continue
                # A resized tile: its stored pixels only (the warp reads past the placed
                # rectangle's edge, so it must see the image's own edge, not padding).
                sh, sw = region
                mine.append(Tile(array[:sh, :sw], x0, y0, x1, y1, left, top, sx, sy))
            rects.append(mine)
        return hwc, rects

    def _canvas_by_slices(self, batch: Batch, placement: _Placement) -> torch.Tensor:
        """The same canvas as `_canvas`, by rectangle copies."""
        height, width = image_hw(batch.images)
        hwc, rects = self._rectangles(batch.images, placement, batch.samples)
        fill = fill_for(batch.images, self.fill)
        canvas = empty_hwc((len(batch), 2 * height, 2 * width, hwc.shape[-1]), batch.images.dtype)
        canvas.fill_(fill)
        canvas_np = canvas.numpy()
        for b, mine in enumerate(rects):
            for r in mine:
                canvas_np[b, r.y0 : r.y1, r.x0 : r.x1] = r.array[
                    r.y0 - r.top : r.y1 - r.top, r.x0 - r.left : r.x1 - r.left
                ]
        return canvas.permute(0, 3, 1, 2)

    def _canvas(self, batch: Batch, placement: _Placement) -> torch.Tensor:
        """Copy tiles into the canvas by index (exact, no interpolation).

        Runs over chunks of samples so the int64 index stays small on CPU.
        """
        tiles, chosen = placement.tiles, placement.chosen
        ox, oy = placement.origin[..., 0], placement.origin[..., 1]
        w, h = placement.extent[..., 0], placement.extent[..., 1]
        xc, yc = placement.center[:, 0:1], placement.center[:, 1:2]
        bsz, _, tile_h, tile_w, channels = tiles.shape  # tiles may be larger than the batch
        height, width = self._tile_hw(batch.images)
        dev = tiles.device
        y = torch.arange(2 * height, device=dev)[None, :, None]
        x = torch.arange(2 * width, device=dev)[None, None, :]
        fill = torch.tensor(fill_for(tiles, self.fill), dtype=tiles.dtype, device=dev)
        parts = []
        for start in range(0, bsz, _CANVAS_CHUNK):
            sl = slice(start, min(bsz, start + _CANVAS_CHUNK))
            n = sl.stop - sl.start
            quadrant = (x >= xc[sl, :, None]).to(torch.int64)
            quadrant = quadrant + 2 * (y >= yc[sl, :, None]).to(torch.int64)
            quadrant = torch.where(chosen[sl, None, None], quadrant, 0).flatten(1)

            def per_tile(
                values: torch.Tensor, index: torch.Tensor = quadrant, rows: int = n
            ) -> torch.Tensor:
                return torch.gather(values, 1, index).view(rows, 2 * height, 2 * width)

            sy = y - per_tile(oy[sl])
            sx = x - per_tile(ox[sl])
            inside = (sy >= 0) & (sy < per_tile(h[sl])) & (sx >= 0) & (sx < per_tile(w[sl]))
            tile = torch.arange(n, device=dev)[:, None] * 4 + quadrant
            flat = (tile.view_as(sy) * tile_h + sy.clamp(0, tile_h - 1)) * tile_w
            flat = flat + sx.clamp(0, tile_w - 1)
            table = tiles[sl].reshape(-1, channels)
            out = table[flat.flatten()].view(n, 2 * height, 2 * width, channels)
            parts.append(torch.where(inside[..., None], out, fill))
        return torch.cat(parts, dim=0).permute(0, 3, 1, 2)


class MixUp(Augmentation):
    """Ultralytics MixUp: ``img * r + partner * (1 - r)``, r ~ Beta(alpha, alpha), boxes of both.

    The partner is another sample of the batch (already augmented); uint8 results are truncated
    like Ultralytics' ``astype(np.uint8)``. Samples not chosen (probability 1 - p) keep r = 1 and
    get no partner boxes.
    """

    def __init__(
        self,
        *,
        p: float = 1.0,
        alpha: int = 32,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__(generator)
        self.p = check_probability("p", p)
        if int(alpha) != alpha or alpha < 1:
            raise UsageError(f"alpha must be a positive integer, got {alpha!r}")
        self.alpha = int(alpha)

    def sample(self, batch: Batch) -> Params:
        bsz, dev, g = len(batch), batch.images.device, self.generator
        offset = rnd.randint(g, 1, max(bsz, 2), (bsz,), dev)
        partner = (torch.arange(bsz, device=dev) + offset) % bsz
        ratio = rnd.beta_integer(g, self.alpha, self.alpha, (bsz,), dev)
        chosen = rnd.bernoulli(g, (bsz,), self.p, dev)
        return {"partner": partner, "ratio": torch.where(chosen, ratio, 1.0), "apply": chosen}

    def apply(self, batch: Batch, params: Params) -> Batch:
        partner, ratio, chosen = params["partner"], params["ratio"], params["apply"]
        r = ratio.to(torch.float32)[:, None, None, None]
        other = batch.images[partner].to(torch.float32)
        mixed = batch.images.to(torch.float32) * r + other * (1 - r)
        if batch.images.dtype == torch.uint8:
            images = mixed.clamp_(0, 255).to(torch.uint8)  # truncation, as astype(np.uint8)
        else:
            images = mixed.to(batch.images.dtype)
        other_mask = batch.mask[partner] & chosen[:, None]
        other_boxes = torch.where(other_mask[..., None], batch.boxes[partner], 0.0)
        other_classes = torch.where(other_mask, batch.classes[partner], -1)
        sizes = batch.sizes
        if sizes is not None:
            sizes = torch.where(chosen[:, None], torch.maximum(sizes, sizes[partner]), sizes)
        # The partner's per-box extras come with its boxes, in the added slots.
        per_box = batch.per_box()
        theirs = where_kept({name: value[partner] for name, value in per_box.items()}, other_mask)
        extras = {
            **batch.extras,
            **{name: torch.cat([value, theirs[name]], dim=1) for name, value in per_box.items()},
        }
        return batch.replace(
            images=images,
            boxes=torch.cat([batch.boxes, other_boxes.to(batch.boxes.dtype)], dim=1),
            classes=torch.cat([batch.classes, other_classes], dim=1),
            mask=torch.cat([batch.mask, other_mask], dim=1),
            sizes=sizes,
            extras=extras,
        )
