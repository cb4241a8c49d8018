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

# The directory holding libnvrtc.so.13 under any `nvidia` package on the path (with the
# folder $1 in front of it), or fail.
libdir() {
  PYTHONPATH="$1${PYTHONPATH:+:$PYTHONPATH}" "$PYTHON" - <<'PY'
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

# Our own folder first: whatever `nvidia` package the Python path finds may lack cu13. The
# marker is written once pip is done (until then the library may be half copied in).
OURS="$TARGET/nvidia/cu13/lib"
if [ -e "$TARGET/.installed" ]; then
  echo "$OURS"
  exit 0
fi
# A wheel importable from $PYTHON is used as it is.
if [ ! -e "$OURS/libnvrtc.so.13" ] && dir=$(libdir "" 2>/dev/null); then
  echo "$dir"
  exit 0
fi
# Callers at once take turns (two pips upgrading one --target remove each other's files);
# one that waited finds what the first installed.
mkdir -p "$TARGET"
exec 9>"$TARGET/.install.lock"
flock 9
if [ ! -e "$TARGET/.installed" ] && [ ! -e "$OURS/libnvrtc.so.13" ]; then
  if ! "$PYTHON" -m pip --version >/dev/null 2>&1; then
    echo "install-nvrtc: $PYTHON has no pip: install it (Debian: apt-get install python3-pip, as scripts/setup-deps.sh --tests does) and run this again" >&2
    exit 1
  fi
  echo "install-nvrtc: installing nvidia-cuda-nvrtc==13.0.* with pip into $TARGET" >&2
  # (pip's advice against installing as root is about the system's environment, not --target.)
  PIP_ROOT_USER_ACTION=ignore "$PYTHON" -m pip install --quiet --disable-pip-version-check --upgrade --target "$TARGET" \
    'nvidia-cuda-nvrtc==13.0.*' >&2
fi
# (A folder installed before the marker existed is complete: no pip holds the lock.)
[ -e "$OURS/libnvrtc.so.13" ] || {
  echo "install-nvrtc: the wheel installed but libnvrtc.so.13 was not found under $OURS" >&2
  exit 1
}
touch "$TARGET/.installed"
echo "$OURS"
