#!/usr/bin/env bash
# bench-cpu-vs-torch.sh: one CPU training step, dcgan-train against PyTorch eager, taking
# turns so that both see the same state of a noisy machine; prints every run and the medians.
#
#   scripts/bench-cpu-vs-torch.sh [ROUNDS] [BASELINE_BINARY]
#
# Each round runs PyTorch (scripts/bench-torch.py --device cpu --threads 2), then
# target/release/dcgan-train bench-step, then BASELINE_BINARY bench-step when given (for
# example an older build, to measure a change), each 20 steps after 3 of warm-up at batch 64.
# The ratio quoted is the median over rounds of (ours / PyTorch) in the same round.
# PYTHON picks the interpreter that has torch (default python3; `pip install torch`); OURS
# another dcgan-train binary (for example the CUDA build's, on a machine without Open MPI).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-8}
baseline=${2:-}
python=${PYTHON:-python3}
ours=${OURS:-target/release/dcgan-train}
[[ -x $ours ]] || { echo "bench-cpu-vs-torch: $ours is missing; run cargo build --release first" >&2; exit 1; }
"$python" -c 'import torch' 2>/dev/null || {
  echo "bench-cpu-vs-torch: $python has no torch; pip install torch, or set PYTHON" >&2
  exit 1
}
[[ -z $baseline || -x $baseline ]] || { echo "bench-cpu-vs-torch: baseline $baseline is not an executable" >&2; exit 1; }

scripts/lib/cpu-info.sh
ms_of() { python3 -c 'import json,sys; print(json.loads(sys.stdin.read().strip().splitlines()[-1])["ms_per_step"])'; }
steps=(--batch-size 64 --steps 20 --warmup 3 --json)
results=$(mktemp)
trap 'rm -f "$results"' EXIT
for r in $(seq 1 "$rounds"); do
  t=$("$python" scripts/bench-torch.py --device cpu --threads 2 --repeats 1 "${steps[@]}" 2>/dev/null | ms_of)
  o=$("$ours" bench-step --device cpu --threads 2 "${steps[@]}" | ms_of)
  b=-
  [[ -n $baseline ]] && b=$("$baseline" bench-step --device cpu --threads 2 "${steps[@]}" | ms_of)
  printf 'round %2d  pytorch %8.1f  ours %8.1f' "$r" "$t" "$o"
  [[ -n $baseline ]] && printf '  baseline %8.1f' "$b"
  echo ' ms/step'
  echo "$t $o $b" >>"$results"
done
python3 - "$results" <<'EOF'
import statistics, sys
rows = [line.split() for line in open(sys.argv[1])]
torch = [float(r[0]) for r in rows]
ours = [float(r[1]) for r in rows]
print(f"median ms/step: pytorch {statistics.median(torch):.1f}, ours {statistics.median(ours):.1f}; "
      f"median of per-round ours/pytorch {statistics.median(o / t for o, t in zip(ours, torch)):.3f}")
if rows[0][2] != "-":
    base = [float(r[2]) for r in rows]
    print(f"baseline {statistics.median(base):.1f}; median of per-round ours/baseline "
          f"{statistics.median(o / b for o, b in zip(ours, base)):.3f}")
EOF
