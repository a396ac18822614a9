"""Prepared samples in input order, each prepared in this process or in a worker.

Only samples whose preparation decodes, resizes or encodes go to worker processes; an
already-sized array stored raw is prepared here (shipping it to a worker would pickle its pixels
there and back for nothing). Results come back in input order from a bounded window, so memory
stays bounded whatever the input length. An invalid sample comes back as its error (the caller
raises it or skips it), in order, like any other result. Without workers, samples that need
only checks (small arrays stored raw) are read and checked in blocks (`detfmt.writing.blocks`).
"""

from __future__ import annotations

import collections
from collections.abc import Iterable, Iterator
from concurrent.futures import BrokenExecutor, Future
from typing import Any

from detfmt.errors import InvalidSampleError, WriteError
from detfmt.writing import blocks, processes
from detfmt.writing.blocks import Block
from detfmt.writing.prepare import Prepared, Rules, needs_worker, prepare

__all__ = ["Outcome", "prepared_stream"]

#: a Block stands for its samples from the index on
Outcome = tuple[int, Prepared | Block | InvalidSampleError]

_rules: Rules | None = None  # set in each worker once, by the pool initializer


def _set_rules(rules: Rules) -> None:
    global _rules
    _rules = rules


def _prepare_in_worker(index: int, sample: Any) -> Prepared | InvalidSampleError:
    """`prepare` in a worker: a raw payload is a memoryview, which cannot be pickled back, so
    it returns as bytes; an invalid sample returns its error instead of raising it."""
    assert _rules is not None
    try:
        item = prepare(index, sample, _rules)
    except InvalidSampleError as error:
        return error
    if isinstance(item.payload, memoryview):
        item.payload = item.payload.tobytes()
    return item


def _prepare_here(index: int, sample: Any, rules: Rules, keep: bool
                  ) -> Prepared | InvalidSampleError:
    try:
        item = prepare(index, sample, rules)
    except InvalidSampleError as error:
        return error
    if keep and isinstance(item.payload, memoryview):
        # it waits behind samples still in workers: the caller may reuse its buffer meanwhile
        item.payload = item.payload.tobytes()
    return item


def _outcome(index: int, future: Future) -> Prepared | InvalidSampleError:
    try:
        return future.result()
    except BrokenExecutor as error:
        raise WriteError(f"a worker process died while preparing sample {index} (killed, or "
                         "out of memory?); nothing was published", index=index) from error


def prepared_stream(samples: Iterable[Any], rules: Rules, workers: int) -> Iterator[Outcome]:
    """(index, prepared sample or its InvalidSampleError) for every input sample, in order."""
    if workers <= 0 and blocks.applies(rules):
        yield from blocks.blocked_stream(samples, rules)
        return
    if workers <= 0:
        for index, sample in enumerate(samples):
            yield index, _prepare_here(index, sample, rules, keep=False)
        return
    pool = None
    pending: collections.deque[tuple[int, Future | Prepared | InvalidSampleError]] = \
        collections.deque()
    in_flight = 0
    window = 4 * workers
    finished = False
    try:
        for index, sample in enumerate(samples):
            if needs_worker(sample, rules):
                if pool is None:
                    pool = processes.process_pool(workers, _set_rules, (rules,))
                pending.append((index, pool.submit(_prepare_in_worker, index, sample)))
                in_flight += 1
            elif not pending:
                yield index, _prepare_here(index, sample, rules, keep=False)
                continue
            else:
                pending.append((index, _prepare_here(index, sample, rules, keep=True)))
            while pending and (in_flight >= window or not isinstance(pending[0][1], Future)
                               or pending[0][1].done()):
                first, result = pending.popleft()
                if isinstance(result, Future):
                    in_flight -= 1
                    result = _outcome(first, result)
                yield first, result
        while pending:
            first, result = pending.popleft()
            yield first, _outcome(first, result) if isinstance(result, Future) else result
        finished = True
    finally:
        if pool is not None:
            processes.stop_pool(pool, kill=not finished)
