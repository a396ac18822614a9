"""``ds.batch(indices)`` into a NEW array against a per-sample copy loop into ``np.empty``
(issue 27 item 3): the same images, the same fresh allocation each call.

Sides, interleaved per round (order alternating), each timed over ``--reps`` calls:

- ``loop``: ``out = np.empty((B, H, W, 3)); out[j] = ds.read_image(i)`` per sample (the
  baseline: what a user writes by hand);
- ``batch``: ``ds.batch(indices)`` (labels too, as it always gathers them);
- ``batch_t1``: ``ds.batch(indices, num_threads=1)``;
- ``before``: ``ds.batch``'s allocation before issue 27 (a zero-filled page-aligned array, no
  padding pass, the same thread count) rebuilt from the engine's public pieces
  (``ds.engine.job/labels/fill``), so that before and after run in the same process (the fill
  itself is today's: the caller takes a share instead of waiting on the pool).

Data: ``--samples`` synthetic raw images of ``--size`` (H W; all the same, so no padding) and,
with ``--mixed``, sizes varying by up to 1/4 (padding to clear). Prints and writes (``--out``)
the medians of the ratios against ``loop`` and the load average before and after.

    python tools/bench_batch_new.py --out docs/bench/batch_new.md
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from benchpaths import load_average, load_line, publish

import detfmt


def write(path: Path, n: int, h: int, w: int, mixed: bool) -> None:
    rng = np.random.default_rng(0)
    samples = []
    for i in range(n):
        hh, ww = (h - int(rng.integers(0, h // 4)), w - int(rng.integers(0, w // 4))) if mixed \
            else (h, w)
        image = rng.integers(0, 256, (hh, ww, 3), dtype=np.uint8)
        samples.append({"image": image, "boxes": np.array([[1, 1, 9, 9]], np.float32),
                        "classes": np.array([i % 2], np.int32)})
    detfmt.write(samples, path, classes=["a", "b"], codec="raw")


def loop(ds, indices: list[int]) -> np.ndarray:
    sizes = [ds.read_image(i).shape for i in indices]
    h = max(s[0] for s in sizes)
    w = max(s[1] for s in sizes)
    out = np.empty((len(indices), h, w, 3), np.uint8)
    for j, i in enumerate(indices):
        image = ds.read_image(i)
        out[j, : image.shape[0], : image.shape[1]] = image
    return out


def before(ds, indices: list[int]) -> np.ndarray:
    engine = ds.engine
    job = engine.job(indices)
    h, w = job.shape
    b = len(job)
    raw = np.zeros(b * h * w * 3 + 4096, np.uint8)
    start = -raw.ctypes.data % 4096
    images = raw[start : start + b * h * w * 3].reshape(b, h, w, 3)
    engine.labels(job)
    threads = 1 if images.nbytes < (4 << 20) else min(b, min(8, os.cpu_count() or 1))
    engine.fill(job, images, None, num_threads=threads)
    return images


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=32)
    parser.add_argument("--size", type=int, nargs=2, default=(480, 640))
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    load_before = load_average()
    lines = [f"`python tools/bench_batch_new.py {' '.join(sys.argv[1:])}`", "",
             f"{args.samples} x {args.size[0]}x{args.size[1]} raw images, {args.rounds} "
             f"interleaved rounds of {args.reps} calls, medians of per-round ratios to `loop`.",
             "", "| data | side | ratio to loop (median) | min | max |", "|---|---|---|---|---|"]
    with tempfile.TemporaryDirectory() as tmp:
        for mixed in (False, True):
            path = Path(tmp) / f"ds{int(mixed)}"
            write(path, args.samples, *args.size, mixed)
            ds = detfmt.open(path)
            indices = list(range(args.samples))
            sides = {"loop": lambda ds=ds, indices=indices: loop(ds, indices),
                     "batch": lambda ds=ds, indices=indices: ds.batch(indices),
                     "batch_t1": lambda ds=ds, indices=indices: ds.batch(indices, num_threads=1),
                     "before": lambda ds=ds, indices=indices: before(ds, indices)}
            for fn in sides.values():
                fn()
            ratios: dict[str, list[float]] = {k: [] for k in sides if k != "loop"}
            names = list(sides)
            for r in range(args.rounds):
                times = {}
                for name in names if r % 2 == 0 else names[::-1]:
                    t0 = time.perf_counter()
                    for _ in range(args.reps):
                        sides[name]()
                    times[name] = time.perf_counter() - t0
                for name in ratios:
                    ratios[name].append(times["loop"] / times[name])
            data = "mixed sizes" if mixed else "same size"
            for name, values in ratios.items():
                lines.append(f"| {data} | {name} | {statistics.median(values):.2f}x | "
                             f"{min(values):.2f}x | {max(values):.2f}x |")
    lines += ["", load_line(load_before)]
    publish(lines, args.out)


if __name__ == "__main__":
    main()
