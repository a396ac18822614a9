"""Torch adapter: batches as uint8 tensors (torch is imported only here and in detfmt.augment).

- `Loader`: threaded, prefetching batches with reusable buffers (the fast path), over any
  detfmt dataset: a 1.0 directory, a sharded root, local or remote; `Sampling` (in which order)
  and `Delivery` (how batches are made) group its settings.
- `DetectionDataset` + `collate`: a map-style Dataset for `DataLoader(num_workers=...)`.
- `RingDataLoader`: DataLoader workers that fill preallocated shared buffers (no per-batch shm).
"""

from detfmt.torch.batch import Batch
from detfmt.torch.dataset import DetectionDataset, collate
from detfmt.torch.loader import Loader
from detfmt.torch.ring_loader import RingDataLoader
from detfmt.torch.settings import Delivery, Sampling

__all__ = [
    "Batch",
    "Delivery",
    "DetectionDataset",
    "Loader",
    "RingDataLoader",
    "Sampling",
    "collate",
]
