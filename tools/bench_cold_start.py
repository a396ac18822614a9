"""Cold start of an augmented loader (issue 27 item 2): the first ``yolo_train`` batch of a
fresh process with an empty numba cache (a new ``NUMBA_CACHE_DIR``) against the same with the
cache that run left (warm).

Each run is a subprocess that imports detfmt, opens a raw dataset, builds
``Loader(transform=yolo_train(imgsz))`` and takes one batch; it reports its CPU seconds (user +
system, all threads) and wall seconds at the first batch, and at exit (``--drain`` seconds later:
work left in the background shows there). Rounds alternate cold and warm; medians, load
recorded. ``cold_before``: cold, both HSV kernels compiled as before issue 27 (the first
recolour compiled the planar and the RGB kernel; now only the one in use).

    python tools/bench_cold_start.py --out docs/bench/cold_start.md
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from benchpaths import load_average, load_line, publish

CHILD = r"""
import json, os, resource, sys, time
t0 = time.perf_counter()
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
import numpy as np, torch
import detfmt
from detfmt.augment.presets import yolo_train
from detfmt.torch import Loader
path, imgsz, batch, drain = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
if sys.argv[5] == "both":  # before issue 27: both HSV kernels compiled on the first recolour
    from detfmt.augment import _native
    kernels = _native.recolour_kernels()
    if kernels is not None:
        _native._ready(kernels[0], True)
        _native._ready(kernels[1], False)
ds = detfmt.open(path)
loader = Loader(ds, batch, seed=0, num_threads=1,
                transform=yolo_train(imgsz, generator=torch.Generator().manual_seed(0)))
first = next(iter(loader))
out = {"first_cpu": cpu(), "first_wall": time.perf_counter() - t0}
time.sleep(drain)
out["exit_cpu"] = cpu()
print(json.dumps(out))
"""


def make(path: Path, n: int, h: int, w: int) -> None:
    import numpy as np

    import detfmt

    rng = np.random.default_rng(0)
    samples = [{"image": rng.integers(0, 256, (h, w, 3), dtype=np.uint8),
                "boxes": np.array([[10, 10, w / 2, h / 2]], np.float32),
                "classes": np.array([i % 3], np.int32)} for i in range(n)]
    detfmt.write(samples, path, classes=["a", "b", "c"], codec="raw")


def run(path: Path, cache: str, args: argparse.Namespace, mode: str = "used"
        ) -> dict[str, float]:
    env = dict(os.environ, NUMBA_CACHE_DIR=cache)
    got = subprocess.run([sys.executable, "-c", CHILD, str(path), str(args.imgsz),
                          str(args.batch), str(args.drain), mode], env=env, capture_output=True,
                         text=True, timeout=900, check=True)
    return json.loads(got.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--imgsz", type=int, default=640)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--drain", type=float, default=0.0)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    load_before = load_average()
    rows: dict[str, list[dict[str, float]]] = {"cold": [], "warm": [], "cold_before": []}
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "ds"
        make(data, 4 * args.batch, 480, 640)
        for r in range(args.rounds):
            cache = tempfile.mkdtemp(dir=tmp)
            rows["cold"].append(run(data, cache, args))  # an empty cache: compiles, fills it
            rows["warm"].append(run(data, cache, args))  # the cache the cold run left
            rows["cold_before"].append(run(data, tempfile.mkdtemp(dir=tmp), args, "both"))
            print(r, rows["cold"][-1], rows["warm"][-1], rows["cold_before"][-1], flush=True)
    med = {side: {k: statistics.median(v[k] for v in runs) for k in runs[0]}
           for side, runs in rows.items()}
    lines = [f"`python tools/bench_cold_start.py {' '.join(sys.argv[1:])}`", "",
             f"First `yolo_train({args.imgsz})` batch of {args.batch} (raw 480x640 images, "
             f"Loader num_threads=1) in a fresh process, {args.rounds} rounds alternating "
             "cold (empty NUMBA_CACHE_DIR) and warm (the cache the cold run left); medians; "
             "CPU = user + system of the whole process.", "",
             "| side | CPU-s at first batch | wall-s at first batch | CPU-s at exit |",
             "|---|---|---|---|"]
    for side in ("cold", "warm", "cold_before"):
        m = med[side]
        lines.append(f"| {side} | {m['first_cpu']:.1f} | {m['first_wall']:.1f} | "
                     f"{m['exit_cpu']:.1f} |")
    extra = med["cold"]["first_cpu"] - med["warm"]["first_cpu"]
    before = med["cold_before"]["first_cpu"] - med["warm"]["first_cpu"]
    lines += ["", f"cold - warm at first batch: {extra:.1f} CPU-s (before: {before:.1f}). "
              + load_line(load_before)]
    publish(lines, args.out)


if __name__ == "__main__":
    main()
