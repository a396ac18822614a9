"""Torch adapter: batches as uint8 tensors (torch is imported only here and in detfmt.augment)."""

from detfmt.torch.batch import Batch

__all__ = ["Batch"]
