"""Benchmark COCO instances JSON parsing: detfmt's msgspec parser vs json.load (vs pycocotools).

Writes a synthetic instances file shaped like train2017 (polygon segmentations, ~7 annotations
per image) and parses it in a fresh subprocess per method, reporting wall time and peak RSS
(VmHWM of that process; the "delta" column subtracts the RSS measured after imports).

    .venv/bin/python tools/bench_coco_json.py --annotations 500000
    .venv/bin/python tools/bench_coco_json.py --pycocotools-python VENV/bin/python
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

CHILD = r"""
import sys, time, gc
method, path = sys.argv[1], sys.argv[2]
def status_kib(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
def rss_kib():
    return status_kib("VmRSS")
if method == "json.load":
    import json
    def run():
        with open(path, "rb") as f:
            return json.load(f)
elif method == "msgspec-structs":
    from detfmt.convert.coco import decode_coco
    from pathlib import Path
    def run():
        return decode_coco(Path(path).read_bytes(), path)
elif method == "detfmt.parse_coco":
    from detfmt.convert.coco import parse_coco
    def run():
        return parse_coco(path)
elif method == "pycocotools.COCO":
    import contextlib, io
    from pycocotools.coco import COCO
    def run():
        with contextlib.redirect_stdout(io.StringIO()):
            return COCO(path)
base = rss_kib()
gc.collect()
t = time.perf_counter()
result = run()
elapsed = time.perf_counter() - t
peak = status_kib("VmHWM")  # ru_maxrss would inherit the parent's peak across fork+exec
print(f"{elapsed:.4f} {peak} {base} {rss_kib()}")
"""


def make_file(path: Path, annotations: int, images: int, points: int, seed: int = 0) -> None:
    """A synthetic instances file with the key order and value shapes of COCO train2017."""
    import msgspec

    rng = np.random.default_rng(seed)
    image_ids = rng.choice(np.arange(1, 10 * images), size=images, replace=False)
    sizes = rng.integers(200, 641, size=(images, 2))
    owner = rng.integers(0, images, size=annotations)
    cats = rng.integers(1, 91, size=annotations)
    data = {
        "info": {"description": "synthetic COCO-shaped benchmark file", "version": "1.0"},
        "licenses": [{"id": 1, "name": "CC0", "url": ""}],
        "images": [
            {"license": 1, "file_name": f"{int(i):012d}.jpg", "coco_url": "", "height": int(h),
             "width": int(w), "date_captured": "2013-11-14 17:02:52", "flickr_url": "",
             "id": int(i)}
            for i, (h, w) in zip(image_ids, sizes, strict=True)
        ],
        "annotations": [],
        "categories": [{"supercategory": "thing", "id": c, "name": f"class{c}"}
                       for c in range(1, 91)],
    }
    chunk = 50_000
    for start in range(0, annotations, chunk):
        stop = min(start + chunk, annotations)
        n = stop - start
        xy = rng.uniform(0, 400, size=(n, 2)).round(2)
        wh = rng.uniform(1, 200, size=(n, 2)).round(2)
        poly = rng.uniform(0, 600, size=(n, points * 2)).round(2)
        for k in range(n):
            a = start + k
            data["annotations"].append({
                "segmentation": [poly[k].tolist()],
                "area": float(round(wh[k, 0] * wh[k, 1], 3)),
                "iscrowd": 0,
                "image_id": int(image_ids[owner[a]]),
                "bbox": [float(xy[k, 0]), float(xy[k, 1]), float(wh[k, 0]), float(wh[k, 1])],
                "category_id": int(cats[a]),
                "id": a + 1,
            })
    path.write_bytes(msgspec.json.encode(data))


def run(python: str, method: str, path: Path) -> dict:
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    out = subprocess.run([python, "-c", CHILD, method, str(path)], capture_output=True,
                         text=True, env=env, check=False)
    if out.returncode != 0:
        return {"method": method, "error": out.stderr.strip().splitlines()[-1:]}
    elapsed, peak, base, _after = out.stdout.split()
    return {"method": method, "seconds": float(elapsed), "peak_rss_mib": int(peak) / 1024,
            "delta_rss_mib": (int(peak) - int(base)) / 1024}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--annotations", type=int, default=500_000)
    parser.add_argument("--images", type=int, default=70_000)
    parser.add_argument("--points", type=int, default=24, help="polygon points per annotation")
    parser.add_argument("--file", type=Path, help="reuse/keep this JSON file")
    parser.add_argument("--repeat", type=int, default=2, help="runs per method (best time kept)")
    parser.add_argument("--pycocotools-python", default=None,
                        help="a python with pycocotools installed (separate venv)")
    parser.add_argument("--json-out", type=Path, help="also write the results as JSON")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = args.file or Path(tmp) / "instances.json"
        if not path.exists():
            t = time.perf_counter()
            make_file(path, args.annotations, args.images, args.points)
            print(f"wrote {path} ({path.stat().st_size / 2**20:.0f} MiB) in "
                  f"{time.perf_counter() - t:.1f} s", file=sys.stderr)
        size_mib = path.stat().st_size / 2**20
        methods = [(sys.executable, "json.load"), (sys.executable, "msgspec-structs"),
                   (sys.executable, "detfmt.parse_coco")]
        if args.pycocotools_python:
            methods.append((args.pycocotools_python, "pycocotools.COCO"))
        results = []
        for python, method in methods:
            runs = [run(python, method, path) for _ in range(args.repeat)]
            ok = [r for r in runs if "error" not in r]
            results.append(min(ok, key=lambda r: r["seconds"]) if ok else runs[0])
    base = next(r for r in results if r["method"] == "json.load")
    print(f"file: {size_mib:.0f} MiB, {args.annotations} annotations, {args.images} images, "
          f"{args.points}-point polygons; best of {args.repeat}")
    print(f"{'method':<20} {'time s':>8} {'x faster':>9} {'peak RSS MiB':>13} "
          f"{'delta MiB':>10} {'mem ratio':>10}")
    for r in results:
        if "error" in r:
            print(f"{r['method']:<20} failed: {r['error']}")
            continue
        print(f"{r['method']:<20} {r['seconds']:8.2f} {base['seconds'] / r['seconds']:9.2f} "
              f"{r['peak_rss_mib']:13.0f} {r['delta_rss_mib']:10.0f} "
              f"{r['peak_rss_mib'] / base['peak_rss_mib']:10.2f}")
    if args.json_out:
        args.json_out.write_text(json.dumps({"file_mib": size_mib, "results": results}, indent=1))


if __name__ == "__main__":
    main()
