#!/usr/bin/env bash
# README demo: convert the bundled chess sample (COCO JSON, public domain), print `detfmt info`
# and `detfmt stats`, split it into train/val, draw a `detfmt show` PNG grid, export back to COCO,
# run a short load benchmark, then load batches with the torch loader, augment them (affine +
# flip + HSV; timed warm, after one untimed epoch, over at least 20 batches) and draw the result.
# The augmentation figures name the CPU backend that ran, per image in ms (wall and CPU), and
# compare the torch kernels on the same batches.
# Works on a fresh machine: creates .venv (like tools/test.sh) when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
# what the README installs ([torch] brings OpenCV, the CPU augmentation backend); torch pinned
# to the CPU build on this machine's disk, as tools/test.sh does
. tools/cpu_torch.sh
cpu_torch .venv/bin/python torch==2.13.0
.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[torch]' torch==2.13.0
OUT=${DEMO_OUT:-out/demo}
mkdir -p "$OUT"
SAMPLE=detfmt/samples/chess

echo "== detfmt convert coco (bundled chess sample, 8 images)"
.venv/bin/detfmt convert coco "$SAMPLE/annotations.coco.json" "$OUT/chess" \
  --images "$SAMPLE" --max-side 512 --codec auto --workers 2 --overwrite --no-progress

echo "== detfmt info"
.venv/bin/detfmt info "$OUT/chess"

echo "== detfmt stats (classes, boxes per image, box and image sizes; --plot FILE.png draws them)"
.venv/bin/detfmt stats "$OUT/chess" --max-classes 5

echo "== detfmt split (deterministic for a seed; stratified: class shares within one image)"
.venv/bin/detfmt split "$OUT/chess" "$OUT/chess_split" --val 0.25 --seed 0 --stratify \
  --overwrite --no-progress

echo "== detfmt show"
.venv/bin/detfmt show "$OUT/chess" --out "$OUT/chess_grid.png" --cell 320

echo "== detfmt export coco (boxes back in original coordinates)"
.venv/bin/detfmt export coco "$OUT/chess" "$OUT/chess_roundtrip.json"

echo "== short load benchmark (random batches of 8 via ds.batch, reused buffer, ~2 s)"
.venv/bin/python - "$OUT/chess" <<'PY'
import sys
import time

import numpy as np

import detfmt

with detfmt.open(sys.argv[1]) as ds:
    rng = np.random.default_rng(0)
    size = min(8, len(ds))
    buffer = ds.batch_buffer(size)  # page-aligned, reused by every batch
    images = batches = 0
    start = time.perf_counter()
    while time.perf_counter() - start < 2.0:
        batch = ds.batch(np.sort(rng.choice(len(ds), size=size, replace=False)), out=buffer)
        images += len(batch.indices)
        batches += 1
    elapsed = time.perf_counter() - start
    print(f"{images / elapsed:,.0f} images/s, {1e6 * elapsed / images:,.0f} µs/image "
          f"({batches} batches of {batch.images.shape}, "
          f"{len(ds)} samples, codecs {dict(ds.header.image.codecs)})")
PY
echo "== torch loader + batched augmentation (affine + flip + HSV), rendered to PNG"
.venv/bin/python - "$OUT/chess" "$OUT/chess_augmented.png" <<'PY'
import importlib.util
import sys
import time

import torch

from detfmt import augment
from detfmt.torch import Delivery, Loader

path, picture = sys.argv[1], sys.argv[2]
generator = torch.Generator().manual_seed(0)
pipeline = augment.Compose([
    augment.RandomAffine(degrees=10.0, translate=0.1, scale=0.5, shear=2.0,
                         generator=generator),
    augment.RandomFlip(p=0.5, generator=generator),
    augment.RandomHSV(h=0.015, s=0.7, v=0.4, generator=generator),
])
loader = Loader(path, batch_size=4, shuffle=True, seed=0, delivery=Delivery(num_threads=2))
names = loader.ds.class_names


def backend_used() -> str:
    """The CPU backend that augments uint8 batches here ("auto": OpenCV when cv2 imports)."""
    chosen = augment.get_cpu_backend()
    if chosen == "auto":
        return "opencv" if importlib.util.find_spec("cv2") else "torch"
    return chosen


def measure(min_batches: int = 20, min_seconds: float = 2.0):
    """Per-image wall and CPU milliseconds over at least ``min_batches`` batches and
    ``min_seconds``, after one untimed epoch (threads, buffers and kernels start up there)."""
    loader.set_epoch(0)
    for batch in loader:
        pipeline(batch)
    images = batches = 0
    epoch = 0
    wall, cpu = time.perf_counter(), time.process_time()
    while batches < min_batches or time.perf_counter() - wall < min_seconds:
        epoch += 1
        loader.set_epoch(epoch)
        for batch in loader:
            out = pipeline(batch)
            images += out.images.shape[0]
            batches += 1
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return out, images, batches, 1000 * wall / images, 1000 * cpu / images


results = {}
backends = [backend_used()] + (["torch"] if backend_used() != "torch" else [])
for backend in backends:  # the one a user gets first, then the torch kernels for comparison
    augment.set_cpu_backend(backend)
    # the torch kernels are slow on a CPU: fewer batches are enough to measure them
    out, images, batches, wall_ms, cpu_ms = measure(20 if not results else 8, 2.0 if not results
                                                    else 0.0)
    results[backend] = (wall_ms, cpu_ms)
    if len(results) == 1:
        augment.render_batch(out, picture, class_names=names)
        kept = int(out.mask.sum())
    print(f"backend {backend:6s}: {images} images in {batches} batches of "
          f"{tuple(out.images.shape)}: {wall_ms:.1f} ms/image wall ({1000 / wall_ms:.1f} "
          f"images/s), {cpu_ms:.1f} ms/image CPU")
augment.set_cpu_backend("auto")
first = backends[0]
if first == "torch":
    print("OpenCV is not installed: the torch kernels ran on the CPU (pip install -e '.[torch]' "
          "brings opencv-python-headless, the fast CPU backend)")
else:
    print(f"{first} is what `pip install -e '.[torch]'` gives on a CPU; the torch kernels took "
          f"{results['torch'][1] / results[first][1]:.1f}x its CPU time per image")
print(f"last {first} batch: {kept} boxes kept; drawn to {picture}")
PY
echo "demo outputs in $OUT/ (chess/, chess.report.json, chess_split/, chess_grid.png,"
echo "  chess_roundtrip.json, chess_augmented.png)"
