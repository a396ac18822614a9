"""`AugmentedBatches`: batches from a loader, augmented and converted on a background thread.

The trainers call the model on the main thread; augmenting there too would serialise data and
compute. Here one producer thread pulls each `Batch` from the loader, runs the augmentation
pipeline and the target converter, and hands the result over a bounded queue, so the next
batch is prepared while the model trains on this one (the OpenCV backend and the loader's
copies release the GIL). The thread sets its own torch thread count, which is what the OpenCV
backend sizes its sample pool by: a trainer that calls ``torch.set_num_threads(1)`` on its
main thread (Ultralytics does, for its DataLoader workers) no longer shrinks it.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch

from detfmt.errors import UsageError
from detfmt.torch.batch import Batch

_DONE = object()


class _Failure:
    def __init__(self, error: BaseException) -> None:
        self.error = error


class AugmentedBatches:
    """Iterate ``loader`` (an iterable of `Batch`), apply ``transform`` then ``convert``.

    Args:
        loader: a `detfmt.torch.Loader` (or any iterable of `Batch`); ``len``, ``set_epoch``,
            ``state_dict`` and ``load_state_dict`` are passed through when it has them.
        transform: a ``detfmt.augment`` module (or any ``Batch -> Batch`` callable), or None.
        convert: ``Batch -> anything`` (a framework's batch format), or None for the `Batch`.
        prefetch: converted batches held ready ahead of the consumer (0: no thread, the work
            runs in the consumer's ``next()``).
        threads: torch (and so OpenCV-backend) threads for the producer; None keeps torch's.
    """

    def __init__(
        self,
        loader: Iterable[Batch],
        transform: Callable[[Batch], Batch] | None = None,
        convert: Callable[[Batch], Any] | None = None,
        *,
        prefetch: int = 2,
        threads: int | None = None,
    ) -> None:
        if prefetch < 0:
            raise UsageError(f"prefetch must be >= 0, got {prefetch!r}")
        if threads is not None and threads < 1:
            raise UsageError(f"threads must be >= 1, got {threads!r}")
        self.loader = loader
        self.transform = transform
        self.convert = convert
        self.prefetch = int(prefetch)
        self.threads = threads
        # The loader's state right after the last batch the consumer received: the producer
        # runs ahead, so the loader's own state counts batches still waiting in the queue.
        self._delivered: dict[str, Any] | None = None

    def __len__(self) -> int:
        return len(self.loader)  # type: ignore[arg-type]

    def set_epoch(self, epoch: int) -> None:
        """Pass ``set_epoch`` through to the loader (DistributedSampler style)."""
        if hasattr(self.loader, "set_epoch"):
            self.loader.set_epoch(epoch)

    def state_dict(self) -> dict[str, Any]:
        """The loader's resume state after the last batch the consumer received.

        Batches prefetched but not yet received are not counted: resuming from this state
        yields them again.
        """
        if not hasattr(self.loader, "state_dict"):
            raise UsageError(f"{type(self.loader).__name__} has no state_dict")
        if self._delivered is not None:
            return dict(self._delivered)
        return self.loader.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if not hasattr(self.loader, "load_state_dict"):
            raise UsageError(f"{type(self.loader).__name__} has no load_state_dict")
        self.loader.load_state_dict(state)
        self._delivered = None

    def _loader_state(self) -> dict[str, Any] | None:
        return self.loader.state_dict() if hasattr(self.loader, "state_dict") else None

    def process(self, batch: Batch) -> Any:
        """Augment and convert one batch (what the producer thread runs)."""
        if self.transform is not None:
            batch = self.transform(batch)
        return self.convert(batch) if self.convert is not None else batch

    def __iter__(self) -> Iterator[Any]:
        if self.prefetch == 0:
            for batch in self.loader:
                yield self.process(batch)
            return
        self._delivered = None
        ready: queue.Queue[Any] = queue.Queue(maxsize=self.prefetch)
        stop = threading.Event()

        def put(item: Any) -> bool:
            while not stop.is_set():
                try:
                    ready.put(item, timeout=0.1)
                    return True
                except queue.Full:
                    continue
            return False

        def produce() -> None:
            if self.threads is not None:
                torch.set_num_threads(self.threads)  # this thread's count only
            try:
                for batch in self.loader:
                    state = self._loader_state()
                    if not put((state, self.process(batch))):
                        return
            except BaseException as error:  # handed to the consumer, re-raised there
                put(_Failure(error))
                return
            put(_DONE)

        worker = threading.Thread(target=produce, name="detfmt-augment", daemon=True)
        worker.start()
        finished = False
        try:
            while True:
                item = ready.get()
                if item is _DONE:
                    finished = True
                    return
                if isinstance(item, _Failure):
                    raise item.error
                self._delivered, result = item
                yield result
        finally:
            stop.set()
            worker.join()
            if finished:
                self._delivered = None
            elif self._delivered is not None:
                # Stopped early: rewind the loader past the batches it prefetched, so the
                # next pass starts right after the last batch the consumer received.
                self.loader.load_state_dict(self._delivered)
