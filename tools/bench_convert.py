"""Benchmark conversion throughput and memory: workers 0/1/2, and peak RSS vs dataset size.

Builds a COCO source from the chess-coco images (2048x1371 JPEGs) repeated ``--repeat`` times
(distinct image ids, same files, so nothing but the image count changes) and converts it with
`detfmt.convert.from_coco` in a fresh subprocess per configuration, reporting images/s, the
parent's peak RSS (VmHWM), the largest worker's peak RSS (RUSAGE_CHILDREN) and CPU seconds per
image in the parent (parsing, checks, the writer's appends) and in the workers (decode, resize,
encode). On a shared machine wall-clock scaling is capped by other load; the CPU split gives the
bound an idle 2-core machine would reach: 2 workers share 2 cores with the parent, so
ratio(2 vs 1) <= 2 * worker / (worker + parent) per-image CPU.

    .venv/bin/python tools/bench_convert.py                       # scaling, 232 images
    .venv/bin/python tools/bench_convert.py --sizes 58 232 928     # memory vs image count
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_SOURCE = ROOT.parent / "shared" / "data" / "chess-coco" / "valid"

CHILD = r"""
import json, resource, sys, time
from detfmt.convert import from_coco
ann, images, dst, workers, codec, max_side = sys.argv[1:7]
t = time.perf_counter()
report = from_coco(ann, images, dst, workers=int(workers), codec=codec,
                   max_side=int(max_side) or None, progress=False)
elapsed = time.perf_counter() - t
def status_kib(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
own = resource.getrusage(resource.RUSAGE_SELF)
children = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"seconds": elapsed, "images": report.images_kept, "boxes": report.boxes_kept,
                  "parent_peak_mib": status_kib("VmHWM") / 1024,
                  "worker_peak_mib": children.ru_maxrss / 1024,
                  "parent_cpu_s": own.ru_utime + own.ru_stime,
                  "workers_cpu_s": children.ru_utime + children.ru_stime}))
"""


def make_source(source: Path, count: int, out: Path) -> Path:
    """A COCO JSON whose ``count`` images cycle through the source's images."""
    data = json.loads((source / "_annotations.coco.json").read_text())
    base_images = data["images"]
    by_image: dict[int, list] = {}
    for a in data["annotations"]:
        by_image.setdefault(a["image_id"], []).append(a)
    images, annotations = [], []
    for i in range(count):
        image = dict(base_images[i % len(base_images)])
        old = image["id"]
        image["id"] = i
        images.append(image)
        for a in by_image.get(old, []):
            annotations.append(dict(a, id=len(annotations), image_id=i))
    out.write_text(json.dumps({"images": images, "annotations": annotations,
                               "categories": data["categories"]}))
    return out


def run(ann: Path, images: Path, dst: Path, workers: int, codec: str, max_side: int) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", CHILD, str(ann), str(images), str(dst),
                          str(workers), codec, str(max_side)], capture_output=True, text=True,
                         env=env, check=False)
    if out.returncode != 0:
        raise SystemExit(out.stderr)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    result["images_per_s"] = result["images"] / result["seconds"]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, default=DEFAULT_SOURCE)
    parser.add_argument("--images", type=int, default=232, help="images in the scaling runs")
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--codecs", nargs="+", default=["raw", "jpeg"])
    parser.add_argument("--max-side", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=2, help="runs per point (best kept)")
    parser.add_argument("--sizes", type=int, nargs="*", default=[],
                        help="also measure peak RSS for these image counts (workers=2, raw)")
    parser.add_argument("--json-out", type=Path)
    args = parser.parse_args()
    if not args.source.is_dir():
        raise SystemExit(f"{args.source} not found (needs ../shared/data/chess-coco)")
    results: dict = {"scaling": [], "memory": []}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        ann = make_source(args.source, args.images, tmp / f"src{args.images}.json")
        print(f"{args.images} images (chess-coco 2048x1371 JPEGs, cycled), max_side "
              f"{args.max_side}, best of {args.rounds}, {os.cpu_count()} CPUs, load average "
              f"{os.getloadavg()[0]:.1f} at start")
        print(f"{'codec':<6} {'workers':>7} {'img/s':>8} {'seconds':>8} {'vs 1 worker':>12} "
              f"{'parent MiB':>11} {'worker MiB':>11} {'parent ms/img':>14} "
              f"{'worker ms/img':>14}")
        for codec in args.codecs:
            base = None
            runs: dict[int, list[dict]] = {w: [] for w in args.workers}
            for r in range(args.rounds):  # interleaved, so every setting sees similar load
                for workers in args.workers:
                    runs[workers].append(run(ann, args.source, tmp / f"ds-{codec}-{workers}-{r}",
                                             workers, codec, args.max_side))
            for workers in args.workers:
                best = max(runs[workers], key=lambda r: r["images_per_s"])
                best.update(codec=codec, workers=workers)
                if workers == 1:
                    base = best["images_per_s"]
                ratio = f"{best['images_per_s'] / base:.2f}x" if base else "-"
                parent_ms = 1000 * best["parent_cpu_s"] / best["images"]
                worker_ms = 1000 * best["workers_cpu_s"] / best["images"]
                print(f"{codec:<6} {workers:>7} {best['images_per_s']:8.1f} "
                      f"{best['seconds']:8.2f} {ratio:>12} {best['parent_peak_mib']:11.0f} "
                      f"{best['worker_peak_mib']:11.0f} {parent_ms:14.1f} {worker_ms:14.1f}")
                if workers == 2 and worker_ms:
                    bound = 2 * worker_ms / (worker_ms + parent_ms)
                    print(f"{'':<6} {'':>7} CPU-split bound for 2 vs 1 worker on an idle 2-core "
                          f"machine: {bound:.2f}x")
                results["scaling"].append(best)
        if args.sizes:
            print("peak RSS vs image count (workers=2, raw):")
            for count in args.sizes:
                src = make_source(args.source, count, tmp / f"mem{count}.json")
                result = run(src, args.source, tmp / f"mem-{count}", 2, "raw", args.max_side)
                result["count"] = count
                results["memory"].append(result)
                print(f"  {count:>6} images: parent {result['parent_peak_mib']:.0f} MiB, "
                      f"worker {result['worker_peak_mib']:.0f} MiB, "
                      f"{result['images_per_s']:.1f} img/s")
    print(f"load average {os.getloadavg()[0]:.1f} at the end (other processes share the CPUs)")
    if args.json_out:
        args.json_out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
