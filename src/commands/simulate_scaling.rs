//! `dcgan-train simulate-scaling`: replay a run's trace against the allreduce cost model at
//! other node counts, and compare `bench-allreduce` rows with the model.

use crate::comm::{Algorithm, AllreduceChoice, Wire};
use crate::scaling::links::{LinkOptions, links_of};
use crate::scaling::run_info::RunInfo;
use crate::scaling::simulate::{SimulateOptions, simulate};
use crate::scaling::{compare, prediction_table};
use anyhow::{Context, Result, bail};
use clap::Args;
use serde_json::Value;
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
    pub wire: Option<Wire>,
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
    /// Algorithms to predict, comma-separated: auto, tree, rd, vhd, ring, hier (the cost
    /// model has no model of mpi).
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

/// An algorithm the cost model can replay, by name; one line naming the choices otherwise
/// (read here rather than by clap, whose errors take several lines).
fn modelled_algorithm(name: &str) -> Result<AllreduceChoice> {
    match <AllreduceChoice as clap::ValueEnum>::from_str(name, false) {
        Ok(AllreduceChoice::Fixed(Algorithm::Mpi)) | Err(_) => {
            bail!("--algorithms: unknown or unmodelled algorithm '{name}': use auto, tree, rd, vhd, ring or hier")
        }
        Ok(a) => Ok(a),
    }
}

impl TryFrom<SimulateScalingArgs> for SimulateOptions {
    type Error = anyhow::Error;
    fn try_from(a: SimulateScalingArgs) -> Result<SimulateOptions> {
        Ok(SimulateOptions {
            summary: a.summary,
            bench_allreduce: a.bench_allreduce,
            trace: a.trace,
            nodes: a.nodes,
            links: LinkOptions {
                links: a.links,
                alpha: a.alpha,
                beta: a.beta,
                gamma: a.gamma,
                intra_links: a.intra_links,
                intra_alpha: a.intra_alpha,
                intra_beta: a.intra_beta,
            },
            ranks_per_node: a.ranks_per_node,
            wire: a.wire,
            comm_cpu_ns_per_byte: a.comm_cpu_ns_per_byte,
            comm_speed_beside_compute: a.comm_speed_beside_compute,
            comm_cpu_from: a.comm_cpu_from,
            algorithms: a.algorithms.iter().map(|n| modelled_algorithm(n)).collect::<Result<_>>()?,
            steps: a.steps,
            trace_rank: a.trace_rank,
            identical_ranks: a.identical_ranks,
            json: a.json,
        })
    }
}

pub fn run(args: SimulateScalingArgs) -> Result<()> {
    let args = SimulateOptions::try_from(args)?;
    let mut out = serde_json::Map::new();
    if !args.bench_allreduce.is_empty() {
        let links = links_of(&args.links, args.ranks_per_node)?;
        let mut rows = Vec::new();
        for f in &args.bench_allreduce {
            rows.extend(compare::compare_file(f, &links, args.ranks_per_node as usize)?);
        }
        let (l, w) = (links.between, links.within);
        let intra = if args.ranks_per_node > 1 {
            format!(
                "; {} ranks per node, {:.2} us and {:.3} ns/B inside one",
                args.ranks_per_node,
                w.alpha * 1e6,
                w.beta * 1e9
            )
        } else {
            String::new()
        };
        println!(
            "Measured allreduce times against the cost model (alpha {:.2} us, beta {:.3} ns/B, gamma {:.3} ns/B{intra}):\n",
            l.alpha * 1e6,
            l.beta * 1e9,
            l.gamma * 1e9
        );
        print!("{}", compare::markdown(&rows));
        out.insert("allreduce".into(), serde_json::to_value(&rows)?);
    }
    if let Some(summary) = &args.summary {
        if !args.bench_allreduce.is_empty() {
            println!();
        }
        let pred = simulate(&args, summary)?;
        let run = RunInfo::from_summary(summary)?;
        print!("{}", prediction_table::markdown(&pred, run.fragment_bytes));
        out.insert("prediction".into(), serde_json::to_value(&pred)?);
    }
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&Value::Object(out))? + "\n")
            .with_context(|| format!("cannot write --json {}", path.display()))?;
    }
    Ok(())
}
