# shellcheck shell=bash
# What the emulated-cluster benchmarks (bench-scaling.sh, bench-two-level.sh) share: source it
# after defining die, log and REPO (the checkout).

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
