#!/usr/bin/env bash
# README demo: convert the bundled chess sample (COCO JSON, public domain), print `detfmt info`,
# draw a `detfmt show` PNG grid, export back to COCO, and run a short load benchmark.
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
    hmax, wmax = (int(v) for v in ds.sizes.max(axis=0))
    buffer = np.empty(size * hmax * wmax * 3, np.uint8)  # reused by every batch
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
echo "demo outputs in $OUT/ (chess/, chess.report.json, chess_grid.png, chess_roundtrip.json)"
