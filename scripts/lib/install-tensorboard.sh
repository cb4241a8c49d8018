#!/usr/bin/env bash
# install-tensorboard.sh: make TensorBoard's event-file reader importable, for the test that
# reads a run's events as TensorBoard does (tests/tensorboard.rs). Idempotent: installs only
# when the reader is not already importable from the folder. Prints the folder to put on
# PYTHONPATH on stdout (progress on stderr). Safe to run several at once (they take turns).
#
# The wheels go into the checkout's own .tensorboard/ (`pip install --target`, as
# install-nvrtc.sh does for NVRTC), never into the Python environment. Only what the reader
# imports is installed (--no-deps): TensorBoard's server (grpcio, werkzeug, its data server)
# is not needed to read event files.
set -euo pipefail

PYTHON=${PYTHON:-python3}
TARGET="$(cd "$(dirname "$0")/../.." && pwd)/.tensorboard"
PACKAGES=(tensorboard==2.21.0 protobuf==7.36.2 numpy==2.4.6 absl-py==2.5.1 packaging==26.4 six==1.17.0)

readable() {
  PYTHONPATH="$TARGET" "$PYTHON" -c 'from tensorboard.backend.event_processing import event_accumulator' 2>/dev/null
}

# The suite's tests call this at once: two pips upgrading one --target remove each other's
# files mid-install, so an install holds a lock, and a caller that waited on it finds what the
# first installed. The marker is written once pip is done (until then the reader may import
# while pip is still copying the rest in).
if [ -e "$TARGET/.installed" ] && readable; then
  echo "$TARGET"
  exit 0
fi
mkdir -p "$TARGET"
exec 9>"$TARGET/.install.lock"
flock 9
if ! readable; then
  if ! "$PYTHON" -m pip --version >/dev/null 2>&1; then
    echo "install-tensorboard: $PYTHON has no pip: install it (Debian: apt-get install python3-pip, as scripts/setup-deps.sh --tests does) and run this again" >&2
    exit 1
  fi
  echo "install-tensorboard: installing ${PACKAGES[*]} with pip into $TARGET" >&2
  PIP_ROOT_USER_ACTION=ignore "$PYTHON" -m pip install --quiet --disable-pip-version-check --upgrade --no-deps \
    --target "$TARGET" "${PACKAGES[@]}" >&2
  readable || {
    echo "install-tensorboard: installed, but TensorBoard's event reader does not import from $TARGET" >&2
    exit 1
  }
fi
# (A folder that imports under the lock is complete: no pip is writing to it.)
touch "$TARGET/.installed"
echo "$TARGET"
