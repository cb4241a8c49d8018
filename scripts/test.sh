#!/usr/bin/env bash
# The test command (CI runs exactly this): install what the tests need, check formatting and
# lints, and run every test, the MPI integration tests included.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup-deps.sh --tests
[ -x "$HOME/.cargo/bin/cargo" ] && export PATH="$HOME/.cargo/bin:$PATH"

# NVRTC (from the nvidia-cuda-nvrtc wheel) lets the kernel test compile every CUDA kernel
# to PTX on a machine without a GPU.
nvrtc_lib=$(scripts/lib/install-nvrtc.sh)
export LD_LIBRARY_PATH="$nvrtc_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export DCGAN_REQUIRE_NVRTC=1

# The emulated-cluster test needs root and network namespaces. Where this script can make
# one, the test must run (a skip fails it); where it cannot, say so here rather than let
# the test skip unseen in cargo's captured output.
probe="dcgtestprobe$$"
if [ "$(id -u)" = 0 ] && ip netns add "$probe" 2>/dev/null; then
    ip netns del "$probe"
    export DCGAN_REQUIRE_CLUSTER=1
else
    echo "note: network namespaces cannot be created here: the emulated-cluster test will skip" >&2
fi

# Open MPI refuses to run as root, and more ranks than cores, unless told it may.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1

# CI builds once from a fresh clone, so incremental state is only disk (about 0.7 GB here).
export CARGO_INCREMENTAL=0

# Where the time goes, printed at the end (the suite's budget is about 15 minutes on 2 cores).
phases=()
phase_start=0
phase() {
    phases+=("$1 $((SECONDS - phase_start)) s")
    phase_start=$SECONDS
}
report() {
    printf 'test.sh:'
    printf ' %s;' "${phases[@]}"
    printf ' %s s in all\n' "$SECONDS"
}
trap report EXIT
phase "setup"

# The tests run the debug binary (the scripts they call are handed it), so nothing else is
# built.
cargo fmt --check
cargo clippy --all-targets --quiet -- -D warnings
phase "fmt and clippy"
# The API docs, private items included, build without warnings: a tensor's shape written
# [B, C] in a doc comment is read as a link unless it is in backticks.
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --document-private-items --quiet
phase "docs"
# nextest runs every test in a process of its own (a crash or a stray thread touches no
# other test), as many at a time as there are cores, with every test's time in
# target/nextest/default/junit.xml (.config/nextest.toml). Where nextest is missing, cargo test.
if cargo nextest --version >/dev/null 2>&1; then
    cargo nextest run --no-run --cargo-quiet
    phase "building the tests"
    cargo nextest run --cargo-quiet --status-level fail --final-status-level slow
    phase "tests"
    cargo test --doc --quiet
    phase "doc tests"
else
    echo "note: cargo-nextest is not installed (cargo install cargo-nextest --locked): running cargo test" >&2
    cargo test --quiet
    phase "tests"
fi
