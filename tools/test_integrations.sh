#!/usr/bin/env bash
# The training-integration tests (tests/integrations) in their own environment.
#
# Ultralytics and torchvision need a torch that PyPI's torchvision imports beside (2.14.1 +
# torchvision 0.29.1, taken from the machine's disk by pip), while the main suite pins the
# CPU-only torch 2.13.0: so these tests get a second virtual environment, .venv-integrations.
# transformers, Lightning, JAX and tensorflow-cpu live here too (one install, one cache).
# Usage: bash tools/test_integrations.sh [pytest args]; INTEGRATIONS_VENV overrides the path.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=${INTEGRATIONS_VENV:-.venv-integrations}
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
# CPU wheels of torch and torchvision where PyTorch's CPU index is reachable (tools/cpu_torch.sh):
# the default Linux wheels add ~5.3 GB of CUDA libraries (nvidia-*, triton, CUDA torch) to the
# ~8.5 GB this environment takes with them. Offline (this project's machine) they come from
# pip's configured index, CUDA build included, because no CPU build of torchvision is on disk
# (torchvision 0.28.0 beside the CPU torch 2.13.0 fails to load its ops).
. tools/cpu_torch.sh
cpu_torch "$VENV/bin/python" torch==2.14.1 torchvision==0.29.1
# --no-compile: no .pyc for the ~8 GB installed (measured on a clean clone: 85 CPU-s instead of
# 112, 8.1 GB instead of 8.5); the few modules the tests import are compiled when first imported.
"$VENV/bin/python" -m pip install -q --no-compile --disable-pip-version-check \
  -e '.[test,fast,integrations-test]' torch==2.14.1 torchvision==0.29.1
# One pytest process per file: TensorFlow and triton (which torch pulls in) crash the
# interpreter when both load in one process in some orders (a segfault in triton's import).
status=0
for target in tests/integrations/test_*.py tests/torch/test_gpu_decode_path.py; do
  rc=0
  "$VENV/bin/python" -m pytest -q "$target" "$@" || rc=$?
  if [ "$rc" -ne 0 ] && [ "$rc" -ne 5 ]; then  # 5: nothing selected in this file (-k)
    status=$rc
  fi
done
exit "$status"
