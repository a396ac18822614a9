"""Thread CPU per stage of `bench_train.py`'s detfmt loader: where the data CPU goes.

Runs `DetfmtYoloLoader` (the `yolo_train` preset inside the `Loader`'s threads, Ultralytics'
batch dict) over a detfmt dataset (raw, or JPEG-stored: then the decode rows count) and adds
up ``time.thread_time()`` around each stage below, in whichever thread runs it; prints
milliseconds per batch and the process CPU per batch over the same window. Stages are
inclusive (a stage's time includes the stages it calls); ``cv2.*`` rows are the OpenCV calls
themselves. Instrumentation adds a little to every call, so compare rows of one run, not runs
of different code.

    python tools/profile_loader_stages.py --data DATASET --threads 1

Run it in the integrations environment (the batch dict imports Ultralytics); `bench_train.py`
writes the datasets (``--work``/detfmt-<imgsz>, and detfmt-<imgsz>-jpeg with ``--codec jpeg``).
"""

from __future__ import annotations

import argparse
import collections
import functools
import importlib
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

# (label, module, attribute path): functions wrapped where they are looked up.
STAGES = [
    ("Compose.forward", "detfmt.augment.compose", "Compose.forward"),
    ("warp_images_opencv", "detfmt.augment._opencv", "warp_images_opencv"),
    ("per-sample work (pool)", "detfmt.augment._opencv", "_for_each_sample"),
    ("HSV (native kernel or OpenCV)", "detfmt.augment._opencv", "_hsv_into"),
    ("staged windows (Mosaic canvases)", "detfmt.augment._opencv", "_read_window"),
    ("staged tile crops", "detfmt.augment._opencv", "_stage_crop"),
    ("warp planning: tile plans", "detfmt.augment._opencv", "_plan_tiles"),
    ("warp planning: source windows", "detfmt.augment._opencv", "source_windows"),
    ("warp planning: HSV tables", "detfmt.augment._opencv", "_hsv_tables"),
    ("plan_steps", "detfmt.augment._geometry", "plan_steps"),
    ("Mosaic.sample", "detfmt.augment.mosaic", "Mosaic.sample"),
    ("Mosaic.apply_deferred", "detfmt.augment.mosaic", "Mosaic.apply_deferred"),
    ("Mosaic ring-buffer push", "detfmt.augment.mosaic", "_RingBuffer.push"),
    ("gather (Gather.fill)", "detfmt.reading.gather", "Gather.fill"),
    ("JPEG/PNG/zstd decode (Gather._decode)", "detfmt.reading.gather", "Gather._decode"),
    ("decoder call (codecs.decode_into)", "detfmt.format.codecs", "decode_into"),
    ("to_batch_dict", "detfmt.integrations.ultralytics", "DetfmtYoloLoader.to_batch_dict"),
]
CV2_CALLS = ("warpAffine", "warpPerspective", "cvtColor", "copyTo", "split", "mixChannels")

totals: collections.Counter[str] = collections.Counter()
calls: collections.Counter[str] = collections.Counter()


def timed(label: str, fn: Any) -> Any:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.thread_time()
        try:
            return fn(*args, **kwargs)
        finally:
            totals[label] += time.thread_time() - start
            calls[label] += 1

    return wrapper


def instrument() -> None:
    """Wrap every stage; a stage that no longer exists is an error, not a silent zero."""
    for label, module_name, path in STAGES:
        owner: Any = importlib.import_module(module_name)
        *parents, name = path.split(".")
        for parent in parents:
            owner = getattr(owner, parent)
        if not hasattr(owner, name):
            raise SystemExit(f"stage {label!r}: {module_name}.{path} not found")
        setattr(owner, name, timed(label, getattr(owner, name)))
    import cv2

    from detfmt.augment import _opencv

    class TimedCv2:
        def __getattr__(self, name: str) -> Any:
            value = getattr(cv2, name)
            return timed(f"cv2.{name}", value) if name in CV2_CALLS else value

    proxy = TimedCv2()
    _opencv._cv2 = lambda: proxy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True,
                        help="detfmt dataset (raw, or JPEG-stored: the decode rows)")
    parser.add_argument("--imgsz", type=int, default=640)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--batches", type=int, default=96, help="timed batches")
    parser.add_argument("--warm", type=int, default=16, help="untimed batches first")
    args = parser.parse_args()
    instrument()
    from ultralytics.cfg import get_cfg
    from ultralytics.utils import DEFAULT_CFG

    from detfmt.augment.presets import yolo_hyp_defaults
    from detfmt.integrations.ultralytics import DetfmtYoloDataset, DetfmtYoloLoader

    cfg = get_cfg(DEFAULT_CFG, {"imgsz": args.imgsz, "mode": "train"})
    hyp = SimpleNamespace(**{k: getattr(cfg, k) for k in yolo_hyp_defaults()})
    dataset = DetfmtYoloDataset(args.data, augment=True, hyp=hyp)
    loader = DetfmtYoloLoader(dataset, args.batch, imgsz=args.imgsz, augment=True, seed=0,
                              threads=args.threads)

    def endless() -> Any:
        while True:
            yield from loader

    batches = endless()
    for _ in range(args.warm):
        next(batches)
    totals.clear()
    calls.clear()
    start = time.process_time()
    images = 0
    for _ in range(args.batches):
        images += int(next(batches)["img"].shape[0])
    per_batch = args.batch / images * 1e3
    print(f"{args.batches} batches of {args.batch} at {args.imgsz} px, {args.threads} "
          f"thread(s): process CPU {(time.process_time() - start) * per_batch:.1f} ms per batch")
    print(f"{'ms/batch':>9} {'calls/batch':>12}  stage")
    for label, seconds in totals.most_common():
        print(f"{seconds * per_batch:9.2f} {calls[label] * args.batch / images:12.1f}  {label}")


if __name__ == "__main__":
    main()
