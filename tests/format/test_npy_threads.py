""".npy headers parsed from several threads at once (the loader's threads open shards lazily):
never the interpreter's "AST constructor recursion depth mismatch"."""

from __future__ import annotations

import gc
import threading
import time

import numpy as np

from detfmt.format import npy


def test_headers_parse_from_many_threads_with_thread_switches():
    header = npy.encode_header(np.dtype("<f4"), (1000, 300, 4))
    size = len(header) + 1000 * 300 * 4 * 4
    failures: list[BaseException] = []

    def parse() -> None:
        try:
            for _ in range(6000):
                assert npy.parse_header(header, size, "x.npy").shape == (1000, 300, 4)
        except BaseException as error:  # any failure fails the test below
            failures.append(error)

    def switch(phase: str, info: dict) -> None:  # a finalizer or GC callback that yields
        time.sleep(0)

    threshold = gc.get_threshold()
    gc.callbacks.append(switch)
    gc.set_threshold(50)
    try:
        threads = [threading.Thread(target=parse) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        gc.callbacks.remove(switch)
        gc.set_threshold(*threshold)
    assert failures == []
