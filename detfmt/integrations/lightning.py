"""`DetfmtDataModule`: a Lightning ``LightningDataModule`` over detfmt datasets.

``train_dataloader()`` / ``val_dataloader()`` return `AugmentedBatches` over a
`detfmt.torch.Loader` (threaded gather, spec-defined order, exact resume), with the
augmentation and the model's target converter run in the loader's threads. The loaders are
built in each process after Lightning has set up distributed training, so every rank reads its
own share of each global batch (the loader takes rank and world size from
``torch.distributed``). The module's ``state_dict`` carries the training loader's position, so
a checkpoint resumes the data order exactly.
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from collections.abc import Callable
from typing import Any

try:
    import lightning as L
except ImportError as error:  # pragma: no cover - exercised only without lightning
    raise ImportError(
        "detfmt.integrations.lightning needs Lightning: pip install 'detfmt[lightning]'"
    ) from error

from detfmt.errors import UsageError
from detfmt.integrations.pipeline import AugmentedBatches
from detfmt.torch.batch import Batch


class DetfmtDataModule(L.LightningDataModule):
    """Train/val loaders from detfmt datasets (paths, URLs or open datasets).

    Args:
        train, val: the datasets (val optional).
        batch_size: per-rank batch size.
        convert: ``Batch -> model input`` (e.g. ``to_torchvision``, ``to_hf_detection``), run on
            the loader's threads; None yields `Batch` es.
        train_transform, val_transform: ``detfmt.augment`` pipelines (or None).
        seed: the loader's order seed (the epoch order is a pure function of seed and epoch).
        num_threads: the loader's gather threads; ``augment_threads``: torch/OpenCV threads
            of each loader thread for the augmentation (the loader's ``transform_threads``).
        loader_options: more ``detfmt.torch.Loader`` keyword arguments (``sampling``,
            ``delivery=Delivery(canvas=..., io=...)``...; ``num_threads`` is set in its delivery).
    """

    def __init__(
        self,
        train: str | os.PathLike[str] | Any,
        val: str | os.PathLike[str] | Any = None,
        *,
        batch_size: int = 16,
        convert: Callable[[Batch], Any] | None = None,
        train_transform: Callable[[Batch], Batch] | None = None,
        val_transform: Callable[[Batch], Batch] | None = None,
        seed: int = 0,
        num_threads: int | None = None,
        augment_threads: int | None = None,
        prefetch: int = 2,
        loader_options: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        self.train_source, self.val_source = train, val
        self.batch_size = int(batch_size)
        self.convert = convert
        self.train_transform, self.val_transform = train_transform, val_transform
        self.seed = int(seed)
        self.num_threads, self.augment_threads = num_threads, augment_threads
        self.prefetch = int(prefetch)
        self.loader_options = dict(loader_options or {})
        self._train: AugmentedBatches | None = None
        self._pending_state: dict[str, Any] | None = None

    def _loader_options(self) -> dict[str, Any]:
        """``loader_options`` with ``num_threads`` in their `Delivery` (the former flat delivery
        keywords in ``loader_options`` are folded in, with a DeprecationWarning)."""
        from detfmt.torch.settings import LEGACY_KEYWORDS, Delivery

        options = dict(self.loader_options)
        flat = {k: options.pop(k) for k in list(options) if LEGACY_KEYWORDS.get(k) is Delivery}
        delivery = options.pop("delivery", None)
        if flat:
            if delivery is not None:
                raise UsageError(f"{sorted(flat)} belong in loader_options['delivery']")
            warnings.warn(f"loader_options {sorted(flat)} are deprecated: pass "
                          "loader_options={'delivery': Delivery(...)}", DeprecationWarning,
                          stacklevel=3)
            delivery = Delivery(**flat)
        if self.num_threads is not None:
            delivery = dataclasses.replace(delivery or Delivery(), num_threads=self.num_threads)
        return {**options, "delivery": delivery}

    def _batches(self, source: Any, shuffle: bool, transform: Any) -> AugmentedBatches:
        from detfmt.torch import Loader

        loader = Loader(
            source,
            self.batch_size,
            shuffle=shuffle,
            seed=self.seed,
            drop_last=None if shuffle else False,
            **self._loader_options(),
        )
        return AugmentedBatches(
            loader, transform, self.convert, prefetch=self.prefetch, threads=self.augment_threads
        )

    def train_dataloader(self) -> AugmentedBatches:
        if self._train is None:
            self._train = self._batches(self.train_source, True, self.train_transform)
            if self._pending_state is not None:
                self._train.load_state_dict(self._pending_state)
                self._pending_state = None
        return self._train

    def val_dataloader(self) -> AugmentedBatches | list[Any]:
        if self.val_source is None:
            return []
        return self._batches(self.val_source, False, self.val_transform)

    def state_dict(self) -> dict[str, Any]:
        """The training loader's resume state (saved in Lightning checkpoints)."""
        if self._train is None:
            return {"loader": self._pending_state} if self._pending_state is not None else {}
        return {"loader": self._train.state_dict()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        loader_state = state_dict.get("loader")
        if loader_state is None:
            return
        if self._train is None:
            self._pending_state = loader_state
        else:
            self._train.load_state_dict(loader_state)
