#!/usr/bin/env bash
# From a fresh clone to a trained generator: installs what is missing (Open MPI, libclang,
# Fashion-MNIST, the Rust build), builds in release mode, trains one epoch on 2 ranks and
# says where the samples and metrics are. Run as root or with sudo on Debian or Ubuntu.
#   scripts/demo.sh [extra dcgan-train options]
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup-deps.sh
[ -x "$HOME/.cargo/bin/cargo" ] && export PATH="$HOME/.cargo/bin:$PATH"
echo "building (release)..." >&2
cargo build --release --quiet

if [ "$(id -u)" -eq 0 ]; then
  # Open MPI refuses root unless told it may.
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
out="runs/demo-$(date +%Y%m%d-%H%M%S)"
# --bind-to none: let each rank's threads use any core (Open MPI would pin each rank to one).
mpiexec --oversubscribe --bind-to none -n 2 target/release/dcgan-train --epochs 1 --out "$out" "$@"

echo
echo "samples:  $out/samples/epoch-001.png"
echo "metrics:  $out/metrics.jsonl  (summary: $out/summary.json)"
echo "weights:  $out/checkpoints/latest  (PyTorch-loadable safetensors)"
echo "curves:   tensorboard --logdir runs  (losses, step times, sample quality and grids of every run)"
echo "more:     target/release/dcgan-train sample --checkpoint $out --out grid.png"
