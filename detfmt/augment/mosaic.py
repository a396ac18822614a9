"""Mix modules: `Mosaic` (2x2, Ultralytics ``_mosaic4``) and `MixUp` (Beta(32, 32) blend).

Both widen the box slots (M -> 4M, M -> 2M) so shapes stay static; `compact` in
`detfmt.augment.targets` trims them back.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import torch
from torch import nn

from detfmt.augment import _backend
from detfmt.augment import _random as rnd
from detfmt.augment._base import Augmentation, Params, check_probability, fill_for, image_hw
from detfmt.augment._matrix import clip_boxes
from detfmt.augment._memory import channels_last, empty_hwc
from detfmt.augment.sanitize import non_empty
from detfmt.errors import UsageError
from detfmt.torch.batch import Batch

if TYPE_CHECKING:
    import numpy as np

    from detfmt.augment._opencv import Tile, TiledSource

_CANVAS_CHUNK = 4


class _RingBuffer(nn.Module):
    """The last ``capacity`` samples (images, boxes, classes, mask, sizes) on the batch device."""

    def __init__(self, capacity: int) -> None:
        super().__init__()
        self.capacity = capacity
        self.filled = 0
        self.cursor = 0
        self.images: torch.Tensor | None = None
        self.boxes: torch.Tensor | None = None
        self.classes: torch.Tensor | None = None
        self.mask: torch.Tensor | None = None
        self.sizes: torch.Tensor | None = None

    def push(self, batch: Batch, sizes: torch.Tensor) -> None:
        if self.images is None:
            n = self.capacity
            # Same memory layout as the batch (channels_last from the loader): the push and the
            # tile copies out of the buffer are then plain copies, not transposes (~3x faster).
            layout = (
                torch.channels_last
                if batch.images.dim() == 4
                and batch.images.is_contiguous(memory_format=torch.channels_last)
                else torch.contiguous_format
            )
            self.images = torch.empty(
                (n, *batch.images.shape[1:]),
                dtype=batch.images.dtype,
                device=batch.images.device,
                memory_format=layout,
            ).zero_()
            self.boxes = batch.boxes.new_zeros((n, *batch.boxes.shape[1:]))
            self.classes = batch.classes.new_full((n, *batch.classes.shape[1:]), -1)
            self.mask = batch.mask.new_zeros((n, *batch.mask.shape[1:]))
            self.sizes = sizes.new_zeros((n, 2))
        if self.images.shape[1:] != batch.images.shape[1:] or (
            self.boxes.shape[1:] != batch.boxes.shape[1:]
        ):
            raise UsageError("Mosaic ring buffer needs the same image shape and box slots")
        fields = (
            (self.images, batch.images),
            (self.boxes, batch.boxes),
            (self.classes, batch.classes),
            (self.mask, batch.mask),
            (self.sizes, sizes.to(self.sizes.dtype)),
        )
        # Sample j goes to slot (cursor + j) % capacity; only the last `capacity` samples
        # survive. At most two contiguous runs of slots: slice copies, not an index_put (for 32
        # 640x640 images on one CPU thread 4.8 ms instead of 40 ms).
        n = len(batch)
        skip = max(0, n - self.capacity)
        count = n - skip
        start = (self.cursor + skip) % self.capacity
        first = min(count, self.capacity - start)
        for store, value in fields:
            store[start : start + first].copy_(value[skip : skip + first])
            store[: count - first].copy_(value[skip + first :])
        self.cursor = (self.cursor + len(batch)) % self.capacity
        self.filled = min(self.capacity, self.filled + len(batch))


def _content_sizes(batch: Batch) -> torch.Tensor:
    if batch.sizes is not None:
        return batch.sizes.to(torch.int64)
    hw = torch.tensor(image_hw(batch.images), device=batch.images.device)
    return hw.expand(len(batch), 2).clone()


class Mosaic(Augmentation):
    """Ultralytics 2x2 mosaic on a (2H, 2W) canvas filled with 114.

    Each sample is tile 0 (top-left of the centre); three partners fill the other quadrants.
    The centre is ``int(U(W/2, 3W/2)), int(U(H/2, 3H/2))``; each tile's valid region
    (``batch.sizes``, else the whole image) touches the centre with one corner. Boxes are shifted,
    clipped to the canvas and zero-area ones dropped; follow with ``RandomAffine(size=(H, W))``
    (Ultralytics' border of -size/2). Samples not chosen (probability 1 - p) are letterboxed in
    the middle of the canvas, so the same affine reproduces Ultralytics' no-mosaic path.

    Partners are drawn uniformly from the batch, or from the batch plus a ring buffer of the
    last ``buffer_size`` samples (Ultralytics draws from recent images). With a buffer, replay
    needs the same buffer contents.
    """

    _force_gather = False  # tests: use the static-shape gather on CPU too

    def __init__(
        self,
        *,
        p: float = 1.0,
        buffer_size: int = 0,
        fill: float = 114.0,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__(generator)
        self.p = check_probability("p", p)
        if buffer_size < 0:
            raise UsageError(f"buffer_size must be >= 0, got {buffer_size!r}")
        self.fill = float(fill)
        self.buffer = _RingBuffer(int(buffer_size)) if buffer_size > 0 else None

    def sample(self, batch: Batch) -> Params:
        bsz, dev, g = len(batch), batch.images.device, self.generator
        height, width = image_hw(batch.images)
        pool = bsz + (self.buffer.filled if self.buffer is not None else 0)
        partners = rnd.randint(g, 0, pool, (bsz, 3), dev)
        xc = torch.floor(rnd.uniform(g, (bsz,), width / 2, 1.5 * width, dev, torch.float64))
        yc = torch.floor(rnd.uniform(g, (bsz,), height / 2, 1.5 * height, dev, torch.float64))
        return {
            "tiles": torch.cat([torch.arange(bsz, device=dev)[:, None], partners], dim=1),
            "center": torch.stack([xc, yc], dim=1).to(torch.int64),
            "apply": rnd.bernoulli(g, (bsz,), self.p, dev),
        }

    def _gather(
        self, batch: Batch, tiles: torch.Tensor, with_images: bool
    ) -> tuple[torch.Tensor, ...]:
        """[images (B, 4, H, W, 3),] boxes, classes, mask (B, 4, M, ...), sizes (B, 4, 2)."""
        sizes = _content_sizes(batch)
        fields = [batch.boxes, batch.classes, batch.mask, sizes]
        if with_images:
            fields.insert(0, batch.images.permute(0, 2, 3, 1))
        if self.buffer is not None and self.buffer.filled > 0:
            buf = self.buffer
            n = buf.filled
            extra = [buf.boxes[:n], buf.classes[:n], buf.mask[:n], buf.sizes[:n]]
            if with_images:
                extra.insert(0, buf.images[:n].permute(0, 2, 3, 1))
            in_batch = tiles < len(batch)
            local = tiles.clamp(max=len(batch) - 1)
            remote = (tiles - len(batch)).clamp(min=0)
            out = []
            for a, b in zip(fields, extra, strict=True):
                shape = (*tiles.shape, *[1] * (a.ndim - 1))
                out.append(torch.where(in_batch.view(shape), a[local], b[remote].to(a.dtype)))
            return tuple(out)
        return tuple(f[tiles] for f in fields)

    def _by_slices(self, batch: Batch) -> bool:
        """Eager CPU copies rectangles (exact, cheap); elsewhere one static-shape gather."""
        return (
            batch.images.device.type == "cpu"
            and not self._force_gather
            and not batch.images.requires_grad
            and not torch.compiler.is_compiling()
        )

    def apply(self, batch: Batch, params: Params) -> Batch:
        by_slices = self._by_slices(batch)
        with _backend.small_ops(batch.images):
            out, placement = self._layout(batch, params, with_images=not by_slices)
        make = self._canvas_by_slices if by_slices else self._canvas
        canvas = make(batch, placement)
        if self.buffer is not None:
            self.buffer.push(batch, _content_sizes(batch))
        return out.replace(images=canvas)

    def can_defer(self, batch: Batch) -> bool:
        """Whether `apply_deferred` can describe the canvas instead of building it."""
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
        ring buffer, whose slots the tiles may point into).
        """
        from detfmt.augment._opencv import TiledSource

        height, width = image_hw(batch.images)
        out, placement = self._layout(batch, params, with_images=False)
        # OpenCV reads HWC rows; a planar batch would be copied per tile otherwise.
        layout = batch.replace(images=channels_last(batch.images))
        hwc, rects = self._rectangles(layout, placement)
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
                self.buffer.push(batch, _content_sizes(batch))

        return out.replace(images=placeholder), source, finish

    def _layout(
        self, batch: Batch, params: Params, with_images: bool
    ) -> tuple[Batch, tuple[torch.Tensor, ...]]:
        """The boxes of the mosaic, and where each tile goes.

        Returns the batch with boxes, classes, mask and sizes of the canvas (images unchanged)
        and the placement: (tiles or gathered images, ox, oy, h, w, xc, yc, chosen, center).
        """
        height, width = image_hw(batch.images)
        tiles, center, chosen = params["tiles"], params["center"], params["apply"]
        gathered = self._gather(batch, tiles, with_images=with_images)
        images = gathered[0] if with_images else tiles
        boxes, classes, mask, sizes = gathered[-4:]
        h, w = sizes[..., 0], sizes[..., 1]  # (B, 4)
        xc, yc = center[:, 0:1], center[:, 1:2]
        ox = torch.cat([xc - w[:, 0:1], xc, xc - w[:, 2:3], xc], dim=1)
        oy = torch.cat([yc - h[:, 0:1], yc - h[:, 1:2], yc, yc], dim=1)
        # Not chosen: the sample alone, letterboxed in the middle of the canvas.
        solo_x = width // 2 + torch.div(width - w[:, 0:1], 2, rounding_mode="floor")
        solo_y = height // 2 + torch.div(height - h[:, 0:1], 2, rounding_mode="floor")
        ox = torch.where(chosen[:, None], ox, solo_x.expand(-1, 4))
        oy = torch.where(chosen[:, None], oy, solo_y.expand(-1, 4))
        shift = torch.stack([ox, oy, ox, oy], dim=-1).to(boxes.dtype)[:, :, None]
        moved = clip_boxes(boxes + shift, 2 * height, 2 * width)
        used = torch.ones_like(chosen[:, None]).expand(-1, 4).clone()
        used[:, 1:] = chosen[:, None]
        keep = mask & used[..., None] & non_empty(moved)
        bsz, m = boxes.shape[0], boxes.shape[2]
        keep = keep.reshape(bsz, 4 * m)
        moved = moved.reshape(bsz, 4 * m, 4)
        classes = classes.reshape(bsz, 4 * m)
        sizes_out = None
        if batch.sizes is not None:
            sizes_out = (
                torch.tensor(
                    [2 * height, 2 * width], dtype=batch.sizes.dtype, device=batch.sizes.device
                )
                .expand(bsz, 2)
                .clone()
            )
        out = batch.replace(
            boxes=torch.where(keep[..., None], moved, 0.0).to(batch.boxes.dtype),
            classes=torch.where(keep, classes, torch.full_like(classes, -1)),
            mask=keep,
            sizes=sizes_out,
        )
        return out, (images, ox, oy, h, w, xc, yc, chosen, center)

    def _rectangles(
        self, batch: Batch, placement: tuple[torch.Tensor, ...]
    ) -> tuple[np.ndarray, list[list[Tile]]]:
        """Each canvas as rectangles of tiles (reads the parameters on the host).

        Returns the batch as a (B, H, W, C) numpy view and, per sample, `Tile` s: canvas
        ``[y0:y1, x0:x1]`` comes from ``array[y0 - top : y1 - top, x0 - left : x1 - left]``.
        """
        from detfmt.augment._opencv import Tile

        tiles, ox, oy, h, w, _, _, chosen, center = placement
        bsz = len(batch)
        height, width = image_hw(batch.images)
        # numpy views: a strided rectangle copy is a row memcpy there, while torch's copy_ of
        # small strided views costs several times more on CPU (and on a busy 2-core box, more).
        hwc = batch.images.permute(0, 2, 3, 1).numpy()
        t, oxs, oys, hs, ws = (x.tolist() for x in (tiles, ox, oy, h, w))
        centres, picked = center.tolist(), chosen.tolist()
        rects: list[list[Tile]] = []
        for b in range(bsz):
            xc, yc = centres[b]
            mine: list[Tile] = []
            for q in range(4 if picked[b] else 1):
                if picked[b]:
                    qx0, qx1 = (0, xc) if q in (0, 2) else (xc, 2 * width)
                    qy0, qy1 = (0, yc) if q < 2 else (yc, 2 * height)
                else:
                    qx0, qx1, qy0, qy1 = 0, 2 * width, 0, 2 * height
                left, top = oxs[b][q], oys[b][q]
                x0, x1 = max(left, qx0), min(left + ws[b][q], qx1)
                y0, y1 = max(top, qy0), min(top + hs[b][q], qy1)
                if x1 <= x0 or y1 <= y0:
                    continue
                index = t[b][q]
                if index < bsz:
                    array = hwc[index]
                else:
                    array = self.buffer.images[index - bsz].permute(1, 2, 0).numpy()
                mine.append(Tile(array, x0, y0, x1, y1, left, top))
            rects.append(mine)
        return hwc, rects

    def _canvas_by_slices(self, batch: Batch, placement: tuple[torch.Tensor, ...]) -> torch.Tensor:
        """The same canvas as `_canvas`, by rectangle copies."""
        height, width = image_hw(batch.images)
        hwc, rects = self._rectangles(batch, placement)
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

    def _canvas(self, batch: Batch, placement: tuple[torch.Tensor, ...]) -> torch.Tensor:
        """Copy tiles into the canvas by index (exact, no interpolation).

        Runs over chunks of samples so the int64 index stays small on CPU.
        """
        tiles, ox, oy, h, w, xc, yc, chosen, _ = placement
        bsz, _, height, width, channels = tiles.shape
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
            flat = (tile.view_as(sy) * height + sy.clamp(0, height - 1)) * width
            flat = flat + sx.clamp(0, width - 1)
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
        return batch.replace(
            images=images,
            boxes=torch.cat([batch.boxes, other_boxes.to(batch.boxes.dtype)], dim=1),
            classes=torch.cat([batch.classes, other_classes], dim=1),
            mask=torch.cat([batch.mask, other_mask], dim=1),
            sizes=sizes,
        )
