//! `dcgan-train ping-pong`: alpha, beta and gamma of the links between ranks 0 and 1, for the
//! cost model.

use super::parse::{parse_timeout, positive_message_size};
use crate::scaling::pingpong::PingPongOptions;
use clap::Args;
use std::path::PathBuf;

#[derive(Args, Clone, Debug)]
pub struct PingPongArgs {
    /// Message sizes (multiples of 4 bytes), comma-separated.
    #[arg(long, value_delimiter = ',', value_parser = positive_message_size,
          default_value = "4B,64B,1KiB,16KiB,64KiB,256KiB,1MiB,4MiB")]
    pub sizes: Vec<usize>,
    /// Round trips per size (default: about 0.3 s per size, 5 to 2000).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub iters: Option<u64>,
    /// Write alpha, beta, gamma and the points as JSON to FILE (input of simulate-scaling
    /// --links).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// End the job when a message has waited this long (seconds).
    #[arg(long, default_value = "60s", value_parser = parse_timeout)]
    pub stall_timeout: std::time::Duration,
}

pub fn run(a: PingPongArgs) -> anyhow::Result<()> {
    crate::scaling::pingpong::run(PingPongOptions {
        sizes: a.sizes,
        iters: a.iters,
        json: a.json,
        stall_timeout: a.stall_timeout,
    })
}
