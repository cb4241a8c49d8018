#!/usr/bin/env bash
# install-nvrtc.sh: make NVRTC (CUDA's run-time compiler, libnvrtc.so.13) available without a
# CUDA toolkit or a GPU, from PyPI's nvidia-cuda-nvrtc 13.0 wheel. Idempotent: installs only
# when the library is not already there. Prints the library directory on stdout (progress on
# stderr), for:
#
#   export LD_LIBRARY_PATH="$(scripts/install-nvrtc.sh)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
#
# The kernels compile with it to PTX/CUBIN here (tests/cuda_nvrtc.rs); running them needs a GPU.
set -euo pipefail

PYTHON=${PYTHON:-python3}

libdir() {
  "$PYTHON" - <<'PY'
import importlib.util, os, sys
spec = importlib.util.find_spec("nvidia")
for base in (spec.submodule_search_locations if spec else []):
    d = os.path.join(base, "cu13", "lib")
    if os.path.exists(os.path.join(d, "libnvrtc.so.13")):
        print(d)
        sys.exit(0)
sys.exit(1)
PY
}

if ! dir=$(libdir 2>/dev/null); then
  echo "install-nvrtc: installing nvidia-cuda-nvrtc==13.0.* with pip" >&2
  "$PYTHON" -m pip install --quiet --disable-pip-version-check 'nvidia-cuda-nvrtc==13.0.*' >&2
  dir=$(libdir) || {
    echo "install-nvrtc: the wheel installed but libnvrtc.so.13 was not found under nvidia/cu13/lib" >&2
    exit 1
  }
fi
echo "$dir"
