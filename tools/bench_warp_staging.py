"""How the CPU augmentation stages a warp (issue 27 item 1): OpenCV's bilinear ``warpAffine`` of a
640x480 RGB image onto a 640x640 output, 3 channels against 4 (RGB staged as RGBA), with
``BORDER_CONSTANT`` against ``BORDER_TRANSPARENT``; and the native HSV kernel reading RGB
against RGBA. One thread, sides interleaved per round, medians of ms per call; ratios against
the staging the augmentation used before (RGBA, ``BORDER_TRANSPARENT`` for mosaic tiles).

    python tools/bench_warp_staging.py --out docs/bench/warp_staging.md
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import cv2
import numpy as np
from benchpaths import load_average, load_line, publish


def per_call(fn: Callable[[], object], calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    cv2.setNumThreads(1)
    load_before = load_average()
    rng = np.random.default_rng(0)
    rgb = rng.integers(0, 256, (482, 642, 3), dtype=np.uint8)  # a staged 480x640 crop
    rgba = cv2.cvtColor(rgb, cv2.COLOR_RGB2RGBA)
    matrix = np.array([[0.9, 0.0, 10.5], [0.0, 0.9, 8.3]])  # output -> source, inside it
    out3 = np.empty((480, 640, 3), np.uint8)
    out4 = np.empty((480, 640, 4), np.uint8)
    flags = cv2.INTER_LINEAR | cv2.WARP_INVERSE_MAP

    def warp(src: np.ndarray, dst: np.ndarray, border: int) -> Callable[[], object]:
        return lambda: cv2.warpAffine(src, matrix, (640, 480), dst=dst, flags=flags,
                                      borderMode=border)

    sides: dict[str, Callable[[], object]] = {
        "warp RGBA, BORDER_TRANSPARENT (before, mosaic tiles)": warp(rgba, out4,
                                                                    cv2.BORDER_TRANSPARENT),
        "warp RGBA, BORDER_CONSTANT (before, plain images)": warp(rgba, out4,
                                                                  cv2.BORDER_CONSTANT),
        "warp RGB, BORDER_TRANSPARENT": warp(rgb, out3, cv2.BORDER_TRANSPARENT),
        "warp RGB, BORDER_CONSTANT (now)": warp(rgb, out3, cv2.BORDER_CONSTANT),
        "stage RGB as RGBA (cvtColor, before)": lambda: cv2.cvtColor(
            rgb, cv2.COLOR_RGB2RGBA, dst=rgba),
    }
    try:
        from detfmt.augment._hsv_numba import recolour_planar
    except ImportError:  # no numba: the OpenCV HSV path has no RGBA question
        recolour_planar = None
    if recolour_planar is not None:
        h, w = 640, 640
        src3 = rng.integers(0, 256, (h, w, 3), dtype=np.uint8).reshape(-1)
        src4 = cv2.cvtColor(src3.reshape(h, w, 3), cv2.COLOR_RGB2RGBA).reshape(-1)
        planes = [np.empty(h * w, np.uint8) for _ in range(3)]
        rects = np.array([[0, 0, w, h]], np.int64)
        params = np.array([5.0, 1.3, 0.8], np.float32)

        def hsv(src: np.ndarray, channels: int) -> Callable[[], object]:
            return lambda: recolour_planar(src, channels, h, w, rects, 114, params, *planes)

        sides["HSV kernel 640x640, RGBA in (before)"] = hsv(src4, 4)
        sides["HSV kernel 640x640, RGB in (now)"] = hsv(src3, 3)
    for fn in sides.values():
        fn()  # warm: compile, caches
    times: dict[str, list[float]] = {name: [] for name in sides}
    names = list(sides)
    for r in range(args.rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            times[name].append(per_call(sides[name], args.calls))
    lines = [f"`python tools/bench_warp_staging.py --rounds {args.rounds} --calls {args.calls}`",
             "", f"OpenCV {cv2.__version__}, one thread, {args.rounds} interleaved rounds of "
             f"{args.calls} calls; median ms per call (min-max over rounds).", "",
             "| side | ms per call | min-max |", "|---|---:|---:|"]
    for name in names:
        values = times[name]
        lines.append(f"| {name} | {statistics.median(values):.3f} | "
                     f"{min(values):.3f}-{max(values):.3f} |")
    lines += ["", load_line(load_before)]
    publish(lines, args.out)


if __name__ == "__main__":
    main()
