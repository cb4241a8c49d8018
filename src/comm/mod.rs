//! Communication between ranks: the `Transport` (MPI or in-process channels), the hand-written
//! allreduce algorithms, the comm thread that owns MPI (`comm_thread`, driven through the
//! `CommHandle` of `handle`), and the measurements of `bench-allreduce` / `tune-allreduce`.
//!
//! MPI lives on one thread: `start` spawns the comm thread, which initializes MPI, makes every
//! MPI call and finalizes; the rest of the program talks to it through a `CommHandle`.

pub mod allreduce;
pub mod bench;
mod bench_engine;
pub mod collectives;
mod comm_thread;
pub mod cpu_clock;
pub mod handle;
pub mod onebit;
pub mod options;
pub mod reduce;
pub mod stall;
pub mod status;
pub mod transport;
pub mod tune;

pub use allreduce::Algorithm;
pub use collectives::PeerFailed;
pub use handle::{BucketDone, BucketRequest, CommHandle, HostData, Ticket};
pub use options::{AllreduceChoice, CommOptions, Wire};

use allreduce::select::{Policy, RulesFile, SelectionTable};
use anyhow::{Context, anyhow};
use comm_thread::CommThread;
use handle::Shared;
use serde::Serialize;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};
use transport::{Local, Transport, WaitPolicy};

/// Who this process is in the job.
#[derive(Clone, Debug, Serialize)]
pub struct WorldInfo {
    pub rank: usize,
    pub size: usize,
    /// From the shared-memory split (ranks on the same host).
    pub local_rank: usize,
    pub local_size: usize,
    pub hostname: String,
    /// Hostname of every rank, index = rank.
    pub hosts: Vec<String>,
    /// MPI_Get_library_version's first line, or "none (single process)".
    pub mpi_library: String,
    /// The MPI thread level granted ("multiple", "serialized", "funneled"; "none" without MPI).
    pub thread_level: String,
}

impl WorldInfo {
    /// One process, no MPI.
    pub fn single() -> WorldInfo {
        let host = hostname();
        WorldInfo {
            rank: 0,
            size: 1,
            local_rank: 0,
            local_size: 1,
            hostname: host.clone(),
            hosts: vec![host],
            mpi_library: "none (single process)".into(),
            thread_level: "none".into(),
        }
    }

    /// How many distinct hosts the ranks run on.
    pub fn host_count(&self) -> usize {
        transport::host_numbers(&self.hosts).into_iter().max().map_or(0, |h| h + 1)
    }
}

pub(crate) fn hostname() -> String {
    gethostname::gethostname().to_string_lossy().into_owned()
}

/// The comm thread's settings, built from `CommOptions`.
#[derive(Clone, Debug)]
pub struct CommConfig {
    /// How the algorithm is picked per message size.
    pub policy: Policy,
    /// Buckets are cut into fragments of at most this many bytes (0 = not cut).
    pub fragment_bytes: usize,
    /// A collective that waits longer than this ends the job (Duration::MAX = never).
    pub stall_timeout: Duration,
    /// End the job when a collective fails (true in the program; tests set false to see the
    /// error as a `Result`).
    pub abort_on_failure: bool,
    /// How gradient buckets travel (bf16: through `transport::bf16_wire`).
    pub wire: Wire,
}

impl Default for CommConfig {
    fn default() -> Self {
        CommConfig::from_options(&CommOptions::default()).expect("the defaults are valid")
    }
}

impl CommConfig {
    pub fn from_options(a: &CommOptions) -> anyhow::Result<Self> {
        let policy = match (a.allreduce, &a.allreduce_tuning) {
            (AllreduceChoice::Auto, Some(path)) => Policy::Rules(RulesFile::load(path)?),
            (AllreduceChoice::Auto, None) => Policy::Threshold(a.allreduce_threshold),
            (AllreduceChoice::Fixed(fixed), Some(_)) => anyhow::bail!(
                "--allreduce-tuning applies to --allreduce auto, not --allreduce {fixed}: drop one of the two"
            ),
            (AllreduceChoice::Fixed(fixed), None) => Policy::Fixed(fixed),
        };
        if a.wire == Wire::Bf16 && a.allreduce == AllreduceChoice::Fixed(Algorithm::Mpi) {
            anyhow::bail!(
                "--wire bf16 compresses the hand-written algorithms, not MPI_Allreduce: drop --allreduce mpi or --wire bf16"
            );
        }
        Ok(CommConfig {
            policy,
            fragment_bytes: a.fragment_bytes,
            stall_timeout: a.stall_timeout,
            abort_on_failure: true,
            wire: a.wire,
        })
    }
}

/// Whether this process was started by mpiexec (or another MPI launcher).
pub fn launched_by_mpi() -> bool {
    ["OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMI_RANK", "PMIX_RANK", "MPI_LOCALNRANKS"]
        .iter()
        .any(|v| std::env::var_os(v).is_some())
}

/// This process's place among the ranks its launcher started on this host, (local rank,
/// local size), read from the launcher's environment without starting MPI: for commands
/// that run on each rank alone (bench-step) yet share the host's cores and GPUs.
pub fn launcher_local_place() -> (usize, usize) {
    let var = |names: &[&str]| names.iter().find_map(|v| std::env::var(v).ok()?.parse::<usize>().ok());
    // Launchers that give both (Open MPI, MPICH's Hydra): a rank without its host's rank
    // count would take every core.
    let rank = var(&["OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID"]).unwrap_or(0);
    let size = var(&["OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"]).unwrap_or(1).max(rank + 1);
    (rank, size)
}

/// A transport for this process and who it is: MPI under mpiexec, else one rank alone.
/// Must run on the thread that will make every call (the comm thread).
fn open_transport() -> anyhow::Result<(Box<dyn Transport>, WorldInfo)> {
    #[cfg(feature = "mpi")]
    if launched_by_mpi() {
        let (t, world) = transport::mpi::Mpi::init()?;
        return Ok((Box::new(t), world));
    }
    let t = Local::group(1).pop().expect("one endpoint");
    Ok((Box::new(t), WorldInfo::single()))
}

/// Spawn the comm thread. Under mpiexec it initializes MPI on that thread; outside mpiexec or
/// without the `mpi` feature: one rank, no MPI (every allreduce is a copy).
pub fn start(cfg: CommConfig) -> anyhow::Result<CommHandle> {
    spawn(cfg, open_transport)?.started()
}

/// `n` comm threads connected in this process (the Local transport): for tests of code that
/// uses a `CommHandle`, one handle per simulated rank.
pub fn start_local_group(n: usize, cfg: CommConfig) -> anyhow::Result<Vec<CommHandle>> {
    // Every thread first, then the waits: starting is collective (the threads agree on the
    // allreduce table), so a rank waited for before the next exists would wait forever.
    let starting: Vec<Starting> = Local::group(n)
        .into_iter()
        .map(|t| {
            let rank = t.rank();
            let world = WorldInfo {
                rank,
                size: n,
                local_rank: rank,
                local_size: n,
                hostname: "local".into(),
                hosts: vec!["local".into(); n],
                mpi_library: "none (Local transport)".into(),
                thread_level: "none".into(),
            };
            spawn(cfg.clone(), move || Ok((Box::new(t) as Box<dyn Transport>, world)))
        })
        .collect::<anyhow::Result<_>>()?;
    starting.into_iter().map(Starting::started).collect()
}

/// A comm thread spawned and still opening its transport: the handle it becomes once the
/// thread says who it is (`started`).
struct Starting {
    ready_rx: Receiver<anyhow::Result<(WorldInfo, SelectionTable)>>,
    handle: Box<dyn FnOnce(WorldInfo, SelectionTable) -> CommHandle>,
}

impl Starting {
    /// Wait until the thread serves requests, or for its start's error.
    fn started(self) -> anyhow::Result<CommHandle> {
        let (world, table) = self.ready_rx.recv().map_err(|_| anyhow!("the comm thread died while starting"))??;
        Ok((self.handle)(world, table))
    }
}

fn spawn(
    cfg: CommConfig,
    make: impl FnOnce() -> anyhow::Result<(Box<dyn Transport>, WorldInfo)> + Send + 'static,
) -> anyhow::Result<Starting> {
    let policy = WaitPolicy::new(cfg.stall_timeout);
    let policy_text = cfg.policy.describe();
    let shared = Arc::new(Shared {
        base: Instant::now(),
        busy_since_ns: AtomicU64::new(0),
        current_seq: AtomicU64::new(0),
        helper_sent: AtomicU64::new(0),
        abort: policy.abort.clone(),
    });
    let (tx, rx) = channel();
    let (ready_tx, ready_rx) = channel();
    let thread_shared = shared.clone();
    let thread = std::thread::Builder::new()
        .name("comm".into())
        .spawn(move || {
            let opened = make().and_then(|(mut t, world)| {
                t.set_policy(policy);
                // Each host reads its own --allreduce-tuning file, which may lack this rank
                // count: a rank that returned alone would leave the others waiting for it.
                let table = cfg.policy.table_on(t.size(), t.hosts());
                let table = collectives::agree(&mut *t, table, transport::TAG_SETUP)?;
                Ok((t, world, table))
            });
            let (t, world, table) = match opened {
                Ok(x) => x,
                Err(e) => {
                    let _ = ready_tx.send(Err(e));
                    return;
                }
            };
            let _ = ready_tx.send(Ok((world, table.clone())));
            CommThread {
                t,
                table,
                fragment_bytes: cfg.fragment_bytes,
                stall_timeout: cfg.stall_timeout,
                abort_on_failure: cfg.abort_on_failure,
                wire: cfg.wire,
                bf16_stage: Default::default(),
                residuals: Default::default(),
                onebit_stage: Default::default(),
                test_nap: crate::fault_hooks::comm_fragment_nap(),
                bucket_group: None,
                shared: thread_shared,
                failed: None,
            }
            .run(rx);
        })
        .context("cannot start the comm thread")?;
    let (fragment_bytes, stall_timeout) = (cfg.fragment_bytes, cfg.stall_timeout);
    let handle = Box::new(move |world: WorldInfo, table| CommHandle {
        bucket_ranks: std::cell::Cell::new(world.size),
        world,
        tx,
        shared,
        table,
        policy_text,
        fragment_bytes,
        stall_timeout,
        thread: Some(thread),
    });
    Ok(Starting { ready_rx, handle })
}

/// Run `f` on a freshly started comm thread that owns the transport (MPI under mpiexec), then
/// finalize: for the benchmark and the tuner, which time the algorithms directly.
pub fn run_on_comm_thread<R: Send + 'static>(
    stall_timeout: Duration,
    f: impl FnOnce(&mut dyn Transport, &WorldInfo) -> anyhow::Result<R> + Send + 'static,
) -> anyhow::Result<R> {
    std::thread::Builder::new()
        .name("comm".into())
        .spawn(move || {
            let (mut t, world) = open_transport()?;
            t.set_policy(WaitPolicy::new(stall_timeout));
            let r = f(&mut *t, &world);
            drop(t); // MPI_Finalize
            r
        })
        .context("cannot start the comm thread")?
        .join()
        .map_err(|_| anyhow!("the comm thread panicked"))?
}
