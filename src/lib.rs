//! dcgan-train: data-parallel DCGAN training over MPI with hand-written allreduce algorithms
//! and CUDA kernels. The binary is a thin layer over this library (see `main.rs`).

pub mod backend;
pub mod checkpoint;
pub mod cli;
pub mod comm;
pub mod data;
pub mod device;
pub mod info;
pub mod model;
pub mod nn;
pub mod ops;
pub mod report;
pub mod sample;
pub mod scaling;
pub mod train;

/// `dcgan-train [train]`
pub fn run_train(args: cli::TrainArgs) -> anyhow::Result<()> {
    train::run::run(args)
}

/// `dcgan-train bench-step`
pub fn run_bench_step(args: cli::BenchStepArgs) -> anyhow::Result<()> {
    train::bench::run(args)
}
