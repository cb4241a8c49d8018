# shellcheck shell=bash
# cluster-stages.sh: gpu-check.sh's stages that run CPU ranks on emulated hosts of the GPU
# machine's many cores (scaling, two-level, wire), through the carried Open MPI. Sourced by
# gpu-check.sh, whose note, run_step, have_bin, have_ompi, ROOT, BIN and OUT they use.

# The copied Open MPI for an emulated cluster (scaling, two-level), in the calling subshell.
cluster_mpi_env() {
  # shellcheck source=gpu-mpi-env.sh
  source "$ROOT/scripts/gpu/gpu-mpi-env.sh" || return 1
  # Those defaults keep a job on one host over shared memory; the emulated cluster starts
  # its daemons through its own agent and sends over TCP between namespaces.
  unset OMPI_MCA_plm OMPI_MCA_plm_rsh_agent OMPI_MCA_btl OMPI_MCA_btl_tcp_if_include OMPI_MCA_oob_tcp_if_include
}

# The weak-scaling benchmark where ranks have cores of their own (a 2-core machine puts 4
# ranks on 2 cores): scripts/bench-scaling.sh on emulated hosts of this machine, CPU ranks
# (--device cpu, --threads 1), through the copied Open MPI. The report is written only at the
# end, so where a run's time limit is in doubt, make the first one
# SCALING_ARGS='--repeats 1 --train-args "--device cpu --wire bf16"'. SCALING_ARGS replaces
# every option but --steps 30 and --out (for example, a later run with
# SCALING_ARGS='--repeats 3 --segment 16KiB --train-args "--device cpu --wire bf16"').
stage_scaling() {
  have_bin dcgan-train-mpi scaling || return
  have_ompi scaling || return
  (
    cluster_mpi_env || exit 1
    local args=()
    eval "args=(${SCALING_ARGS:---repeats 3 --train-args \"--device cpu --wire bf16\"})"
    local dir=/tmp/gpu-check-scaling
    rm -rf "$dir"
    DCGAN_TRAIN="$BIN/dcgan-train-mpi" run_step scaling "${SCALING_LIMIT:-570}" \
      bash "$ROOT/scripts/bench-scaling.sh" --steps 30 "${args[@]}" --out "$dir"
    # The report, not the 100-odd run folders.
    mkdir -p "$OUT/scaling"
    for f in environment.txt links-shaped.txt links-allreduce.txt results.md results.json speedup.png simulated.md simulated-cpu.md \
        model-allreduce.md trace-report-2.md trace-report-4.md; do
      cp "$dir/$f" "$OUT/scaling/" 2>/dev/null || true
    done
    # The tables the targets are judged on, the step budget (with cores of their own, the core
    # taken should be near zero) and where the waits went, into the output's tail.
    [[ -f "$dir/results.md" ]] && awk '/^## / { show = /^## (Measured|Paired|Where the|Targets)/ } show' "$dir/results.md"
  )
}

# The two-level cost model where every rank and its comm thread have a core (on 2 cores,
# 2 x 2 ranks take turns and the rounds run long): scripts/bench-two-level.sh, 2 hosts of 4
# ranks by default (TWO_LEVEL_ARGS replaces the options).
stage_two_level() {
  cluster_stage two-level model-two-level.md bench-two-level.sh "${TWO_LEVEL_LIMIT:-300}" \
    "${TWO_LEVEL_ARGS:---hosts 2 --slots 4 --repeats 2}"
}

# The compressed exchanges where every rank and its comm thread have a core (on 2 cores the 4
# ranks' own drift is larger than 1bit's exposed exchange): scripts/bench-wire.sh, 4 emulated
# hosts at 1 Gbit/s (WIRE_ARGS replaces the options).
stage_wire() {
  cluster_stage wire results.md bench-wire.sh "${WIRE_LIMIT:-420}" \
    "${WIRE_ARGS:---hosts 4 --rate 1gbit --steps 30 --skip 8 --repeats 2 --variants no-exchange,f32,bf16,1bit --train-args \"--device cpu\"}"
}

# cluster_stage NAME REPORT SCRIPT LIMIT ARGS: benchmark scripts/SCRIPT on the emulated
# cluster with the carried MPI build (ARGS: its options, as one shell-quoted string), time
# limit LIMIT; its report files into $OUT/NAME, environment.txt and report REPORT into the
# log's tail.
cluster_stage() {
  local name=$1 report=$2 script=$3 limit=$4 options=$5
  have_bin dcgan-train-mpi "$name" || return
  have_ompi "$name" || return
  (
    cluster_mpi_env || exit 1
    local args=() dir=/tmp/gpu-check-$name
    eval "args=($options)"
    rm -rf "$dir"
    DCGAN_TRAIN="$BIN/dcgan-train-mpi" run_step "$name" "$limit" bash "$ROOT/scripts/$script" "${args[@]}" --out "$dir"
    mkdir -p "$OUT/$name"
    cp "$dir"/*.md "$dir"/*.txt "$dir"/*.json "$OUT/$name/" 2>/dev/null || true
    [[ -f "$dir/$report" ]] && cat "$dir/environment.txt" "$dir/$report"
  )
}
