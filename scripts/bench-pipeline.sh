#!/usr/bin/env bash
# When a pipeline is the better use of two cores (or devices): at each --batches global batch,
# one rank with 1 thread, one rank with 2, 2-rank data parallelism (half the batch each) and
# the 2-rank pipeline (--pipeline, 1 thread a stage) at each of --micro M, the variants taking
# turns in each of --repeats rounds. Per run, over the steps after --skip: the mean step, and
# for the pipeline each stage's time busy (summary.json) and per phase of the step (its trace).
#
#   scripts/bench-pipeline.sh [--batches 64,256] [--micro 1,2,4,8,16,32] [--steps 12]
#                             [--skip 2] [--repeats 2] [--out DIR] [--data DIR|synthetic:N]
#
# Writes DIR/results.md and results.json (`python3 scripts/reports pipeline DIR`): step ms,
# images/s, the speedup over one rank with one thread, and for the pipeline the idle fraction
# of each stage against GPipe's (p-1)/(m+p-1) and the step the stages' busy times predict.
# DCGAN_TRAIN picks the binary (default: a release build of this checkout).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(dirname "$HERE")"
BATCHES=64,256 MICRO=1,2,4,8,16,32 STEPS=12 SKIP=2 REPEATS=2 OUT="" DATA=()
die() { echo "bench-pipeline: $*" >&2; exit 1; }
log() { echo "bench-pipeline: $*" >&2; }
# shellcheck source=lib/bench-common.sh
. "$HERE/lib/bench-common.sh"

while [ $# -gt 0 ]; do
    case "$1" in
        --batches) BATCHES="${2?}"; shift 2 ;;
        --micro) MICRO="${2?}"; shift 2 ;;
        --steps) STEPS="${2?}"; shift 2 ;;
        --skip) SKIP="${2?}"; shift 2 ;;
        --repeats) REPEATS="${2?}"; shift 2 ;;
        --out) OUT="${2?}"; shift 2 ;;
        --data) DATA=(--data "${2?}"); shift 2 ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown option $1 (see --help)" ;;
    esac
done
for n in "$STEPS" "$SKIP" "$REPEATS"; do
    [[ "$n" =~ ^[0-9]+$ ]] || die "'$n' is not a whole number"
done
[ "$SKIP" -lt "$STEPS" ] || die "--skip $SKIP leaves none of --steps $STEPS to measure"
IFS=, read -r -a BS <<<"$BATCHES"
IFS=, read -r -a MS <<<"$MICRO"
for b in "${BS[@]}"; do
    [[ "$b" =~ ^[0-9]+$ && $((b % 2)) -eq 0 ]] || die "--batches: '$b' is not an even number (data parallelism halves it)"
done

OUT="${OUT:-$REPO/runs/pipeline-$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$OUT"
resolve_binary
local_mpiexec
environment_header >"$OUT/environment.txt"

# variant name, ranks, options (the batch per rank comes from the global batch $b)
variants() {
    local b="$1"
    echo "one-1t 1 --threads 1 --batch-size $b"
    echo "one-2t 1 --threads 2 --batch-size $b"
    echo "ddp2 2 --threads 1 --batch-size $((b / 2))"
    for m in "${MS[@]}"; do
        [ $((b % m)) -eq 0 ] && echo "pipe-m$m 2 --threads 1 --batch-size $b --pipeline --micro-batches $m --trace TRACE"
    done
}

for r in $(seq 1 "$REPEATS"); do
    for b in "${BS[@]}"; do
        while read -r name ranks opts; do
            dir="$OUT/r$r-b$b-$name"
            opts="${opts/TRACE/$dir/trace.json --trace-steps $STEPS}"
            log "round $r/$REPEATS: batch $b, $name"
            # shellcheck disable=SC2086
            "${MPIEXEC[@]}" -n "$ranks" "$BIN" train "${DATA[@]}" $opts --max-steps "$STEPS" --no-progress \
                --out "$dir" </dev/null >"$dir.log" 2>&1 || die "round $r, batch $b, $name failed: see $dir.log"
        done < <(variants "$b")
    done
done
echo "batches=$BATCHES micro=$MICRO steps=$STEPS skip=$SKIP repeats=$REPEATS" >"$OUT/settings.txt"
python3 "$HERE/reports" pipeline "$OUT"
log "done: $OUT/results.md"
