#!/usr/bin/env bash
# One command for a machine with a CUDA GPU, within 8 minutes: set up an environment, run the
# CUDA tests, then measure and write one markdown table (docs/bench/gpu.md; tools/gpu_check.py
# says what each row is).
#
# Usage: bash tools/gpu_check.sh [--dry-run] [--out FILE] [gpu_check.py args...]
#   --dry-run (automatic without CUDA): no tests, CUDA rows "skipped (no CUDA)", small sizes.
# Environment: GPU_CHECK_PYTHON=an interpreter that already has detfmt's deps (no venv, no
# install); GPU_CHECK_VENV (default .venv-gpu); GPU_CHECK_DATA (default ../shared/data/
# coco128-yolo when present, else synthetic images).
#
# Safe on a fresh machine: the venv sees the system's packages (a preinstalled CUDA torch is
# used as is), pip installs only what is missing, under a time budget; a failed install (no
# network) leaves what imports, and each row that cannot run says why.
set -uo pipefail
cd "$(dirname "$0")/.."
START=$(date +%s)
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"  # this checkout's detfmt
DRY=0
ARGS=()
for arg in "$@"; do
  if [ "$arg" = "--dry-run" ]; then DRY=1; else ARGS+=("$arg"); fi
done
left() { echo $(( 480 - ($(date +%s) - START) )); }

if [ -n "${GPU_CHECK_PYTHON:-}" ]; then
  PY=$GPU_CHECK_PYTHON
else
  VENV=${GPU_CHECK_VENV:-.venv-gpu}
  if [ ! -x "$VENV/bin/python" ]; then
    "${PYTHON:-python3}" -m venv --system-site-packages "$VENV"
  fi
  PY=$VENV/bin/python
  # the package and its test deps (torch only if none imports: keep a CUDA build the machine has)
  EXTRAS='.[test,fast,augment-test]'
  "$PY" -c 'import torch' 2>/dev/null || EXTRAS='.[test,torch,fast,augment-test]'
  timeout 150 "$PY" -m pip install -q --disable-pip-version-check -e "$EXTRAS" \
    || echo "gpu_check: install incomplete (no network or over 150 s); going on with what imports"
  if [ "$DRY" = 0 ]; then  # optional sides: torchvision (nvJPEG), ultralytics (baseline, YOLOv8n)
    timeout 90 "$PY" -m pip install -q --disable-pip-version-check torchvision ultralytics \
      || echo "gpu_check: torchvision/ultralytics not installed; their rows will say so"
  fi
fi

CUDA=$("$PY" -c 'import torch; print(int(torch.cuda.is_available()))' 2>/dev/null || echo 0)
if [ "$CUDA" != 1 ]; then
  [ "$DRY" = 1 ] || echo "gpu_check: no CUDA device: dry run"
  DRY=1
fi

SUMMARY=""
if [ "$DRY" = 0 ]; then
  budget=$(( $(left) - 200 ))  # leave the measurements 200 s
  [ "$budget" -gt 30 ] || budget=30
  LOG=$(mktemp)
  # the CUDA tests: the gpu marker, and the GPU decode path (its cuda cases skip without CUDA)
  timeout "$budget" "$PY" -m pytest -q -p no:cacheprovider -m gpu tests \
    tests/torch/test_gpu_decode_path.py 2>&1 | tee "$LOG"
  SUMMARY=$(grep -E '(passed|failed|error|skipped|no tests ran)' "$LOG" | tail -1 | tr -d '=|')
  [ -n "$SUMMARY" ] || SUMMARY="no summary (timed out after ${budget} s?)"
  rm -f "$LOG"
  EXTRA=()
else
  EXTRA=(--dry-run --samples 16 --batch 8 --batches 2 --rounds 1 --imgsz 320)
fi

DATA=${GPU_CHECK_DATA:-../shared/data/coco128-yolo}
DATA_ARG=()
if [ -d "$DATA/images" ] && [ "$DRY" = 0 ]; then DATA_ARG=(--data "$DATA"); fi
timeout "$(( $(left) > 30 ? $(left) : 30 ))" "$PY" tools/gpu_check.py \
  --tests-summary "$SUMMARY" "${DATA_ARG[@]}" "${EXTRA[@]}" "${ARGS[@]}"
