#!/usr/bin/env bash
# gpu-check.sh: everything a machine with a GPU checks, in one call, with prebuilt binaries
# (the GPU machine has CUDA, compute-sanitizer, ncu and PyTorch, but no Rust).
#
# 1. Here (no GPU needed), build the binaries the GPU machine runs into target/gpu-bin:
#
#      bash scripts/gpu/gpu-check.sh --build
#
#    That is scripts/gpu/build-gpu-bin.sh: `cargo build --release --no-default-features
#    --features cuda` of the dcgan-train binary and of the CUDA test executables (`cargo test
#    --no-run`), and the default (MPI) build as dcgan-train-mpi, copied under stable names into
#    target/gpu-bin, stripped of debug info (about 30 MiB). For the mpi stage, also `scripts/gpu/fetch-ompi-runtime.sh`
#    once (an Open MPI runtime in .ompi, 18 MiB: that machine has none).
# 2. On the GPU machine, from the repository root, with target/gpu-bin (and .ompi) copied there:
#
#      bash scripts/gpu/gpu-check.sh [STAGE...]    (default: env nvrtc tests sanitize bench
#                                                   torch binary mpi; "all": those, quality
#                                                   and ncu)
#
#    Stages: env nvrtc tests sanitize bench torch binary mpi quality ncu scaling two-level wire
#    wgan.
#    Everything measured goes under $OUT (or ./gpu-check-out): one log per stage, *.jsonl benchmark
#    lines, summary.txt.
#    Where there is no GPU, `bash scripts/gpu/gpu-check.sh --rehearse [bench] [mpi]` runs those
#    stages on the CUDA emulator at toy sizes (11 to 36 minutes on 2 cores, .ompi needed for
#    mpi): a check of this script after changing it, not a measurement.
#    To bring everything back as one file:
#      OUT=/tmp/gc bash scripts/gpu/gpu-check.sh; tar czf gc.tgz -C /tmp gc
#    Each stage has a time limit; if one run is too short for all of them, run
#    "env nvrtc tests sanitize" in one and "nvrtc bench torch binary" in the next.
#
#    env       nvidia-smi, nvcc, driver, PyTorch versions
#    nvrtc     pick the libnvrtc directory whose kernels load on this driver
#    tests     every op, G/D gradients and 20 training steps against the CPU backend,
#              staging through pinned memory, probe; the tf32 and 3xtf32 convolutions within
#              their tolerance; bf16 and 1bit packed on the device bitwise against the comm
#              thread's packing; layer norm, the WGAN-GP penalty (DCGAN_TEST_ENGINES=gpu)
#    sanitize  compute-sanitizer memcheck, racecheck, synccheck, initcheck on the op tests
#              (small shapes), the DCGAN gradient test, and a short training run (memcheck)
#    bench     per-kernel times in each --precision and the whole step at batch 64 and 256
#              in each --precision, launched and replayed as CUDA graphs (--cuda-graphs;
#              JSON lines, five runs each)
#    torch     scripts/bench-torch.py at batch 64 and 256, cuDNN with TF32 (PyTorch's
#              default) and without, and torch.compile(mode="max-autotune") with TF32
#    binary    the release dcgan-train: --version, info, a training run, and the two
#              batch-size errors (32-bit indexing, out of device memory)
#    mpi       2 ranks on the one GPU through the carried Open MPI: every allreduce family,
#              ranks checked identical; the same without the exchange;
#              overlap against --no-overlap, and the 2-rank --pipeline against one rank
#              with its micro-batches, bitwise (scripts/gpu/same-weights.py); --wire bf16
#              and 1bit packed on the GPU against packed by the comm thread, bitwise, and
#              the 1bit trace replayed to 8 GPUs
#    quality   5 epochs of Fashion-MNIST in each --precision, FID and KID every epoch (the
#              data and feature network --build puts in target/gpu-quality, 33 MB: carry it
#              with target/gpu-bin/dcgan-train alone, the one binary it runs; with the whole
#              of target/gpu-bin, 37 MB, the checkout passes 64 MiB; not default)
#    ncu       Nsight Compute summary of the conv kernels at batch 64 (slow; not default)
#    scaling   scripts/bench-scaling.sh with CPU ranks on cores of their own (the weak-scaling
#              targets; about 8 minutes, so a run of its own; not default; needs .ompi)
#    two-level scripts/bench-two-level.sh: 2 emulated hosts of 4 ranks, every algorithm
#              against the two-level cost model (about 2 minutes; not default; needs .ompi)
#    wire      scripts/bench-wire.sh: 4 emulated hosts at 1 Gbit/s, CPU ranks on cores of
#              their own, f32 against bf16 and 1bit: the exposed exchange of each (about 3
#              minutes; not default; needs .ompi)
#    wgan      scripts/bench-wgan-gp-vs-torch.sh --device cuda: WGAN-GP's critic step with and
#              without the penalty, ours against PyTorch eager, the critic without a norm and
#              with layer norm, 4 rounds each (about a minute; not default)
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN="$ROOT/target/gpu-bin"
QUALITY_DATA="$ROOT/target/gpu-quality"

if [[ "${1:-}" == "--build" ]]; then
  exec bash "$ROOT/scripts/gpu/build-gpu-bin.sh"
fi

# --rehearse: the bench and mpi stages on the CUDA emulator at toy sizes (11 to 36 minutes
# on 2 cores), to check this script's own logic where there is no GPU; its figures mean
# nothing.
REHEARSE=0
if [[ "${1:-}" == "--rehearse" ]]; then
  REHEARSE=1
  shift
fi
if [[ $REHEARSE == 1 ]]; then
  DEVICE=cuda-emulated LIMIT_SCALE=4 TRAIN_STEPS=4 CHECK_EVERY=2 WIRE_WARMUP=1
  BENCH_BATCHES=(2 4) BENCH_REPS=(1 2) BENCH_RUN=(--steps 1 --warmup 1)
  TRAIN_DATA=(--data synthetic:64 --batch-size 4) MICRO_RUN=(--data synthetic:64 --batch-size 8 --max-steps 4)
  # NVRTC from the PyPI wheel, as the test command finds it.
  nvrtc_lib=$("$ROOT/scripts/lib/install-nvrtc.sh") || exit 1
  export LD_LIBRARY_PATH="$nvrtc_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  NVRTC_PICKED=1
else
  DEVICE=cuda LIMIT_SCALE=1 TRAIN_STEPS=60 CHECK_EVERY=10 WIRE_WARMUP=5
  BENCH_BATCHES=(64 256) BENCH_REPS=(1 2 3 4 5) BENCH_RUN=(--steps 100 --warmup 20)
  TRAIN_DATA=(--data synthetic:4096) MICRO_RUN=(--data synthetic:4096 --max-steps 20)
fi

OUT=${OUT:-$ROOT/gpu-check-out}
mkdir -p "$OUT"
cd "$ROOT"
export DCGAN_KERNEL_CACHE=${DCGAN_KERNEL_CACHE:-/tmp/dcgan-kernel-cache}
export DCGAN_TEST_ENGINES=gpu
export DCGAN_REQUIRE_NVRTC=1
export DCGAN_REQUIRE_GPU=$((1 - REHEARSE))
export RUST_BACKTRACE=1
SUMMARY="$OUT/summary.txt"
: >"$SUMMARY"

note() { echo "$*" | tee -a "$SUMMARY"; }
# run_step NAME LIMIT_S CMD...: one logged, time-limited command; PASS/FAIL into the summary.
run_step() {
  local name=$1 limit=$(($2 * LIMIT_SCALE))
  shift 2
  local log="$OUT/$name.log" t0=$SECONDS
  echo "== $name: $*" >"$log"
  timeout --kill-after=10 "$limit" "$@" >>"$log" 2>&1
  local rc=$?
  local verdict=PASS
  [[ $rc -ne 0 ]] && verdict="FAIL (exit $rc$([[ $rc -eq 124 ]] && echo ", timed out after ${limit}s"))"
  note "$(printf '%-34s %-6s %4ss  %s' "$name" "$verdict" $((SECONDS - t0)) "$log")"
  # A failure's last lines go to stdout too, for a caller that keeps only the output's tail.
  [[ $rc -ne 0 ]] && tail -n 25 "$log" | sed "s/^/    $name| /"
  return "$rc"
}

have_bin() {
  [[ -x "$BIN/$1" ]] || { note "$(printf '%-34s SKIP   missing %s (run --build here first)' "$2" "$BIN/$1")"; return 1; }
}

# have_ompi STAGE: whether the carried Open MPI runtime is here (else the stage is skipped).
have_ompi() {
  [[ -x "$ROOT/.ompi/root/usr/bin/orterun" ]] && return 0
  note "$(printf '%-34s SKIP   no .ompi (scripts/gpu/fetch-ompi-runtime.sh, then copy .ompi here)' "$1")"
  return 1
}

# Directories that hold a libnvrtc, best guesses first.
nvrtc_candidates() {
  [[ -n "${NVRTC_DIR:-}" ]] && echo "$NVRTC_DIR"
  if command -v nvcc >/dev/null 2>&1; then
    local nv
    nv=$(dirname "$(readlink -f "$(command -v nvcc)")")
    echo "$nv/../lib64"
    echo "$nv/../targets/x86_64-linux/lib"
  fi
  echo /usr/local/cuda/lib64
  ldconfig -p 2>/dev/null | awk '/libnvrtc\.so/ {print $NF}' | xargs -r -n1 dirname
  python3 - <<'PY' 2>/dev/null
import importlib.util, os
spec = importlib.util.find_spec("nvidia")
for base in (spec.submodule_search_locations if spec else []):
    for root, _, files in os.walk(base):
        if any(f.startswith("libnvrtc.so") for f in files):
            print(root)
PY
}

stage_env() {
  {
    date -u
    hostname
    nvidia-smi || echo "nvidia-smi failed"
    nvidia-smi --query-gpu=name,memory.total,driver_version,compute_cap --format=csv || true
    command -v nvcc && nvcc --version
    command -v compute-sanitizer && compute-sanitizer --version | head -3
    command -v ncu && ncu --version | tail -1
    python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version())' 2>&1
    echo "NVRTC candidates:"
    nvrtc_candidates | while read -r d; do ls "$d"/libnvrtc.so* 2>/dev/null; done | sort -u
    ls -la "$BIN" 2>&1
  } >"$OUT/env.txt" 2>&1
  note "$(printf '%-34s %-6s        %s' env DONE "$OUT/env.txt")"
}

# Pick the first NVRTC directory with which the kernels compile, load and run here.
stage_nvrtc() {
  NVRTC_PICKED=1
  have_bin cuda_device nvrtc || return 1
  local log="$OUT/nvrtc.log" d
  : >"$log"
  for d in $(nvrtc_candidates | while read -r x; do [[ -d "$x" ]] && readlink -f "$x"; done | awk '!seen[$0]++'); do
    ls "$d"/libnvrtc.so* >/dev/null 2>&1 || continue
    echo "== trying $d" >>"$log"
    if LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" timeout 120 \
      "$BIN/cuda_device" --test-threads=1 --nocapture >>"$log" 2>&1; then
      export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
      echo "$d" >"$OUT/nvrtc-dir.txt"
      note "$(printf '%-34s %-6s        %s' nvrtc PASS "NVRTC from $d ($log)")"
      return 0
    fi
  done
  note "$(printf '%-34s %-6s        %s' nvrtc FAIL "no NVRTC directory worked, see $log")"
  return 1
}

ensure_nvrtc() {
  [[ -n "${NVRTC_PICKED:-}" ]] && return 0
  if [[ -s "$OUT/nvrtc-dir.txt" ]]; then
    local dir
    dir=$(cat "$OUT/nvrtc-dir.txt")
    export LD_LIBRARY_PATH="$dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  else
    stage_nvrtc || true
  fi
  NVRTC_PICKED=1
}

stage_tests() {
  ensure_nvrtc
  # Every test executable --build put in target/gpu-bin (its list is build-gpu-bin.sh's), but
  # the kernel benchmark, which the bench stage runs.
  local exe t found=0
  for exe in "$BIN"/*; do
    t=$(basename "$exe")
    [[ -x $exe && $t != dcgan-train* && $t != cuda_bench ]] || continue
    found=1
    # penalty's training run is a CPU run on Fashion-MNIST, which the device has no copy of.
    local skip=()
    [[ $t == penalty ]] && skip=(--skip the_penalty_holds_the_critics_gradient_norm_near_one)
    run_step "test-$t" 240 "$BIN/$t" --test-threads=1 --nocapture "${skip[@]}"
  done
  [[ $found == 1 ]] || note "$(printf '%-34s SKIP   no test executables in %s (bash scripts/gpu/gpu-check.sh --build, and carry it)' tests "$BIN")"
}

stage_sanitize() {
  ensure_nvrtc
  command -v compute-sanitizer >/dev/null || { note "sanitize: SKIP (no compute-sanitizer)"; return; }
  have_bin cuda_ops sanitize || return
  local cs=(compute-sanitizer --error-exitcode 9 --print-limit 20)
  export DCGAN_TEST_SMALL=1
  run_step sanitize-memcheck-ops 240 "${cs[@]}" --tool memcheck "$BIN/cuda_ops" --test-threads=1
  run_step sanitize-memcheck-dcgan 240 "${cs[@]}" --tool memcheck "$BIN/cuda_dcgan" --test-threads=1 generator_and_discriminator
  run_step sanitize-racecheck 300 "${cs[@]}" --tool racecheck --racecheck-report hazard "$BIN/cuda_ops" --test-threads=1 convolution batchnorm bce
  run_step sanitize-synccheck 240 "${cs[@]}" --tool synccheck "$BIN/cuda_ops" --test-threads=1 convolution batchnorm bce
  run_step sanitize-initcheck 240 "${cs[@]}" --tool initcheck "$BIN/cuda_ops" --test-threads=1
  # The program itself, a short training run: data, staging, CUDA graph replay, samples.
  if have_bin dcgan-train sanitize-memcheck-train; then
    rm -rf /tmp/gpu-sanitize-run
    run_step sanitize-memcheck-train 240 "${cs[@]}" --tool memcheck "$BIN/dcgan-train" --device cuda \
      --data synthetic:512 --max-steps 6 --no-progress --out /tmp/gpu-sanitize-run
  fi
  unset DCGAN_TEST_SMALL
}

stage_bench() {
  ensure_nvrtc
  if have_bin cuda_bench bench-kernels; then
    if [[ $REHEARSE == 0 ]]; then
      run_step bench-kernels 180 "$BIN/cuda_bench" --ignored --nocapture --test-threads=1 bench_kernels
      grep '^{' "$OUT/bench-kernels.log" >"$OUT/bench-kernels.jsonl" || true
    fi
  fi
  if have_bin dcgan-train bench-step; then
    # The training step of the program itself (D step + G step, Adam), as users run it: five
    # runs per batch size, precision and launch mode, the variants alternating (compare()
    # quotes the median of their medians, as bench-torch.py does over its runs).
    for rep in "${BENCH_REPS[@]}"; do
      for b in "${BENCH_BATCHES[@]}"; do
        for p in fp32 tf32 3xtf32; do
          for g in launched graphs; do
            local graphs=()
            [[ $g == graphs ]] && graphs=(--cuda-graphs)
            run_step "bench-step-$b-$p-$g-run$rep" 150 "$BIN/dcgan-train" bench-step --device "$DEVICE" \
              --batch-size "$b" --precision "$p" "${graphs[@]}" "${BENCH_RUN[@]}" --json
          done
        done
      done
    done
    grep -h '^{' "$OUT"/bench-step-*-run*.log >"$OUT/bench-step.jsonl" || true
  fi
}

stage_torch() {
  python3 -c 'import torch' 2>/dev/null || { note "torch: SKIP (no PyTorch)"; return; }
  : >"$OUT/bench-torch.jsonl"
  run_step bench-torch-tf32 150 python3 scripts/bench-torch.py --batch-size 64 256 --json
  run_step bench-torch-fp32 150 python3 scripts/bench-torch.py --batch-size 64 256 --json --no-tf32
  run_step bench-torch-compile 400 python3 scripts/bench-torch.py --batch-size 64 256 --json --compile
  grep -h '^{' "$OUT"/bench-torch-{tf32,fp32,compile}.log >"$OUT/bench-torch.jsonl" || true
}

stage_binary() {
  ensure_nvrtc
  have_bin dcgan-train binary || return
  run_step binary-version 30 "$BIN/dcgan-train" --version
  run_step binary-info 60 "$BIN/dcgan-train" info
  # One training run on the GPU: the whole program path (data, staging, checkpoint, PNG).
  rm -rf /tmp/gpu-train-run
  run_step binary-train 180 "$BIN/dcgan-train" --device cuda --data synthetic:4096 --max-steps 50 \
    --no-progress --out /tmp/gpu-train-run
  cp /tmp/gpu-train-run/summary.json "$OUT/train-summary.json" 2>/dev/null || true
  cp /tmp/gpu-train-run/samples/final.png "$OUT/train-final.png" 2>/dev/null || true
  # Bad input: a batch beyond the kernels' 32-bit indexing, and one that does not fit in
  # device memory: each must fail with one line that names --batch-size.
  run_step binary-batch-too-large 60 bash -c 'expect_error "$@"' _ "32 bits; use a smaller --batch-size" \
    "$BIN/dcgan-train" bench-step --device cuda --batch-size 1000000 --steps 1 --warmup 0
  # (The 28x28 model at batch 80000 fits in an H100's 80 GB; the 64x64 one at 30000 does not,
  # and its largest tensor, 64x32x32 per image, still fits 32-bit indexing.)
  run_step binary-out-of-memory 120 bash -c 'expect_error "$@"' _ "out of GPU memory" \
    "$BIN/dcgan-train" bench-step --device cuda --image-size 64 --batch-size 30000 --steps 1 --warmup 0
}

# expect_error PATTERN CMD...: CMD must exit non-zero with PATTERN in its output.
expect_error() {
  local pattern=$1 out rc
  shift
  out=$("$@" 2>&1)
  rc=$?
  echo "$out"
  echo "exit $rc"
  [[ $rc -ne 0 ]] && grep -qF -- "$pattern" <<<"$out"
}
export -f expect_error

# Two ranks on the one GPU through the copied Open MPI runtime (.ompi, scripts/gpu/gpu-mpi-env.sh):
# the staged gradient path (copy stream, pinned memory, comm thread) with real MPI, ranks
# checked bitwise identical every 10 steps, each allreduce family, the same run without the
# exchange for its cost, and the bf16 and 1bit wires.
stage_mpi() {
  ensure_nvrtc
  have_bin dcgan-train-mpi mpi || return
  have_ompi mpi || return
  (
    # shellcheck source=gpu-mpi-env.sh
    source "$ROOT/scripts/gpu/gpu-mpi-env.sh" || exit 1
    run_step mpi-info 60 mpiexec -n 2 "$BIN/dcgan-train-mpi" info
    for run in "auto" "auto --no-overlap" "auto --cuda-graphs" "ring" "tree" "rd" "vhd" "auto --no-exchange"; do
      local name="mpi-train-${run// /}"
      name=${name//--/-}
      rm -rf "/tmp/$name"
      # (--no-exchange lets the ranks drift apart: no consistency check there.)
      local check=(--check-consistency "$CHECK_EVERY")
      [[ $run == *no-exchange* ]] && check=()
      # shellcheck disable=SC2086
      run_step "$name" 180 mpiexec -n 2 "$BIN/dcgan-train-mpi" --device "$DEVICE" "${TRAIN_DATA[@]}" \
        --max-steps "$TRAIN_STEPS" "${check[@]}" --no-progress --out "/tmp/$name" --allreduce $run
      cp "/tmp/$name/summary.json" "$OUT/$name-summary.json" 2>/dev/null || true
    done
    # Overlap (buckets leave during backward, G's update lands stage by stage in the next
    # forward) against none: the kernels have no atomics, so the weights must be bitwise
    # equal; a missing stream dependency on the copy-back shows up here.
    run_step mpi-overlap-bitwise 60 python3 "$ROOT/scripts/gpu/same-weights.py" \
      /tmp/mpi-train-auto /tmp/mpi-train-auto-no-overlap
    # The steps replayed as CUDA graphs, cut at every gradient copy and wait: the same bits.
    run_step mpi-graphs-bitwise 60 python3 "$ROOT/scripts/gpu/same-weights.py" \
      /tmp/mpi-train-auto /tmp/mpi-train-auto-cuda-graphs
    # The pipeline (G's stage and D's on the one GPU) against one rank with the same
    # micro-batches: the same kernels on the same micro-batches, so bitwise equal.
    local micro=(--device "$DEVICE" "${MICRO_RUN[@]}" --micro-batches 4 --no-progress)
    rm -rf /tmp/mpi-micro /tmp/mpi-pipeline
    run_step mpi-micro-batches 120 mpiexec -n 1 "$BIN/dcgan-train-mpi" "${micro[@]}" --out /tmp/mpi-micro
    run_step mpi-pipeline 120 mpiexec -n 2 "$BIN/dcgan-train-mpi" "${micro[@]}" --pipeline --out /tmp/mpi-pipeline
    cp /tmp/mpi-pipeline/summary.json "$OUT/mpi-pipeline-summary.json" 2>/dev/null || true
    run_step mpi-pipeline-bitwise 60 python3 "$ROOT/scripts/gpu/same-weights.py" /tmp/mpi-micro /tmp/mpi-pipeline
    # A wire packed and unpacked on the GPU (the copies carry the small form) against the comm
    # thread packing it (DCGAN_WIRE_PACKING=host): the same bits, and the comm thread's time
    # per step of each (summary.json) beside f32's above; then the scaling replay of the
    # packed 1bit run's trace to 8 GPUs on 100 Gbit/s links (0.08 ns a byte, 5 us a message).
    packed_against_host() { # NAME TRAIN-ARGS...
      local name=$1
      shift
      rm -rf "/tmp/$name" "/tmp/$name-host"
      run_step "$name" 180 mpiexec -n 2 "$BIN/dcgan-train-mpi" "$@" --trace "/tmp/$name-trace.json" --out "/tmp/$name"
      DCGAN_WIRE_PACKING=host run_step "$name-host" 180 mpiexec -n 2 -x DCGAN_WIRE_PACKING \
        "$BIN/dcgan-train-mpi" "$@" --out "/tmp/$name-host"
      cp "/tmp/$name/summary.json" "$OUT/$name-summary.json" 2>/dev/null || true
      cp "/tmp/$name-host/summary.json" "$OUT/$name-host-summary.json" 2>/dev/null || true
      run_step "$name-bitwise" 60 python3 "$ROOT/scripts/gpu/same-weights.py" "/tmp/$name" "/tmp/$name-host"
    }
    local run=(--device "$DEVICE" "${TRAIN_DATA[@]}" --max-steps "$TRAIN_STEPS" --check-consistency "$CHECK_EVERY"
      --no-progress)
    packed_against_host mpi-bf16 "${run[@]}" --wire bf16
    packed_against_host mpi-1bit "${run[@]}" --wire 1bit --wire-warmup-steps "$WIRE_WARMUP"
    run_step mpi-1bit-simulate 120 "$BIN/dcgan-train-mpi" simulate-scaling --summary /tmp/mpi-1bit/summary.json \
      --trace /tmp/mpi-1bit-trace.json --nodes 2,4,8 --alpha 5 --beta 0.08
  )
}

# Sample quality per --precision: tf32's rounding against fp32 (and 3xtf32) at 5 epochs.
stage_quality() {
  ensure_nvrtc
  have_bin dcgan-train quality || return
  local data="$QUALITY_DATA"
  if [[ ! -f $data/feature-net.safetensors ]]; then
    note "$(printf '%-34s SKIP   no %s (--build where Fashion-MNIST is installed)' quality "$data")"
    return
  fi
  for p in fp32 tf32 3xtf32; do
    rm -rf "/tmp/quality-$p"
    run_step "quality-$p" 300 "$BIN/dcgan-train" --device cuda --precision "$p" --data "$data" \
      --classifier "$data/feature-net.safetensors" --epochs 5 --eval-every 1 --no-progress \
      --out "/tmp/quality-$p"
    cp "/tmp/quality-$p/metrics.jsonl" "$OUT/quality-$p-metrics.jsonl" 2>/dev/null || true
  done
  python3 - "$OUT" <<'PY' | tee -a "$SUMMARY"
import json, os, sys
out = sys.argv[1]
print("\nFID by epoch (Fashion-MNIST, batch 64, 1 GPU)")
for p in ("fp32", "tf32", "3xtf32"):
    path = os.path.join(out, f"quality-{p}-metrics.jsonl")
    if not os.path.exists(path):
        continue
    fids = [r["fid"] for r in map(json.loads, open(path)) if r.get("type") == "epoch" and "fid" in r]
    print(f"{p:7s} " + " ".join(f"{f:7.2f}" for f in fids))
PY
}

# The stages on emulated hosts of CPU ranks: scaling, two-level, wire.
# shellcheck source=cluster-stages.sh
source "$ROOT/scripts/gpu/cluster-stages.sh"

stage_ncu() {
  ensure_nvrtc
  command -v ncu >/dev/null || { note "ncu: SKIP (no ncu)"; return; }
  have_bin cuda_bench ncu || return
  DCGAN_BENCH_BATCHES=64 run_step ncu 400 ncu --csv --page details --section SpeedOfLight \
    --section Occupancy --section LaunchStats -k 'regex:conv_|bn_' --launch-count 60 \
    "$BIN/cuda_bench" --ignored --test-threads=1 bench_kernels
}

# Our step against PyTorch eager at each batch size, from the bench and torch stages.
compare() {
  [[ -s "$OUT/bench-step.jsonl" || -s "$OUT/bench-torch.jsonl" ]] || return 0
  python3 "$ROOT/scripts/gpu/compare-step.py" "$OUT" | tee -a "$SUMMARY"
}

# WGAN-GP's critic step on the GPU, ours against PyTorch eager, for each critic norm.
stage_wgan() {
  ensure_nvrtc
  have_bin dcgan-train wgan || return
  python3 -c 'import torch' 2>/dev/null || { note "wgan: SKIP (no PyTorch)"; return; }
  for norm in none layer; do
    run_step "wgan-gp-$norm" 240 env CRITIC_NORM="$norm" OURS="$BIN/dcgan-train" PYTHON=python3 \
      scripts/bench-wgan-gp-vs-torch.sh 4 --device cuda
  done
}

STAGES=("$@")
[[ ${#STAGES[@]} -eq 0 ]] && STAGES=(env nvrtc tests sanitize bench torch binary mpi)
[[ $REHEARSE == 1 && $# -eq 0 ]] && STAGES=(bench mpi)
[[ "${STAGES[0]}" == all ]] && STAGES=(env nvrtc tests sanitize bench torch binary mpi quality ncu)
for s in "${STAGES[@]}"; do
  if [[ $REHEARSE == 1 && $s != bench && $s != mpi ]]; then
    note "$(printf '%-34s SKIP   --rehearse runs bench and mpi only' "$s")"
    continue
  fi
  case $s in
    env | nvrtc | tests | sanitize | bench | torch | binary | mpi | quality | ncu | scaling | wgan) "stage_$s" ;;
    two-level) stage_two_level ;;
    wire) stage_wire ;;
    *) echo "gpu-check: unknown stage '$s' (env nvrtc tests sanitize bench torch binary mpi quality ncu scaling two-level wire wgan all)" >&2; exit 2 ;;
  esac
done
compare
echo
echo "summary ($SUMMARY):"
cat "$SUMMARY"
grep -q FAIL "$SUMMARY" && exit 1
exit 0
