# shellcheck shell=bash
# What the benchmark scripts (bench-scaling.sh, bench-two-level.sh, bench-quality.sh) share:
# source it after defining die, log and REPO (the checkout).

BENCH_LIB="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

# The dcgan-train to measure: $DCGAN_TRAIN, or a release build of this checkout. Sets BIN.
resolve_binary() {
    BIN="${DCGAN_TRAIN:-}"
    if [ -z "$BIN" ]; then
        log "building (cargo build --release)"
        (cd "$REPO" && cargo build --release -q) || die "cargo build --release failed"
        BIN="$REPO/target/release/dcgan-train"
    fi
    [ -x "$BIN" ] || die "$BIN is not an executable dcgan-train (set DCGAN_TRAIN)"
}

# The lines every report starts with: binary, date, machine, CPU, load (for environment.txt).
environment_header() {
    echo "binary: $BIN"
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "machine: $(nproc) cores, $(uname -sr)"
    "$BENCH_LIB/cpu-info.sh"
    echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
}

# mpiexec on this machine alone, as the array MPIEXEC: ranks may outnumber the cores
# (--oversubscribe), and each rank's threads may use any core (--bind-to none: Open MPI would
# pin each rank to one). As root, with Open MPI's permission.
local_mpiexec() {
    command -v mpiexec >/dev/null || die "mpiexec not found: install Open MPI (apt-get install openmpi-bin libopenmpi-dev)"
    MPIEXEC=(mpiexec --oversubscribe --bind-to none)
    if [ "$(id -u)" = 0 ]; then
        export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    fi
}

# The train options of an exchange variant (bench-wire.sh, bench-wire-quality.sh): no-exchange,
# f32, bf16, 1bit, 1bit-frozen (Adam's variance frozen after the warm-up) or bmufK (block
# momentum every K steps), the latter optionally followed by -bmX (block momentum X), -reset
# (Adam's moments reset every block) and -blocking (the sync before the next step, not
# overlapping it): bmuf4-bm0-reset. Dies on an unknown name.
variant_args() {
    case "$1" in
        no-exchange) echo "--no-exchange" ;;
        f32) echo "" ;;
        bf16) echo "--wire bf16" ;;
        1bit) echo "--wire 1bit" ;;
        1bit-frozen) echo "--wire 1bit --wire-freeze-variance" ;;
        bmuf*)
            [[ "$1" =~ ^bmuf([1-9][0-9]*)(-bm([0-9.]+))?(-reset)?(-blocking)?$ ]] \
                || die "variant $1: bmufK[-bmX][-reset][-blocking] with K a step count and X a momentum"
            local args="--sync-every ${BASH_REMATCH[1]}"
            [ -n "${BASH_REMATCH[3]}" ] && args="$args --block-momentum ${BASH_REMATCH[3]}"
            [ -n "${BASH_REMATCH[4]}" ] && args="$args --block-reset-adam"
            [ -n "${BASH_REMATCH[5]}" ] && args="$args --no-overlap"
            echo "$args" ;;
        *) die "unknown variant $1 (no-exchange, f32, bf16, 1bit, 1bit-frozen, bmufK[-bmX][-reset][-blocking])" ;;
    esac
}
