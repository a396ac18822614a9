"""RandomHSV on one 640x640 image: the native kernel (detfmt[fast]) against OpenCV's five passes.

Both sides are the CPU backend's own code (`_opencv._hsv_into`): with the kernel's parameters,
and with NaN parameters, which send it to OpenCV (cvtColor, split, three LUTs, merge, cvtColor
into reused scratch buffers). Input is the warp's RGBA staging of a real photo, output RGB.
Per round a fresh Ultralytics gain draw; within a round the two sides alternate; the ratio is
per round (native / OpenCV), min / median / max over rounds.

    python tools/bench_hsv.py --out docs/bench
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import time
from pathlib import Path

import cv2
import numpy as np
from benchpaths import SHARED_DATA, shown

from detfmt.augment import _native
from detfmt.augment._opencv import _hsv_into, hsv_luts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default=str(SHARED_DATA / "coco128-yolo"))
    parser.add_argument("--size", type=int, default=640)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--reps", type=int, default=40)
    parser.add_argument("--out", default="docs/bench")
    args = parser.parse_args()
    cv2.setNumThreads(1)
    if _native.recolour_kernels() is None:
        raise SystemExit("the native kernel is not available (pip install 'detfmt[fast]')")
    photo = sorted(glob.glob(f"{args.data}/**/*.jpg", recursive=True))[0]
    rgb = cv2.cvtColor(cv2.imread(photo), cv2.COLOR_BGR2RGB)
    image = cv2.cvtColor(cv2.resize(rgb, (args.size, args.size)), cv2.COLOR_RGB2RGBA)
    out = np.empty((args.size, args.size, 3), np.uint8)
    to_opencv = np.full(3, np.nan, np.float32)
    rng = np.random.default_rng(0)
    rows = []
    for _ in range(args.rounds):
        gains = rng.uniform(-1, 1, (1, 3)) * [0.015, 0.7, 0.4]
        tables = hsv_luts(gains)
        params = _native.lut_parameters(gains, tables)[0]
        native, opencv = [], []
        for _ in range(args.reps):
            t0 = time.perf_counter()
            _hsv_into(image, to_opencv, tables[0], [True] * 3, out)
            t1 = time.perf_counter()
            _hsv_into(image, params, tables[0], [True] * 3, out)
            t2 = time.perf_counter()
            opencv.append(t1 - t0)
            native.append(t2 - t1)
        rows.append({"opencv_ms": statistics.median(opencv) * 1e3,
                     "native_ms": statistics.median(native) * 1e3,
                     "ratio": statistics.median(
                         n / o for n, o in zip(native, opencv, strict=True))})
    ratios = [r["ratio"] for r in rows]
    load = "{:.2f} {:.2f} {:.2f}".format(*os.getloadavg())
    report = (
        "# RandomHSV on CPU: native kernel vs OpenCV\n\n"
        f"`python tools/bench_hsv.py` ({args.size}x{args.size} RGBA staging of a coco128 photo "
        f"-> RGB, one thread, {args.rounds} rounds of {args.reps} alternated calls; load "
        f"{load}).\n\n"
        "| side | median ms per image |\n|---|---:|\n"
        f"| OpenCV (cvtColor, split, 3 LUTs, merge, cvtColor) | "
        f"{statistics.median(r['opencv_ms'] for r in rows):.3f} |\n"
        f"| native kernel (`detfmt[fast]`) | "
        f"{statistics.median(r['native_ms'] for r in rows):.3f} |\n\n"
        f"native / OpenCV per round: {min(ratios):.2f} / {statistics.median(ratios):.2f} / "
        f"{max(ratios):.2f} (min / median / max). Same bytes "
        "(tests/augment/test_hsv_kernel.py).\n")
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "hsv_kernel.md").write_text(report)
    record = {"args": {**vars(args), "data": shown(args.data)}, "load": load, "rows": rows}
    (out_dir / "hsv_kernel.json").write_text(json.dumps(record, indent=1))
    print(report)


if __name__ == "__main__":
    main()
