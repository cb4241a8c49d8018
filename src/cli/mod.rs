//! The command line: clap definitions. `train` is the default action, so
//! `dcgan-train --epochs 1` and `dcgan-train train --epochs 1` are the same.

pub mod comm;
pub mod scaling;
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
    /// Render a grid of images from a saved generator.
    Sample(SampleArgs),
    /// Print, per rank, the host, local rank, device and the MPI library (run under mpiexec).
    Info(InfoArgs),
    /// Predict step time, eq. (1) speedup and hidden communication at other node counts by
    /// replaying a run's trace against the allreduce cost model.
    SimulateScaling(scaling::SimulateScalingArgs),
    /// Measure alpha (latency), beta (per byte) and gamma (reduction) between ranks 0 and 1,
    /// for the cost model (run under mpiexec, one rank per host).
    PingPong(scaling::PingPongArgs),
    /// From a multi-rank run's trace: where the waits for gradient buckets went (the slowest
    /// rank or the exchange) and how much of the allreduce time compute hid.
    TraceReport(TraceReportArgs),
}

#[derive(Args, Debug, Clone)]
pub struct TraceReportArgs {
    /// A trace of a run of 2 or more ranks (`train --trace FILE`).
    pub trace: PathBuf,
    /// Steps at the start left out as warm-up.
    #[arg(long, value_name = "STEPS", default_value_t = 2)]
    pub skip: u64,
    /// Also write the report as JSON to this file.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
}

#[derive(Args, Debug, Clone)]
pub struct InfoArgs {
    #[command(flatten)]
    pub comm: comm::CommArgs,
}

#[derive(Args, Debug, Clone)]
pub struct SampleArgs {
    /// A run directory (its latest checkpoint) or a checkpoint directory.
    #[arg(long)]
    pub checkpoint: PathBuf,
    /// Number of images.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=4096))]
    pub n: u64,
    /// The PNG to write.
    #[arg(long, default_value = "samples.png")]
    pub out: PathBuf,
    /// Seed of other noise; without it, the noise of the run's own sample grids, so that the
    /// first 64 images are the grid the run drew with these weights (samples/final.png for
    /// its latest checkpoint).
    #[arg(long)]
    pub seed: Option<u64>,
}

/// Options shared by training and the step benchmark.
#[derive(Args, Debug, Clone, serde::Serialize)]
pub struct ModelArgs {
    /// Image side: 28 (the default model) or 64 (the DCGAN paper's; 28x28 data is resized).
    #[arg(long, default_value_t = 28, value_parser = parse_image_size)]
    pub image_size: usize,
    /// Images per rank per step (at most 2^20).
    #[arg(long, default_value_t = 64, value_parser = batch_size)]
    pub batch_size: u64,
    /// Adam learning rate.
    #[arg(long, default_value_t = 2e-4, value_parser = positive_f64)]
    pub lr: f64,
    /// Adam's beta1 (the DCGAN paper's 0.5).
    #[arg(long, default_value_t = 0.5, value_parser = adam_beta)]
    pub adam_beta1: f32,
    /// Adam's beta2.
    #[arg(long, default_value_t = 0.999, value_parser = adam_beta)]
    pub adam_beta2: f32,
    /// Adam's epsilon (PyTorch's default 1e-8).
    #[arg(long, default_value_t = 1e-8, value_parser = positive_f32)]
    pub adam_eps: f32,
    /// Seed for weights, data order and noise: the same seed gives the same run.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Compute threads per rank (default: the cores of this host divided by its ranks).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Where each rank computes: auto (a GPU when one is usable, else the CPU), cpu, cuda, or
    /// cuda-emulated (the CUDA kernels on the CPU: slow, for checking without a GPU).
    #[arg(long, value_enum, default_value_t = crate::device::DeviceChoice::Auto)]
    pub device: crate::device::DeviceChoice,
}

#[derive(Args, Debug, Clone, serde::Serialize)]
pub struct TrainArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Training images: a directory with train-images-idx3-ubyte[.gz] (MNIST or
    /// Fashion-MNIST), or synthetic:N for N generated images. Default: the Debian package
    /// dataset-fashion-mnist in /usr/share/datasets/fashion-mnist.
    #[arg(long)]
    pub data: Option<String>,
    /// Passes over the data.
    #[arg(long, default_value_t = 5, value_parser = at_least_one)]
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
    pub parallel: ParallelArgs,
    #[command(flatten)]
    pub checkpoints: CheckpointArgs,
    #[command(flatten)]
    pub comm: comm::CommArgs,
}

/// Data parallelism: how the batch is split and how gradients are exchanged.
#[derive(Args, Debug, Clone, serde::Serialize)]
pub struct ParallelArgs {
    /// A fixed global batch split over the ranks (strong scaling) instead of --batch-size per
    /// rank (weak scaling); must be divisible by the number of ranks.
    #[arg(long, value_parser = at_least_one, conflicts_with = "batch_size")]
    pub global_batch_size: Option<u64>,
    /// Scale the learning rate with the global batch relative to 64: none, linear or sqrt.
    #[arg(long, value_enum, default_value_t = LrScaling::None)]
    pub lr_scaling: LrScaling,
    /// Ramp the learning rate linearly from 0 over this many steps.
    #[arg(long, default_value_t = 0)]
    pub warmup_steps: u64,
    /// Batch-norm statistics over all ranks (one allreduce per BN layer per pass) instead of
    /// per rank.
    #[arg(long)]
    pub sync_bn: bool,
    /// Fuse neighbouring layers' gradients into buckets of at most this size (B/KiB/MiB). The
    /// layer whose gradient backward completes last always travels alone: nothing is left to
    /// hide its exchange before D's update.
    #[arg(long, default_value = "1MiB", value_parser = size::parse_bytes)]
    pub bucket_bytes: usize,
    /// Exchange gradients only after the whole backward (for comparison with the default,
    /// which sends each bucket as soon as backward completes it).
    #[arg(long)]
    pub no_overlap: bool,
    /// Benchmarking only: skip the gradient exchange (ranks drift apart) to isolate its cost.
    /// The per-step losses are still averaged, so the ranks stay in step as in a real run.
    #[arg(long)]
    pub no_exchange: bool,
    /// Write a Chrome trace (Perfetto, chrome://tracing) of every rank to FILE.
    #[arg(long)]
    pub trace: Option<PathBuf>,
    /// Steps recorded in the trace.
    #[arg(long, default_value_t = 20)]
    pub trace_steps: u64,
    /// Every K steps, check that all ranks hold identical parameters (0 = never). With
    /// --no-exchange the ranks drift apart by design, so the check fails: a test of the check.
    #[arg(long, default_value_t = 0)]
    pub check_consistency: u64,
    /// A 1-rank run's summary.json: the summary then reports the weak-scaling speedup of the
    /// MPI paper's eq. (1) against it.
    #[arg(long)]
    pub baseline_summary: Option<PathBuf>,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LrScaling {
    None,
    Linear,
    Sqrt,
}

/// Checkpoints and resuming.
#[derive(Args, Debug, Clone, serde::Serialize)]
pub struct CheckpointArgs {
    /// Write a checkpoint every N steps (default: at the end of every epoch), and always at
    /// the end and when stopped by SIGINT/SIGTERM.
    #[arg(long, value_parser = at_least_one)]
    pub checkpoint_every: Option<u64>,
    /// How many checkpoints to keep, newest first (0 = all; default 1, or on --resume the
    /// run's own): a GAN's last checkpoint is not always its best, so keep some to pick from.
    #[arg(long)]
    pub keep_checkpoints: Option<usize>,
    /// Continue the run in DIR from its latest checkpoint (same ranks and options); its
    /// outputs go on in DIR, so --out is not taken with it.
    #[arg(long, conflicts_with = "out")]
    pub resume: Option<PathBuf>,
}

#[derive(Args, Debug, Clone)]
pub struct BenchStepArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Timed steps, after the warm-up.
    #[arg(long, default_value_t = 20, value_parser = at_least_one)]
    pub steps: u64,
    /// Untimed steps first.
    #[arg(long, default_value_t = 3)]
    pub warmup: u64,
    /// Print one JSON line instead of text.
    #[arg(long)]
    pub json: bool,
}

/// A count that must be at least 1, with a message that says so.
fn at_least_one(s: &str) -> Result<u64, String> {
    match s.parse::<u64>() {
        Ok(n) if n >= 1 => Ok(n),
        Ok(_) => Err("must be at least 1".into()),
        Err(_) => Err(format!("'{s}' is not a whole number")),
    }
}

/// Images per rank: 1 to 2^20 (far past what fits in memory: a larger one overflowed the
/// size arithmetic instead of saying so).
fn batch_size(s: &str) -> Result<u64, String> {
    match at_least_one(s)? {
        n if n <= MAX_BATCH => Ok(n),
        _ => Err(format!("must be at most {MAX_BATCH} images per rank")),
    }
}

const MAX_BATCH: u64 = 1 << 20;

/// A finite number above 0 (the learning rate).
fn positive_f64(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        Ok(_) => Err("must be a finite number above 0".into()),
        Err(_) => Err(format!("'{s}' is not a number")),
    }
}

/// A finite number above 0 (Adam's epsilon).
fn positive_f32(s: &str) -> Result<f32, String> {
    positive_f64(s).and_then(|v| {
        let f = v as f32;
        if f > 0.0 && f.is_finite() { Ok(f) } else { Err("must be above 0 and within f32's range".into()) }
    })
}

/// Adam's beta1 and beta2: 0 <= beta < 1 (at 1 the bias correction divides by zero).
fn adam_beta(s: &str) -> Result<f32, String> {
    match s.parse::<f32>() {
        Ok(v) if (0.0..1.0).contains(&v) => Ok(v),
        Ok(_) => Err("must be at least 0 and below 1 (e.g. 0.5 or 0.999)".into()),
        Err(_) => Err(format!("'{s}' is not a number")),
    }
}

fn parse_image_size(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n @ (28 | 64)) => Ok(n),
        _ => Err(format!("unknown image size '{s}': use 28 or 64")),
    }
}
