//! Command-line options of `simulate-scaling` (the cost-model replay of a run at other node
//! counts) and `ping-pong` (alpha, beta and gamma of the links, for the model).

use crate::cli::size::parse_bytes;
use clap::Args;
use std::path::PathBuf;

/// `dcgan-train simulate-scaling`
#[derive(Args, Clone, Debug)]
pub struct SimulateScalingArgs {
    /// summary.json of the run whose step is replayed (its buckets, batch and options).
    #[arg(long, value_name = "FILE", required_unless_present = "bench_allreduce")]
    pub summary: Option<PathBuf>,
    /// Instead of (or besides) the replay: compare the rows of `bench-allreduce --json FILE`
    /// files with the cost model (comma-separated files).
    #[arg(long, value_name = "FILE", value_delimiter = ',')]
    pub bench_allreduce: Vec<PathBuf>,
    /// The run's Chrome trace, with the per-layer compute times (default: the --trace the run
    /// was started with, as recorded in its summary).
    #[arg(long, value_name = "FILE")]
    pub trace: Option<PathBuf>,
    /// Node counts, comma-separated (each runs --ranks-per-node ranks).
    #[arg(long, value_delimiter = ',', value_parser = clap::value_parser!(u64).range(1..=1_048_576),
          default_value = "1,2,4,8,16,32,64,128,256,512,1024")]
    pub nodes: Vec<u64>,
    /// The links' constants from `dcgan-train ping-pong --json FILE`; --alpha, --beta and
    /// --gamma override single values.
    #[arg(long, value_name = "FILE")]
    pub links: Option<PathBuf>,
    /// Latency per message in microseconds (default 15, or from --links).
    #[arg(long, value_name = "US")]
    pub alpha: Option<f64>,
    /// Nanoseconds per byte sent (default 8 = 1 Gbit/s, or from --links).
    #[arg(long, value_name = "NS_PER_BYTE")]
    pub beta: Option<f64>,
    /// Nanoseconds per byte reduced (default: measured on this machine at start, or from
    /// --links).
    #[arg(long, value_name = "NS_PER_BYTE")]
    pub gamma: Option<f64>,
    /// Ranks on each node, placed in blocks (as mpiexec fills a host's slots). Above 1, the
    /// messages between ranks of one node take the --intra link and the ranks of a node share
    /// its network link, so flat algorithms pay for sending a node's bytes once per rank and
    /// `hier` (auto's choice there) is modelled as it runs. Also applies to --bench-allreduce.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=1024))]
    pub ranks_per_node: u64,
    /// The link between two ranks of one node: `mpiexec -n 2 dcgan-train ping-pong --json FILE`
    /// run on one node; --intra-alpha and --intra-beta override single values.
    #[arg(long, value_name = "FILE")]
    pub intra_links: Option<PathBuf>,
    /// Latency per message between ranks of one node, in microseconds (default 1, or from
    /// --intra-links).
    #[arg(long, value_name = "US")]
    pub intra_alpha: Option<f64>,
    /// Nanoseconds per byte between ranks of one node (default 0.1 = 10 GB/s, or from
    /// --intra-links).
    #[arg(long, value_name = "NS_PER_BYTE")]
    pub intra_beta: Option<f64>,
    /// How gradient values travel in the prediction: f32, or bf16 (half the bytes). Default:
    /// as the run travelled (its summary's `--wire`), so an f32 run can be asked about bf16.
    #[arg(long, value_enum)]
    pub wire: Option<crate::cli::comm::Wire>,
    /// Compute time a rank loses per byte it moves each way, in nanoseconds: the CPU the comm
    /// thread and the kernel's network stack take from compute where every core computes (CPU
    /// ranks). Charged for the part of each allreduce that runs beside compute. Default 0: the
    /// exchange costs wire time only, as where the comm thread has a core of its own (GPU ranks).
    /// Given for a rank with a core of its own; the replay divides it by the share of a core
    /// the --summary run's ranks had, where that run records it and had no exchange.
    #[arg(long, value_name = "NS_PER_BYTE", conflicts_with = "comm_cpu_from")]
    pub comm_cpu_ns_per_byte: Option<f64>,
    /// The fraction of its wire speed a collective keeps while compute runs beside it on the
    /// same cores (the comm thread and the kernel's receive path wait for a core), for a rank
    /// with a core of its own; multiplied by the --summary run's share of a core. Default 1.
    #[arg(long, value_name = "FRACTION", conflicts_with = "comm_cpu_from")]
    pub comm_speed_beside_compute: Option<f64>,
    /// Measure --comm-cpu-ns-per-byte and --comm-speed-beside-compute from two runs of the
    /// same ranks on the same hosts: the summary.json of one with the exchange overlapped and of
    /// one with --no-exchange (comma-separated, in that order): the compute time the exchange
    /// added per byte moved beside compute, and its comm time against the cost model's.
    #[arg(long, value_name = "WITH,WITHOUT", value_delimiter = ',')]
    pub comm_cpu_from: Vec<PathBuf>,
    /// Algorithms to predict, comma-separated: auto, tree, rd, vhd, ring, hier.
    #[arg(long, value_delimiter = ',', default_value = "auto,tree,rd,vhd,ring")]
    pub algorithms: Vec<String>,
    /// Steps replayed back to back (the first two are not counted: G's exchange runs into the
    /// next step), rounded up to whole passes over the recorded steps; more steps average
    /// over more ways the ranks' steps fall together.
    #[arg(long, default_value_t = 40, value_parser = clap::value_parser!(u64).range(4..=10_000))]
    pub steps: u64,
    /// The rank whose compute track is replayed.
    #[arg(long, default_value_t = 0)]
    pub trace_rank: usize,
    /// Every rank replays the same recorded step at the same time, so that no rank ever waits
    /// for another (by default each rank takes the recorded steps in an order of its own).
    #[arg(long)]
    pub identical_ranks: bool,
    /// Also write the predictions as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
}

/// `dcgan-train ping-pong`
#[derive(Args, Clone, Debug)]
pub struct PingPongArgs {
    /// Message sizes (multiples of 4 bytes), comma-separated.
    #[arg(long, value_delimiter = ',', value_parser = parse_size,
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
    #[arg(long, default_value = "60s", value_parser = crate::cli::comm::parse_duration)]
    pub stall_timeout: std::time::Duration,
}

fn parse_size(s: &str) -> Result<usize, String> {
    let b = parse_bytes(s)?;
    if b == 0 || b % 4 != 0 {
        return Err(format!("{b} bytes: sizes must be positive multiples of 4 bytes"));
    }
    Ok(b)
}
