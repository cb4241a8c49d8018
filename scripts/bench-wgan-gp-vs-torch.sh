#!/usr/bin/env bash
# bench-wgan-gp-vs-torch.sh: what WGAN-GP's penalty costs a critic step, ours (the explicit
# double backward) against PyTorch eager's (autograd, create_graph=True), taking turns so that
# both see the same state of a noisy machine; prints every round and the medians.
#
#   PYTHON=/path/to/python-with-torch scripts/bench-wgan-gp-vs-torch.sh [ROUNDS] [--device cuda]
#   CRITIC_NORM=layer PYTHON=... scripts/bench-wgan-gp-vs-torch.sh 8   # the layer-norm critic
#
# Each round runs scripts/bench-torch-wgan-gp.py, then `dcgan-train bench-step --loss wgan-gp`,
# each 20 critic steps with the penalty and 20 without, taking turns step by step, after 4 of
# warm-up, at batch 64 (on the CPU with 2 threads). Reported: each side's median ms per critic
# step with and without the penalty and their ratio (the penalty's cost), and the median over
# rounds of ours / PyTorch for the step with the penalty. OURS picks the binary (default
# target/release/dcgan-train).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-8}
device=cpu
[[ ${2:-} == --device ]] && device=${3:?--device needs cpu or cuda}
python=${PYTHON:-python3}
norm=${CRITIC_NORM:-none}
ours=${OURS:-target/release/dcgan-train}
[[ -x $ours ]] || { echo "bench-wgan-gp-vs-torch: $ours is missing; run cargo build --release first" >&2; exit 1; }
"$python" -c 'import torch' 2>/dev/null || {
  echo "bench-wgan-gp-vs-torch: $python has no torch; pip install torch, or set PYTHON" >&2
  exit 1
}
scripts/lib/cpu-info.sh
threads=()
[[ $device == cpu ]] && threads=(--threads 2)
results=$(mktemp)
trap 'rm -f "$results"' EXIT
for r in $(seq 1 "$rounds"); do
  t=$("$python" scripts/bench-torch-wgan-gp.py --device "$device" "${threads[@]}" --batch-size 64 --steps 20 --warmup 4 --critic-norm "$norm" --json | tail -n 1)
  o=$("$ours" bench-step --loss wgan-gp --critic-norm "$norm" --device "$device" "${threads[@]}" --batch-size 64 --steps 20 --warmup 4 --json 2>/dev/null | tail -n 1)
  echo "$t" >>"$results"
  echo "$o" >>"$results"
  python3 - "$r" "$t" "$o" <<'PY'
import json, sys
r, t, o = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
side = lambda x: "%.1f/%.1f ms (%.2fx)" % (x["ms_per_critic_step"], x["ms_per_critic_step_without_penalty"], x["penalty_cost_ratio"])
print("round %s  pytorch %s  ours %s" % (r, side(t), side(o)))
PY
done
python3 - "$results" <<'EOF'
import json, statistics, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
torch, ours = rows[0::2], rows[1::2]
med = lambda xs, k: statistics.median(x[k] for x in xs)
for name, side in (("pytorch", torch), ("ours", ours)):
    print(f"{name}: median {med(side, 'ms_per_critic_step'):.1f} ms with the penalty, "
          f"{med(side, 'ms_per_critic_step_without_penalty'):.1f} without; the penalty costs "
          f"{med(side, 'penalty_cost_ratio'):.2f}x (median over rounds)")
print(f"ours / pytorch, with the penalty: median over rounds "
      f"{statistics.median(o['ms_per_critic_step'] / t['ms_per_critic_step'] for o, t in zip(ours, torch)):.3f}")
EOF
