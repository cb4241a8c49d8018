//! The training thread's side of the comm thread: `CommHandle` submits gradient buckets
//! (averaged in place, in submission order, cut into fragments that each run one allreduce)
//! and makes small blocking collectives; the comm thread (`comm_thread.rs`) makes every call into
//! the transport.

use crate::comm::WorldInfo;
use crate::comm::allreduce::Algorithm;
use crate::comm::allreduce::select::SelectionTable;
use crate::comm::onebit::Residuals;
use crate::comm::stall::STALL_EXIT_CODE;
use anyhow::{anyhow, bail};
use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Host memory the comm thread may read and write while it owns it (`Vec<f32>` for the CPU
/// backend, pinned memory for CUDA).
pub trait HostData: Send {
    fn as_mut_slice(&mut self) -> &mut [f32];
    /// Its elements `r` alone: what the comm thread works on while averaging one fragment,
    /// so that the owner may read fragments already averaged meanwhile.
    fn fragment_mut(&mut self, r: std::ops::Range<usize>) -> &mut [f32] {
        &mut self.as_mut_slice()[r]
    }
}

impl HostData for Vec<f32> {
    fn as_mut_slice(&mut self) -> &mut [f32] {
        self
    }
}

/// Called on the comm thread with the element range of one fragment.
pub type FragmentHook = Box<dyn FnMut(Range<usize>) + Send>;

/// One bucket of gradients to average over the ranks.
pub struct BucketRequest {
    /// Stable per bucket; also its tag base (buckets must be submitted in the same order, with
    /// the same ids and lengths, on every rank).
    pub id: u32,
    /// e.g. "G.layer1 (convT+bn)", for stall messages and traces.
    pub label: String,
    /// Averaged in place (sum over ranks, then * 1/N).
    pub data: Box<dyn HostData>,
    /// Called on the comm thread before fragment `[range]` is reduced (the CUDA path waits there
    /// for the device-to-host copy of that fragment). None = ready now.
    pub before_fragment: Option<FragmentHook>,
    /// Called on the comm thread after fragment `[range]` is reduced (the exchange reports it
    /// to the training thread, which copies that fragment back while the next is reduced).
    pub after_fragment: Option<FragmentHook>,
    /// Travels as f32 whatever `--wire` says (the per-step metrics: losses are reported, not
    /// trained on, so they keep every bit).
    pub exact: bool,
    /// Packed by the device already, and given back packed. `--wire 1bit`: each fragment's
    /// f32 range holds, from its start, this rank's encodings of its stripes
    /// (`onebit::packed_layout`, which must fit: `onebit::packed_fits`), and gets back the
    /// quantized means in the same layout (`onebit::allreduce_mean_packed`); the device keeps
    /// the rank's own residual. `--wire bf16`: each fragment's first half holds its values as
    /// bf16 (`codec::bf16::packed_in_mut`), and gets back their mean the same way.
    pub packed: bool,
}

impl BucketRequest {
    /// A bucket with no fragment hooks.
    pub fn new(id: u32, label: impl Into<String>, data: impl HostData + 'static) -> Self {
        BucketRequest {
            id,
            label: label.into(),
            data: Box::new(data),
            before_fragment: None,
            after_fragment: None,
            exact: false,
            packed: false,
        }
    }

    /// The same bucket, sent as f32 whatever the wire (`--wire bf16` or `1bit`).
    pub fn exact(self) -> Self {
        BucketRequest { exact: true, ..self }
    }
}

/// A send or receive posted to the comm thread, which makes it in order after what was posted
/// before; `CommHandle::wait_sent` / `wait_received` claim it.
pub struct Posted {
    done: Receiver<anyhow::Result<HelperOut>>,
}

/// Claim on a submitted bucket; `CommHandle::wait` turns it into the averaged data.
pub struct Ticket {
    done: Receiver<anyhow::Result<BucketDone>>,
}

/// A bucket after averaging.
pub struct BucketDone {
    pub data: Box<dyn HostData>,
    /// The algorithm used (chosen by fragment size), or the 1-bit wire's own.
    pub algorithm: &'static str,
    pub bytes: usize,
    /// Bytes this rank sent for it, counted where they left (MPI's own allreduce: 0).
    pub sent: u64,
    /// `--wire 1bit`: the sum of squares of this rank's residuals of the bucket afterwards.
    pub residual_sq: Option<f64>,
    /// When the comm thread took the bucket up.
    pub started: Instant,
    pub finished: Instant,
    /// Time inside the allreduce calls (excludes waiting in `before_fragment`).
    pub busy: Duration,
    /// The comm thread's CPU time within `busy` (polling, copies, sums): what averaging
    /// took from the cores, which matters where compute threads use them all.
    pub cpu: Duration,
}

/// State the comm thread publishes for the handle's watchdog, and the abort flag.
pub(crate) struct Shared {
    pub base: Instant,
    /// Nanoseconds after `base` at which the current collective began; 0 = idle.
    pub busy_since_ns: AtomicU64,
    pub current_seq: AtomicU64,
    /// Bytes the blocking helpers (not the gradient buckets) have sent, counted at the
    /// transport.
    pub helper_sent: AtomicU64,
    /// Non-zero: abort with this code (checked by every wait loop).
    pub abort: Arc<AtomicI32>,
}

pub(crate) enum HelperOp {
    MeanF32(Vec<f32>),
    MeanF64(Vec<f64>),
    BroadcastF32(usize, Vec<f32>),
    BroadcastBytes(usize, Vec<u8>),
    GatherBytes(Vec<u8>),
    Barrier,
    /// Point to point, for a pipeline's stages: `Vec<f32>` to one rank, or one from it.
    SendF32(usize, Vec<f32>),
    RecvF32(usize),
    /// This rank's 1-bit residuals, by bucket id (not collective).
    Residuals,
    SetResiduals(Vec<(u32, Residuals)>),
    /// Average gradient buckets among these ranks only (not collective).
    SetBucketGroup(Vec<usize>),
}

pub(crate) enum HelperOut {
    F32(Vec<f32>),
    F64(Vec<f64>),
    Bytes(Vec<u8>),
    Gathered(Option<Vec<Vec<u8>>>),
    Residuals(Vec<(u32, Residuals)>),
    Unit,
}

pub(crate) enum Command {
    Bucket {
        req: BucketRequest,
        done: Sender<anyhow::Result<BucketDone>>,
    },
    Helper {
        op: HelperOp,
        done: Sender<anyhow::Result<HelperOut>>,
    },
    Abort {
        code: i32,
    },
    /// Agree on a new algorithm table, fragment size and wire (collective).
    Configure {
        cfg: super::CommConfig,
        done: Sender<anyhow::Result<SelectionTable>>,
    },
    Shutdown {
        done: Sender<()>,
    },
}

/// The elements of each fragment of an `n`-element bucket: equal parts of at most
/// `fragment_bytes` (0 = one fragment). Always at least one fragment (empty for n = 0).
pub fn fragments(n: usize, fragment_bytes: usize) -> Vec<Range<usize>> {
    let k = fragment_count(n, fragment_bytes);
    (0..k).map(|j| crate::comm::allreduce::part(n, k, j)).collect()
}

fn fragment_count(n: usize, fragment_bytes: usize) -> usize {
    if fragment_bytes == 0 { 1 } else { n.div_ceil((fragment_bytes / 4).max(1)).max(1) }
}

/// Bytes of the first (largest) fragment of a bucket of `bytes`: the message size that picks
/// the bucket's algorithm.
pub fn first_fragment_bytes(bytes: usize, fragment_bytes: usize) -> usize {
    let n = bytes / 4;
    crate::comm::allreduce::part(n, fragment_count(n, fragment_bytes), 0).len() * 4
}

/// How much longer than the stall timeout the training thread waits for a comm thread that
/// is stuck where its own detector cannot see (inside a blocking MPI_Allreduce).
const WATCHDOG_EXTRA: Duration = Duration::from_secs(30);

/// The training thread's handle on the comm thread. Dropped without `shutdown` (an error on
/// this rank), the comm thread stops without finalizing MPI and is not joined (it may be
/// blocked in a collective the other ranks will never finish); the process exiting then makes
/// mpiexec end the job.
pub struct CommHandle {
    pub(crate) world: WorldInfo,
    pub(crate) tx: Sender<Command>,
    pub(crate) shared: Arc<Shared>,
    pub(crate) table: SelectionTable,
    /// `Policy::describe()` of the configuration, for summaries.
    pub(crate) policy_text: String,
    pub(crate) fragment_bytes: usize,
    pub(crate) stall_timeout: Duration,
    pub(crate) thread: Option<JoinHandle<()>>,
    /// How many ranks a gradient bucket is averaged over: the world, or the members of
    /// `set_bucket_group` (what a bucket packed on the device must be laid out for).
    pub(crate) bucket_ranks: std::cell::Cell<usize>,
}

impl CommHandle {
    pub fn world(&self) -> &WorldInfo {
        &self.world
    }

    /// How many ranks every later gradient bucket is averaged over (the world's size unless
    /// `set_bucket_group` named fewer).
    pub fn bucket_ranks(&self) -> usize {
        self.bucket_ranks.get()
    }

    /// The fragments the comm thread cuts an `n`-element bucket into (in this order).
    pub fn fragments_of(&self, n: usize) -> Vec<Range<usize>> {
        fragments(n, self.fragment_bytes)
    }

    /// Queue a bucket; returns at once. Buckets are averaged in submission order.
    pub fn submit(&self, req: BucketRequest) -> Ticket {
        let (done, rx) = channel();
        // If the comm thread is gone the ticket's channel is closed and `wait` says so.
        let _ = self.tx.send(Command::Bucket { req, done });
        Ticket { done: rx }
    }

    /// Block until the bucket is averaged.
    pub fn wait(&self, t: Ticket) -> anyhow::Result<BucketDone> {
        self.await_reply(&t.done)
    }

    /// Average a vector over the ranks (blocking): sync-bn statistics, running stats.
    pub fn allreduce_mean(&self, data: Vec<f32>) -> anyhow::Result<Vec<f32>> {
        match self.helper(HelperOp::MeanF32(data))? {
            HelperOut::F32(v) => Ok(v),
            _ => unreachable!("MeanF32 answers F32"),
        }
    }

    /// Average a small f64 vector over the ranks (metrics).
    pub fn allreduce_mean_f64(&self, data: Vec<f64>) -> anyhow::Result<Vec<f64>> {
        match self.helper(HelperOp::MeanF64(data))? {
            HelperOut::F64(v) => Ok(v),
            _ => unreachable!("MeanF64 answers F64"),
        }
    }

    /// Every rank gets `root`'s vector (initial weights); other ranks' `data` is ignored.
    pub fn broadcast_f32(&self, root: usize, data: Vec<f32>) -> anyhow::Result<Vec<f32>> {
        match self.helper(HelperOp::BroadcastF32(root, data))? {
            HelperOut::F32(v) => Ok(v),
            _ => unreachable!("BroadcastF32 answers F32"),
        }
    }

    /// Every rank gets `root`'s bytes (config hash, resume state).
    pub fn broadcast_bytes(&self, root: usize, data: Vec<u8>) -> anyhow::Result<Vec<u8>> {
        match self.helper(HelperOp::BroadcastBytes(root, data))? {
            HelperOut::Bytes(v) => Ok(v),
            _ => unreachable!("BroadcastBytes answers Bytes"),
        }
    }

    /// Every rank's bytes on rank 0 (index = rank); None on the other ranks.
    pub fn gather_bytes(&self, data: Vec<u8>) -> anyhow::Result<Option<Vec<Vec<u8>>>> {
        match self.helper(HelperOp::GatherBytes(data))? {
            HelperOut::Gathered(v) => Ok(v),
            _ => unreachable!("GatherBytes answers Gathered"),
        }
    }

    /// Post `data` to rank `to` (its `recv_f32` takes it); returns at once.
    pub fn send_f32(&self, to: usize, data: Vec<f32>) -> Posted {
        self.post(HelperOp::SendF32(to, data))
    }

    /// Post a receive of the next vector rank `from` sends; returns at once.
    pub fn recv_f32(&self, from: usize) -> Posted {
        self.post(HelperOp::RecvF32(from))
    }

    /// Post an average over the ranks (`allreduce_mean`) and return at once; its result is
    /// claimed by `wait_received`. Collective: every rank posts it in the same order.
    pub fn post_mean_f32(&self, data: Vec<f32>) -> Posted {
        self.post(HelperOp::MeanF32(data))
    }

    /// Block until a posted send has left.
    pub fn wait_sent(&self, p: Posted) -> anyhow::Result<()> {
        self.await_reply(&p.done).map(|_| ())
    }

    /// Block until a posted receive (or average) has arrived.
    pub fn wait_received(&self, p: Posted) -> anyhow::Result<Vec<f32>> {
        match self.await_reply(&p.done)? {
            HelperOut::F32(v) => Ok(v),
            _ => unreachable!("RecvF32 and MeanF32 answer F32"),
        }
    }

    fn post(&self, op: HelperOp) -> Posted {
        let (done, rx) = channel();
        // If the comm thread is gone the channel is closed and the wait says so.
        let _ = self.tx.send(Command::Helper { op, done });
        Posted { done: rx }
    }

    /// Bytes this rank's blocking helpers (allreduce_mean, broadcasts, ...) have sent so far.
    pub fn helper_bytes_sent(&self) -> u64 {
        self.shared.helper_sent.load(Ordering::Relaxed)
    }

    /// This rank's `--wire 1bit` residuals by bucket id (none before any 1-bit bucket).
    pub fn residuals(&self) -> anyhow::Result<Vec<(u32, Residuals)>> {
        match self.helper(HelperOp::Residuals)? {
            HelperOut::Residuals(v) => Ok(v),
            _ => unreachable!("Residuals answers Residuals"),
        }
    }

    /// Replace this rank's 1-bit residuals (a resume's).
    pub fn set_residuals(&self, r: Vec<(u32, Residuals)>) -> anyhow::Result<()> {
        self.helper(HelperOp::SetResiduals(r)).map(|_| ())
    }

    /// Average every later gradient bucket among `members` (real ranks, this one among them)
    /// instead of all ranks: the replicas of one pipeline stage.
    pub fn set_bucket_group(&self, members: Vec<usize>) -> anyhow::Result<()> {
        let n = members.len();
        self.helper(HelperOp::SetBucketGroup(members))?;
        self.bucket_ranks.set(n);
        Ok(())
    }

    pub fn barrier(&self) -> anyhow::Result<()> {
        self.helper(HelperOp::Barrier).map(|_| ())
    }

    /// Print `msg` as one line (prefixed with the rank) and end the whole job with `code`
    /// (MPI_Abort through the comm thread; plain exit with one rank). Never returns.
    pub fn abort(&self, code: i32, msg: &str) -> ! {
        eprintln!("rank {}: {msg}", self.world.rank);
        if self.world.size == 1 {
            std::process::exit(code);
        }
        // Wakes a comm thread that is blocked in a collective as well as an idle one.
        self.shared.abort.store(if code == 0 { 1 } else { code }, Ordering::SeqCst);
        let _ = self.tx.send(Command::Abort { code });
        // The comm thread calls MPI_Abort; if it cannot (stuck in a blocking MPI call), a
        // plain exit also makes mpiexec end the job.
        std::thread::sleep(Duration::from_secs(10));
        std::process::exit(code)
    }

    /// The algorithm a bucket of `bytes` gets (chosen by its fragment size).
    pub fn algorithm_for(&self, bytes: usize) -> Algorithm {
        self.table.pick(first_fragment_bytes(bytes, self.fragment_bytes))
    }

    /// (min_bytes, max_bytes inclusive, algorithm) by message (= fragment) size, for
    /// summaries. The last range ends at usize::MAX.
    pub fn selection_table(&self) -> Vec<(usize, usize, Algorithm)> {
        self.table.ranges().to_vec()
    }

    /// One line for run summaries: how the algorithm is chosen and the resulting table, e.g.
    /// `auto: rd below 8KiB, vhd (...) above [0B-8191B: rd, 8KiB-: vhd]`.
    pub fn selection_description(&self) -> String {
        format!("{} [{}]", self.policy_text, self.table.describe())
    }

    /// Take up the algorithm policy, fragment size and wire of `cfg` (its stall timeout and
    /// abort setting stay as started), agreeing on the new table with every rank: for a run
    /// that learns its options from a checkpoint only after the ranks can talk. Collective:
    /// every rank calls it, before any bucket is submitted.
    pub fn reconfigure(&mut self, cfg: &super::CommConfig) -> anyhow::Result<()> {
        let (done, rx) = channel();
        self.tx
            .send(Command::Configure { cfg: cfg.clone(), done })
            .map_err(|_| anyhow!("rank {}: the comm thread has stopped", self.world.rank))?;
        self.table = self.await_reply(&rx)?;
        self.policy_text = cfg.policy.describe();
        self.fragment_bytes = cfg.fragment_bytes;
        Ok(())
    }

    /// Finish queued work, finalize MPI and join the comm thread.
    pub fn shutdown(mut self) -> anyhow::Result<()> {
        let (done, rx) = channel();
        self.tx.send(Command::Shutdown { done }).map_err(|_| anyhow!("the comm thread had already stopped"))?;
        let _ = rx.recv();
        if let Some(h) = self.thread.take() {
            h.join().map_err(|_| anyhow!("the comm thread panicked while shutting down"))?;
        }
        Ok(())
    }

    fn helper(&self, op: HelperOp) -> anyhow::Result<HelperOut> {
        let (done, rx) = channel();
        self.tx
            .send(Command::Helper { op, done })
            .map_err(|_| anyhow!("rank {}: the comm thread has stopped", self.world.rank))?;
        self.await_reply(&rx)
    }

    fn await_reply<R>(&self, rx: &Receiver<anyhow::Result<R>>) -> anyhow::Result<R> {
        loop {
            match rx.recv_timeout(Duration::from_secs(1)) {
                Ok(r) => return r,
                Err(RecvTimeoutError::Timeout) => self.watchdog(),
                Err(RecvTimeoutError::Disconnected) => {
                    bail!("rank {}: the comm thread has stopped", self.world.rank)
                }
            }
        }
    }

    /// End the job if the comm thread has been inside one collective far longer than the
    /// stall timeout: it is stuck where its own detector cannot see.
    fn watchdog(&self) {
        let since = self.shared.busy_since_ns.load(Ordering::Relaxed);
        if since == 0 {
            return;
        }
        let busy = self.shared.base.elapsed().saturating_sub(Duration::from_nanos(since));
        if busy > self.stall_timeout.saturating_add(WATCHDOG_EXTRA) {
            eprintln!(
                "rank {}: stall: the comm thread has been inside collective #{} for {:.0} s \
                 (stuck in a blocking MPI call); ending the job",
                self.world.rank,
                self.shared.current_seq.load(Ordering::Relaxed),
                busy.as_secs_f64()
            );
            std::process::exit(STALL_EXIT_CODE);
        }
    }
}
