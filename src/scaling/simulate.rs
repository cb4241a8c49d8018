//! `dcgan-train simulate-scaling`: replay one run's steps at other node counts against the cost
//! model and print, per algorithm and node count, the predicted step time, the MPI paper's
//! eq. (1) weak-scaling speedup, the communication per step and how much of it is hidden.

use super::comm_cpu::{CommCpu, SharedCores, calibrate};
use super::core_share::ShareSource;
use super::cost::{Choice, allreduce_seconds_on, bucket_bytes_moved, bucket_time};
use super::links::{LinkOptions, MAX_RANKS, check_times, links_of};
use super::program::StepProgram;
use super::replay::{CollectiveCost, Outcome, WARM_STEPS, replay};
use super::run_info::{RunInfo, recorded_steps};
use super::two_level::{Links, Placement};
use crate::comm::allreduce::select::Policy;
use crate::comm::{Algorithm, AllreduceChoice, Wire};
use anyhow::{Result, bail};
use serde::Serialize;
use std::path::{Path, PathBuf};

/// What `simulate-scaling` replays, and on which links.
#[derive(Clone, Debug)]
pub struct SimulateOptions {
    /// summary.json of the run whose step is replayed.
    pub summary: Option<PathBuf>,
    /// `bench-allreduce --json` files to compare with the cost model.
    pub bench_allreduce: Vec<PathBuf>,
    /// The run's trace (None: the one its summary records).
    pub trace: Option<PathBuf>,
    pub nodes: Vec<u64>,
    pub links: LinkOptions,
    /// Ranks on each node, in blocks.
    pub ranks_per_node: u64,
    /// How values travel in the prediction (None: as the run's).
    pub wire: Option<Wire>,
    /// Compute lost per byte moved beside compute, for a rank with a core of its own.
    pub comm_cpu_ns_per_byte: Option<f64>,
    /// The fraction of wire speed a collective keeps beside compute.
    pub comm_speed_beside_compute: Option<f64>,
    /// Two summaries (with the exchange, with --no-exchange) to measure the two above from.
    pub comm_cpu_from: Vec<PathBuf>,
    pub algorithms: Vec<AllreduceChoice>,
    /// Steps replayed back to back.
    pub steps: u64,
    /// The rank whose compute track is replayed.
    pub trace_rank: usize,
    /// Every rank replays the same recorded step at the same time.
    pub identical_ranks: bool,
    /// Also write the predictions as JSON here.
    pub json: Option<PathBuf>,
}

/// Bytes of the per-step metrics allreduce (6 f32).
const METRICS_BYTES: usize = 24;

#[derive(Clone, Debug, Serialize)]
pub struct BucketRow {
    pub bucket: String,
    pub bytes: usize,
    pub algorithm: String,
    pub ms: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Row {
    pub nodes: u64,
    /// nodes x --ranks-per-node: eq. (1)'s N.
    pub ranks: u64,
    pub algorithm: String,
    pub step_ms: f64,
    pub speedup_eq1: f64,
    pub efficiency: f64,
    pub comm_ms_per_step: f64,
    pub exposed_comm_ms_per_step: f64,
    /// Of the exposed time, the part spent waiting for the slowest rank to hand a bucket over.
    pub slowest_rank_ms_per_step: f64,
    pub hidden_comm_fraction: f64,
    /// Compute time per step lost to the exchange's CPU (in `step_ms`; 0 without a CPU cost).
    pub comm_cpu_ms_per_step: f64,
    /// Whether the collectives' lengths settled (always, at full speed beside compute).
    pub comm_lengths_settled: bool,
    pub buckets: Vec<BucketRow>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Prediction {
    pub summary: String,
    pub trace: String,
    /// The rank whose compute track was replayed (`--trace-rank`).
    pub trace_rank: usize,
    pub replayed_steps: Vec<u64>,
    pub compute_ms_per_step: f64,
    pub measured_ms_per_step: f64,
    pub measured_ranks: u64,
    pub alpha_us: f64,
    pub beta_ns_per_byte: f64,
    pub gamma_ns_per_byte: f64,
    /// Ranks on each node, in blocks; above 1 the messages inside a node take the intra link.
    pub ranks_per_node: u64,
    pub intra_alpha_us: f64,
    pub intra_beta_ns_per_byte: f64,
    /// How gradient values travel in the prediction.
    pub wire: Wire,
    /// Whether every rank replayed the same step at the same time (`--identical-ranks`).
    pub identical_ranks: bool,
    /// Compute lost per byte a rank moves each way (0: wire time only), for a rank with a
    /// core of its own.
    pub comm_cpu_ns_per_byte: f64,
    /// The fraction of wire speed a collective keeps beside compute (1: all of it), for a rank
    /// with a core of its own.
    pub comm_speed_beside_compute: f64,
    /// The share of a core each rank of the replayed run had, which scales the two above
    /// (`core_share`), and where it came from: measured, run_had_exchange, not_recorded, or
    /// not_used (the wire-only replay).
    pub core_share: f64,
    pub core_share_from: ShareSource,
    /// Where it was measured (`--comm-cpu-from`), if it was.
    pub comm_cpu_from: Option<CommCpu>,
    pub rows: Vec<Row>,
}

/// Which recorded step each rank replays as its step k (`[rank][k]`). Rank 0 takes them in
/// recorded order; every other rank takes each recorded step once per pass over them, in an
/// order of its own (seeded by the rank), so that at any moment the ranks run different steps
/// with the same mean compute, as the ranks of a real job do: a step whose compute ran long on
/// one rank makes the others wait. `identical`: every rank as rank 0, so no rank ever waits
/// for another.
pub fn step_order(recorded: usize, ranks: usize, steps: usize, identical: bool) -> Vec<Vec<usize>> {
    use rand::SeedableRng;
    use rand::seq::SliceRandom;
    (0..ranks)
        .map(|r| {
            if r == 0 || identical {
                return (0..steps).map(|k| k % recorded).collect();
            }
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(r as u64);
            // The passes start with the counted steps, so that each rank counts every
            // recorded step equally often.
            let mut order: Vec<usize> = (0..WARM_STEPS.min(steps)).map(|k| k % recorded).collect();
            while order.len() < steps {
                let mut pass: Vec<usize> = (0..recorded).collect();
                pass.shuffle(&mut rng);
                order.extend(pass);
            }
            order.truncate(steps);
            order
        })
        .collect()
}

fn choice_of(choice: AllreduceChoice, threshold: usize, place: Placement) -> Result<Choice> {
    Ok(match choice {
        // As the comm thread picks from the hosts it finds: hier where nodes run several ranks.
        AllreduceChoice::Auto => {
            Choice::Auto(Policy::Threshold(threshold).table_on(place.ranks(), &place.host_numbers())?)
        }
        AllreduceChoice::Fixed(Algorithm::Mpi) => {
            bail!(
                "--algorithms: the cost model has no model of the MPI library's allreduce: use auto, tree, rd, vhd, ring or hier"
            )
        }
        AllreduceChoice::Fixed(a) => Choice::Fixed(a),
    })
}

/// The recorded steps and how they are replayed.
pub struct Replay<'a> {
    pub programs: &'a [StepProgram],
    /// Steps per replay, warm-up included.
    pub steps: usize,
    /// Seconds per step of one rank alone (eq. (1)'s t_1).
    pub t1: f64,
    /// `--identical-ranks`.
    pub identical: bool,
    /// What sharing cores with compute costs the exchange and the compute.
    pub shared: SharedCores,
}

/// Most rounds of the fixed point between the collectives' lengths and how much of them
/// runs beside compute.
const MAX_ROUNDS: usize = 50;
/// The largest share of the way to its target a length moves in one round.
const MAX_GAIN: f64 = 0.5;
/// How far (relative) from its target a length may be at the fixed point.
const SETTLED: f64 = 1e-4;

/// The prediction for one algorithm at `nodes` nodes of `ranks_per_node` ranks each.
pub fn predict(
    run: &RunInfo,
    rp: &Replay,
    links: &Links,
    algo: AllreduceChoice,
    nodes: u64,
    ranks_per_node: u64,
) -> Result<Row> {
    let place = Placement { hosts: nodes as usize, ranks_per_host: ranks_per_node as usize };
    let p = place.ranks() as u64;
    let choice = choice_of(algo, run.threshold, place)?;
    let mut buckets = Vec::new();
    let mut costs = Vec::new();
    for b in &run.buckets {
        let (a, s) = bucket_time(&choice, b.bytes, run.fragment_bytes, place, links, run.wire);
        buckets.push(BucketRow { bucket: b.label.clone(), bytes: b.bytes, algorithm: a.name().into(), ms: s * 1e3 });
        let cpu_s = match rp.shared.cpu_ns_per_byte_here() {
            0.0 => 0.0,
            c => c * 1e-9 * bucket_bytes_moved(&choice, b.bytes, run.fragment_bytes, place, run.wire),
        };
        costs.push(CollectiveCost { wire_s: s, cpu_s });
    }
    // The cost model's times, before any lengthening beside compute.
    let model_s: Vec<f64> = costs.iter().map(|c| c.wire_s).collect();
    let metrics_algo = match &choice {
        Choice::Fixed(a) => *a,
        Choice::Auto(t) => t.pick(METRICS_BYTES),
    };
    let metrics_s = allreduce_seconds_on(metrics_algo, METRICS_BYTES as f64, place, links, Wire::F32).unwrap_or(0.0);
    let order = step_order(rp.programs.len(), p as usize, rp.steps, rp.identical);
    // The metrics' 24 bytes cost no CPU worth counting (and the calibration leaves them out).
    let metrics = CollectiveCost::wire_only(metrics_s);
    let run_with = |costs: &[CollectiveCost]| {
        replay(rp.programs, &|r, k| order[r][k], p as usize, costs, metrics, rp.steps, p > 1)
    };
    let mut o: Outcome = run_with(&costs);
    // A collective slowed beside compute lasts longer, which changes how much of it runs
    // beside compute: iterate to the fixed point, where each bucket's length is the one the
    // share of it beside compute in the same replay gives. Each round moves a length part of
    // the way there. Undamped, the lengths can swing between two states at a thousand nodes
    // and more; even damped they can (4 ranks on half a core each, where a longer collective
    // runs less beside compute), so a bucket whose step turns back halves its gain (the fixed
    // point lies between its last two lengths), and one that keeps its direction earns gain
    // back. Settled means the replay's lengths are its own targets, whatever the gains.
    let speed = rp.shared.speed_here();
    let mut settled = speed >= 1.0 || p == 1;
    let rounds = if settled { 0 } else { MAX_ROUNDS };
    let mut gains = vec![MAX_GAIN; costs.len()];
    let mut last_steps = vec![0.0f64; costs.len()];
    for _ in 0..rounds {
        let targets: Vec<f64> = model_s.iter().zip(&o.beside_compute).map(|(w, h)| w / (speed * h + 1.0 - h)).collect();
        let off = costs.iter().zip(&targets).map(|(c, t)| (t - c.wire_s).abs() / t.max(1e-12)).fold(0.0, f64::max);
        if off < SETTLED {
            settled = true;
            break;
        }
        for (b, (c, target)) in costs.iter_mut().zip(targets).enumerate() {
            let step = target - c.wire_s;
            if step * last_steps[b] < 0.0 {
                gains[b] *= 0.5;
            } else if step * last_steps[b] > 0.0 {
                gains[b] = (gains[b] * 1.25).min(MAX_GAIN);
            }
            last_steps[b] = step;
            c.wire_s += gains[b] * step;
        }
        o = run_with(&costs);
    }
    let speedup = crate::record::summary::weak_scaling_speedup(rp.t1, run.batch, o.step_s, run.batch, p as f64);
    Ok(Row {
        nodes,
        ranks: p,
        algorithm: algo.name().to_string(),
        step_ms: o.step_s * 1e3,
        speedup_eq1: speedup,
        efficiency: speedup / p as f64,
        comm_ms_per_step: o.comm_s * 1e3,
        exposed_comm_ms_per_step: o.exposed_s * 1e3,
        slowest_rank_ms_per_step: o.slowest_rank_s * 1e3,
        hidden_comm_fraction: o.hidden_fraction(),
        comm_cpu_ms_per_step: o.cpu_s * 1e3,
        comm_lengths_settled: settled,
        buckets,
    })
}

pub fn simulate(args: &SimulateOptions, summary: &Path) -> Result<Prediction> {
    let mut run = RunInfo::from_summary(summary)?;
    run.wire = args.wire.unwrap_or(run.wire);
    for &a in &args.algorithms {
        choice_of(a, run.threshold, Placement { hosts: 2, ranks_per_host: 1 })?;
    }
    let trace = match (&args.trace, &run.trace) {
        (Some(t), _) => t.clone(),
        (None, Some(t)) => t.clone(),
        (None, None) => bail!(
            "{} was written by a run without --trace: pass --trace FILE, or train with --trace FILE --trace-steps 6",
            summary.display()
        ),
    };
    // The replay keeps every rank's state, so its time and memory grow with the ranks: the
    // one-rank-per-node limit (--nodes 1048576) bounds nodes of several ranks too (and where
    // collectives slow beside compute, the replay runs up to MAX_ROUNDS times until their
    // lengths settle).
    if let Some(&too_many) = args.nodes.iter().find(|&&p| p * args.ranks_per_node > MAX_RANKS) {
        bail!(
            "--nodes {too_many} x --ranks-per-node {} is {} ranks: the replay goes up to {MAX_RANKS}; \
             give fewer nodes",
            args.ranks_per_node,
            too_many * args.ranks_per_node
        );
    }
    let links = links_of(&args.links, args.ranks_per_node)?;
    let (shared, comm_cpu_from, core_share_from) = shared_cores_of(args, &links, run.core_share)?;
    let (programs, steps, t1) =
        recorded_steps(&trace, args.trace_rank, &run.buckets, args.steps, args.identical_ranks)?;
    let rp = Replay { programs: &programs, steps, t1, identical: args.identical_ranks, shared };
    let mut rows = Vec::new();
    for &algo in &args.algorithms {
        for &p in &args.nodes {
            let row = predict(&run, &rp, &links, algo, p, args.ranks_per_node)?;
            if !row.comm_lengths_settled {
                eprintln!(
                    "simulate-scaling: {algo} at {p} nodes: the collectives' lengths did not settle in {MAX_ROUNDS} \
                     rounds; the row is the last round's"
                );
            }
            rows.push(row);
        }
    }
    Ok(Prediction {
        summary: summary.display().to_string(),
        trace: trace.display().to_string(),
        trace_rank: args.trace_rank,
        replayed_steps: programs.iter().map(|p| p.step).collect(),
        compute_ms_per_step: t1 * 1e3,
        measured_ms_per_step: run.ms_per_step,
        measured_ranks: run.ranks,
        alpha_us: links.between.alpha * 1e6,
        beta_ns_per_byte: links.between.beta * 1e9,
        gamma_ns_per_byte: links.between.gamma * 1e9,
        ranks_per_node: args.ranks_per_node,
        intra_alpha_us: links.within.alpha * 1e6,
        intra_beta_ns_per_byte: links.within.beta * 1e9,
        wire: run.wire,
        identical_ranks: args.identical_ranks,
        comm_cpu_ns_per_byte: shared.cpu_ns_per_byte,
        comm_speed_beside_compute: shared.comm_speed_beside_compute,
        core_share: shared.core_share,
        core_share_from,
        comm_cpu_from,
        rows,
    })
}

/// --comm-cpu-ns-per-byte and --comm-speed-beside-compute, or both measured from
/// --comm-cpu-from's two runs, or none of either.
/// `core_share`: the replayed run's share of a core, which the figures are scaled by; not
/// used (1) by the wire-only replay, which has no figures to scale.
fn shared_cores_of(
    args: &SimulateOptions,
    links: &Links,
    (core_share, share_from): (f64, ShareSource),
) -> Result<(SharedCores, Option<CommCpu>, ShareSource)> {
    match &args.comm_cpu_from[..] {
        [] => {
            let ns = args.comm_cpu_ns_per_byte.unwrap_or(0.0);
            check_times(&[("--comm-cpu-ns-per-byte", ns)])?;
            let speed = args.comm_speed_beside_compute.unwrap_or(1.0);
            if !(speed > 0.0 && speed <= 1.0) {
                bail!(
                    "--comm-speed-beside-compute {speed} is not a fraction of wire speed: give one above 0, at most 1"
                );
            }
            if ns == 0.0 && speed == 1.0 {
                return Ok((SharedCores::NONE, None, ShareSource::NotUsed));
            }
            Ok((SharedCores { cpu_ns_per_byte: ns, comm_speed_beside_compute: speed, core_share }, None, share_from))
        }
        [with, without] => {
            let mut c = calibrate(with, without, links)?;
            c.comm_speed_beside_compute =
                super::speed_fit::fit_speed(&c, without, links, args.steps, args.identical_ranks)?;
            let shared = SharedCores {
                cpu_ns_per_byte: c.ns_per_byte,
                comm_speed_beside_compute: c.comm_speed_beside_compute,
                core_share,
            };
            Ok((shared, Some(c), share_from))
        }
        files => bail!(
            "--comm-cpu-from takes two summary.json files, WITH,WITHOUT (the exchange overlapped, then --no-exchange), \
             not {}",
            files.len()
        ),
    }
}
