#!/usr/bin/env bash
# build-gpu-bin.sh: the binaries a GPU machine runs, built here (no GPU needed), into
# target/gpu-bin: the CUDA build of dcgan-train, the CUDA test executables and the MPI build
# as dcgan-train-mpi, stripped of debug info (about 30 MiB); and, where Fashion-MNIST is
# installed, target/gpu-quality for the quality stage. `gpu-check.sh --build` runs this.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN="$ROOT/target/gpu-bin"
QUALITY_DATA="$ROOT/target/gpu-quality"
# The test executables gpu-check.sh runs: its tests stage runs every one but cuda_bench.
TESTS=(cuda_nvrtc cuda_device cuda_ops cuda_layernorm penalty cuda_precision cuda_wire cuda_dcgan cuda_bench)
cd "$ROOT"
FEAT=(--release --no-default-features --features cuda)
cargo build "${FEAT[@]}" --bin dcgan-train
args=()
for t in "${TESTS[@]}"; do args+=(--test "$t"); done
# Afresh: an executable left from an older build would be run as one of this build's.
rm -rf "$BIN"
mkdir -p "$BIN"
cargo test "${FEAT[@]}" --no-run "${args[@]}" --message-format=json |
  python3 -c '
import json, os, shutil, sys
dst = sys.argv[1]
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    exe = m.get("executable")
    if m.get("reason") == "compiler-artifact" and exe and "test" in m.get("target", {}).get("kind", []):
        name = m["target"]["name"]
        shutil.copy2(exe, os.path.join(dst, name))
        print("gpu-bin:", name, file=sys.stderr)
' "$BIN"
cp target/release/dcgan-train "$BIN/"
# The MPI variant for the "mpi" stage (that machine has no Open MPI: copy .ompi there, see
# scripts/gpu/fetch-ompi-runtime.sh).
cargo build --release --bin dcgan-train
cp target/release/dcgan-train "$BIN/dcgan-train-mpi"
# Without debug info the set is a tenth of the size, quicker to copy; panics still name
# functions.
for f in "$BIN"/*; do [[ -f $f ]] && strip --strip-debug "$f"; done
# For the quality stage, apart (carried with target/gpu-bin/dcgan-train only): Fashion-MNIST
# and its feature network (trained here once), 33 MB.
fm=/usr/share/datasets/fashion-mnist
if [[ -d $fm ]]; then
  mkdir -p "$QUALITY_DATA"
  cp "$fm"/*.gz "$QUALITY_DATA/"
  target/release/dcgan-train classifier --data "$fm" --out "$QUALITY_DATA/feature-net.safetensors"
  du -sh "$QUALITY_DATA"
fi
size() { du -sch "$@" 2>/dev/null | tail -n 1 | cut -f 1; }
tree=$(git ls-files -z | xargs -0 du -cb | tail -n 1 | cut -f 1)
echo "to carry to the GPU machine with the checkout ($((tree / 1048576)) MiB; 64 MiB in all), by stage:"
echo "  env nvrtc tests sanitize bench torch binary wgan: target/gpu-bin ($(size "$BIN"))"
echo "  mpi scaling two-level wire: target/gpu-bin and .ompi ($(size "$BIN" .ompi); .ompi from scripts/gpu/fetch-ompi-runtime.sh)"
echo "  quality: target/gpu-bin/dcgan-train and target/gpu-quality ($(size "$BIN/dcgan-train" "$QUALITY_DATA"))"
echo "then there: bash scripts/gpu/gpu-check.sh [STAGE...]"
