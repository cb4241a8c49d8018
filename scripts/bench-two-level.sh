#!/usr/bin/env bash
# The allreduce algorithms on emulated hosts of several ranks each, against the two-level cost
# model (src/scaling/two_level.rs) and the one-level one that treats every rank as a host.
#
#   scripts/bench-two-level.sh [--hosts 2] [--slots 2] [--rate 1gbit] [--repeats 2] [--out DIR]
#                              [--name NAME] [--no-probe]
#
# (default DIR: runs/two-level-DATE-TIME; NAME, default dcgtwolevel, names the emulated
# clusters it brings up and takes down; --no-probe skips cluster-emulate.sh's TCP and
# MPI_Allreduce link checks, about 25 s on 2 cores, which only the reader of links-*.txt uses)
#
# 1. The link between hosts: ping-pong between two hosts of one rank each (between.json).
# 2. The link inside a host: ping-pong between two ranks of h1 (within.json).
# 3. bench-allreduce on --hosts x --slots ranks, tree, rd, vhd, ring and hier taking turns call
#    by call, 64 KiB to 4 MiB, --repeats times (bench-N.json).
# 4. simulate-scaling --bench-allreduce with both models: model-two-level.md and
#    model-one-level.md (measured / model for every row), and vs-model.md, the rows outside
#    1.25x of the two-level model (`python3 scripts/reports allreduce-vs-model`).
#
# Where the ranks outnumber the cores they take turns and the rounds run long: judge the model
# where every rank and its comm thread have a core.
# Needs what cluster-emulate.sh needs (root, iproute2, Open MPI). DCGAN_TRAIN picks the binary
# (default: cargo build --release). The clusters are taken down at the end, also on failure.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(dirname "$HERE")"
HOSTS=2 SLOTS=2 RATE=1gbit REPEATS=2 OUT="" PROBE=()
NAME=dcgtwolevel
die() { echo "bench-two-level: $*" >&2; exit 1; }
log() { echo "bench-two-level: $*" >&2; }
# shellcheck source=lib/bench-common.sh
source "$HERE/lib/bench-common.sh"

while [ $# -gt 0 ]; do
    case "$1" in
        --hosts) HOSTS="${2:?--hosts needs a host count}"; shift 2 ;;
        --slots) SLOTS="${2:?--slots needs a rank count per host}"; shift 2 ;;
        --rate) RATE="${2:?--rate needs a value}"; shift 2 ;;
        --repeats) REPEATS="${2:?--repeats needs a value}"; shift 2 ;;
        --out) OUT="${2:?--out needs a directory}"; shift 2 ;;
        --name) NAME="${2:?--name needs a cluster name}"; shift 2 ;;
        --no-probe) PROBE=(--no-probe); shift ;;
        -h|--help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown option '$1' (see $0 --help)" ;;
    esac
done
[[ "$HOSTS" =~ ^[1-9][0-9]*$ && "$HOSTS" -ge 2 ]] || die "--hosts '$HOSTS': give 2 or more hosts"
[[ "$SLOTS" =~ ^[1-9][0-9]*$ && "$SLOTS" -ge 2 ]] \
    || die "--slots '$SLOTS': give 2 or more ranks per host (one rank per host is bench-scaling.sh's case)"
[[ "$REPEATS" =~ ^[1-9][0-9]*$ ]] || die "--repeats '$REPEATS' is not a positive whole number"

# cluster-emulate.sh's rule, one character shorter: the script also brings up "${NAME}1".
[[ "$NAME" =~ ^[A-Za-z][A-Za-z0-9_]{0,14}$ ]] || die "--name '$NAME': use a letter then up to 14 letters, digits or _"

# Fail before anything long runs.
CLUSTER="$HERE/cluster-emulate.sh"
"$CLUSTER" up "$HOSTS" --rate "$RATE" --slots "$SLOTS" --check || exit 1
[ "$(id -u)" = 0 ] || die "needs root (network namespaces): run it as root"
command -v mpiexec >/dev/null || die "mpiexec not found: install Open MPI (apt-get install openmpi-bin libopenmpi-dev)"
resolve_binary
OUT="${OUT:-$REPO/runs/two-level-$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"

cleanup() {
    "$CLUSTER" down --name "${NAME}1" >/dev/null 2>&1 || true
    "$CLUSTER" down --name "$NAME" >/dev/null 2>&1 || true
}
trap cleanup EXIT
trap 'exit 130' INT TERM
cleanup
{
    environment_header
    echo "settings: --hosts $HOSTS --slots $SLOTS --rate $RATE --repeats $REPEATS"
} >"$OUT/environment.txt"

log "1/4 the link between hosts (one rank each)"
"$CLUSTER" up 2 --rate "$RATE" --name "${NAME}1" "${PROBE[@]}" 2>&1 | tee "$OUT/links-between.txt"
"$CLUSTER" run --name "${NAME}1" -n 2 -- "$BIN" ping-pong --json "$OUT/between.json" | tee -a "$OUT/links-between.txt"
"$CLUSTER" down --name "${NAME}1" >/dev/null

log "2/4 the link inside a host (two ranks of h1)"
"$CLUSTER" up "$HOSTS" --rate "$RATE" --slots "$SLOTS" --name "$NAME" "${PROBE[@]}" 2>&1 | tee "$OUT/links-shaped.txt"
# -n 2 fills h1's slots first: both ranks on one host.
"$CLUSTER" run --name "$NAME" -n 2 -- "$BIN" ping-pong --json "$OUT/within.json" | tee "$OUT/links-within.txt"

ranks=$((HOSTS * SLOTS))
files=()
for i in $(seq 1 "$REPEATS"); do
    log "3/4 bench-allreduce on $HOSTS x $SLOTS ranks, repeat $i of $REPEATS"
    "$CLUSTER" run --name "$NAME" -n "$ranks" -- "$BIN" bench-allreduce --algos tree,rd,vhd,ring,hier \
        --sizes 64KiB,256KiB,1MiB,4MiB --iters 30 --json "$OUT/bench-$i.json" | tee "$OUT/bench-$i.txt"
    files+=("$OUT/bench-$i.json")
done

log "4/4 the two models"
list=$(IFS=,; echo "${files[*]}")
"$BIN" simulate-scaling --bench-allreduce "$list" --links "$OUT/between.json" --intra-links "$OUT/within.json" \
    --ranks-per-node "$SLOTS" --json "$OUT/model-two-level.json" >"$OUT/model-two-level.md"
"$BIN" simulate-scaling --bench-allreduce "$list" --links "$OUT/between.json" \
    --json "$OUT/model-one-level.json" >"$OUT/model-one-level.md"
# Which rows lie outside 1.25x of the two-level model, weighed against the links' token bucket.
python3 "$HERE/reports" allreduce-vs-model "$OUT/model-two-level.json" --links "$OUT/between.json" \
    --shaped "$OUT/links-shaped.txt" >"$OUT/vs-model.md"
echo "## Two-level model ($HOSTS hosts x $SLOTS ranks)"
cat "$OUT/vs-model.md"
echo
echo "## One-level model (every rank a host), for comparison"
cat "$OUT/model-one-level.md"
log "done: $OUT/vs-model.md (the two-level model's table and the rows outside the band), $OUT/model-one-level.md"
