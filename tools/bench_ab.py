"""Before/after of one change on the paths it could slow down: two source trees of detfmt, the
same workloads, interleaved rounds (the tree order alternating), one fresh process per run.

Workloads, each run once to warm up then ``--repeat`` times, wall seconds and the process's CPU
seconds (all threads; less sensitive to other jobs' load); ratios base / new, > 1 = new faster:

- ``loader_raw`` / ``loader_jpeg``: an epoch of ``Loader(ds, 32, num_threads=2)`` over a raw /
  a JPEG copy of ``--data`` (a YOLO tree) at long side 640;
- ``batch_out``: ``ds.batch(32 indices, out=reused)`` over the raw copy, every batch;
- ``verify``: ``detfmt.verify`` of the JPEG copy (decodes every payload);
- ``write``: ``detfmt.write`` of 64 raw 480x640 samples;
- ``yolo_train_raw`` / ``yolo_train_jpeg``: an epoch of ``Loader(ds, 8, transform=yolo_train(640))``
  with one loader thread and one torch thread (the training-data path of
  ``tools/bench_train.py`` without Ultralytics), over the raw / JPEG copy.

    git archive BASE detfmt | tar -x -C ../base-tree
    python tools/bench_ab.py --base ../base-tree --new . --data ../shared/data/coco128-yolo
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
import json, resource, sys, time, tempfile
from pathlib import Path
import numpy as np
import detfmt
work, which, repeat = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
out = {}
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
def timed(name, fn):
    fn()  # warm: imports, kernels, page cache
    t, c = time.perf_counter(), cpu()
    for _ in range(repeat):
        fn()
    out[name] = time.perf_counter() - t
    out[name + " (cpu)"] = cpu() - c
if which == "read":
    from detfmt.torch import Loader
    for name in ("raw", "jpeg"):
        ds = detfmt.open(work / name)
        timed("loader_" + name, lambda: [None for _ in Loader(ds, 32, seed=0, num_threads=2)])
    ds = detfmt.open(work / "raw")
    buf = ds.batch_buffer(32)
    timed("batch_out", lambda: [ds.batch(range(s, s + 32), out=buf)
                                for s in range(0, len(ds) - 31, 32)])
    timed("verify", lambda: detfmt.verify(work / "jpeg"))
elif which == "augment":
    import torch
    from detfmt.augment.presets import yolo_train
    from detfmt.torch import Delivery, Loader
    torch.set_num_threads(1)
    for name in ("raw", "jpeg"):
        transform = yolo_train(640, buffer_size=64, generator=torch.Generator(),
                               memory_format=torch.contiguous_format)
        loader = Loader(work / name, 8, shuffle=True, seed=0, transform=transform,
                        delivery=Delivery(num_threads=1, transform_threads=1, torch_threads=1))
        timed("yolo_train_" + name, lambda: [None for _ in loader])
else:
    rng = np.random.default_rng(0)
    samples = [{"image": rng.integers(0, 256, (480, 640, 3), dtype=np.uint8),
                "boxes": np.array([[1, 1, 9, 9]], np.float32),
                "classes": np.array([0], np.int32)} for _ in range(64)]
    def write():
        with tempfile.TemporaryDirectory() as tmp:
            detfmt.write(samples, Path(tmp) / "w", classes=["a"], codec="raw")
    timed("write", write)
print(json.dumps(out))
"""
# Each child checks that the detfmt it measured is the tree it was given.
IMPORTED = r"""
tree = Path(sys.argv[4]).resolve()
assert Path(detfmt.__file__).resolve().is_relative_to(tree), (detfmt.__file__, str(tree))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True)
    parser.add_argument("--new", default=".")
    parser.add_argument("--data", default="../shared/data/coco128-yolo")
    parser.add_argument("--repeat", type=int, default=4, help="passes per workload and run")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    before = load_average()
    trees = {"base": str(Path(args.base).resolve()), "new": str(Path(args.new).resolve())}
    times: dict[str, dict[str, list[float]]] = {"base": {}, "new": {}}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        env = dict(os.environ, PYTHONPATH=trees["new"])
        prep = (
            "import sys; from pathlib import Path; from detfmt.convert import from_yolo\n"
            "src, work = Path(sys.argv[1]), Path(sys.argv[2])\n"
            "for codec in ('raw', 'jpeg'):\n"
            "    from_yolo(src / 'images', src / 'object_detection' / 'labels', work / codec,\n"
            "              names=src / 'object_detection' / 'config.yaml', max_side=640,\n"
            "              codec=codec)\n")
        # Children run in the scratch directory: ``python -c`` puts the working directory first
        # on sys.path, so from a checkout both sides would import its detfmt, not PYTHONPATH's.
        data = str(Path(args.data).resolve())
        subprocess.run([sys.executable, "-c", prep, data, str(work)], env=env, check=True,
                       cwd=work)
        for r in range(args.rounds):
            for side in ("base", "new") if r % 2 == 0 else ("new", "base"):
                env = dict(os.environ, PYTHONPATH=trees[side])
                for which in ("read", "write", "augment"):
                    got = subprocess.run([sys.executable, "-c", CHILD + IMPORTED, str(work),
                                          which, str(args.repeat), trees[side]],
                                         env=env, capture_output=True, text=True, check=True,
                                         cwd=work)
                    for k, v in json.loads(got.stdout.strip().splitlines()[-1]).items():
                        times[side].setdefault(k, []).append(v)
            print(r, {side: {k: round(v[-1], 3) for k, v in t.items()}
                      for side, t in times.items()}, flush=True)
    lines = [f"`python tools/bench_ab.py {' '.join(sys.argv[1:])}`", "",
             f"{args.rounds} interleaved rounds, one process per run; medians of seconds; "
             "ratio base/new (> 1: new faster).", "",
             "| workload | base s | new s | base/new |", "|---|---|---|---|"]
    for k in times["new"]:
        b, n = statistics.median(times["base"][k]), statistics.median(times["new"][k])
        lines.append(f"| {k} | {b:.3f} | {n:.3f} | {b / n:.2f}x |")
    lines += ["", load_line(before)]
    publish(lines, args.out)


if __name__ == "__main__":
    main()
