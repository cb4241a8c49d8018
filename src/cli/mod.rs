//! The command line: clap definitions. `train` is the default action, so
//! `dcgan-train --epochs 1` and `dcgan-train train --epochs 1` are the same.

pub mod comm;
pub mod size;

use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

#[derive(Parser, Debug)]
#[command(
    name = "dcgan-train",
    version,
    about = "Data-parallel DCGAN training over MPI",
    args_conflicts_with_subcommands = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub train: TrainArgs,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Train the DCGAN (the default when no subcommand is given).
    Train(TrainArgs),
    /// Time full GAN steps (D step + G step) and print ms/step and images/s.
    BenchStep(BenchStepArgs),
    /// Time every allreduce algorithm over a range of message sizes (run under mpiexec).
    BenchAllreduce(comm::BenchAllreduceArgs),
    /// Measure the algorithms on these ranks and write a rules file for --allreduce-tuning.
    TuneAllreduce(comm::TuneAllreduceArgs),
}

/// Options shared by training and the step benchmark.
#[derive(Args, Debug, Clone)]
pub struct ModelArgs {
    /// Image side: 28 (the default model) or 64 (the DCGAN paper's; 28x28 data is resized).
    #[arg(long, default_value_t = 28, value_parser = parse_image_size)]
    pub image_size: usize,
    /// Images per rank per step.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..))]
    pub batch_size: u64,
    /// Adam learning rate.
    #[arg(long, default_value_t = 2e-4)]
    pub lr: f32,
    /// Seed for weights, data order and noise: the same seed gives the same run.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Compute threads per rank (default: the cores of this host divided by its ranks).
    #[arg(long)]
    pub threads: Option<usize>,
}

#[derive(Args, Debug, Clone)]
pub struct TrainArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Training images: a directory with train-images-idx3-ubyte[.gz] (MNIST or
    /// Fashion-MNIST), or synthetic:N for N generated images. Default: the Debian package
    /// dataset-fashion-mnist in /usr/share/datasets/fashion-mnist.
    #[arg(long)]
    pub data: Option<String>,
    /// Passes over the data.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..))]
    pub epochs: u64,
    /// Stop after this many steps in total (for short runs and tests).
    #[arg(long)]
    pub max_steps: Option<u64>,
    /// Output directory (default runs/<timestamp>).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// No progress bar and no periodic progress lines.
    #[arg(long)]
    pub no_progress: bool,
    #[command(flatten)]
    pub comm: comm::CommArgs,
}

#[derive(Args, Debug, Clone)]
pub struct BenchStepArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Timed steps, after the warm-up.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..))]
    pub steps: u64,
    /// Untimed steps first.
    #[arg(long, default_value_t = 3)]
    pub warmup: u64,
    /// Print one JSON line instead of text.
    #[arg(long)]
    pub json: bool,
}

fn parse_image_size(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n @ (28 | 64)) => Ok(n),
        _ => Err(format!("unknown image size '{s}': use 28 or 64")),
    }
}
