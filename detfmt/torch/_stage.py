"""The loader's transform stage: each gathered batch augmented (and converted) in epoch order,
in the gather threads, so augmentation overlaps the training step.

Why in order, one batch at a time: augmentation modules hold state across batches (`Mosaic`'s
buffer of recent samples, each module's ``last_params`` and generator), so running them on two
batches at once would race, and running them out of order would make a run depend on thread
timing. The batches are still gathered in parallel; whichever gather thread delivers the next
batch in order runs the transform on it and on any later ones already waiting, while the other
threads keep gathering. Parallelism inside a batch comes from the transform itself (the OpenCV
backend's per-sample pool, sized by the loader's ``transform_threads``).

Per-batch seeds: before each batch, every ``torch.Generator`` the transform holds is re-seeded
from (seed, epoch, position of the batch's first sample in the epoch order, generator number),
so a resumed run draws the same parameters for the same batches.
"""

from __future__ import annotations

import concurrent.futures as cf
import threading
from collections.abc import Callable
from typing import Any

import torch

from detfmt.order import epoch_key, mix64, stream_output

__all__ = ["AUGMENT_DOMAIN", "TransformStage", "augment_seed", "find_generators"]

AUGMENT_DOMAIN = 0x6175676D656E74  # "augment": keeps these seeds apart from the order's streams


def augment_seed(seed: int, epoch: int, position: int, k: int = 0) -> int:
    """The seed of generator ``k`` for the batch whose first sample is at ``position`` of the
    epoch order: ``x_k(x_position(mix64(k(seed, epoch) ^ AUGMENT_DOMAIN)))`` (SPEC O-1, O-2)."""
    domain = mix64(epoch_key(seed, epoch) ^ AUGMENT_DOMAIN)
    return stream_output(stream_output(domain, position), k)


def find_generators(transform: Any) -> list[torch.Generator]:
    """The distinct ``torch.Generator`` objects a transform draws from: the ``generator``
    attribute of the transform and, for an ``nn.Module``, of each submodule (in module order)."""
    found: list[torch.Generator] = []
    seen: set[int] = set()
    modules = list(transform.modules()) if isinstance(transform, torch.nn.Module) else [transform]
    for module in modules:
        generator = getattr(module, "generator", None)
        if isinstance(generator, torch.Generator) and id(generator) not in seen:
            seen.add(id(generator))
            found.append(generator)
    return found


class TransformStage:
    """Runs ``process(t, item)`` for t = 0, 1, 2... in order, as items are offered by any thread;
    its results (or errors) land in one future per t."""

    def __init__(self, process: Callable[[int, Any], Any], release: Callable[[Any], None],
                 stop: threading.Event) -> None:
        self.process = process
        self.release = release  # frees an offered item that will never be processed
        self.stop = stop
        self.futures: dict[int, cf.Future] = {}
        self._ready: dict[int, tuple[Any, BaseException | None]] = {}
        self._next = 0
        self._draining = False
        self._lock = threading.Lock()

    @property
    def processed(self) -> int:
        """Items taken for processing so far (0..processed-1, in order)."""
        with self._lock:
            return self._next

    def expect(self, t: int) -> cf.Future:
        """The future of item ``t`` (call before offering it)."""
        future: cf.Future = cf.Future()
        with self._lock:
            self.futures[t] = future
        return future

    def offer(self, t: int, item: Any = None, error: BaseException | None = None) -> None:
        """Item ``t`` was gathered (or failed); process it and any waiting successors in order,
        unless another thread is already doing so."""
        with self._lock:
            self._ready[t] = (item, error)
            if self._draining:
                return
            self._draining = True
        self._drain()

    def _drain(self) -> None:
        while True:
            with self._lock:
                entry = self._ready.pop(self._next, None)
                if entry is None or self.stop.is_set():
                    if entry is not None:
                        self._ready[self._next] = entry  # left for `abandon`
                    self._draining = False
                    return
                t = self._next
                self._next += 1
                future = self.futures.pop(t)
            item, error = entry
            if error is not None:
                _settle(future, error=error)
                continue
            try:
                result = self.process(t, item)
            except BaseException as failure:  # handed to the consumer in order
                _settle(future, error=failure)
            else:
                _settle(future, result)
            del item, entry

    def abandon(self) -> None:
        """After the gather threads stopped: free the items never processed."""
        with self._lock:
            left = list(self._ready.values())
            self._ready.clear()
        for item, error in left:
            if error is None:
                self.release(item)


def _settle(future: cf.Future, result: Any = None, error: BaseException | None = None) -> None:
    """Complete ``future`` unless the consumer cancelled it meanwhile (the loader stopping)."""
    try:
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)
    except cf.InvalidStateError:
        pass
