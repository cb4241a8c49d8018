//! The `Transport` trait: point-to-point messages between ranks, which every allreduce
//! algorithm is written against, with two implementations: `Mpi` (rsmpi, under mpiexec) and
//! `Local` (threads and channels in one process, for tests at any rank count).

/// The `Transport` methods a wrapper hands to `self.inner` unchanged: by default what the rank
/// is doing, its wait policy, the status queries of stalled ranks and aborting the job; `who`
/// and `receive` for those groups. (The names they use must be in scope where expanded.)
macro_rules! forward_to_inner {
    // Who the rank is: rank, ranks, their hosts.
    (who) => {
        fn rank(&self) -> usize {
            self.inner.rank()
        }
        fn size(&self) -> usize {
            self.inner.size()
        }
        fn hosts(&self) -> &[usize] {
            self.inner.hosts()
        }
    };
    // Receiving as it comes.
    (receive) => {
        fn recv(&mut self, from: usize, tag: Tag, buf: &mut [u8]) -> Result<(), CommError> {
            self.inner.recv(from, tag, buf)
        }
        fn recv_vec(&mut self, from: usize, tag: Tag) -> Result<Vec<u8>, CommError> {
            self.inner.recv_vec(from, tag)
        }
    };
    () => {
        fn activity(&mut self) -> &mut Activity {
            self.inner.activity()
        }
        fn set_policy(&mut self, policy: WaitPolicy) {
            self.inner.set_policy(policy)
        }
        fn serve_status(&mut self) {
            self.inner.serve_status()
        }
        fn query_status(&mut self, grace: Duration) -> Vec<Option<StatusReply>> {
            self.inner.query_status(grace)
        }
        fn abort(&mut self, code: i32) -> ! {
            self.inner.abort(code)
        }
    };
}
pub(crate) use forward_to_inner;

pub mod bf16_wire;
pub mod counting;
pub mod group;
pub mod local;
#[cfg(feature = "mpi")]
pub mod mpi;

use crate::comm::status::{Activity, StatusReply};
use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::{Duration, Instant};

pub use group::Group;
pub use local::Local;

/// Host numbers for `Transport::hosts` from each rank's host name: counted from 0 in order
/// of each name's first rank.
pub fn host_numbers<S: PartialEq>(names: &[S]) -> Vec<usize> {
    let mut first: Vec<&S> = Vec::new();
    names
        .iter()
        .map(|n| match first.iter().position(|f| *f == n) {
            Some(h) => h,
            None => {
                first.push(n);
                first.len() - 1
            }
        })
        .collect()
}

/// An MPI tag. MPI guarantees tags up to 32767 (`MPI_TAG_UB` may be larger, never smaller).
pub type Tag = i32;

/// Tags at and above this value are reserved for the comm thread's own messages; bucket tags
/// are taken modulo this value.
pub const TAG_RESERVED: Tag = 32700;
/// Blocking helpers of `CommHandle` (broadcast, small allreduce, gather, barrier).
pub const TAG_HELPER: Tag = 32700;
/// The library's own allreduce on the Local transport.
pub const TAG_NATIVE: Tag = 32701;
/// Start-up exchanges (hostnames).
pub const TAG_SETUP: Tag = 32702;
/// Benchmark and tuning collectives.
pub const TAG_BENCH: Tag = 32703;
/// A pipeline's activations and their gradients between its stages.
pub const TAG_PIPELINE: Tag = 32704;
/// Stall detector: "where are you?" and its answer.
pub const TAG_STATUS_QUERY: Tag = 32765;
pub const TAG_STATUS_REPLY: Tag = 32766;

/// How received values are combined with the values already in the buffer.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Combine {
    /// `dst = src`
    Copy,
    /// `dst = dst + src`
    Add,
    /// `dst = (dst + src) * s`: the last reduction step, fused with the 1/N scaling.
    AddScale(f32),
}

/// Why a transport operation did not complete.
#[derive(Debug, Clone, PartialEq)]
pub enum CommError {
    /// Waited longer than the stall timeout for `peer`.
    Stalled { peer: usize, waited: Duration },
    /// The job is being aborted (`CommHandle::abort` was called on this rank).
    Aborted { code: i32 },
    /// The peer's endpoint is gone (Local transport: its thread ended).
    Disconnected { peer: usize },
    /// The ranks disagree about a message (length, order): a bug or mismatched calls.
    Protocol(String),
}

impl std::fmt::Display for CommError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CommError::Stalled { peer, waited } => {
                write!(f, "waited {:.1} s for rank {peer}", waited.as_secs_f64())
            }
            CommError::Aborted { code } => write!(f, "job aborted (code {code})"),
            CommError::Disconnected { peer } => write!(f, "rank {peer} has gone away"),
            CommError::Protocol(msg) => f.write_str(msg),
        }
    }
}

impl std::error::Error for CommError {}

/// How long a blocked operation may wait, and the flag that interrupts it.
#[derive(Clone, Debug)]
pub struct WaitPolicy {
    pub stall_timeout: Duration,
    /// 0 = keep going; anything else = abort with that exit code.
    pub abort: Arc<AtomicI32>,
}

impl WaitPolicy {
    pub fn new(stall_timeout: Duration) -> Self {
        WaitPolicy { stall_timeout, abort: Arc::new(AtomicI32::new(0)) }
    }
}

impl Default for WaitPolicy {
    fn default() -> Self {
        WaitPolicy::new(Duration::from_secs(60))
    }
}

/// What a wait loop should do after one more unsuccessful poll.
pub enum Tick {
    Poll,
    /// Poll, but first answer status queries from stalled ranks.
    Serve,
    Fail(CommError),
}

/// Bookkeeping of one blocking wait: polls, offers the core to other threads (every
/// `SPINS_PER_CHECK` polls at first, at every poll once the wait has lasted `SPIN_ALONE`),
/// answers status queries every 10 ms, and fails after the stall timeout.
pub struct WaitClock {
    spins: u32,
    start: Option<Instant>,
    last_serve: Option<Instant>,
    /// Past `SPIN_ALONE`: offer the core at every poll.
    yield_every_poll: bool,
}

impl WaitClock {
    /// Polls between two reads of the clock.
    const SPINS_PER_CHECK: u32 = 64;
    const SERVE_EVERY: Duration = Duration::from_millis(10);
    /// How long a wait polls before it offers the core at every poll: longer than a small
    /// message takes through shared memory, which a yield per poll would slow several times
    /// over.
    const SPIN_ALONE: Duration = Duration::from_micros(30);
    const SPINS_BEFORE_CLOCK: u32 = 8;

    pub fn new() -> Self {
        WaitClock { spins: 0, start: None, last_serve: None, yield_every_poll: false }
    }

    pub fn tick(&mut self, policy: &WaitPolicy, peer: usize) -> Tick {
        self.spins = self.spins.wrapping_add(1);
        // The clock starts a few polls in: the shortest waits (shared memory, a few hundred
        // ns) would otherwise pay for reading it.
        // (`spins` wraps in a wait of billions of polls; the start must not move then.)
        if self.spins == Self::SPINS_BEFORE_CLOCK && self.start.is_none() {
            self.start = Some(Instant::now());
        }
        // Where cores are shared (compute threads, or other ranks on emulated hosts), each
        // poll on a busy core is time taken from compute; on an idle core sched_yield returns
        // at once. Over TCP a poll is a syscall or two, so a long wait offers the core at every
        // poll, not every SPINS_PER_CHECK (measured: docs/performance/overlap.md).
        if self.yield_every_poll {
            std::thread::yield_now();
        }
        if !self.spins.is_multiple_of(Self::SPINS_PER_CHECK) {
            return Tick::Poll;
        }
        let now = Instant::now();
        let start = self.start.unwrap_or(now);
        let waited = now - start;
        let code = policy.abort.load(Ordering::Relaxed);
        if code != 0 {
            return Tick::Fail(CommError::Aborted { code });
        }
        if waited > policy.stall_timeout {
            return Tick::Fail(CommError::Stalled { peer, waited });
        }
        // Offer the core from the first clock check on: a wait that spins alone for longer
        // keeps the training thread waiting for a core (measured: docs/performance/overlap.md).
        if !self.yield_every_poll {
            std::thread::yield_now();
            self.yield_every_poll = waited >= Self::SPIN_ALONE;
        }
        let last = *self.last_serve.get_or_insert(start);
        if now - last > Self::SERVE_EVERY {
            self.last_serve = Some(now);
            return Tick::Serve;
        }
        Tick::Poll
    }
}

impl Default for WaitClock {
    fn default() -> Self {
        Self::new()
    }
}

/// Point-to-point messages between the ranks of one job. All calls block until done (or
/// fail with a `CommError` after the stall timeout); the allreduce algorithms are sequences of
/// these calls, identical in structure on every rank.
pub trait Transport {
    fn rank(&self) -> usize;
    fn size(&self) -> usize;
    /// The host of every rank (index = rank): ranks with the same number share a machine, the
    /// numbers counted from 0 in order of each host's first rank. Empty: one host (or not
    /// known), which is what a transport that does not say means.
    fn hosts(&self) -> &[usize] {
        &[]
    }

    fn send(&mut self, to: usize, tag: Tag, data: &[u8]) -> Result<(), CommError>;
    /// Receive exactly `buf.len()` bytes; a message of another length is a `Protocol` error.
    fn recv(&mut self, from: usize, tag: Tag, buf: &mut [u8]) -> Result<(), CommError>;
    /// Receive a message whose length only the sender knows.
    fn recv_vec(&mut self, from: usize, tag: Tag) -> Result<Vec<u8>, CommError>;
    /// Send to `to` and receive from `from` at the same time (no deadlock when two ranks
    /// exchange large messages).
    fn sendrecv(&mut self, to: usize, data: &[u8], from: usize, buf: &mut [u8], tag: Tag) -> Result<(), CommError>;

    /// The step every allreduce algorithm is made of: send `buf[send.1]` to rank `send.0`
    /// while receiving `recv.1.len()` values from rank `recv.0` and combining them into
    /// `buf[recv.1]`. The two ranges are either disjoint or identical (recursive doubling
    /// sends the vector it reduces into). Empty ranges are skipped: both sides know the
    /// lengths. Large reductions are pipelined in chunks where the transport can.
    fn exchange(&mut self, buf: &mut [f32], send: SendEnd, recv: RecvEnd, tag: Tag) -> Result<(), CommError>;

    /// The library's own sum-allreduce (MPI_Allreduce), the baseline `mpi` algorithm.
    fn native_allreduce_sum(&mut self, data: &mut [f32]) -> Result<(), CommError>;

    /// What this rank is doing, for other ranks' stall reports.
    fn activity(&mut self) -> &mut Activity;
    fn set_policy(&mut self, policy: WaitPolicy);
    /// Answer pending status queries of stalled ranks (called from wait loops and when idle).
    fn serve_status(&mut self);
    /// Ask every other rank what it is doing; `None` where no answer came within `grace`.
    fn query_status(&mut self, grace: Duration) -> Vec<Option<StatusReply>>;
    /// End the whole job with `code` (MPI_Abort; a plain exit in one process).
    fn abort(&mut self, code: i32) -> !;
}

/// One end of `Transport::exchange`: (peer, elements of the buffer).
pub type SendEnd = Option<(usize, Range<usize>)>;
/// The other end: (peer, elements, how the received values combine).
pub type RecvEnd = Option<(usize, Range<usize>, Combine)>;

/// `exchange`'s ends with the empty ranges dropped: both sides know the lengths, so nothing
/// is sent for them (every transport skips them the same way).
pub fn skip_empty(send: SendEnd, recv: RecvEnd) -> (SendEnd, RecvEnd) {
    (send.filter(|(_, r)| !r.is_empty()), recv.filter(|(_, r, _)| !r.is_empty()))
}

/// The bytes of a float slice (for sending f32 data through the byte interface).
pub use crate::codec::f32_bytes;

/// The f32s `f32_bytes` made of them (native byte order, as they travelled).
pub fn f32s_from_bytes(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4).map(|c| f32::from_ne_bytes([c[0], c[1], c[2], c[3]])).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `n` unsuccessful polls of one wait; the last tick's verdict.
    fn polls(clock: &mut WaitClock, policy: &WaitPolicy, n: u32) -> Tick {
        (0..n).map(|_| clock.tick(policy, 1)).last().unwrap()
    }

    #[test]
    fn a_wait_yields_at_every_poll_once_it_has_lasted_spin_alone() {
        let policy = WaitPolicy::new(Duration::from_secs(60));
        let mut clock = WaitClock::new();
        polls(&mut clock, &policy, WaitClock::SPINS_BEFORE_CLOCK);
        std::thread::sleep(WaitClock::SPIN_ALONE * 2);
        // The next clock check sees the wait's age, counted from the 8th poll.
        assert!(!clock.yield_every_poll);
        polls(&mut clock, &policy, WaitClock::SPINS_PER_CHECK - WaitClock::SPINS_BEFORE_CLOCK);
        assert!(clock.yield_every_poll, "a wait of {:?} still polls without yielding", WaitClock::SPIN_ALONE * 2);
    }

    #[test]
    fn a_wait_past_the_stall_timeout_fails_naming_the_peer() {
        let policy = WaitPolicy::new(Duration::from_millis(5));
        let mut clock = WaitClock::new();
        polls(&mut clock, &policy, WaitClock::SPINS_BEFORE_CLOCK);
        std::thread::sleep(Duration::from_millis(10));
        // The 64th poll reads the clock.
        match polls(&mut clock, &policy, WaitClock::SPINS_PER_CHECK - WaitClock::SPINS_BEFORE_CLOCK) {
            Tick::Fail(CommError::Stalled { peer: 1, waited }) => assert!(waited >= Duration::from_millis(10)),
            Tick::Fail(e) => panic!("failed with {e} instead of a stall"),
            _ => panic!("a wait of 10 ms with a 5 ms stall timeout went on"),
        }
    }
}
