#!/usr/bin/env bash
# What each --wire (and block momentum) saves on slow links: an emulated cluster
# (scripts/cluster-emulate.sh) of --hosts hosts, one rank each, links shaped to --rate; every
# variant trains --steps steps, the variants taking turns in each of --repeats rounds, so that
# a round's figures share the machine's state. Per run, over the steps after --skip (past
# 1-bit's f32 warm-up): the mean step, the mean time the step waited on other ranks (the
# exposed exchange; means, as block momentum pays in one step of K), and the bytes sent per
# step counted at the transport (summary.json).
#
#   scripts/bench-wire.sh [--hosts 4] [--rate 1gbit] [--steps 40] [--skip 10] [--repeats 3]
#                         [--variants no-exchange,f32,bf16,1bit,bmuf4,bmuf16] [--out DIR]
#                         [--train-args "..."]
#
# Variants: no-exchange (the step without communication), f32, bf16, 1bit (--wire 1bit
# --wire-warmup-steps 5), bmufK (--sync-every K). Writes DIR/results.md and results.json
# (`python3 scripts/reports wire DIR`). Needs what cluster-emulate.sh needs (root, iproute2,
# Open MPI). DCGAN_TRAIN picks the binary (default: a release build of this checkout);
# --train-args adds options to every run. Without Debian's Fashion-MNIST the runs read
# synthetic images of the same size (the step and the bytes exchanged are the same).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(dirname "$HERE")"
HOSTS=4 RATE=1gbit STEPS=40 SKIP=10 REPEATS=3 VARIANTS=no-exchange,f32,bf16,1bit,bmuf4,bmuf16 OUT="" TRAIN_ARGS=""
NAME=dcgwire

die() { echo "bench-wire: $*" >&2; exit 1; }
log() { echo "bench-wire: $*" >&2; }
# shellcheck source=lib/bench-common.sh
. "$HERE/lib/bench-common.sh"

while [ $# -gt 0 ]; do
    case "$1" in
        --hosts) HOSTS="${2?}"; shift 2 ;;
        --rate) RATE="${2?}"; shift 2 ;;
        --steps) STEPS="${2?}"; shift 2 ;;
        --skip) SKIP="${2?}"; shift 2 ;;
        --repeats) REPEATS="${2?}"; shift 2 ;;
        --variants) VARIANTS="${2?}"; shift 2 ;;
        --out) OUT="${2?}"; shift 2 ;;
        --train-args) TRAIN_ARGS="${2?--train-args needs a value}"; shift 2 ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown option $1 (see --help)" ;;
    esac
done
for n in "$HOSTS" "$STEPS" "$SKIP" "$REPEATS"; do
    [[ "$n" =~ ^[0-9]+$ ]] || die "'$n' is not a whole number"
done
[ "$HOSTS" -ge 2 ] || die "--hosts $HOSTS: the exchange needs at least 2 hosts"
[ "$SKIP" -lt "$STEPS" ] || die "--skip $SKIP leaves none of --steps $STEPS to measure"

# The variant's options; 1-bit's warm-up fits these short runs.
run_args() {
    local a; a="$(variant_args "$1")"
    case "$1" in 1bit*) a+=" --wire-warmup-steps 5" ;; esac
    echo "$a"
}
IFS=, read -r -a VARS <<<"$VARIANTS"
for v in "${VARS[@]}"; do variant_args "$v" >/dev/null; done

OUT="${OUT:-$REPO/runs/wire-$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$OUT"
resolve_binary
CLUSTER="$HERE/cluster-emulate.sh"
read -ra EXTRA <<<"$TRAIN_ARGS"
[ -d /usr/share/datasets/fashion-mnist ] || EXTRA=(--data synthetic:60000 "${EXTRA[@]}")
cleanup() { "$CLUSTER" down --name "$NAME" >/dev/null 2>&1 || true; }
trap cleanup EXIT
environment_header >"$OUT/environment.txt"
echo "every run also: ${EXTRA[*]:-(nothing)}" >>"$OUT/environment.txt"
"$CLUSTER" up "$HOSTS" --rate "$RATE" --name "$NAME" 2>&1 | tee "$OUT/links.txt" >&2

for r in $(seq 1 "$REPEATS"); do
    for v in "${VARS[@]}"; do
        dir="$OUT/r$r-$v"
        log "round $r/$REPEATS: $v"
        # shellcheck disable=SC2046
        "$CLUSTER" run --name "$NAME" -n "$HOSTS" -- "$BIN" train --batch-size 64 --threads 1 \
            --max-steps "$STEPS" --no-progress --out "$dir" $(run_args "$v") "${EXTRA[@]}" \
            >"$OUT/r$r-$v.log" 2>&1 || die "round $r, $v failed: see $OUT/r$r-$v.log"
    done
done
echo "hosts=$HOSTS rate=$RATE steps=$STEPS skip=$SKIP repeats=$REPEATS variants=$VARIANTS" >"$OUT/settings.txt"
python3 "$HERE/reports" wire "$OUT"
log "done: $OUT/results.md"
