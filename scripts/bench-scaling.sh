#!/usr/bin/env bash
# The weak-scaling measurement of the MPI paper on an emulated cluster (scripts/cluster-emulate.sh):
# 1, 2 and 4 hosts (or --hosts), one rank per host, the same batch per rank, links shaped to --rate.
#
#   scripts/bench-scaling.sh [--rate 1gbit] [--segment SIZE] [--burst SIZE] [--steps 40] [--repeats 3] [--batch 64] [--out DIR]
#                            [--train-args "--wire bf16"] [--hosts 1,2,4]
#                            [--modes overlap,no-overlap,no-exchange] [--skip-allreduce-bench]
#                            [--allreduce-links 16KiB/24KiB|training]
#
# (default DIR: runs/scaling-DATE-TIME; with --steps 30 --repeats 3, minutes on a small machine)
#
# To judge one figure on a noisy machine, run fewer things more often, for example the
# 2-host efficiency over eight paired repeats:
#   scripts/bench-scaling.sh --hosts 1,2 --modes overlap,no-exchange --repeats 8 --skip-allreduce-bench
#
# 1. Link checks: raw TCP round trip and an 8-byte MPI_Allreduce on unshaped links (the latter
#    must be within 3x of the former), then on the shaped links (bandwidth within 10% of --rate;
#    --segment and --burst set their segments and token bucket, see cluster-emulate.sh for the
#    defaults and their trade-off).
# 2. alpha, beta (ping-pong between two hosts) and gamma (a local reduction): links.json.
# 3. bench-allreduce for every algorithm at 2 and 4 hosts, compared with the cost model. These
#    rows time the algorithms against a wire, so they run on links reshaped to
#    --allreduce-links SEGMENT/BUCKET (default 16KiB/24KiB), with alpha and beta measured again
#    on them (links-allreduce.json); then the training links come back. A link's token bucket
#    lets one-way bursts through at memory speed after the link has idled, which a wire does
#    not, and algorithms whose directions take turns (the binomial tree) gain from a large one;
#    small segments cost the ranks a timer interrupt each, which training pays for in compute,
#    so training keeps its own links (docs/emulated-cluster.md). `training` keeps the training
#    links for these rows too.
# 4. Training for --steps steps at 1, 2 and 4 hosts: with overlap (the default), --no-overlap and
#    --no-exchange (the same placement without the exchange), --repeats times, interleaved
#    (each repeat runs 1 host, then every N and mode, so the report can pair them by repeat);
#    --threads 1 (the machine this was written on has 2 cores); --train-args adds options to
#    every training run (for example --wire bf16 or --allreduce ring).
# 5. simulate-scaling: the 1-host run's trace replayed up to 1024 nodes, and each N-host
#    --no-exchange trace replayed at N to predict the N-host run (checked against it). Every
#    step is traced: on a noisy machine the first few alone do not represent the run.
#    Where the run has 2 hosts with overlap and with --no-exchange, both again with compute and
#    the exchange sharing cores (--comm-cpu-from, measured on the next repeat's 2-host pair, so
#    that no prediction is checked against a run its figures came from: the compute the
#    exchange takes per byte, and the wire speed it keeps beside compute): these ranks compute
#    on every core. With one repeat the pair is its own, and the report does not judge it at 2
#    hosts.
# 6. trace-report-N.md (dcgan-train trace-report of each N-host overlap run's trace, first
#    repeat: where the waits went), then results.md (tables, targets met or not), results.json
#    and speedup.png (speedup against hosts, measured and simulated, next to the ideal line),
#    written by `python3 scripts/reports scaling OUT`. Every N-host run gets its repeat's 1-host
#    summary as --baseline-summary, so its summary.json holds its eq. (1) speedup.
#
# Needs root, iproute2 and Open MPI (see cluster-emulate.sh), python3 with matplotlib
# (pip install matplotlib, or apt-get install python3-matplotlib). DCGAN_TRAIN picks the
# binary (default: cargo build --release, then target/release/dcgan-train). The cluster is
# taken down at the end, also when a step fails or the script is interrupted.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(dirname "$HERE")"
RATE=1gbit BURST="" SEGMENT="" STEPS=40 REPEATS=3 BATCH=64 OUT="" TRAIN_ARGS="" HOSTS_ARG=1,2,4
MODES_ARG=overlap,no-overlap,no-exchange ALLREDUCE_BENCH=1 ALLREDUCE_LINKS=16KiB/24KiB
NAME=dcgbench
die() { echo "bench-scaling: $*" >&2; exit 1; }
log() { echo "bench-scaling: $*" >&2; }
# shellcheck source=lib/bench-common.sh
source "$HERE/lib/bench-common.sh"

while [ $# -gt 0 ]; do
    case "$1" in
        --rate) RATE="${2:?--rate needs a value}"; shift 2 ;;
        --burst) BURST="${2:?--burst needs a size, e.g. 16KiB}"; shift 2 ;;
        --segment) SEGMENT="${2:?--segment needs a size, e.g. 16KiB}"; shift 2 ;;
        --steps) STEPS="${2:?--steps needs a value}"; shift 2 ;;
        --repeats) REPEATS="${2:?--repeats needs a value}"; shift 2 ;;
        --batch) BATCH="${2:?--batch needs a value}"; shift 2 ;;
        --out) OUT="${2:?--out needs a directory}"; shift 2 ;;
        --train-args) TRAIN_ARGS="${2?--train-args needs a value, e.g. \"--wire bf16\"}"; shift 2 ;;
        --hosts) HOSTS_ARG="${2:?--hosts needs a list, e.g. 1,2,4}"; shift 2 ;;
        --modes) MODES_ARG="${2:?--modes needs a list, e.g. overlap,no-exchange}"; shift 2 ;;
        --skip-allreduce-bench) ALLREDUCE_BENCH=0; shift ;;
        --allreduce-links) ALLREDUCE_LINKS="${2:?--allreduce-links needs SEGMENT/BUCKET (e.g. 16KiB/24KiB) or training}"; shift 2 ;;
        -h|--help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown option '$1' (see $0 --help)" ;;
    esac
done
for v in STEPS REPEATS BATCH; do
    [[ "${!v}" =~ ^[1-9][0-9]*$ ]] || die "--${v,,} '${!v}' is not a positive whole number"
done
[ "$STEPS" -ge 12 ] || die "--steps $STEPS: use at least 12 (the trace needs steps past the warm-up)"
IFS=, read -ra HOSTS <<<"$HOSTS_ARG"
prev=0
for n in "${HOSTS[@]}"; do
    [[ "$n" =~ ^[1-9][0-9]*$ && "$n" -gt "$prev" ]] \
        || die "--hosts '$HOSTS_ARG': give host counts in rising order, separated by commas, starting at 1 (e.g. 1,2,4)"
    prev="$n"
done
[ "${HOSTS[0]}" = 1 ] && [ "${#HOSTS[@]}" -ge 2 ] \
    || die "--hosts '$HOSTS_ARG': start at 1 (the eq. (1) reference) and add at least one larger count (e.g. 1,2)"
IFS=, read -ra MODES <<<"$MODES_ARG"
for m in "${MODES[@]}"; do
    case "$m" in overlap | no-overlap | no-exchange) ;; *) die "--modes: unknown mode '$m': use overlap, no-overlap or no-exchange" ;; esac
done
[ "$(printf '%s\n' "${MODES[@]}" | sort -u | wc -l)" = "${#MODES[@]}" ] || die "--modes '$MODES_ARG': name each mode once"
[[ ",$MODES_ARG," == *,overlap,* ]] || die "--modes '$MODES_ARG': include overlap (the runs the speedup is measured on)"

# Fail before anything long runs.
"$HERE/cluster-emulate.sh" up "${HOSTS[-1]}" --rate "$RATE" ${SEGMENT:+--segment "$SEGMENT"} ${BURST:+--burst "$BURST"} --check || exit 1
AR_SEGMENT="" AR_BURST=""
if [ "$ALLREDUCE_LINKS" != training ]; then
    [[ "$ALLREDUCE_LINKS" =~ ^[^/]+/[^/]+$ ]] \
        || die "--allreduce-links '$ALLREDUCE_LINKS': give SEGMENT/BUCKET, e.g. 16KiB/24KiB, or training (the training links)"
    AR_SEGMENT="${ALLREDUCE_LINKS%%/*}" AR_BURST="${ALLREDUCE_LINKS#*/}"
    why="$("$HERE/cluster-emulate.sh" up 2 --rate "$RATE" --segment "$AR_SEGMENT" --burst "$AR_BURST" --check 2>&1)" \
        || die "--allreduce-links '$ALLREDUCE_LINKS' (SEGMENT/BUCKET): ${why#cluster-emulate: }"
fi
[ "$(id -u)" = 0 ] || die "needs root (network namespaces): run it as root"
command -v mpiexec >/dev/null || die "mpiexec not found: install Open MPI (apt-get install openmpi-bin libopenmpi-dev)"
python3 -c 'import matplotlib' 2>/dev/null \
    || die "python3 has no matplotlib (for the plot): pip install matplotlib, or apt-get install python3-matplotlib"
resolve_binary
export DCGAN_TRAIN="$BIN"
OUT="${OUT:-$REPO/runs/scaling-$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$OUT/runs"
OUT="$(cd "$OUT" && pwd)"
DATA=()
[ -d /usr/share/datasets/fashion-mnist ] || DATA=(--data synthetic:60000)

CLUSTER="$HERE/cluster-emulate.sh"
cleanup() {
    "$CLUSTER" down --name "$NAME" >/dev/null 2>&1 || true
    "$CLUSTER" down --name "${NAME}u" >/dev/null 2>&1 || true
}
trap cleanup EXIT
trap 'exit 130' INT TERM
cleanup

{
    environment_header
    echo "settings: --rate $RATE${SEGMENT:+ --segment $SEGMENT}${BURST:+ --burst $BURST} --steps $STEPS --repeats $REPEATS --batch $BATCH --hosts $HOSTS_ARG --modes $MODES_ARG --allreduce-links $ALLREDUCE_LINKS, --threads 1 per rank${TRAIN_ARGS:+, train $TRAIN_ARGS}"
} >"$OUT/environment.txt"

log "1/6 link checks (unshaped, then $RATE)"
"$CLUSTER" up 2 --name "${NAME}u" 2>&1 | tee "$OUT/links-unshaped.txt"
"$CLUSTER" down --name "${NAME}u" >/dev/null
"$CLUSTER" up "${HOSTS[-1]}" --rate "$RATE" ${SEGMENT:+--segment "$SEGMENT"} ${BURST:+--burst "$BURST"} --name "$NAME" 2>&1 | tee "$OUT/links-shaped.txt"

run() { "$CLUSTER" run --name "$NAME" "$@"; }

log "2/6 ping-pong: alpha, beta, gamma"
run -n 2 -- "$BIN" ping-pong --json "$OUT/links.json" | tee "$OUT/ping-pong.txt"

# The segments and token bucket `up` gave the links, from its line: "segments of N bytes, token
# bucket M bytes" (nothing on unshaped links).
training_links() { sed -n 's/.*segments of \([0-9]*\) bytes, token bucket \([0-9]*\) bytes.*/\1 \2/p' "$OUT/links-shaped.txt" | head -1; }
if [ -z "$(training_links)" ] && [ -n "$AR_SEGMENT" ]; then
    log "the links are unshaped (no token bucket): the allreduce rows run on them as they are"
    AR_SEGMENT=""
fi
ALLREDUCE_FILES=()
AR_LINKS_JSON="$OUT/links.json"
if [ "$ALLREDUCE_BENCH" = 1 ]; then log "3/6 bench-allreduce at ${HOSTS[*]:1} hosts"; else log "3/6 bench-allreduce skipped"; fi
if [ "$ALLREDUCE_BENCH" = 1 ] && [ -n "$AR_SEGMENT" ]; then
    "$CLUSTER" reshape --name "$NAME" --segment "$AR_SEGMENT" --burst "$AR_BURST" 2>&1 | tee "$OUT/links-allreduce.txt"
    AR_LINKS_JSON="$OUT/links-allreduce.json"
    run -n 2 -- "$BIN" ping-pong --json "$AR_LINKS_JSON" | tee "$OUT/ping-pong-allreduce.txt"
fi
for n in "${HOSTS[@]}"; do
    [ "$n" -ge 2 ] && [ "$ALLREDUCE_BENCH" = 1 ] || continue
    # Fixed call counts: the default (by size, for fast links) would take minutes per size here.
    for group in "small 8B,1KiB,16KiB 300" "large 64KiB,256KiB,1MiB,4MiB 30"; do
        read -r label sizes iters <<<"$group"
        run -n "$n" -- "$BIN" bench-allreduce --algos tree,rd,vhd,ring,mpi,auto --sizes "$sizes" \
            --iters "$iters" --json "$OUT/allreduce-$n-$label.json" | tee "$OUT/allreduce-$n-$label.txt"
        ALLREDUCE_FILES+=("$OUT/allreduce-$n-$label.json")
    done
done
if [ "$ALLREDUCE_BENCH" = 1 ] && [ -n "$AR_SEGMENT" ]; then
    # Back to the links the cluster came up with (and links.json was measured on).
    read -r seg bucket < <(training_links)
    "$CLUSTER" reshape --name "$NAME" --segment "$seg" --burst "$bucket" >&2
fi

log "4/6 training: ${HOSTS[*]} hosts x (${MODES[*]}) x $REPEATS"
# The whole machine's CPU ticks (/proc/stat's cpu line: user nice system idle iowait irq
# softirq steal), so that the report can say how much of a run's time the hypervisor took
# (steal) and how busy the machine was.
cpu_ticks() { awk '/^cpu /{print $2, $3, $4, $5, $6, $7, $8, $9; exit}' /proc/stat; }
machine_cpu_json() { # "ticks before" "ticks after"
    local names=(user nice system idle iowait irq softirq steal) a b i sep="" json="{"
    read -ra a <<<"$1"; read -ra b <<<"$2"
    for i in "${!names[@]}"; do
        json+="$sep\"${names[$i]}\": $((${b[$i]:-0} - ${a[$i]:-0}))"; sep=", "
    done
    echo "$json}"
}
train() { # hosts mode rep
    local n="$1" mode="$2" rep="$3" dir="$OUT/runs/$1-$2-$3" extra=()
    read -ra extra <<<"$TRAIN_ARGS"
    case "$mode" in
        overlap) ;;
        no-overlap) extra+=(--no-overlap) ;;
        no-exchange) extra+=(--no-exchange) ;;
    esac
    [ "$n" = 1 ] || extra+=(--baseline-summary "$OUT/runs/1-overlap-$rep/summary.json")
    log "  $n host(s), $mode, repeat $rep"
    local before; before="$(cpu_ticks)"
    run -n "$n" -- "$BIN" train "${DATA[@]}" --batch-size "$BATCH" --threads 1 --max-steps "$STEPS" \
        --no-progress --out "$dir" --trace "$dir/trace.json" --trace-steps "$STEPS" "${extra[@]}" \
        >"$dir.log" 2>&1 || { cat "$dir.log" >&2; die "the run $dir failed (log above)"; }
    machine_cpu_json "$before" "$(cpu_ticks)" >"$dir/machine-cpu.json"
}
for rep in $(seq 1 "$REPEATS"); do
    for n in "${HOSTS[@]}"; do
        if [ "$n" = 1 ]; then
            train 1 overlap "$rep"
        else
            for mode in "${MODES[@]}"; do train "$n" "$mode" "$rep"; done
        fi
    done
done

echo "load average after the training runs: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$OUT/environment.txt"

log "5/6 simulate-scaling"
if [ "${#ALLREDUCE_FILES[@]}" -gt 0 ]; then
    files=$(IFS=,; echo "${ALLREDUCE_FILES[*]}")
    "$BIN" simulate-scaling --bench-allreduce "$files" --links "$AR_LINKS_JSON" \
        --json "$OUT/model-allreduce.json" >"$OUT/model-allreduce.md"
fi
"$BIN" simulate-scaling --summary "$OUT/runs/1-overlap-1/summary.json" --links "$OUT/links.json" \
    --json "$OUT/simulated.json" >"$OUT/simulated.md"
for n in "${HOSTS[@]}"; do
    [ "$n" -ge 2 ] && [[ ",$MODES_ARG," == *,no-exchange,* ]] || continue
    for rep in $(seq 1 "$REPEATS"); do
        "$BIN" simulate-scaling --summary "$OUT/runs/$n-no-exchange-$rep/summary.json" --links "$OUT/links.json" \
            --nodes "$n" --algorithms auto --json "$OUT/predict-$n-$rep.json" >/dev/null
        cal=$((rep % REPEATS + 1))
        pair="$OUT/runs/2-overlap-$cal/summary.json,$OUT/runs/2-no-exchange-$cal/summary.json"
        [ -f "$OUT/runs/2-overlap-$cal/summary.json" ] && [ -f "$OUT/runs/2-no-exchange-$cal/summary.json" ] || continue
        # A pair the calibration refuses (say, --train-args with --no-overlap) leaves this out.
        "$BIN" simulate-scaling --summary "$OUT/runs/$n-no-exchange-$rep/summary.json" --links "$OUT/links.json" \
            --nodes "$n" --algorithms auto --comm-cpu-from "$pair" --json "$OUT/predict-cpu-$n-$rep.json" >/dev/null \
            || log "no prediction with the exchange's CPU for $n hosts, repeat $rep, from repeat $cal's pair (above: why)"
    done
done
# The curve again with the cores shared: the medians of the repeats' 2-host calibrations.
if compgen -G "$OUT/predict-cpu-2-*.json" >/dev/null; then
    median_of() {
        python3 -c 'import json, statistics, sys
print(statistics.median(json.load(open(f))["prediction"][sys.argv[1]] for f in sys.argv[2:]))' "$1" \
            "$OUT"/predict-cpu-2-*.json
    }
    "$BIN" simulate-scaling --summary "$OUT/runs/1-overlap-1/summary.json" --links "$OUT/links.json" \
        --comm-cpu-ns-per-byte "$(median_of comm_cpu_ns_per_byte)" \
        --comm-speed-beside-compute "$(median_of comm_speed_beside_compute)" \
        --json "$OUT/simulated-cpu.json" >"$OUT/simulated-cpu.md"
fi

log "6/6 report"
for n in "${HOSTS[@]:1}"; do
    trace="$OUT/runs/$n-overlap-1/trace.json"
    [ -f "$trace" ] || continue
    "$BIN" trace-report "$trace" --json "$OUT/trace-report-$n.json" >"$OUT/trace-report-$n.md" \
        || { rm -f "$OUT/trace-report-$n.md"; log "no trace report for $n hosts (above: why)"; }
done
python3 "$HERE/reports" scaling "$OUT"
log "done: $OUT/results.md and $OUT/speedup.png"
