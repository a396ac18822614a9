"""Core read-path benchmark: ds.batch vs memcpy of the same bytes, and open() cost at N = 1M.

Ratios are measured against a baseline run in the same process, so a noisy shared machine moves
both sides. Usage: python tools/bench_core.py [--samples N] [--out results.md]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import detfmt

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "raccoon"


def real_or_synthetic_images(count: int, long_side: int = 640) -> list[np.ndarray]:
    """Raccoon photos resized to ``long_side`` if ../shared is present, else random pixels."""
    from detfmt.writing import image as _image

    files = sorted((SHARED / "images").glob("*.jpg")) if SHARED.exists() else []
    images = []
    rng = np.random.default_rng(0)
    for i in range(count):
        if files:
            image = _image.load_rgb(files[i % len(files)])
            h, w = _image.scaled_size(image.shape[0], image.shape[1], long_side)
            images.append(_image.resize_rgb(image, h, w))
        else:
            images.append(rng.integers(0, 256, (480, long_side, 3), dtype=np.uint8))
    return images


def bench_batch(path: Path, batch_size: int, rounds: int) -> dict:
    """Median ds.batch time vs one np.copyto of the same number of bytes, interleaved."""
    ds = detfmt.open(path)
    rng = np.random.default_rng(1)
    hmax, wmax = (int(v) for v in ds.sizes.max(axis=0))
    buffer = ds.batch_buffer(batch_size)  # page-aligned (np.empty's offset can cost 3x)
    batches = [rng.choice(len(ds), batch_size, replace=False) for _ in range(rounds)]
    for indices in batches[:3]:
        ds.batch(indices, out=buffer)  # warm the page cache and the mapping
    source = np.random.default_rng(2).integers(0, 256, buffer.size, dtype=np.uint8)
    target = np.empty_like(buffer)
    detfmt_times, copy_times, buffer_times, sizes = [], [], [], []
    for indices in batches:
        t0 = time.perf_counter()
        batch = ds.batch(indices, out=buffer)
        t1 = time.perf_counter()
        nbytes = int((batch.sizes[:, 0].astype(np.int64) * batch.sizes[:, 1] * 3).sum())
        np.copyto(target[:nbytes], source[:nbytes])
        t2 = time.perf_counter()
        np.copyto(target[: batch.images.size], source[: batch.images.size])
        t3 = time.perf_counter()
        detfmt_times.append(t1 - t0)
        copy_times.append(t2 - t1)
        buffer_times.append(t3 - t2)
        sizes.append(nbytes)
    batch_s, copy_s = statistics.median(detfmt_times), statistics.median(copy_times)
    buffer_s = statistics.median(buffer_times)
    return {
        "buffer_MB": batch_size * hmax * wmax * 3 / 1e6,
        "buffer_memcpy_images_per_s": batch_size / buffer_s,
        "buffer_ratio": buffer_s / batch_s,
        "fixed": ds.header.image.fixed_shape is not None,
        "image_size": f"{hmax}x{wmax}",
        "MB_per_batch": statistics.mean(sizes) / 1e6,
        "detfmt_images_per_s": batch_size / batch_s,
        "memcpy_images_per_s": batch_size / copy_s,
        "ratio": copy_s / batch_s,
    }


def build_read_datasets(root: Path, samples: int) -> dict[str, Path]:
    if (root / "fixed").exists():
        return {"variable": root / "variable", "fixed": root / "fixed"}
    images = real_or_synthetic_images(samples)
    data = [{"image": im, "boxes": [[0, 0, 10, 10]], "classes": [0]} for im in images]
    detfmt.write(data, root / "variable", classes=["raccoon"], codec="raw")
    detfmt.write(data, root / "fixed", classes=["raccoon"], codec="raw", fixed_size=(640, 640))
    return {"variable": root / "variable", "fixed": root / "fixed"}


def make_million(path: Path, n: int) -> float:
    if path.exists() and len(detfmt.open(path)) == n:
        return float("nan")  # reused from an earlier run (--work)
    if path.exists():
        import shutil

        shutil.rmtree(path)
    pixel = np.zeros((1, 1, 3), np.uint8)
    empty = np.zeros((0, 4))
    t0 = time.perf_counter()
    detfmt.write(({"image": pixel, "boxes": empty, "classes": []} for _ in range(n)), path,
                 classes=["a"], progress=False)
    return time.perf_counter() - t0


OPEN_PROBE = """
import sys, time, json
import detfmt

def rss_mb():
    # VmRSS counts mapped page-cache pages too (shared with every process reading the files,
    # reclaimable; kernels map them in large folios); RssAnon is the process's own memory
    out = {}
    for line in open("/proc/self/status"):
        key = line.split(":")[0]
        if key in ("VmRSS", "RssAnon", "RssFile"):
            out[key] = int(line.split()[1]) / 1024
    return out

detfmt.open(sys.argv[1]).close()  # modules the first open imports lazily are not counted
before = rss_mb()
times, keep = [], []
for _ in range(7):
    t0 = time.perf_counter(); ds = detfmt.open(sys.argv[1]); times.append(time.perf_counter() - t0)
    keep.append(ds)  # keep them open: memory must not grow with N
times.sort()
after = rss_mb()
print(json.dumps({"open_ms": times[len(times) // 2] * 1e3,
                  "anon_mb_per_open": (after["RssAnon"] - before["RssAnon"]) / 7,
                  "file_mb_per_open": (after["RssFile"] - before["RssFile"]) / 7}))
"""


def probe_open(path: Path) -> dict:
    out = subprocess.run([sys.executable, "-c", OPEN_PROBE, str(path)], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--samples", type=int, default=1_000_000, help="N for the open() test")
    parser.add_argument("--batch-samples", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--work", type=Path, default=None,
                        help="keep the datasets here and reuse them on the next run")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = args.work or Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        paths = build_read_datasets(root, args.batch_samples)
        results = {name: bench_batch(path, 32, args.rounds) for name, path in paths.items()}
        small_n = 1000
        make_million(root / "small", small_n)
        write_s = make_million(root / "large", args.samples)
        small, large = probe_open(root / "small"), probe_open(root / "large")
    lines = ["| measurement | value |", "|---|---|"]
    for name, batch in results.items():
        label = ("letterboxed to 640x640 (fixed shape)" if batch["fixed"]
                 else f"long side 640, padded to {batch['image_size']}")
        lines += [
            f"| ds.batch, 32 random raw samples, {label} | "
            f"{batch['detfmt_images_per_s']:,.0f} images/s |",
            f"| np.copyto of the same {batch['MB_per_batch']:.1f} MB (memcpy baseline) | "
            f"{batch['memcpy_images_per_s']:,.0f} images/s |",
            f"| **ratio ds.batch / memcpy ({name})** | **{batch['ratio']:.2f}x** |",
        ]
        if not batch["fixed"]:
            lines += [
                f"| np.copyto of the whole padded batch buffer ({batch['buffer_MB']:.1f} MB) | "
                f"{batch['buffer_memcpy_images_per_s']:,.0f} images/s |",
                f"| **ratio ds.batch / memcpy of the padded buffer** | "
                f"**{batch['buffer_ratio']:.2f}x** |",
            ]
    lines += [
        f"| open(), N = {small_n:,} | {small['open_ms']:.1f} ms; per open: own memory "
        f"+{small['anon_mb_per_open']:.2f} MB, mapped page cache "
        f"+{small['file_mb_per_open']:.1f} MB |",
        f"| open(), N = {args.samples:,} | {large['open_ms']:.1f} ms; per open: own memory "
        f"+{large['anon_mb_per_open']:.2f} MB, mapped page cache "
        f"+{large['file_mb_per_open']:.1f} MB |",
        f"| write of the N = {args.samples:,} dataset (1x1 images) | {write_s:.1f} s "
        f"({args.samples / write_s:,.0f} samples/s) |",
    ]
    table = "\n".join(lines)
    print(table)
    if args.out:
        args.out.write_text(table + "\n")



if __name__ == "__main__":
    main()
