#!/usr/bin/env bash
# What each way of exchanging less costs in sample quality: 4 ranks on this machine (one per
# core or shared), the same batch per rank and learning rate, trained for --epochs with the
# Fréchet distance and KID after every epoch (scripts/bench-quality.sh per variant), for
# f32, bf16, 1bit (with and without the frozen variance) and block momentum.
#
#   scripts/bench-wire-quality.sh [--ranks 4] [--epochs 5] [--seed 1] [--eval-n 10000]
#                                 [--variants f32,bf16,1bit,1bit-frozen,bmuf4,bmuf16] [--out DIR]
#                                 [--data DIR|synthetic:N]
#
# Writes OUT/VARIANT/ (bench-quality.sh's folder of each) and OUT/results.md, results.json and
# quality.png (`python3 scripts/reports wire-quality OUT`): the distance against the epoch and
# against the training time. The runs share this machine's cores, not emulated links, so
# their times say what each costs in compute, not on a slow network (bench-wire.sh measures
# that; `python3 scripts/reports wire-quality OUT --links WIRE/results.json` then sets the
# distance against the time the epochs take on those links). DCGAN_TRAIN picks the binary.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(dirname "$HERE")"
RANKS=4 EPOCHS=5 SEED=1 EVAL_N=10000 VARIANTS=f32,bf16,1bit,1bit-frozen,bmuf4,bmuf16 OUT="" DATA=()
die() { echo "bench-wire-quality: $*" >&2; exit 1; }
log() { echo "bench-wire-quality: $*" >&2; }
# shellcheck source=lib/bench-common.sh
. "$HERE/lib/bench-common.sh"

while [ $# -gt 0 ]; do
    case "$1" in
        --ranks) RANKS="${2?}"; shift 2 ;;
        --epochs) EPOCHS="${2?}"; shift 2 ;;
        --seed) SEED="${2?}"; shift 2 ;;
        --eval-n) EVAL_N="${2?}"; shift 2 ;;
        --variants) VARIANTS="${2?}"; shift 2 ;;
        --out) OUT="${2?}"; shift 2 ;;
        --data) DATA=(--data "${2?}"); shift 2 ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown option $1 (see --help)" ;;
    esac
done
[[ "$RANKS" =~ ^[0-9]+$ && "$RANKS" -ge 2 ]] || die "--ranks '$RANKS': at least 2 (the variants exchange between ranks)"

IFS=, read -r -a VARS <<<"$VARIANTS"
for v in "${VARS[@]}"; do variant_args "$v" >/dev/null; done
OUT="${OUT:-$REPO/runs/wire-quality-$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$OUT"
echo "ranks=$RANKS epochs=$EPOCHS seed=$SEED eval_n=$EVAL_N variants=$VARIANTS" >"$OUT/settings.txt"
for v in "${VARS[@]}"; do
    log "$v: $(variant_args "$v")"
    "$HERE/bench-quality.sh" --ranks "$RANKS" --lr-scaling none --seeds "$SEED" --epochs "$EPOCHS" \
        --eval-n "$EVAL_N" "${DATA[@]}" --out "$OUT/$v" --train-args "$(variant_args "$v")" || die "$v failed"
done
python3 "$HERE/reports" wire-quality "$OUT"
