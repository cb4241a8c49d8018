//! `dcgan-train bench-allreduce`: time every allreduce algorithm over a range of message sizes.

use super::comm_args::CommArgs;
use super::parse::message_size;
use crate::comm::AllreduceChoice;
use crate::comm::bench::BenchOptions;
use clap::Args;
use std::path::PathBuf;

#[derive(Args, Clone, Debug)]
pub struct BenchAllreduceArgs {
    #[command(flatten)]
    pub comm: CommArgs,
    /// Message sizes, comma-separated (multiples of 4 bytes): e.g. 4B,1KiB,4MiB.
    /// Default: 4B to 64MiB in x4 steps.
    #[arg(long, value_delimiter = ',', value_parser = message_size)]
    pub sizes: Vec<usize>,
    /// Algorithms to time, comma-separated (auto: what --allreduce auto picks for the size,
    /// shown as auto(rd) etc.). Default: tree,rd,vhd,ring,mpi,auto, and hier where the job
    /// runs on two or more hosts of the same number (two or more) of ranks (elsewhere hier is
    /// ring or the across-hosts algorithm under another name).
    #[arg(long, value_enum, value_delimiter = ',')]
    pub algos: Vec<AllreduceChoice>,
    /// Timed calls per size and algorithm (default: about a quarter second per row, from
    /// 10,000 for small messages down to 10 for 64 MiB).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub iters: Option<u64>,
    /// Untimed calls first (default: a tenth of the timed calls, at least 2).
    #[arg(long)]
    pub warmup: Option<u64>,
    /// Verify every result on every rank and fail the run if any is wrong.
    #[arg(long)]
    pub check: bool,
    /// Also write the rows as a JSON array to this file.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Time whole buckets through the comm thread instead (submit + wait from the calling
    /// thread, with --allreduce's choice): the algorithm plus the hand-over to the comm thread.
    #[arg(long)]
    pub via_engine: bool,
}

impl From<BenchAllreduceArgs> for BenchOptions {
    fn from(a: BenchAllreduceArgs) -> BenchOptions {
        BenchOptions {
            comm: a.comm.into(),
            sizes: a.sizes,
            algos: a.algos,
            iters: a.iters,
            warmup: a.warmup,
            check: a.check,
            json: a.json,
            via_engine: a.via_engine,
        }
    }
}

pub fn run(args: BenchAllreduceArgs) -> anyhow::Result<()> {
    crate::comm::bench::run(args.into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::comm::Algorithm;
    use crate::comm::bench::{default_bench_algos, default_sizes};
    use clap::Parser;

    #[derive(Parser)]
    struct B {
        #[command(flatten)]
        bench: BenchAllreduceArgs,
    }

    #[test]
    fn bench_lists() {
        let b = B::parse_from(["x", "--sizes", "4B,1KiB,4MiB", "--algos", "rd,auto"]).bench;
        assert_eq!(b.sizes, vec![4, 1024, 4 << 20]);
        assert_eq!(b.algos, vec![AllreduceChoice::Fixed(Algorithm::Rd), AllreduceChoice::Auto]);
        let b = B::parse_from(["x"]).bench;
        assert!(b.sizes.is_empty() && b.algos.is_empty());
        let e = B::try_parse_from(["x", "--sizes", "4B,6B"]).err().unwrap().to_string();
        assert!(e.contains("--sizes") && e.contains("multiples of 4"), "{e}");
        let e = B::try_parse_from(["x", "--algos", "rd,best"]).err().unwrap().to_string();
        assert!(e.contains("--algos"), "{e}");
    }

    #[test]
    fn the_default_algorithms_add_hier_only_on_two_levels() {
        let flat = default_bench_algos(false);
        assert_eq!(flat.len(), 6);
        assert!(!flat.contains(&AllreduceChoice::Fixed(Algorithm::Hier)));
        assert_eq!(flat.last(), Some(&AllreduceChoice::Auto));
        assert_eq!(default_bench_algos(true)[4], AllreduceChoice::Fixed(Algorithm::Hier));
    }

    #[test]
    fn default_sizes_are_4b_to_64mib_by_4() {
        let s = default_sizes();
        assert_eq!(s.first(), Some(&4));
        assert_eq!(s.last(), Some(&(64 << 20)));
        assert!(s.windows(2).all(|w| w[1] == 4 * w[0]));
    }
}
