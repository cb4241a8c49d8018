//! `dcgan-train bench-allreduce`: time every algorithm over a range of message sizes on the
//! comm thread, directly on the transport (no `CommHandle` queue in between), and check every
//! result against the exact expected mean.

use crate::comm::allreduce::hierarchical::HostLayout;
use crate::comm::allreduce::select::{SelectionTable, large_message_algorithm_on};
use crate::comm::allreduce::{Algorithm, allreduce_mean, inv_ranks};
use crate::comm::handle::{first_fragment_bytes, fragments};
use crate::comm::options::{AllreduceChoice, CommOptions};
use crate::comm::transport::{CommError, TAG_BENCH, Transport};
use crate::comm::{CommConfig, WorldInfo, collectives, run_on_comm_thread, stall};
use crate::memory::ensure_fits_in_memory;
use crate::units::format_bytes;
use anyhow::Context;
use rand::SeedableRng;
use rand::seq::SliceRandom;
use serde::Serialize;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// What `bench-allreduce` measures.
#[derive(Clone, Debug)]
pub struct BenchOptions {
    pub comm: CommOptions,
    /// Message sizes in bytes, multiples of 4 (empty: `default_sizes`).
    pub sizes: Vec<usize>,
    /// What to time (empty: `default_bench_algos`).
    pub algos: Vec<AllreduceChoice>,
    /// Timed calls per size and algorithm (None: `default_iters`).
    pub iters: Option<u64>,
    /// Untimed calls first (None: a tenth of the timed calls, at least 2).
    pub warmup: Option<u64>,
    /// Verify every result on every rank, not only the first and last.
    pub check: bool,
    /// Also write the rows as a JSON array here.
    pub json: Option<PathBuf>,
    /// Time whole buckets through the comm thread's queue instead (`bench_engine`).
    pub via_engine: bool,
}

/// The sizes timed by default: 4 B to 64 MiB in x4 steps.
pub fn default_sizes() -> Vec<usize> {
    (0..=12).map(|k| 4usize << (2 * k)).collect()
}

/// What is timed by default; `two_levels`: the job's hosts each run the same number (two or
/// more) of ranks, so that hier is an algorithm of its own (elsewhere it is ring or the
/// across-hosts algorithm under another name).
pub fn default_bench_algos(two_levels: bool) -> Vec<AllreduceChoice> {
    Algorithm::all()
        .iter()
        .filter(|&&a| a != Algorithm::Hier || two_levels)
        .map(|&a| AllreduceChoice::Fixed(a))
        .chain([AllreduceChoice::Auto])
        .collect()
}

/// One line of the table (and one object of the JSON array).
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    pub bytes: usize,
    /// tree, rd, vhd, ring, mpi or auto.
    pub algorithm: String,
    /// The algorithm that actually ran (differs from `algorithm` for auto).
    pub selected: String,
    pub ranks: usize,
    pub fragments: usize,
    pub iters: u64,
    pub avg_us: f64,
    /// Robust to the odd call slowed by a neighbour.
    pub median_us: f64,
    pub min_us: f64,
    pub max_us: f64,
    /// GB/s (1e9 bytes per second): bytes / avg time.
    pub algbw: f64,
    /// algbw * 2(N-1)/N, the nccl-tests bus bandwidth.
    pub busbw: f64,
    /// Every checked result equal, bit for bit, to the expected mean on every rank.
    pub correct: bool,
    /// Where the ranks ran: "HxL" (H hosts of L consecutive ranks) or "mixed"; what
    /// `simulate-scaling --bench-allreduce` checks its --ranks-per-node against. None where
    /// not known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub placement: Option<String>,
}

/// Integer-valued input of rank r, element i (|x| <= 15): sums over thousands of ranks are
/// exact in f32, so every correct algorithm gives exactly `expected`.
pub fn bench_input(r: usize, i: usize) -> f32 {
    ((i * 7 + r * 13 + (i >> 10)) % 31) as f32 - 15.0
}

/// The exact mean every algorithm must produce: the integer sum times `inv_ranks(p)`.
pub fn bench_expected(p: usize, n: usize) -> Vec<f32> {
    let s = inv_ranks(p);
    (0..n).map(|i| (0..p).map(|r| bench_input(r, i) as i64).sum::<i64>() as f32 * s).collect()
}

/// Timed calls when --iters is not given: about a quarter second per row, 10 to 10000.
pub fn default_iters(bytes: usize) -> u64 {
    let est_s = 1e-6 + bytes as f64 / 2e9;
    (0.25 / est_s).clamp(10.0, 10_000.0) as u64
}

/// What to time: one algorithm (cut into the engine's fragments), `mpi` on the whole message,
/// or `auto`'s pick for the fragment size.
#[derive(Clone, Debug)]
pub struct Case {
    pub name: String,
    pub algorithm: Algorithm,
    pub fragment_bytes: usize,
}

impl Case {
    pub fn new(algo: AllreduceChoice, table: &SelectionTable, bytes: usize, fragment_bytes: usize) -> Case {
        let fixed = |a: Algorithm| Case {
            name: a.name().into(),
            algorithm: a,
            // The library's MPI_Allreduce is the baseline as a user would call it: one call.
            fragment_bytes: if a == Algorithm::Mpi { 0 } else { fragment_bytes },
        };
        match algo {
            AllreduceChoice::Fixed(a) => fixed(a),
            AllreduceChoice::Auto => {
                let frag = first_fragment_bytes(bytes, fragment_bytes);
                Case { name: "auto".into(), algorithm: table.pick(frag), fragment_bytes }
            }
        }
    }
}

/// Per-call seconds of one case (the slowest rank's time for each call) and whether every
/// rank's checked results were exact.
pub struct Timings {
    pub seconds: Vec<f64>,
    pub correct: bool,
}

/// Time `iters` rounds over all `cases` on `input` (after `warmup` untimed rounds). The cases
/// take turns call by call (in a shuffled order each round), so that a noisy neighbour on a
/// shared machine slows them alike.
/// The input is copied in before every call (outside the timing), as backward would have just
/// written the gradient. The first and last results (all of them with `check_every`) are
/// compared bit for bit with `expected`.
pub fn time_cases(
    t: &mut dyn Transport,
    cases: &[Case],
    input: &[f32],
    expected: &[f32],
    iters: u64,
    warmup: u64,
    check_every: bool,
) -> Result<Vec<Timings>, CommError> {
    let frags: Vec<_> = cases.iter().map(|c| fragments(input.len(), c.fragment_bytes)).collect();
    let mut data = input.to_vec();
    let call = |t: &mut dyn Transport, k: usize, data: &mut [f32]| -> Result<(), CommError> {
        for f in &frags[k] {
            allreduce_mean(t, cases[k].algorithm, &mut data[f.clone()], TAG_BENCH)?;
        }
        Ok(())
    };
    for _ in 0..warmup {
        for k in 0..cases.len() {
            data.copy_from_slice(input);
            call(t, k, &mut data)?;
        }
    }
    collectives::barrier(t, TAG_BENCH)?;
    let mut times = vec![Vec::with_capacity(iters as usize + 1); cases.len()];
    let mut wrong = vec![0usize; cases.len()];
    // A fresh order every round, the same on every rank (same seed): a call that leaves the
    // ranks out of step (an asymmetric algorithm finishes earlier on some ranks) delays the
    // next call, and that cost must not always land on the same neighbour.
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0x5eed);
    let mut order: Vec<usize> = (0..cases.len()).collect();
    for i in 0..iters {
        order.shuffle(&mut rng);
        for &k in &order {
            data.copy_from_slice(input);
            let t0 = Instant::now();
            call(t, k, &mut data)?;
            times[k].push(t0.elapsed().as_secs_f64());
            if check_every || i == 0 || i + 1 == iters {
                wrong[k] += data.iter().zip(expected).filter(|(a, b)| a.to_bits() != b.to_bits()).count();
            }
        }
    }
    // One reduction for everything: per-call maxima over ranks, and any wrong result.
    let mut flat = Vec::with_capacity(cases.len() * (iters as usize + 1));
    for k in 0..cases.len() {
        flat.extend_from_slice(&times[k]);
        flat.push(wrong[k] as f64);
    }
    let maxed = collectives::max_f64(t, &flat, TAG_BENCH)?;
    Ok(maxed
        .chunks_exact(iters as usize + 1)
        .map(|c| Timings { seconds: c[..iters as usize].to_vec(), correct: c[iters as usize] == 0.0 })
        .collect())
}

/// Median of a non-empty slice.
pub fn median(x: &[f64]) -> f64 {
    let mut v = x.to_vec();
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    if v.len() % 2 == 1 { v[m] } else { (v[m - 1] + v[m]) / 2.0 }
}

/// End the job over a failed collective (a benchmark cannot carry on without a rank).
pub(crate) fn fatal(t: &mut dyn Transport, e: CommError, timeout: std::time::Duration) -> ! {
    let msg = match &e {
        CommError::Aborted { code } => t.abort(*code),
        CommError::Stalled { .. } => stall::report(t, &e, timeout),
        other => format!("rank {}: communication failed: {other}", t.rank()),
    };
    eprintln!("{msg}");
    t.abort(stall::STALL_EXIT_CODE)
}

fn header(world: &WorldInfo, cfg: &CommConfig, table: &SelectionTable, iters: &str) -> String {
    let hosts = world.host_count();
    format!(
        "# dcgan-train bench-allreduce: {} rank(s) on {} host(s) ({}), {}, thread level {}\n\
         # hand-written algorithms run on fragments of {} (--fragment-bytes), as in training; \
         mpi = one MPI_Allreduce over the whole message\n\
         # auto = {} [{}]\n\
         # per call: the slowest rank's time; avg/median/min/max over {iters} timed calls, the algorithms taking turns; \
         algbw = bytes/avg; busbw = algbw * 2(N-1)/N (nccl-tests)\n\
         # {:>10}  {:<10} {:>6} {:>10} {:>10} {:>10} {:>10} {:>11} {:>11}  correct",
        world.size,
        hosts,
        world.hosts.first().map(String::as_str).unwrap_or("?"),
        world.mpi_library,
        world.thread_level,
        if cfg.fragment_bytes == 0 { "any size (not cut)".to_string() } else { format_bytes(cfg.fragment_bytes) },
        cfg.policy.describe(),
        table.describe(),
        "bytes",
        "algorithm",
        "calls",
        "avg_us",
        "median_us",
        "min_us",
        "max_us",
        "algbw_GB/s",
        "busbw_GB/s",
    )
}

pub fn make_row(case: &Case, tm: &Timings, bytes: usize, p: usize, iters: u64, placement: &str) -> Row {
    let x = &tm.seconds;
    let avg = x.iter().sum::<f64>() / x.len() as f64;
    let min = x.iter().copied().fold(f64::INFINITY, f64::min);
    let max = x.iter().copied().fold(0.0, f64::max);
    let algbw = if avg > 0.0 { bytes as f64 / avg / 1e9 } else { 0.0 };
    Row {
        bytes,
        algorithm: case.name.clone(),
        selected: case.algorithm.name().into(),
        ranks: p,
        fragments: fragments(bytes / 4, case.fragment_bytes).len(),
        iters,
        avg_us: avg * 1e6,
        median_us: median(x) * 1e6,
        min_us: min * 1e6,
        max_us: max * 1e6,
        algbw,
        busbw: algbw * 2.0 * (p as f64 - 1.0) / p as f64,
        correct: tm.correct,
        placement: Some(placement.to_string()),
    }
}

pub fn format_row(r: &Row) -> String {
    let name = if r.algorithm == r.selected { r.algorithm.clone() } else { format!("{}({})", r.algorithm, r.selected) };
    format!(
        "  {:>10}  {:<10} {:>6} {:>10.2} {:>10.2} {:>10.2} {:>10.2} {:>11.3} {:>11.3}  {}",
        r.bytes,
        name,
        r.iters,
        r.avg_us,
        r.median_us,
        r.min_us,
        r.max_us,
        r.algbw,
        r.busbw,
        if r.correct { "yes" } else { "NO" }
    )
}

/// Copies of the largest message a benchmark holds at once (its input, the message, the
/// expected result, the transport's receive slots), for the memory check.
const MESSAGE_COPIES: u64 = 4;

/// One rank has no one to exchange with: every algorithm is a copy and its times measure
/// nothing, so a benchmark on one rank (without mpiexec, or `mpiexec -n 1`) refuses to run.
pub(crate) fn ensure_two_ranks(ranks: usize, command: &str) -> anyhow::Result<()> {
    if ranks < 2 {
        anyhow::bail!(
            "{command} needs two or more ranks (one rank measures nothing): run it as mpiexec -n 2 dcgan-train {command}"
        );
    }
    Ok(())
}

/// Rank 0's `flag PATH` can be written, checked before anything is timed, or every rank
/// returns an error (see `collectives::agree`): a benchmark of minutes should not end in a
/// file it cannot write. Collective.
pub(crate) fn agree_root_can_write<T: Transport + ?Sized>(
    t: &mut T,
    path: Option<&Path>,
    flag: &str,
) -> anyhow::Result<()> {
    let writable = match path {
        Some(path) if t.rank() == 0 => crate::report::check_writable(path, flag),
        _ => Ok(()),
    };
    collectives::agree(t, writable, TAG_BENCH)
}

/// An error naming `command --sizes` where the largest size would not fit in this host's
/// memory (an allocation that large aborts the process instead of failing).
pub(crate) fn ensure_sizes_fit(sizes: &[usize], command: &str) -> anyhow::Result<()> {
    let most = sizes.iter().max().copied().unwrap_or(0) as u64;
    ensure_fits_in_memory(MESSAGE_COPIES * most, &format!("{command} --sizes"))
}

pub fn run(args: BenchOptions) -> anyhow::Result<()> {
    args.comm.wire.require_f32("bench-allreduce")?;
    if args.via_engine {
        let (rows, rank) = crate::comm::bench_engine::run(&args)?;
        return finish_rows(args.json.as_deref(), args.check, rows, rank == 0);
    }
    let cfg = CommConfig::from_options(&args.comm)?;
    let sizes = if args.sizes.is_empty() { default_sizes() } else { args.sizes.clone() };
    ensure_sizes_fit(&sizes, "bench-allreduce")?;
    let json = args.json.clone();
    let check = args.check;
    let options = format!("{args:?}");
    let rows = run_on_comm_thread(cfg.stall_timeout, move |t, world| {
        collectives::same_options(t, "bench-allreduce", &options, TAG_BENCH)?;
        ensure_two_ranks(t.size(), "bench-allreduce")?;
        agree_root_can_write(t, args.json.as_deref(), "--json")?;
        let table = collectives::agree(t, cfg.policy.table_on(t.size(), t.hosts()), TAG_BENCH)?;
        let iters_note = match args.iters {
            Some(n) => n.to_string(),
            None => "10..10000 (by size)".into(),
        };
        if world.rank == 0 {
            println!("{}", header(world, &cfg, &table, &iters_note));
        }
        let p = t.size();
        if crate::fault_hooks::delayed_bench_rank(world.rank) {
            let nap = cfg.stall_timeout.saturating_mul(20);
            std::thread::sleep(nap.min(std::time::Duration::from_secs(60)));
        }
        // hier only where it is two levels: elsewhere it is ring or the across-hosts
        // algorithm under another name.
        let algos = if args.algos.is_empty() {
            default_bench_algos(large_message_algorithm_on(p, t.hosts()) == Algorithm::Hier)
        } else {
            args.algos.clone()
        };
        let placement = HostLayout::new(t.hosts(), p).placement();
        let mut rows = Vec::new();
        for &bytes in &sizes {
            let n = bytes / 4;
            let input: Vec<f32> = (0..n).map(|i| bench_input(t.rank(), i)).collect();
            let expected = bench_expected(p, n);
            let iters = args.iters.unwrap_or_else(|| default_iters(bytes));
            let warmup = args.warmup.unwrap_or((iters / 10).max(2));
            let cases: Vec<Case> = algos.iter().map(|&a| Case::new(a, &table, bytes, cfg.fragment_bytes)).collect();
            t.activity().enter(&format!("bench-allreduce at {bytes} bytes"));
            let timings = time_cases(t, &cases, &input, &expected, iters, warmup, check)
                .unwrap_or_else(|e| fatal(t, e, cfg.stall_timeout));
            t.activity().leave();
            for (case, tm) in cases.iter().zip(timings) {
                let row = make_row(case, &tm, bytes, p, iters, &placement);
                if world.rank == 0 {
                    println!("{}", format_row(&row));
                    let _ = std::io::stdout().flush();
                }
                rows.push(row);
            }
        }
        Ok((rows, world.rank))
    })?;
    let (rows, rank) = rows;
    finish_rows(json.as_deref(), check, rows, rank == 0)
}

/// Write the JSON (rank 0) and fail the run if --check found a wrong result (every rank).
fn finish_rows(json: Option<&std::path::Path>, check: bool, rows: Vec<Row>, rank0: bool) -> anyhow::Result<()> {
    if let (Some(path), true) = (json, rank0) {
        let text = serde_json::to_string_pretty(&rows)? + "\n";
        crate::report::write_atomically(path, |f| Ok(f.write_all(text.as_bytes())?))
            .with_context(|| format!("cannot write --json {}", path.display()))?;
    }
    let wrong: Vec<String> =
        rows.iter().filter(|r| !r.correct).map(|r| format!("{} at {} bytes", r.algorithm, r.bytes)).collect();
    if check && !wrong.is_empty() {
        anyhow::bail!(
            "bench-allreduce --check: {} of {} results differ from the expected mean: {}",
            wrong.len(),
            rows.len(),
            wrong.join(", ")
        );
    }
    Ok(())
}
