//! dcgan-train: data-parallel DCGAN training over MPI with hand-written allreduce algorithms
//! and CUDA kernels. The binary is a thin layer over this library (see `main.rs`).

pub mod backend;
pub mod cli;
pub mod comm;
pub mod data;
pub mod ops;
pub mod report;

/// `dcgan-train [train]`
pub fn run_train(_args: cli::TrainArgs) -> anyhow::Result<()> {
    anyhow::bail!("training is not built yet")
}

/// `dcgan-train bench-step`
pub fn run_bench_step(_args: cli::BenchStepArgs) -> anyhow::Result<()> {
    anyhow::bail!("bench-step is not built yet")
}
