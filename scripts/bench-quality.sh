#!/usr/bin/env bash
# What more ranks do to sample quality. Weak scaling on one machine (the same batch per rank,
# so the global batch grows with the ranks: 64 x N by default) at 1, 2 and 4 ranks, under each
# --lr-scaling, for the same number of epochs, with several seeds; the Fréchet distance (FID)
# and KID of the generator's images to the test split after every epoch, set against the
# epoch and against the training wall time.
#
#   scripts/bench-quality.sh [--ranks 1,2,4] [--lr-scaling none,sqrt,linear] [--seeds 1,2]
#                            [--epochs 5] [--eval-n 10000] [--data DIR] [--batch 64] [--out DIR]
#                            [--train-args "--wire 1bit"]
#
# (--data: a directory of MNIST-layout files with their t10k test split, or synthetic:N; by
# default Debian's Fashion-MNIST, /usr/share/datasets/fashion-mnist. --out: by default
# runs/quality-DATE-TIME. The defaults train 14 runs of 5 epochs each: hours on 2 cores. A
# check of the whole script in minutes:
#   scripts/bench-quality.sh --ranks 1,2 --lr-scaling none,linear --seeds 1 --epochs 1 \
#       --eval-n 300 --data synthetic:2048 --out /tmp/bq )
#
# 1. The feature network the distances are taken with: `dcgan-train classifier --data DIR`,
#    trained once per data set and reused from ~/.cache/dcgan-train/feature-nets/ after that
#    (classifier.log).
# 2. For each seed, rank count and scaling, one run: mpiexec -n R --bind-to none, --threads
#    cores/R (at least 1), --batch-size BATCH per rank, --lr-scaling SCALING --seed SEED
#    --eval-every 1 --eval-n N --epochs E, into OUT/rR-SCALING-sSEED (its output in
#    OUT/rR-SCALING-sSEED.log). Seeds outermost, so that a slow stretch of the machine falls on
#    every configuration alike. At 1 rank with --batch 64 the global batch is the reference 64,
#    where no scaling changes the learning rate: one run per seed (under the first scaling
#    listed) stands for all of them.
#    --train-args adds options to every run (split on spaces), e.g. --wire 1bit (with --g-ema N
#    the report gives the averaged generator's FID beside G's).
# 3. results.md, results.json and quality.png: `python3 scripts/reports quality OUT`.
#
# environment.txt records the machine, the date, this command and the binary's version. A run
# that fails stops the script with a line naming it (its log above). Needs Open MPI, and
# matplotlib for the plot (without it the report says it left the plot out: pip install
# matplotlib, or apt-get install python3-matplotlib). DCGAN_TRAIN picks the binary (default:
# cargo build --release, then target/release/dcgan-train).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(dirname "$HERE")"
# The command as typed (words quoted only where the shell needs it), for environment.txt.
quote() { if [[ "$1" =~ ^[A-Za-z0-9_./:,=+@-]+$ ]]; then printf '%s' "$1"; else printf '%q' "$1"; fi; }
COMMAND="$(quote "$0")"
for a in "$@"; do COMMAND+=" $(quote "$a")"; done
RANKS_ARG=1,2,4 SCALINGS_ARG=none,sqrt,linear SEEDS_ARG=1,2 EPOCHS=5 EVAL_N=10000 BATCH=64 OUT="" TRAIN_ARGS=""
DATA=/usr/share/datasets/fashion-mnist
REFERENCE_BATCH=64 # --lr-scaling's: the learning rate is --lr at this global batch
die() { echo "bench-quality: $*" >&2; exit 1; }
log() { echo "bench-quality: $*" >&2; }
# shellcheck source=lib/bench-common.sh
source "$HERE/lib/bench-common.sh"

while [ $# -gt 0 ]; do
    case "$1" in
        --ranks) RANKS_ARG="${2:?--ranks needs a list, e.g. 1,2,4}"; shift 2 ;;
        --lr-scaling) SCALINGS_ARG="${2:?--lr-scaling needs a list, e.g. none,sqrt,linear}"; shift 2 ;;
        --seeds) SEEDS_ARG="${2:?--seeds needs a list, e.g. 1,2}"; shift 2 ;;
        --epochs) EPOCHS="${2:?--epochs needs a value}"; shift 2 ;;
        --eval-n) EVAL_N="${2:?--eval-n needs a value}"; shift 2 ;;
        --data) DATA="${2:?--data needs a directory or synthetic:N}"; shift 2 ;;
        --batch) BATCH="${2:?--batch needs a value}"; shift 2 ;;
        --out) OUT="${2:?--out needs a directory}"; shift 2 ;;
        --train-args) TRAIN_ARGS="${2?--train-args needs a value, e.g. \"--wire 1bit\"}"; shift 2 ;;
        -h|--help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown option '$1' (see $0 --help)" ;;
    esac
done
for v in EPOCHS EVAL_N BATCH; do
    flag="--${v,,}"
    [[ "${!v}" =~ ^[1-9][0-9]*$ ]] || die "${flag//_/-} '${!v}' is not a positive whole number"
done
IFS=, read -ra RANKS <<<"$RANKS_ARG"
prev=0
for n in "${RANKS[@]}"; do
    [[ "$n" =~ ^[1-9][0-9]*$ && "$n" -gt "$prev" ]] \
        || die "--ranks '$RANKS_ARG': give rank counts in rising order, separated by commas (e.g. 1,2,4)"
    prev="$n"
done
[ "${#RANKS[@]}" -ge 1 ] || die "--ranks '$RANKS_ARG': give at least one rank count (e.g. 1,2,4)"
[ "${RANKS[0]}" = 1 ] || log "--ranks '$RANKS_ARG' has no 1-rank run: the report will have nothing to compare the larger batches with"
IFS=, read -ra SCALINGS <<<"$SCALINGS_ARG"
[ "${#SCALINGS[@]}" -ge 1 ] || die "--lr-scaling '$SCALINGS_ARG': give at least one of none, sqrt, linear"
for s in "${SCALINGS[@]}"; do
    case "$s" in none | sqrt | linear) ;; *) die "--lr-scaling: unknown scaling '$s': use none, sqrt or linear" ;; esac
done
[ "$(printf '%s\n' "${SCALINGS[@]}" | sort -u | wc -l)" = "${#SCALINGS[@]}" ] \
    || die "--lr-scaling '$SCALINGS_ARG': name each scaling once"
IFS=, read -ra SEEDS <<<"$SEEDS_ARG"
[ "${#SEEDS[@]}" -ge 1 ] || die "--seeds '$SEEDS_ARG': give at least one seed (e.g. 1,2)"
for s in "${SEEDS[@]}"; do
    [[ "$s" =~ ^[0-9]+$ ]] || die "--seeds '$SEEDS_ARG': give whole numbers separated by commas (e.g. 1,2)"
done
[ "$(printf '%s\n' "${SEEDS[@]}" | sort -u | wc -l)" = "${#SEEDS[@]}" ] || die "--seeds '$SEEDS_ARG': name each seed once"
if [[ "$DATA" != synthetic:* ]]; then
    [ -d "$DATA" ] || die "--data '$DATA' is not a directory: scripts/setup-deps.sh installs Fashion-MNIST, or give --data DIR (or synthetic:N)"
    DATA="$(cd "$DATA" && pwd)"
fi
if [ -n "$OUT" ] && [ -e "$OUT" ] && [ -n "$(ls -A "$OUT" 2>/dev/null)" ]; then
    die "--out '$OUT' is not empty: give a new folder (the report reads every run in it)"
fi

local_mpiexec
python3 -c 'import matplotlib' 2>/dev/null \
    || log "python3 has no matplotlib: the report will leave out quality.png (pip install matplotlib, or apt-get install python3-matplotlib)"
resolve_binary
OUT="${OUT:-$REPO/runs/quality-$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
CORES="$(nproc)"

# The runs, in order: "RANKS SCALING SEED".
PLAN=()
for seed in "${SEEDS[@]}"; do
    for n in "${RANKS[@]}"; do
        for s in "${SCALINGS[@]}"; do
            PLAN+=("$n $s $seed")
            # Global batch 64: every scaling gives --lr itself, the same run.
            if [ "$((n * BATCH))" = "$REFERENCE_BATCH" ]; then break; fi
        done
    done
done

{
    environment_header
    echo "version: $("$BIN" --version)"
    if git -C "$REPO" rev-parse --short HEAD >/dev/null 2>&1; then
        echo "checkout: $(git -C "$REPO" describe --always --dirty) (branch $(git -C "$REPO" rev-parse --abbrev-ref HEAD))"
    fi
    echo "command: $COMMAND"
    echo "settings: --ranks $RANKS_ARG --lr-scaling $SCALINGS_ARG --seeds $SEEDS_ARG --epochs $EPOCHS --eval-n $EVAL_N --batch $BATCH per rank --data $DATA; --threads cores/ranks (at least 1) of $CORES cores; ${#PLAN[@]} runs"
} >"$OUT/environment.txt"

START=$SECONDS
log "1/3 the feature network for $DATA (trained once, then reused)"
"$BIN" classifier --data "$DATA" >"$OUT/classifier.log" 2>&1 \
    || { cat "$OUT/classifier.log" >&2; die "dcgan-train classifier --data $DATA failed (its output above)"; }
tail -n 3 "$OUT/classifier.log" >&2

log "2/3 training: ${#PLAN[@]} runs of $EPOCHS epoch(s), batch $BATCH per rank, FID and KID on $EVAL_N images after every epoch"
if [ "${RANKS[0]}" = 1 ] && [ "$BATCH" = "$REFERENCE_BATCH" ] && [ "${#SCALINGS[@]}" -gt 1 ]; then
    log "  1 rank: global batch $REFERENCE_BATCH, where --lr-scaling ${SCALINGS_ARG//,/, } all give the same learning rate: one run per seed (under ${SCALINGS[0]}) stands for every scaling"
fi
i=0
for run in "${PLAN[@]}"; do
    read -r n s seed <<<"$run"
    i=$((i + 1))
    name="r$n-$s-s$seed"
    dir="$OUT/$name"
    threads=$((CORES / n))
    [ "$threads" -ge 1 ] || threads=1
    log "  run $i/${#PLAN[@]}: $name ($n rank(s) x $threads thread(s), global batch $((n * BATCH)), --lr-scaling $s, seed $seed)"
    # shellcheck disable=SC2086 # --train-args: one word per option
    "${MPIEXEC[@]}" -n "$n" "$BIN" train --data "$DATA" --batch-size "$BATCH" --lr-scaling "$s" --seed "$seed" \
        --threads "$threads" --epochs "$EPOCHS" --eval-every 1 --eval-n "$EVAL_N" --no-progress --out "$dir" \
        $TRAIN_ARGS >"$dir.log" 2>&1 || { tail -n 20 "$dir.log" >&2; die "the run $name failed (the end of $dir.log above)"; }
    grep -h '^epoch [0-9]*: FID' "$dir.log" | sed 's/^/    /' >&2 || true
done
echo "load average after the training runs: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$OUT/environment.txt"
echo "took: $((SECONDS - START)) s (the feature network and the runs)" >>"$OUT/environment.txt"

log "3/3 report"
python3 "$HERE/reports" quality "$OUT"
log "done in $((SECONDS - START)) s: $OUT/results.md"
