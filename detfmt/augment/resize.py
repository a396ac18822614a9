"""`ShortestEdgeResize`: the DETR family's resize (shortest edge to S, longest at most L)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from detfmt.augment._base import Augmentation, Params, image_hw
from detfmt.errors import UsageError
from detfmt.torch.batch import Batch


def shortest_edge_size(
    height: int, width: int, shortest_edge: int, longest_edge: int | None = None
) -> tuple[int, int]:
    """(height, width) after the resize: transformers' ``get_size_with_aspect_ratio`` (shortest
    edge to ``shortest_edge``, lowered so the longest stays within ``longest_edge``), with its
    integer rounding (``int()`` of the long side), so the sizes are the processors'."""
    size = shortest_edge
    raw_size = None
    if longest_edge is not None:
        low, high = float(min(height, width)), float(max(height, width))
        if high / low * size > longest_edge:
            raw_size = longest_edge * low / high
            size = round(raw_size)
    if (height <= width and height == size) or (width <= height and width == size):
        return height, width
    if width < height:
        long = raw_size if raw_size is not None else size
        return int(long * height / width), size
    long = raw_size if raw_size is not None else size
    return size, int(long * width / height)


class ShortestEdgeResize(Augmentation):
    """DETR's resize, as transformers' ``DetrImageProcessor`` does it with ``size=
    {"shortest_edge": S, "longest_edge": L}`` (defaults 800 and 1333, its own): each image's
    valid region (``batch.sizes``) scaled so its shortest edge is S and its longest at most L
    (`shortest_edge_size`), antialiased bilinear like PIL's and torchvision's resize (a
    downscale averages every source pixel, where the warps of `Letterbox` sample two), boxes
    scaled with it. Images go to the top-left of a canvas of the batch's largest result, the
    rest filled with ``fill``, and ``batch.sizes`` become the new sizes: `to_hf_detection`
    then pads and masks as the processors do. uint8 images stay uint8 (rounded).
    """

    def __init__(self, shortest_edge: int = 800, longest_edge: int | None = 1333, *,
                 fill: float = 0.0) -> None:
        super().__init__()
        if shortest_edge < 1 or (longest_edge is not None and longest_edge < shortest_edge):
            raise UsageError(f"need 1 <= shortest_edge <= longest_edge, got "
                             f"{(shortest_edge, longest_edge)}")
        self.shortest_edge = int(shortest_edge)
        self.longest_edge = None if longest_edge is None else int(longest_edge)
        self.fill = float(fill)

    def sample(self, batch: Batch) -> Params:
        return {}

    def apply(self, batch: Batch, params: Params) -> Batch:
        images = batch.images
        height, width = image_hw(images)
        sizes = batch.sizes
        if sizes is None:
            sizes = torch.tensor([height, width]).expand(len(batch), 2)
        regions = [(int(h), int(w)) for h, w in sizes.tolist()]
        targets = [shortest_edge_size(h, w, self.shortest_edge, self.longest_edge)
                   for h, w in regions]
        out_h = max((t[0] for t in targets), default=1)
        out_w = max((t[1] for t in targets), default=1)
        fill = round(self.fill) if images.dtype == torch.uint8 else self.fill
        out = torch.full((len(batch), images.shape[1], out_h, out_w), fill, dtype=images.dtype,
                         device=images.device)
        for i, ((h, w), (new_h, new_w)) in enumerate(zip(regions, targets, strict=True)):
            out[i, :, :new_h, :new_w] = _resize(images[i : i + 1, :, :h, :w], (new_h, new_w))[0]
        scale = torch.tensor([[nw / w, nh / h] * 2 for (h, w), (nh, nw) in zip(regions, targets,
                                                                               strict=True)],
                             dtype=torch.float32, device=batch.boxes.device).reshape(-1, 4)
        boxes = batch.boxes * scale[:, None, :]
        new_sizes = torch.tensor(targets, dtype=torch.int32).reshape(-1, 2)
        if batch.sizes is not None:
            new_sizes = new_sizes.to(batch.sizes.device)
        return batch.replace(images=out, boxes=boxes, sizes=new_sizes)


def _resize(image: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """One (1, C, h, w) image to ``size``, antialiased bilinear (PIL / torchvision's)."""
    if tuple(image.shape[-2:]) == size:
        return image
    if image.dtype == torch.uint8 and image.device.type == "cpu":  # torch's uint8 kernel
        return F.interpolate(image, size=size, mode="bilinear", antialias=True,
                             align_corners=False)
    out = F.interpolate(image.to(torch.float32), size=size, mode="bilinear", antialias=True,
                        align_corners=False)
    if image.dtype == torch.uint8:
        return out.round_().clamp_(0, 255).to(torch.uint8)
    return out.to(image.dtype)
