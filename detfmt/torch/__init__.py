"""Torch adapter: batches as uint8 tensors (torch is imported only here and in detfmt.augment).

- `Loader`: threaded, prefetching batches with reusable buffers (the fast path), over 1.0
  directories and sharded (1.1) roots, local or remote (elastic order, SPEC §19.6).
- `DetectionDataset` + `collate`: a map-style Dataset for `DataLoader(num_workers=...)`.
- `RingDataLoader`: DataLoader workers that fill preallocated shared buffers (no per-batch shm).
"""

from detfmt.torch.batch import Batch
from detfmt.torch.dataset import DetectionDataset, RingDataLoader, collate
from detfmt.torch.loader import Loader

__all__ = ["Batch", "DetectionDataset", "Loader", "RingDataLoader", "collate"]
