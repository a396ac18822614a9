#!/usr/bin/env bash
# Set up a local virtual environment (first run only) and run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
# torch is pinned here (the CPU build on this machine's disk); the package itself asks for a range.
# The scale extra (Ray, Dask, fsspec/s3fs, moto) is test-only ([torch] brings OpenCV);
# fast (numba) is installed so both gather paths are tested (tests/reading/test_gather_kernel.py),
# plot (matplotlib) so the stats plot is (tests/workflows).
. tools/cpu_torch.sh
cpu_torch .venv/bin/python torch==2.13.0
.venv/bin/python -m pip install -q --disable-pip-version-check \
  -e '.[test,torch,fast,plot,scale]' torch==2.13.0
# tests/view drive headless Chromium: Debian's chromium and chromium-driver, installed here when
# missing and apt-get can (as root); without them those tests skip and say why
if ! command -v chromedriver >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 \
    && [ "$(id -u)" = 0 ]; then
  (apt-get update -qq && apt-get install -y -qq chromium chromium-driver) >/dev/null 2>&1 \
    || echo "note: chromium could not be installed; tests/view skip their browser tests"
fi
.venv/bin/python -m ruff check .
.venv/bin/lint-imports  # the floor plan: [tool.importlinter] in pyproject.toml
status=0
.venv/bin/python -m pytest -q "$@" || status=$?
# The training integrations (Ultralytics, torchvision, transformers, Lightning, JAX, TF) need
# torch 2.14.1 + torchvision, so they run in their own environment (tools/test_integrations.sh),
# after the main suite and only for a whole-suite run; DETFMT_SKIP_INTEGRATIONS=1 skips them.
# They run even when the main suite failed (one failure must not hide the rest); the exit
# status is the main suite's when it failed, else theirs.
if [ "$#" -eq 0 ] && [ "${DETFMT_SKIP_INTEGRATIONS:-0}" != 1 ]; then
  rc=0
  bash tools/test_integrations.sh || rc=$?
  if [ "$status" -eq 0 ]; then
    status=$rc
  fi
fi
exit "$status"
