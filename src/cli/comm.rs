//! Command-line options of the communication layer: the allreduce selection and the comm
//! thread's settings (flattened into `train`), and the `bench-allreduce` / `tune-allreduce`
//! subcommands.

use crate::cli::size::parse_bytes;
use crate::comm::Algorithm;
use clap::{Args, ValueEnum};
use std::path::PathBuf;
use std::time::Duration;

/// `--allreduce`: one algorithm for every message, or `auto` (by message size).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum AllreduceChoice {
    /// rd below --allreduce-threshold, vhd above (ring if the rank count is not a power of
    /// two, hier where several ranks share each host), or the rules of --allreduce-tuning.
    Auto,
    /// Binomial-tree reduce to rank 0, then binomial broadcast.
    Tree,
    /// Butterfly recursive doubling.
    Rd,
    /// Vector halving / distance doubling (Rabenseifner).
    Vhd,
    /// Ring reduce-scatter + ring allgather.
    Ring,
    /// Two levels for several ranks per host: ring inside each host, one rank per host
    /// across (rd for small parts, vhd or ring above).
    Hier,
    /// The MPI library's MPI_Allreduce (the baseline).
    Mpi,
}

impl AllreduceChoice {
    /// The fixed algorithm; None for `auto`.
    pub fn algorithm(self) -> Option<Algorithm> {
        match self {
            AllreduceChoice::Auto => None,
            AllreduceChoice::Tree => Some(Algorithm::Tree),
            AllreduceChoice::Rd => Some(Algorithm::Rd),
            AllreduceChoice::Vhd => Some(Algorithm::Vhd),
            AllreduceChoice::Ring => Some(Algorithm::Ring),
            AllreduceChoice::Hier => Some(Algorithm::Hier),
            AllreduceChoice::Mpi => Some(Algorithm::Mpi),
        }
    }
}

/// `--wire`: how gradient values travel between ranks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Wire {
    /// Exact: 4 bytes per value.
    #[default]
    F32,
    /// bfloat16, 2 bytes per value: half the bytes on slow links, each value rounded to 8
    /// significant bits before it travels (sums stay f32; every rank keeps identical bits).
    Bf16,
}

impl Wire {
    /// Bytes one gradient value takes on the wire.
    pub fn bytes_per_value(self) -> usize {
        match self {
            Wire::F32 => 4,
            Wire::Bf16 => 2,
        }
    }

    /// For commands that time or tune exact f32 messages: an error for anything else.
    pub fn require_f32(self, command: &str) -> anyhow::Result<()> {
        if self != Wire::F32 {
            anyhow::bail!("{command} times exact f32 messages; --wire bf16 applies to train: drop --wire bf16");
        }
        Ok(())
    }
}

/// Default of `--allreduce-threshold` (the rd/vhd crossover measured at N = 2, see README).
pub const DEFAULT_THRESHOLD: &str = "8KiB";
pub const DEFAULT_FRAGMENT: &str = "1MiB";
pub const DEFAULT_STALL: &str = "60s";

/// Options every command that talks to other ranks accepts.
#[derive(Args, Clone, Debug, serde::Serialize)]
pub struct CommArgs {
    /// Allreduce algorithm for gradients: auto picks by message size.
    #[arg(long, value_enum, default_value_t = AllreduceChoice::Auto)]
    pub allreduce: AllreduceChoice,
    /// With --allreduce auto: messages smaller than this use rd, larger ones vhd (or ring).
    /// Sizes accept B, KiB, MiB.
    #[arg(long, value_parser = parse_bytes, default_value = DEFAULT_THRESHOLD,
          conflicts_with = "allreduce_tuning")]
    pub allreduce_threshold: usize,
    /// With --allreduce auto: take the algorithm per message size from this rules file
    /// (written by `dcgan-train tune-allreduce --out FILE`).
    #[arg(long, value_name = "FILE")]
    pub allreduce_tuning: Option<PathBuf>,
    /// Cut gradient buckets into fragments of at most this size, each its own allreduce, so
    /// that copies and the exchange pipeline (0 = do not cut).
    #[arg(long, value_parser = parse_fragment_bytes, default_value = DEFAULT_FRAGMENT)]
    pub fragment_bytes: usize,
    /// End the job when a collective has waited this long for another rank, printing which
    /// ranks have not arrived (e.g. 60s, 500ms, 5m; 0 = never).
    #[arg(long, value_parser = parse_duration, default_value = DEFAULT_STALL)]
    pub stall_timeout: Duration,
    /// How gradients travel between ranks: f32 (exact) or bf16 (half the bytes, like
    /// Horovod's fp16 compression; for slow links). Applies to the hand-written algorithms.
    #[arg(long, value_enum, default_value_t = Wire::F32)]
    pub wire: Wire,
}

impl Default for CommArgs {
    fn default() -> Self {
        CommArgs {
            allreduce: AllreduceChoice::Auto,
            allreduce_threshold: parse_bytes(DEFAULT_THRESHOLD).expect("valid default"),
            allreduce_tuning: None,
            fragment_bytes: parse_fragment_bytes(DEFAULT_FRAGMENT).expect("valid default"),
            stall_timeout: parse_duration(DEFAULT_STALL).expect("valid default"),
            wire: Wire::F32,
        }
    }
}

/// Algorithms `bench-allreduce --algos` accepts: the five algorithms and `auto`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum BenchAlgo {
    Tree,
    Rd,
    Vhd,
    Ring,
    Hier,
    Mpi,
    /// What --allreduce auto picks for the size (shown as auto(rd) etc.).
    Auto,
}

/// Default `--sizes`: 4 B to 64 MiB in x4 steps.
pub fn default_sizes() -> Vec<usize> {
    (0..=12).map(|k| 4usize << (2 * k)).collect()
}

/// What `bench-allreduce` times when `--algos` is not given; `two_levels`: the job's hosts
/// each run the same number (two or more) of ranks, so that hier is an algorithm of its own.
pub fn default_bench_algos(two_levels: bool) -> Vec<BenchAlgo> {
    use BenchAlgo::*;
    let flat = [Tree, Rd, Vhd, Ring];
    let hier: &[BenchAlgo] = if two_levels { &[Hier] } else { &[] };
    [&flat[..], hier, &[Mpi, Auto]].concat()
}

/// `dcgan-train bench-allreduce`
#[derive(Args, Clone, Debug)]
pub struct BenchAllreduceArgs {
    #[command(flatten)]
    pub comm: CommArgs,
    /// Message sizes, comma-separated (multiples of 4 bytes): e.g. 4B,1KiB,4MiB.
    /// Default: 4B to 64MiB in x4 steps.
    #[arg(long, value_delimiter = ',', value_parser = parse_message_size)]
    pub sizes: Vec<usize>,
    /// Algorithms to time, comma-separated. Default: tree,rd,vhd,ring,mpi,auto, and hier
    /// where the job runs on two or more hosts of the same number (two or more) of ranks
    /// (elsewhere hier is ring or the across-hosts algorithm under another name).
    #[arg(long, value_enum, value_delimiter = ',')]
    pub algos: Vec<BenchAlgo>,
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
    /// thread, with --allreduce's choice): the algorithm plus the engine's hand-over cost.
    #[arg(long)]
    pub via_engine: bool,
}

/// `dcgan-train tune-allreduce`
#[derive(Args, Clone, Debug)]
pub struct TuneAllreduceArgs {
    #[command(flatten)]
    pub comm: CommArgs,
    /// Write the rules (CSV: ranks,min_bytes,max_bytes,algorithm) to this file.
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,
    /// Message sizes to measure, comma-separated (default: 4B to 64MiB in x2 steps).
    #[arg(long, value_delimiter = ',', value_parser = parse_message_size)]
    pub sizes: Vec<usize>,
    /// Repeat each measurement this many times and keep the median.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..))]
    pub repeats: u64,
    /// Add the new rules to FILE, replacing only the lines for this rank count.
    #[arg(long)]
    pub append: bool,
}

fn parse_message_size(s: &str) -> Result<usize, String> {
    let b = parse_bytes(s)?;
    if b % 4 != 0 {
        return Err(format!("{b} bytes is not a whole number of f32 values: use multiples of 4 bytes"));
    }
    Ok(b)
}

fn parse_fragment_bytes(s: &str) -> Result<usize, String> {
    let b = parse_bytes(s)?;
    if b % 4 != 0 {
        return Err(format!("{b} bytes is not a whole number of f32 values: use a multiple of 4 bytes (or 0)"));
    }
    Ok(b)
}

/// `60s`, `500ms`, `5m`, `60` (seconds); `0` = never.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let v: f64 = num.parse().map_err(|_| format!("'{s}' is not a duration: write e.g. 60s, 500ms or 5m"))?;
    let secs = match unit.trim() {
        "" | "s" => v,
        "ms" => v / 1000.0,
        "m" | "min" => v * 60.0,
        other => return Err(format!("unknown unit '{other}' in '{s}': use ms, s or m")),
    };
    if !secs.is_finite() || secs < 0.0 {
        return Err(format!("'{s}' is not a duration"));
    }
    if secs == 0.0 {
        return Ok(Duration::MAX);
    }
    // Past about 584 billion years a Duration overflows: that is "never" too, so say so.
    Duration::try_from_secs_f64(secs).map_err(|_| format!("'{s}' is longer than any run: use 0 for no timeout"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct T {
        #[command(flatten)]
        comm: CommArgs,
    }

    #[test]
    fn defaults_match_default_impl() {
        let parsed = T::parse_from(["x"]).comm;
        let d = CommArgs::default();
        assert_eq!(parsed.allreduce, d.allreduce);
        assert_eq!(parsed.allreduce_threshold, 8 << 10);
        assert_eq!(parsed.fragment_bytes, 1 << 20);
        assert_eq!(parsed.stall_timeout, Duration::from_secs(60));
        assert_eq!(d.fragment_bytes, 1 << 20);
    }

    #[test]
    fn bad_values_name_the_flag() {
        let e = T::try_parse_from(["x", "--allreduce", "fast"]).err().unwrap().to_string();
        assert!(e.contains("--allreduce"), "{e}");
        let e = T::try_parse_from(["x", "--allreduce-threshold", "8XB"]).err().unwrap().to_string();
        assert!(e.contains("--allreduce-threshold") && e.contains("unknown unit"), "{e}");
        let e = T::try_parse_from(["x", "--fragment-bytes", "5"]).err().unwrap().to_string();
        assert!(e.contains("--fragment-bytes"), "{e}");
        let e = T::try_parse_from(["x", "--allreduce-threshold", "1KiB", "--allreduce-tuning", "f"])
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("cannot be used with"), "{e}");
    }

    #[derive(Parser)]
    struct B {
        #[command(flatten)]
        bench: BenchAllreduceArgs,
    }

    #[test]
    fn bench_lists() {
        let b = B::parse_from(["x", "--sizes", "4B,1KiB,4MiB", "--algos", "rd,auto"]).bench;
        assert_eq!(b.sizes, vec![4, 1024, 4 << 20]);
        assert_eq!(b.algos, vec![BenchAlgo::Rd, BenchAlgo::Auto]);
        let b = B::parse_from(["x"]).bench;
        assert!(b.sizes.is_empty() && b.algos.is_empty());
        assert_eq!(default_bench_algos(false).len(), 6);
        assert!(!default_bench_algos(false).contains(&BenchAlgo::Hier));
        assert_eq!(default_bench_algos(true)[4], BenchAlgo::Hier);
        let e = B::try_parse_from(["x", "--sizes", "4B,6B"]).err().unwrap().to_string();
        assert!(e.contains("--sizes") && e.contains("multiples of 4"), "{e}");
        let e = B::try_parse_from(["x", "--algos", "rd,best"]).err().unwrap().to_string();
        assert!(e.contains("--algos"), "{e}");
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("60s"), Ok(Duration::from_secs(60)));
        assert_eq!(parse_duration("60"), Ok(Duration::from_secs(60)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("0"), Ok(Duration::MAX));
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("5h").is_err());
    }

    #[test]
    fn default_sizes_are_4b_to_64mib_by_4() {
        let s = default_sizes();
        assert_eq!(s.first(), Some(&4));
        assert_eq!(s.last(), Some(&(64 << 20)));
        assert!(s.windows(2).all(|w| w[1] == 4 * w[0]));
    }
}
