"""Per-stage CPU time of the `yolo_train` preset in one loader thread, per augmented image.

Batches are gathered once (untimed) from a raw detfmt dataset; after a warm-up pass (the ring
buffers reach their final size), each round times on the same batches: the preset, the preset
without HSV, and the conversion of its output to Ultralytics' NCHW batch. Min / median / max
over rounds. Run it in the integrations environment (the conversion imports Ultralytics).

    python tools/profile_yolo_train.py --data DATASET --imgsz 640
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

from detfmt.augment import presets
from detfmt.torch import Delivery, Loader
from detfmt.torch.threads import configure_thread


def gather(path: str, batch: int, count: int) -> list[Any]:
    loader = Loader(path, batch, shuffle=True, seed=0, delivery=Delivery(num_threads=1))
    out = []
    for b in loader:
        out.append(b.replace(images=b.images.clone(memory_format=torch.channels_last)))
        if len(out) == count:
            break
    return out


def cpu_seconds(fn: Callable[[Any], Any], items: list[Any]) -> float:
    start = time.process_time()
    for item in items:
        fn(item)
    return time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", required=True, help="a raw detfmt dataset, e.g. the "
                        "detfmt-640 that tools/bench_train.py writes in its --work directory")
    parser.add_argument("--imgsz", type=int, default=640)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--batches", type=int, default=12)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1, help="the loader thread's budget")
    args = parser.parse_args()
    from detfmt.integrations.ultralytics import _nchw

    items = gather(args.data, args.batch, args.batches)
    configure_thread(args.threads)
    images = sum(len(b) for b in items)
    # The ring buffer as DetfmtYoloLoader sizes it (Ultralytics: min(n, 8 * batch)).
    buffer = 8 * args.batch
    full = presets.yolo_train(args.imgsz, buffer_size=buffer,
                              generator=torch.Generator().manual_seed(0))
    no_hsv = presets.yolo_train(args.imgsz, buffer_size=buffer, hsv_h=0, hsv_s=0, hsv_v=0,
                                generator=torch.Generator().manual_seed(0))
    outputs = [full(b) for b in items]
    for b in items:
        no_hsv(b)
    stages: dict[str, tuple[Callable[[Any], Any], list[Any]]] = {
        "preset": (full, items),
        "preset without HSV": (no_hsv, items),
        "to NCHW": (lambda out: _nchw(out.images), outputs),
    }
    results: dict[str, list[float]] = {k: [] for k in stages}
    for _ in range(args.rounds):
        for name, (fn, inputs) in stages.items():
            results[name].append(cpu_seconds(fn, inputs) / images * 1e3)
    print(f"{images} images per round, {args.rounds} rounds, ms CPU per image (min/median/max)")
    for name, values in results.items():
        print(f"  {name:20s} {min(values):6.2f} {statistics.median(values):6.2f} "
              f"{max(values):6.2f}")


if __name__ == "__main__":
    main()
