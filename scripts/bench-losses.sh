#!/usr/bin/env bash
# DCGAN's loss against WGAN-GP's, by sample quality at equal training wall time: each loss at
# each rank count (weak scaling, the same batch per rank) for the same number of epochs, with
# FID and KID to the test split after every epoch, set against the training wall time.
#
#   scripts/bench-losses.sh [--losses dcgan,wgan-gp] [--ranks 1,2] [--seeds 1] [--epochs 3]
#                           [--eval-n 10000] [--data DIR] [--batch 64] [--out DIR]
#
# (--data: MNIST-layout files with their t10k test split, or synthetic:N; by default Debian's
# Fashion-MNIST. --out: by default runs/losses-DATE-TIME. Each loss trains with its own
# optimizer defaults: DCGAN lr 2e-4, betas 0.5/0.999; WGAN-GP lr 1e-4, betas 0.5/0.9, 5
# critic steps per generator step, lambda 10; wgan-gp-layer is WGAN-GP with layer norm in the
# critic, --critic-norm layer. An epoch is one pass over the data for both: DCGAN steps, or
# WGAN-GP critic steps.)
#
# 1. The feature network: `dcgan-train classifier --data DIR`, reused when trained already.
# 2. For each seed, rank count and loss, one run: mpiexec -n R --bind-to none, --threads
#    cores/R (at least 1), --loss LOSS --eval-every 1 into OUT/LOSS-rR-sSEED (its output in
#    OUT/LOSS-rR-sSEED.log). Seeds outermost, then ranks, so that the losses of one rank count
#    run back to back on the machine.
# 3. results.md, results.json and losses.png: `python3 scripts/reports losses OUT`.
#
# environment.txt records the machine, the date and this command. Needs Open MPI, and
# matplotlib for the plot. DCGAN_TRAIN picks the binary (default: cargo build --release).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(dirname "$HERE")"
COMMAND="$0 $*"
LOSSES_ARG=dcgan,wgan-gp RANKS_ARG=1,2 SEEDS_ARG=1 EPOCHS=3 EVAL_N=10000 BATCH=64 OUT=""
DATA=/usr/share/datasets/fashion-mnist
die() { echo "bench-losses: $*" >&2; exit 1; }
log() { echo "bench-losses: $*" >&2; }
# shellcheck source=lib/bench-common.sh
source "$HERE/lib/bench-common.sh"

while [ $# -gt 0 ]; do
    case "$1" in
        --losses) LOSSES_ARG="${2:?--losses needs a list, e.g. dcgan,wgan-gp}"; shift 2 ;;
        --ranks) RANKS_ARG="${2:?--ranks needs a list, e.g. 1,2}"; shift 2 ;;
        --seeds) SEEDS_ARG="${2:?--seeds needs a list, e.g. 1,2}"; shift 2 ;;
        --epochs) EPOCHS="${2:?--epochs needs a value}"; shift 2 ;;
        --eval-n) EVAL_N="${2:?--eval-n needs a value}"; shift 2 ;;
        --data) DATA="${2:?--data needs a directory or synthetic:N}"; shift 2 ;;
        --batch) BATCH="${2:?--batch needs a value}"; shift 2 ;;
        --out) OUT="${2:?--out needs a directory}"; shift 2 ;;
        -h|--help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown option '$1' (see $0 --help)" ;;
    esac
done
for v in EPOCHS EVAL_N BATCH; do
    [[ "${!v}" =~ ^[1-9][0-9]*$ ]] || die "--${v,,} '${!v}' is not a positive whole number"
done
IFS=, read -ra LOSSES <<<"$LOSSES_ARG"
for l in "${LOSSES[@]}"; do
    case "$l" in dcgan | wgan-gp | wgan-gp-layer) ;; *) die "--losses: unknown loss '$l': use dcgan, wgan-gp or wgan-gp-layer" ;; esac
done
IFS=, read -ra RANKS <<<"$RANKS_ARG"
for n in "${RANKS[@]}"; do [[ "$n" =~ ^[1-9][0-9]*$ ]] || die "--ranks '$RANKS_ARG': give rank counts such as 1,2"; done
IFS=, read -ra SEEDS <<<"$SEEDS_ARG"
for s in "${SEEDS[@]}"; do [[ "$s" =~ ^[0-9]+$ ]] || die "--seeds '$SEEDS_ARG': give whole numbers such as 1,2"; done
if [[ "$DATA" != synthetic:* ]]; then
    [ -d "$DATA" ] || die "--data '$DATA' is not a directory: scripts/setup-deps.sh installs Fashion-MNIST, or give --data DIR"
    DATA="$(cd "$DATA" && pwd)"
fi
if [ -n "$OUT" ] && [ -n "$(ls -A "$OUT" 2>/dev/null)" ]; then
    die "--out '$OUT' is not empty: give a new folder (the report reads every run in it)"
fi

local_mpiexec
resolve_binary
OUT="${OUT:-$REPO/runs/losses-$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
CORES="$(nproc)"
{
    environment_header
    echo "version: $("$BIN" --version)"
    echo "command: $COMMAND"
} >"$OUT/environment.txt"

START=$SECONDS
log "1/3 the feature network for $DATA"
"$BIN" classifier --data "$DATA" >"$OUT/classifier.log" 2>&1 \
    || { cat "$OUT/classifier.log" >&2; die "dcgan-train classifier --data $DATA failed (its output above)"; }
log "2/3 training"
for seed in "${SEEDS[@]}"; do
    for n in "${RANKS[@]}"; do
        for loss in "${LOSSES[@]}"; do
            name="$loss-r$n-s$seed"
            threads=$((CORES / n))
            [ "$threads" -ge 1 ] || threads=1
            log "  $name ($n rank(s) x $threads thread(s), batch $BATCH per rank)"
            loss_args=(--loss "$loss")
            [ "$loss" = wgan-gp-layer ] && loss_args=(--loss wgan-gp --critic-norm layer)
            "${MPIEXEC[@]}" -n "$n" "$BIN" train "${loss_args[@]}" --data "$DATA" --batch-size "$BATCH" --seed "$seed" \
                --threads "$threads" --epochs "$EPOCHS" --eval-every 1 --eval-n "$EVAL_N" --no-progress \
                --out "$OUT/$name" >"$OUT/$name.log" 2>&1 \
                || { tail -n 20 "$OUT/$name.log" >&2; die "the run $name failed (the end of $OUT/$name.log above)"; }
            grep -h '^epoch [0-9]*: FID' "$OUT/$name.log" | sed 's/^/    /' >&2 || true
        done
    done
done
echo "took: $((SECONDS - START)) s" >>"$OUT/environment.txt"
log "3/3 report"
python3 "$HERE/reports" losses "$OUT"
