"""DataLoader compatibility: a map-style Dataset + collate.

- `DetectionDataset` is a standard ``torch.utils.data.Dataset`` (works with ``DistributedSampler``
  and any sampler) over any detfmt dataset. It pickles the dataset's location and identity only,
  so each worker re-opens it (and refuses a dataset replaced in between); items come from
  ``ds[i]`` (every check of the reader) and `collate` pads them into a `Batch`. Convenient, but a
  stock DataLoader then copies every batch into fresh shared memory.
- `RingDataLoader` (workers that gather whole batches into shared buffers) is a loader: it is
  in `detfmt.torch.ring_loader`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import torch.utils.data as tud

from detfmt.errors import UsageError
from detfmt.reading.protocol import DatasetLike
from detfmt.torch._reopen import Reopen
from detfmt.torch.batch import Batch
from detfmt.torch.loader import open_dataset

__all__ = ["DetectionDataset", "collate"]


class DetectionDataset(tud.Dataset):
    """Map-style dataset of samples: ``{"image", "boxes", "classes", "index", "size"}`` tensors,
    and ``"box_fields"``: the dataset's per-box fields (``iscrowd``, ``ann_id``...), (K,) each.

    ``image`` is (H, W, 3) uint8 (or (3, H, W) with ``layout="CHW"``), a copy the caller owns.
    """

    def __init__(self, ds_or_path: Any, layout: str = "HWC") -> None:
        if layout not in ("CHW", "HWC"):
            raise UsageError(f"layout must be 'CHW' or 'HWC', got {layout!r}")
        self._source = Reopen(open_dataset(ds_or_path))
        self.layout = layout
        self._len = len(self._source.ds)

    @property
    def ds(self) -> DatasetLike:
        return self._source.ds

    def __len__(self) -> int:
        return self._len

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        sample = self.ds[index]  # checks the index, the record and the labels
        h, w = sample.image.shape[:2]
        image = torch.from_numpy(np.array(sample.image))
        return {
            "image": image if self.layout == "HWC" else image.permute(2, 0, 1),
            "boxes": torch.from_numpy(np.asarray(sample.boxes, dtype=np.float32)),
            "classes": torch.from_numpy(np.asarray(sample.classes, dtype=np.int32)),
            "index": torch.tensor(sample.index, dtype=torch.int64),
            "size": torch.tensor([h, w], dtype=torch.int32),
            "box_fields": {
                f.name: torch.from_numpy(np.array(sample.fields[f.name]))
                for f in self.ds.schema.box_fields
            },
        }


def collate(samples: Sequence[dict[str, torch.Tensor]], pad_value: int = 0) -> Batch:
    """Pad a list of `DetectionDataset` items into one `Batch` (images padded bottom/right).

    Images come out as (B, 3, H, W) channels_last views of one HWC tensor, like the `Loader`.
    """
    if not samples:
        raise UsageError("collate needs at least one sample")
    hwc = [s["image"] if s["image"].shape[-1] == 3 and s["image"].dim() == 3 and
           s["image"].shape[0] != 3 else s["image"].permute(1, 2, 0) for s in samples]
    sizes = torch.stack([s["size"] for s in samples])
    height, width = int(sizes[:, 0].max()), int(sizes[:, 1].max())
    images = torch.full((len(samples), height, width, 3), pad_value, dtype=torch.uint8)
    for j, image in enumerate(hwc):
        images[j, : image.shape[0], : image.shape[1]] = image
    m = max(int(s["boxes"].shape[0]) for s in samples)
    boxes = torch.zeros((len(samples), m, 4), dtype=torch.float32)
    classes = torch.full((len(samples), m), -1, dtype=torch.int32)
    mask = torch.zeros((len(samples), m), dtype=torch.bool)
    names = list(samples[0].get("box_fields", {}))
    fields = {name: torch.zeros((len(samples), m), dtype=samples[0]["box_fields"][name].dtype)
              for name in names}  # padding slots 0, as the Loader's
    for j, s in enumerate(samples):
        k = int(s["boxes"].shape[0])
        boxes[j, :k] = s["boxes"]
        classes[j, :k] = s["classes"]
        mask[j, :k] = True
        for name in names:
            fields[name][j, :k] = s["box_fields"][name]
    return Batch(
        images=images.permute(0, 3, 1, 2), boxes=boxes, classes=classes, mask=mask,
        sizes=sizes, indices=torch.stack([s["index"] for s in samples]),
        extras=fields, box_fields=tuple(names),  # the dataset's per-box fields
    )


def __getattr__(name: str) -> Any:
    """``detfmt.torch.dataset.RingDataLoader``, where it was in 0.1: import it from
    `detfmt.torch` (this path warns and goes in the next release)."""
    if name == "RingDataLoader":
        import warnings

        from detfmt.torch.ring_loader import RingDataLoader

        warnings.warn("detfmt.torch.dataset.RingDataLoader moved: import it from detfmt.torch",
                      DeprecationWarning, stacklevel=2)
        return RingDataLoader
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
