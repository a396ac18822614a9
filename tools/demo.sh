#!/usr/bin/env bash
# README demo: convert the bundled chess sample (COCO JSON, public domain), print `detfmt info`
# and `detfmt stats`, split it into train/val, draw a `detfmt show` PNG grid, export back to COCO,
# run a short load benchmark, then load batches with the torch loader, augment them (affine +
# flip + HSV; timed warm, after one untimed epoch) and draw the result.
# Works on a fresh machine: creates .venv (like tools/test.sh) when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[test,torch]' torch==2.13.0
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
    print(f"{images / elapsed:,.0f} images/s ({batches} batches of {batch.images.shape}, "
          f"{len(ds)} samples, codecs {dict(ds.header.image.codecs)})")
PY
echo "== torch loader + batched augmentation (affine + flip + HSV), rendered to PNG"
.venv/bin/python - "$OUT/chess" "$OUT/chess_augmented.png" <<'PY'
import sys
import time

import torch

from detfmt import augment
from detfmt.torch import Loader

path, picture = sys.argv[1], sys.argv[2]
generator = torch.Generator().manual_seed(0)
pipeline = augment.Compose([
    augment.RandomAffine(degrees=10.0, translate=0.1, scale=0.5, shear=2.0,
                         generator=generator),
    augment.RandomFlip(p=0.5, generator=generator),
    augment.RandomHSV(h=0.015, s=0.7, v=0.4, generator=generator),
])
loader = Loader(path, batch_size=4, shuffle=True, seed=0, num_threads=2)
names = loader.ds.class_names
loader.set_epoch(0)  # one untimed epoch: threads, buffers and kernels start up here
for batch in loader:
    pipeline(batch)
images = 0
start = time.perf_counter()
for epoch in range(1, 11):
    loader.set_epoch(epoch)
    for batch in loader:
        out = pipeline(batch)
        images += len(out)
elapsed = time.perf_counter() - start
augment.render_batch(out, picture, class_names=names)
kept = int(out.mask.sum())
print(f"{images} images loaded and augmented on the CPU in {elapsed:.2f} s "
      f"({images / elapsed:,.0f} images/s, warm: after one untimed epoch); last batch "
      f"{tuple(out.images.shape)} {out.images.dtype}, {kept} boxes kept; drawn to {picture}")
PY
echo "demo outputs in $OUT/ (chess/, chess.report.json, chess_split/, chess_grid.png,"
echo "  chess_roundtrip.json, chess_augmented.png)"
