"""Benchmark: batched detfmt.augment vs an Ultralytics-style per-sample CPU pipeline.

Both sides get the same B uint8 images (H x W) with the same boxes and run
[mosaic ->] random affine -> horizontal flip -> HSV. The reference is a numpy/OpenCV port of
Ultralytics' per-sample code (cv2.warpAffine with border 114, corner boxes + box_candidates,
the HSV LUTs, np.fliplr), run one image at a time as a dataloader worker would.
Prints a markdown table with images/s for both and their ratio, measured in the same run.

    python tools/bench_augment.py                       # B=32, 640x640, CPU, no mosaic
    python tools/bench_augment.py --mosaic --device cuda
    python tools/bench_augment.py --backends opencv     # skip the slow eager torch CPU side

On CPU the detfmt side runs with each CPU backend in ``--backends`` (``set_cpu_backend``):
``opencv`` (cv2 per sample in a thread pool, the default when cv2 is installed) and ``torch``
(the batched kernels, as on CUDA).
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import random
import statistics
import sys
import time

import numpy as np
import torch

import detfmt.augment as A
from detfmt.torch import Batch

try:
    import cv2
except ImportError:  # the reference side needs OpenCV; the torch side still runs
    cv2 = None


def make_inputs(
    batch: int, size: int, slots: int, seed: int
) -> tuple[np.ndarray, list[np.ndarray]]:
    """Smooth random images (B, H, W, 3) uint8 and per-image xyxy boxes."""
    rng = np.random.default_rng(seed)
    low = rng.integers(0, 256, (batch, size // 16, size // 16, 3), dtype=np.uint8)
    images = np.repeat(np.repeat(low, 16, axis=1), 16, axis=2)
    images = images + rng.integers(0, 16, images.shape, dtype=np.uint8)
    boxes = []
    for _ in range(batch):
        n = int(rng.integers(1, slots + 1))
        wh = rng.uniform(8, size / 3, (n, 2))
        xy = rng.uniform(0, 1, (n, 2)) * (size - wh)
        boxes.append(np.concatenate([xy, xy + wh], axis=1).astype(np.float32))
    return np.ascontiguousarray(images), boxes


def to_batch(images: np.ndarray, boxes: list[np.ndarray], slots: int) -> Batch:
    b = len(boxes)
    padded = torch.zeros(b, slots, 4)
    classes = torch.full((b, slots), -1, dtype=torch.int64)
    mask = torch.zeros(b, slots, dtype=torch.bool)
    for i, bx in enumerate(boxes):
        padded[i, : len(bx)] = torch.from_numpy(bx)
        classes[i, : len(bx)] = 0
        mask[i, : len(bx)] = True
    hwc = torch.from_numpy(images)
    return Batch(images=hwc.permute(0, 3, 1, 2), boxes=padded, classes=classes, mask=mask)


# ---- Ultralytics-style per-sample reference (numpy + OpenCV) ---------------------------------


def ref_mosaic4(imgs, boxes, s):
    yc, xc = (int(random.uniform(s // 2, 2 * s - s // 2)) for _ in range(2))
    img4 = np.full((s * 2, s * 2, 3), 114, dtype=np.uint8)
    out = []
    for i, (img, bx) in enumerate(zip(imgs, boxes, strict=True)):
        h, w = img.shape[:2]
        if i == 0:
            x1a, y1a, x2a, y2a = max(xc - w, 0), max(yc - h, 0), xc, yc
            x1b, y1b, x2b, y2b = w - (x2a - x1a), h - (y2a - y1a), w, h
        elif i == 1:
            x1a, y1a, x2a, y2a = xc, max(yc - h, 0), min(xc + w, s * 2), yc
            x1b, y1b, x2b, y2b = 0, h - (y2a - y1a), min(w, x2a - x1a), h
        elif i == 2:
            x1a, y1a, x2a, y2a = max(xc - w, 0), yc, xc, min(s * 2, yc + h)
            x1b, y1b, x2b, y2b = w - (x2a - x1a), 0, w, min(y2a - y1a, h)
        else:
            x1a, y1a, x2a, y2a = xc, yc, min(xc + w, s * 2), min(s * 2, yc + h)
            x1b, y1b, x2b, y2b = 0, 0, min(w, x2a - x1a), min(y2a - y1a, h)
        img4[y1a:y2a, x1a:x2a] = img[y1b:y2b, x1b:x2b]
        out.append(bx + np.array([x1a - x1b, y1a - y1b] * 2, dtype=np.float32))
    bx = np.concatenate(out, 0)
    bx = bx.clip(0, 2 * s)
    bx = bx[(bx[:, 2] > bx[:, 0]) & (bx[:, 3] > bx[:, 1])]
    return img4, bx


def ref_random_perspective(img, bx, out_size, degrees=0.0, translate=0.1, scale=0.5, shear=0.0):
    h_in, w_in = img.shape[:2]
    c = np.eye(3, dtype=np.float32)
    c[0, 2], c[1, 2] = -w_in / 2, -h_in / 2
    r = np.eye(3, dtype=np.float32)
    a = random.uniform(-degrees, degrees)
    s = random.uniform(1 - scale, 1 + scale)
    r[:2] = cv2.getRotationMatrix2D(angle=a, center=(0, 0), scale=s)
    sh = np.eye(3, dtype=np.float32)
    sh[0, 1] = math.tan(random.uniform(-shear, shear) * math.pi / 180)
    sh[1, 0] = math.tan(random.uniform(-shear, shear) * math.pi / 180)
    t = np.eye(3, dtype=np.float32)
    t[0, 2] = random.uniform(0.5 - translate, 0.5 + translate) * out_size
    t[1, 2] = random.uniform(0.5 - translate, 0.5 + translate) * out_size
    m = t @ sh @ r @ c
    img = cv2.warpAffine(img, m[:2], dsize=(out_size, out_size), borderValue=(114, 114, 114))
    n = len(bx)
    xy = np.ones((n * 4, 3), dtype=np.float32)
    xy[:, :2] = bx[:, [0, 1, 2, 3, 0, 3, 2, 1]].reshape(n * 4, 2)
    xy = (xy @ m.T)[:, :2].reshape(n, 8)
    x, y = xy[:, [0, 2, 4, 6]], xy[:, [1, 3, 5, 7]]
    new = np.stack([x.min(1), y.min(1), x.max(1), y.max(1)], 1).clip(0, out_size)
    w1, h1 = (bx[:, 2] - bx[:, 0]) * s, (bx[:, 3] - bx[:, 1]) * s
    w2, h2 = new[:, 2] - new[:, 0], new[:, 3] - new[:, 1]
    ar = np.maximum(w2 / (h2 + 1e-16), h2 / (w2 + 1e-16))
    keep = (w2 > 2) & (h2 > 2) & (w2 * h2 / (w1 * h1 + 1e-16) > 0.1) & (ar < 100)
    return img, new[keep]


def ref_hsv(img, hgain=0.015, sgain=0.7, vgain=0.4):
    r = np.random.uniform(-1, 1, 3) * [hgain, sgain, vgain]
    hue, sat, val = cv2.split(cv2.cvtColor(img, cv2.COLOR_RGB2HSV))
    x = np.arange(0, 256, dtype=r.dtype)
    lut_hue = ((x + r[0] * 180) % 180).astype(np.uint8)
    lut_sat = np.clip(x * (r[1] + 1), 0, 255).astype(np.uint8)
    lut_val = np.clip(x * (r[2] + 1), 0, 255).astype(np.uint8)
    lut_sat[0] = 0
    im_hsv = cv2.merge((cv2.LUT(hue, lut_hue), cv2.LUT(sat, lut_sat), cv2.LUT(val, lut_val)))
    return cv2.cvtColor(im_hsv, cv2.COLOR_HSV2RGB)


def ref_flip(img, bx, p=0.5):
    if random.random() < p:
        img = np.ascontiguousarray(np.fliplr(img))
        w = img.shape[1]
        bx = bx.copy()
        bx[:, [0, 2]] = w - bx[:, [2, 0]]
    return img, bx


def run_reference(images, boxes, size, mosaic):
    out = []
    n = len(images)
    for i in range(n):
        img, bx = images[i], boxes[i]
        if mosaic:
            partners = random.choices(range(n), k=3)
            img, bx = ref_mosaic4(
                [img] + [images[j] for j in partners], [bx] + [boxes[j] for j in partners], size
            )
        img, bx = ref_random_perspective(img, bx, size)
        img = ref_hsv(img)
        img, bx = ref_flip(img, bx)
        out.append((img, bx))
    return out


# ---- measurement -------------------------------------------------------------------------------


def timed(fn, repeats: int, sync, cpu: list[float] | None = None) -> list[float]:
    """Wall seconds per call; process CPU seconds (all threads) appended to ``cpu``.

    CPU time is what a call costs regardless of how busy a shared machine is.
    """
    times = []
    for _ in range(repeats):
        sync()
        start, start_cpu = time.perf_counter(), time.process_time()
        fn()
        sync()
        times.append(time.perf_counter() - start)
        if cpu is not None:
            cpu.append(time.process_time() - start_cpu)
    return times


_STEPS = {
    "<warpAffine>": "warpAffine",
    "<warpPerspective>": "warpAffine",
    "<cvtColor>": "cvtColor",
    "<LUT>": "LUT, split, merge",
    "<split>": "LUT, split, merge",
    "<merge>": "LUT, split, merge",
}


def profile_steps(fn, repeats: int) -> dict[str, float]:
    """CPU ms per call by step: OpenCV kernels by name, the rest (Python, torch, numpy) lumped.

    cProfile with process time sees only the calling thread, so run with ``--threads 1`` for
    the detfmt side (its per-sample pool then runs inline).
    """
    import cProfile
    import pstats

    fn()
    profiler = cProfile.Profile(time.process_time)
    start = time.process_time()
    profiler.enable()
    for _ in range(repeats):
        fn()
    profiler.disable()
    total = (time.process_time() - start) / repeats * 1e3
    steps: dict[str, float] = {}
    for (_, _, name), (_, _, own, _, _) in pstats.Stats(profiler).stats.items():  # type: ignore[attr-defined]
        if name in _STEPS:
            steps[_STEPS[name]] = steps.get(_STEPS[name], 0.0) + own / repeats * 1e3
    steps["everything else"] = total - sum(steps.values())
    steps["total"] = total
    return steps


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--size", type=int, default=640)
    parser.add_argument("--slots", type=int, default=20, help="box slots per image")
    parser.add_argument("--device", default="cpu", help="cpu or cuda for the torch side")
    parser.add_argument("--mosaic", action="store_true", help="add 2x2 mosaic on both sides")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--threads", type=int, default=0, help="torch/cv2 threads (0: default)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--compile",
        action="store_true",
        help="also time with detfmt.augment.use_compiled_kernels (torch.compile; slow first call)",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="also print CPU ms per step (cProfile; use with --threads 1)",
    )
    parser.add_argument(
        "--backends",
        default="opencv,torch",
        help="comma-separated CPU backends for the detfmt side (opencv, torch)",
    )
    args = parser.parse_args(argv)

    if args.threads:
        torch.set_num_threads(args.threads)
        if cv2 is not None:
            cv2.setNumThreads(args.threads)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("CUDA is not available on this machine", file=sys.stderr)
        return 2
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

    images, boxes = make_inputs(args.batch, args.size, args.slots, args.seed)
    batch = to_batch(images, boxes, args.slots).to(device)
    steps: list[torch.nn.Module] = [A.Mosaic()] if args.mosaic else []
    # Ultralytics flips the whole image after its affine: about="canvas"
    steps += [A.RandomAffine(size=args.size), A.RandomFlip(p=0.5, about="canvas"), A.RandomHSV()]
    pipeline = A.Compose(steps, generator=torch.Generator().manual_seed(args.seed))
    random.seed(args.seed)
    np.random.seed(args.seed)

    def reference() -> object:
        return run_reference(images, boxes, args.size, args.mosaic)

    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    if device.type == "cuda":
        backends = ["torch"]
    if cv2 is None:
        backends = [b for b in backends if b != "opencv"]
    variants: list[tuple[str, str, bool]] = []
    if "opencv" in backends:
        variants.append(("detfmt.augment (OpenCV CPU backend)", "opencv", False))
    if "torch" in backends:
        variants.append(("detfmt.augment (batched torch, eager)", "torch", False))
        if args.compile:
            variants.append(("detfmt.augment (batched torch, compiled kernels)", "torch", True))
    ours: dict[str, list[float]] = {}
    warmup_s: dict[str, float] = {}
    ref: list[float] = []
    cpu: dict[str, list[float]] = {}
    for label, backend, compiled in variants:
        A.set_cpu_backend(backend)
        A.use_compiled_kernels(compiled)
        start = time.perf_counter()
        for _ in range(args.warmup):
            pipeline(batch)
        sync()
        warmup_s[label] = time.perf_counter() - start
        ours[label] = []
    if cv2 is not None:
        for _ in range(args.warmup):
            reference()
    for _ in range(args.repeats):  # interleaved, so load changes hit every side alike
        for label, backend, compiled in variants:
            A.set_cpu_backend(backend)
            A.use_compiled_kernels(compiled)
            ours[label] += timed(lambda: pipeline(batch), 1, sync, cpu.setdefault(label, []))
        if cv2 is not None:
            ref += timed(reference, 1, sync, cpu.setdefault("ref", []))
    A.use_compiled_kernels(False)
    A.set_cpu_backend("auto")

    name = ("mosaic + " if args.mosaic else "") + "affine + flip + HSV"
    cv2_info = f"cv2 {cv2.__version__} threads={cv2.getNumThreads()}" if cv2 else "cv2 missing"
    print(
        f"\n{name}, B={args.batch}, {args.size}x{args.size}, median of {args.repeats}, "
        f"torch {torch.__version__} threads={torch.get_num_threads()}, {cv2_info}, "
        f"{platform.machine()} with {os.cpu_count()} CPUs, load average "
        f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}\n"
    )
    print("| pipeline | device | ms / batch | images/s | vs reference | CPU ms / batch |")
    print("|---|---|---:|---:|---:|---:|")
    ref_s = statistics.median(ref) if ref else None
    for label, times in ours.items():
        med = statistics.median(times)
        ratio = f"{ref_s / med:.2f}x" if ref_s else "-"
        cpu_ms = statistics.median(cpu[label]) * 1e3
        print(
            f"| {label} | {device} | {med * 1e3:.1f} | {args.batch / med:.1f} | {ratio} "
            f"| {cpu_ms:.0f} |"
        )
    if ref_s:
        print(
            f"| Ultralytics-style per-sample (numpy/OpenCV) | cpu | {ref_s * 1e3:.1f} | "
            f"{args.batch / ref_s:.1f} | 1.00x | {statistics.median(cpu['ref']) * 1e3:.0f} |"
        )
    else:
        print("\nreference skipped: opencv-python-headless is not installed")
    if args.profile:
        print("\n| CPU ms / batch by step | " + " | ".join(["reference", *ours]) + " |")
        print("|---" * (2 + len(ours)) + "|")
        columns = []
        if cv2 is not None:
            columns.append(profile_steps(reference, args.repeats))
        for _, backend, compiled in variants:
            A.set_cpu_backend(backend)
            A.use_compiled_kernels(compiled)
            columns.append(profile_steps(lambda: pipeline(batch), args.repeats))
        A.use_compiled_kernels(False)
        A.set_cpu_backend("auto")
        if cv2 is None:
            columns.insert(0, {})
        names = dict.fromkeys(name for column in columns for name in column)
        for name in names:
            cells = " | ".join(f"{column.get(name, 0.0):.1f}" for column in columns)
            print(f"| {name} | {cells} |")
    for label, seconds in warmup_s.items():
        print(
            f"\nwarm-up ({args.warmup} call(s), includes compilation) for {label}: {seconds:.1f} s"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
