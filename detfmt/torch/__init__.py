"""Torch adapter: batches as uint8 tensors (torch is imported only here and in detfmt.augment).

- `Loader`: threaded, prefetching batches with reusable buffers (the fast path), over any
  detfmt dataset: a 1.0 directory, a sharded root, local or remote.
- `DetectionDataset` + `collate`: a map-style Dataset for `DataLoader(num_workers=...)`.
- `RingDataLoader`: DataLoader workers that fill preallocated shared buffers (no per-batch shm).
"""

from detfmt.torch.batch import Batch
from detfmt.torch.dataset import DetectionDataset, collate
from detfmt.torch.loader import Loader
from detfmt.torch.ring_loader import RingDataLoader

__all__ = [
    "Batch",
    "DetectionDataset",
    "Loader",
    "RingDataLoader",
    "collate",
]
