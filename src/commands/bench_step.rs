//! `dcgan-train bench-step`: time full GAN steps on one rank.

use super::parse::at_least_one;
use super::train::ModelArgs;
use crate::train::bench::BenchStepOptions;
use clap::Args;

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

pub fn run(a: BenchStepArgs) -> anyhow::Result<()> {
    crate::train::bench::run(BenchStepOptions { model: a.model.into(), steps: a.steps, warmup: a.warmup, json: a.json })
}
