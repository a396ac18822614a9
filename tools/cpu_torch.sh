# Sourced by tools/demo.sh, tools/test.sh and tools/test_integrations.sh.
#
# cpu_torch PYTHON REQUIREMENT...: on a machine without an NVIDIA GPU, install the torch (and
# torchvision) REQUIREMENTs from PyTorch's CPU wheel index, so that the default Linux wheels
# do not bring ~5 GB of CUDA libraries (nvidia-*, triton) that nothing here uses. It does
# nothing when torch is already installed, when `nvidia-smi` works, when DETFMT_TORCH_INDEX is
# set empty, or when the index is unreachable (offline: pip's configured index then provides
# torch, as on this project's machine: the CPU build of 2.13.0, and 2.14.1 with CUDA).
TORCH_CPU_INDEX=${DETFMT_TORCH_INDEX-https://download.pytorch.org/whl/cpu}

cpu_torch() {
  local python=$1
  shift
  if [ -z "$TORCH_CPU_INDEX" ] || "$python" -c "import torch" 2>/dev/null; then
    return 0
  fi
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    return 0  # a GPU: the default (CUDA) wheels are the right ones
  fi
  if "$python" - "$TORCH_CPU_INDEX" <<'PY'
import sys
import urllib.request

try:
    urllib.request.urlopen(sys.argv[1], timeout=10).close()
except OSError:
    sys.exit(1)
PY
  then
    echo "installing $* from $TORCH_CPU_INDEX (CPU build, no CUDA libraries)" >&2
    "$python" -m pip install -q --disable-pip-version-check --index-url "$TORCH_CPU_INDEX" "$@"
  else
    echo "($TORCH_CPU_INDEX unreachable: $* from pip's configured index)" >&2
  fi
}
