//! `dcgan-train tune-allreduce`: measure the algorithms on these ranks and write a rules file
//! for `--allreduce-tuning`.

use super::comm_args::CommArgs;
use super::parse::message_size;
use crate::comm::tune::TuneOptions;
use clap::Args;
use std::path::PathBuf;

#[derive(Args, Clone, Debug)]
pub struct TuneAllreduceArgs {
    #[command(flatten)]
    pub comm: CommArgs,
    /// Write the rules (CSV: ranks,min_bytes,max_bytes,algorithm) to this file.
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,
    /// Message sizes to measure, comma-separated (default: 4B to 64MiB in x2 steps).
    #[arg(long, value_delimiter = ',', value_parser = message_size)]
    pub sizes: Vec<usize>,
    /// Repeat each measurement this many times and keep the median.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..))]
    pub repeats: u64,
    /// Add the new rules to FILE, replacing only the lines for this rank count.
    #[arg(long)]
    pub append: bool,
    /// Replace an existing FILE that is not a rules file (a rules file is replaced anyway).
    #[arg(long)]
    pub force: bool,
}

pub fn run(a: TuneAllreduceArgs) -> anyhow::Result<()> {
    crate::comm::tune::run(TuneOptions {
        comm: a.comm.into(),
        out: a.out,
        sizes: a.sizes,
        repeats: a.repeats,
        append: a.append,
        force: a.force,
    })
}
