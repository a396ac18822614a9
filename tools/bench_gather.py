"""Raw gather candidates side by side (issue 15 item 1): how a batch of raw images gets from the
mapping into a padded (B, H, W, 3) buffer, against a memcpy of the same bytes.

Candidates, each filling the same batches into the same two alternating buffers (padding of
the previous batch in that buffer cleared, as the Loader does):

- ``numpy``: `detfmt.reading.gather.Gather.fill` on its numpy path, one ``np.copyto`` per sample
(numpy
  releases the GIL for each copy), rows split over ``--threads`` threads;
- ``kernel``: the same `fill` with the native kernel loaded (`detfmt.reading.kernel`, numba: one
  ``nogil`` call per thread over a table of source addresses; only if numba is installed);
- ``memcpy``: ``np.copyto`` of one contiguous block of the mapping holding as many bytes as the
  batch's images, split over the threads (the limit: no strided destination, no bookkeeping).

Rounds are interleaved; each prints img/s and the ratios of the round; the summary gives
min/median/max of the ratios and the load average. Usage:

    python tools/bench_gather.py DATASET [--threads 1 2] [--rounds 7] [--batches 40]
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

import detfmt
from detfmt.reading import kernel as _kernel


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dataset")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--batches", type=int, default=40)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()

    ds = detfmt.open(args.dataset)
    engine = ds.engine
    b = args.batch_size
    rng = np.random.default_rng(0)
    jobs = [engine.job(rng.choice(len(ds), b, replace=False)) for _ in range(args.batches)]
    height = max(int(j.heights.max()) for j in jobs)
    width = max(int(j.widths.max()) for j in jobs)
    buffers = [ds.batch_buffer(b, canvas=(height, width))[: b * height * width * 3].reshape(
        b, height, width, 3) for _ in range(2)]  # page-aligned, as the Loader's
    blob = ds.blob
    pool = ThreadPoolExecutor(max(args.threads))
    memcpy_target = np.empty(b * height * width * 3, np.uint8)
    kernel = _kernel.raw_gather() if _kernel.load() else None

    def run_fill(threads: int) -> None:
        previous: list = [None, None]
        for k, job in enumerate(jobs):
            slot = k % 2
            previous[slot] = engine.fill(job, buffers[slot], 0, previous=previous[slot],
                                         num_threads=threads)

    def run_numpy(threads: int) -> None:
        _kernel._KERNEL = None
        try:
            run_fill(threads)
        finally:
            _kernel._KERNEL = kernel

    def run_memcpy(threads: int) -> None:
        for job in jobs:
            size = int((job.heights.astype(np.int64) * job.widths * 3).sum())
            lo = min(int(job.offsets.min()), blob.size - size)
            cuts = np.linspace(0, size, threads + 1).astype(np.int64).tolist()
            pairs = [(memcpy_target[cuts[t]:cuts[t + 1]], blob[lo + cuts[t]:lo + cuts[t + 1]])
                     for t in range(threads)]
            if threads == 1:
                np.copyto(*pairs[0])
            else:
                list(pool.map(lambda pair: np.copyto(*pair), pairs))

    candidates = {"numpy": run_numpy, "memcpy": run_memcpy}
    if kernel is not None:
        candidates["kernel"] = run_fill
        check = [np.zeros_like(buffers[0]) for _ in range(2)]
        for out, fn in zip(check, (run_numpy, run_fill), strict=True):
            buffers[0], saved = out, buffers[0]
            fn(1)
            buffers[0] = saved
        assert np.array_equal(check[0], check[1]), "the kernel and numpy disagree"
    else:
        print("numba is not installed (pip install detfmt[fast]): the kernel is skipped")
    for fn in candidates.values():
        fn(1)  # warm the page cache and the buffers

    images = len(jobs) * b
    print(f"{args.dataset}: {len(ds)} samples, canvas {height}x{width}, B={b}, "
          f"{args.batches} batches per measurement, load {os.getloadavg()}")
    for threads in args.threads:
        ratios: dict[str, list[float]] = {}
        for r in range(args.rounds):
            speed = {}
            for name, fn in candidates.items():
                t0 = time.perf_counter()
                fn(threads)
                speed[name] = images / (time.perf_counter() - t0)
            line = " ".join(f"{k} {v:6.0f}" for k, v in speed.items())
            for name in speed:
                if name != "memcpy":
                    ratios.setdefault(f"{name}/memcpy", []).append(speed[name] / speed["memcpy"])
            if "kernel" in speed:
                ratios.setdefault("kernel/numpy", []).append(speed["kernel"] / speed["numpy"])
            print(f"threads={threads} round {r}: {line} img/s")
        for key, values in ratios.items():
            print(f"threads={threads} {key}: min {min(values):.2f} median "
                  f"{statistics.median(values):.2f} max {max(values):.2f}")
    print(f"load after: {os.getloadavg()}, threads alive {threading.active_count()}")


if __name__ == "__main__":
    main()
