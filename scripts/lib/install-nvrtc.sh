#!/usr/bin/env bash
# install-nvrtc.sh: make NVRTC (CUDA's run-time compiler, libnvrtc.so.13) available without a
# CUDA toolkit or a GPU, from PyPI's nvidia-cuda-nvrtc 13.0 wheel. Idempotent: installs only
# when the library is not already there. Prints the library directory on stdout (progress on
# stderr), for:
#
#   export LD_LIBRARY_PATH="$(scripts/lib/install-nvrtc.sh)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
#
# The wheel goes into the checkout's own .nvrtc/ (`pip install --target`), never into the
# Python environment: Debian's Python refuses pip installs into it (PEP 668,
# "externally-managed-environment"), and a test run should not change the user's Python.
# A wheel already importable from $PYTHON is used as it is.
#
# The kernels compile with it to PTX/CUBIN here (tests/cuda_nvrtc.rs); running them needs a GPU.
set -euo pipefail

PYTHON=${PYTHON:-python3}
TARGET="$(cd "$(dirname "$0")/../.." && pwd)/.nvrtc"

# The directory holding libnvrtc.so.13 under any `nvidia` package on the path, or fail.
libdir() {
  PYTHONPATH="$TARGET${PYTHONPATH:+:$PYTHONPATH}" "$PYTHON" - <<'PY'
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

# Our own folder first: whatever `nvidia` package the Python path finds may lack cu13.
if [ -e "$TARGET/nvidia/cu13/lib/libnvrtc.so.13" ]; then
  echo "$TARGET/nvidia/cu13/lib"
  exit 0
fi
# Callers at once take turns (two pips upgrading one --target remove each other's files).
mkdir -p "$TARGET"
exec 9>"$TARGET/.install.lock"
flock 9
if ! dir=$(libdir 2>/dev/null); then
  if ! "$PYTHON" -m pip --version >/dev/null 2>&1; then
    echo "install-nvrtc: $PYTHON has no pip: install it (Debian: apt-get install python3-pip, as scripts/setup-deps.sh --tests does) and run this again" >&2
    exit 1
  fi
  echo "install-nvrtc: installing nvidia-cuda-nvrtc==13.0.* with pip into $TARGET" >&2
  # (pip's advice against installing as root is about the system's environment, not --target.)
  PIP_ROOT_USER_ACTION=ignore "$PYTHON" -m pip install --quiet --disable-pip-version-check --upgrade --target "$TARGET" \
    'nvidia-cuda-nvrtc==13.0.*' >&2
  dir=$(libdir) || {
    echo "install-nvrtc: the wheel installed but libnvrtc.so.13 was not found under $TARGET/nvidia/cu13/lib" >&2
    exit 1
  }
fi
echo "$dir"
