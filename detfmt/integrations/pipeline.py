"""`AugmentedBatches`: a loader's batches, augmented and converted (for the integrations).

The work runs in the `detfmt.torch.Loader` itself (``Loader(transform=, convert=)``): each
batch is augmented and converted in the loader's gather threads, in epoch order, while the
model trains on the previous one, with the loader's own thread budget (a trainer that calls
``torch.set_num_threads(1)``, as Ultralytics does, does not shrink it). This class only puts
the three pieces together under the names the integrations use; its ``state_dict`` is the
loader's, which counts exactly the batches handed to the consumer.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

from detfmt.errors import UsageError
from detfmt.torch.batch import Batch
from detfmt.torch.loader import Loader

__all__ = ["AugmentedBatches"]


class AugmentedBatches:
    """Iterate ``loader``, each batch through ``transform`` then ``convert``.

    Args:
        loader: a `detfmt.torch.Loader` (the transform and convert run in its threads; they
            become its ``transform``/``convert``), or any iterable of `Batch` (they then run in
            the consumer's ``next()``).
        transform: a ``detfmt.augment`` module (or any ``Batch -> Batch`` callable), or None.
        convert: ``Batch -> anything`` (a framework's batch format), or None for the `Batch`.
        prefetch: batches in flight ahead of the consumer (sets the loader's ``prefetch``
            when given).
        threads: torch and OpenCV-backend threads of each loader thread (the loader's
            ``transform_threads``); None keeps the loader's.
    """

    def __init__(
        self,
        loader: Iterable[Batch],
        transform: Callable[[Batch], Batch] | None = None,
        convert: Callable[[Batch], Any] | None = None,
        *,
        prefetch: int | None = None,
        threads: int | None = None,
    ) -> None:
        if prefetch is not None and (isinstance(prefetch, bool) or not isinstance(prefetch, int)
                                     or prefetch < 0):
            raise UsageError(f"prefetch must be an int >= 0, got {prefetch!r}")
        if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int)
                                    or threads < 1):
            raise UsageError(f"threads must be an int >= 1, got {threads!r}")
        self.loader = loader
        self._transform: Callable[[Batch], Batch] | None = None
        self._convert: Callable[[Batch], Any] | None = None
        if isinstance(loader, Loader):
            if threads is not None:
                loader.transform_threads = threads
            if prefetch:
                loader.prefetch = prefetch
        self.transform = transform
        self.convert = convert

    @property
    def transform(self) -> Callable[[Batch], Batch] | None:
        return self.loader.transform if isinstance(self.loader, Loader) else self._transform

    @transform.setter
    def transform(self, transform: Callable[[Batch], Batch] | None) -> None:
        if isinstance(self.loader, Loader):
            self.loader.transform = transform
        else:
            self._transform = transform

    @property
    def convert(self) -> Callable[[Batch], Any] | None:
        return self.loader.convert if isinstance(self.loader, Loader) else self._convert

    @convert.setter
    def convert(self, convert: Callable[[Batch], Any] | None) -> None:
        if convert is not None and not callable(convert):
            raise UsageError(f"convert must be callable, got {type(convert).__name__}")
        if isinstance(self.loader, Loader):
            self.loader.convert = convert
        else:
            self._convert = convert

    def __len__(self) -> int:
        return len(self.loader)  # type: ignore[arg-type]

    def set_epoch(self, epoch: int) -> None:
        """Pass ``set_epoch`` through to the loader (DistributedSampler style)."""
        if hasattr(self.loader, "set_epoch"):
            self.loader.set_epoch(epoch)

    def state_dict(self) -> dict[str, Any]:
        """The loader's resume state: batches handed to the consumer, not those in flight."""
        if not hasattr(self.loader, "state_dict"):
            raise UsageError(f"{type(self.loader).__name__} has no state_dict")
        return self.loader.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if not hasattr(self.loader, "load_state_dict"):
            raise UsageError(f"{type(self.loader).__name__} has no load_state_dict")
        self.loader.load_state_dict(state)

    def process(self, batch: Batch) -> Any:
        """Augment and convert one batch (what runs per batch)."""
        if self.transform is not None:
            batch = self.transform(batch)
        return self.convert(batch) if self.convert is not None else batch

    def __iter__(self) -> Iterator[Any]:
        if isinstance(self.loader, Loader):
            return iter(self.loader)
        return (self.process(batch) for batch in self.loader)
