#!/usr/bin/env bash
# Overlap of the gradient exchange with backward on one machine, N ranks (default 2): the same
# training with the exchange overlapped (default), after backward (--no-overlap) and skipped
# (--no-exchange). Prints the overlapped run's trace report (where the waits went, the hidden
# share on the timeline), then the three runs side by side with the hidden share from step
# times, as markdown tables.
#   scripts/bench-overlap.sh [RANKS] [STEPS] [extra dcgan-train options]
set -euo pipefail
cd "$(dirname "$0")/.."
ranks=${1:-2}; steps=${2:-40}; shift $(( $# > 2 ? 2 : $# ))
cargo build --release --quiet
bin=target/release/dcgan-train
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
out=$(mktemp -d)
run() {
  local name=$1; shift
  mpiexec --oversubscribe --bind-to none -n "$ranks" "$bin" --data synthetic:60000 \
    --max-steps "$steps" --no-progress --out "$out/$name" "$@" 2>/dev/null
}
run overlap --trace "$out/trace.json" --trace-steps 10 "$@"
run no-overlap --no-overlap "$@"
run no-exchange --no-exchange "$@"
"$bin" trace-report "$out/trace.json"
echo
python3 scripts/reports overlap overlap="$out/overlap/summary.json" no-overlap="$out/no-overlap/summary.json" \
  no-exchange="$out/no-exchange/summary.json"
echo "(runs in $out)"
