//! `Mpi`: the transport over MPI point-to-point (rsmpi's raw bindings), owned by the comm
//! thread, which initialized MPI and finalizes it when this is dropped. Every wait is a
//! nonblocking request tested in a loop, so that a stalled peer is noticed and status
//! queries are answered. Reductions of large messages are pipelined in chunks: the receive of
//! chunk k+1 is in flight while chunk k (in a small, cache-resident scratch slot) is added.
//!
//! Messages are cut the same way on both sides, by length only (`MessageCuts`): mid-size ones
//! into pieces small enough for Open MPI's shared-memory eager protocol (4 KiB with headers),
//! so no piece pays the rendezvous handshake, all in flight at once; larger ones into chunks,
//! a few receives in flight.

use super::{CommError, RecvEnd, SendEnd, Tag, Tick, Transport, WaitClock, WaitPolicy};
use crate::comm::status::{Activity, StatusReply};
use mpi::environment::Universe;
use mpi::ffi;
use std::ffi::{c_int, c_void};
use std::time::Duration;

mod exchange;
mod init;
mod status;

/// How messages are cut: tuning knobs for benchmarks, read from the environment when MPI
/// starts; every rank must be given the same values. Sizes are bytes, with or without a unit
/// (`64KiB`); a value that does not parse is ignored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct MessageCuts {
    /// Floats per chunk of a large message: `DCGAN_ALLREDUCE_CHUNK` bytes (default 1MiB).
    pub chunk: usize,
    /// Chunks received at once: `DCGAN_ALLREDUCE_DEPTH` (default 2, at most 8).
    pub depth: usize,
    /// Floats per piece of a mid-size message: `DCGAN_ALLREDUCE_PIECE` bytes (default 4032).
    pub piece: usize,
    /// The longest message (in floats) cut into pieces rather than chunks:
    /// `DCGAN_ALLREDUCE_EAGER_MAX` bytes (default 16KiB).
    pub eager_max: usize,
}

impl MessageCuts {
    pub fn from_env() -> MessageCuts {
        let var = |name: &str, default: usize| {
            std::env::var(name).ok().and_then(|v| crate::units::parse_bytes(&v).ok()).unwrap_or(default)
        };
        MessageCuts {
            chunk: (var("DCGAN_ALLREDUCE_CHUNK", 1 << 20) / 4).max(1),
            depth: var("DCGAN_ALLREDUCE_DEPTH", 2).clamp(1, 8),
            piece: (var("DCGAN_ALLREDUCE_PIECE", 4032) / 4).max(1),
            eager_max: var("DCGAN_ALLREDUCE_EAGER_MAX", 16 << 10) / 4,
        }
    }
}

pub struct Mpi {
    comm: ffi::MPI_Comm,
    rank: usize,
    size: usize,
    /// `Transport::hosts`, from the host names gathered at start.
    hosts: Vec<usize>,
    policy: WaitPolicy,
    activity: Activity,
    /// Receive slots for pipelined reductions.
    scratch: Vec<f32>,
    /// Floats per chunk of a large message, and chunks received at once.
    chunk: usize,
    depth: usize,
    /// Floats per piece of a mid-size message, and the largest message cut into pieces.
    piece: usize,
    eager_max: usize,
    /// Receive requests of the exchange in progress (kept to reuse the allocation).
    recvs: Vec<ffi::MPI_Request>,
    /// Send requests of the exchange in progress (kept to reuse the allocation).
    sends: Vec<ffi::MPI_Request>,
    /// Declared last: dropped (MPI_Finalize) after everything above.
    _universe: Universe,
}

fn null_request() -> ffi::MPI_Request {
    // SAFETY: reading an extern constant initialized by the MPI shim.
    unsafe { ffi::RSMPI_REQUEST_NULL }
}

fn count(n: usize) -> c_int {
    c_int::try_from(n).expect("message larger than 2^31 elements")
}

impl Mpi {
    pub(super) fn check_peer(&self, peer: usize) -> Result<c_int, CommError> {
        if peer >= self.size {
            return Err(CommError::Protocol(format!("rank {peer} does not exist (the job has {} ranks)", self.size)));
        }
        Ok(peer as c_int)
    }

    /// # Safety
    /// `ptr..ptr+len` must stay valid and unmodified until the request completes.
    pub(super) unsafe fn isend_raw(
        &self,
        ptr: *const c_void,
        len: usize,
        dtype: ffi::MPI_Datatype,
        to: usize,
        tag: Tag,
    ) -> ffi::MPI_Request {
        let mut req = null_request();
        // SAFETY: the caller keeps the buffer alive; the communicator is valid.
        unsafe { ffi::MPI_Isend(ptr, count(len), dtype, to as c_int, tag, self.comm, &mut req) };
        req
    }

    /// # Safety
    /// `ptr..ptr+len` must stay valid and untouched until the request completes.
    pub(super) unsafe fn irecv_raw(
        &self,
        ptr: *mut c_void,
        len: usize,
        dtype: ffi::MPI_Datatype,
        from: usize,
        tag: Tag,
    ) -> ffi::MPI_Request {
        let mut req = null_request();
        // SAFETY: as above.
        unsafe { ffi::MPI_Irecv(ptr, count(len), dtype, from as c_int, tag, self.comm, &mut req) };
        req
    }

    /// Call `test` until it returns a value, ticking the wait clock in between: status
    /// requests are served while this rank waits on `peer`, and the policy's limit becomes
    /// an error naming it. Every wait of this transport goes through here.
    fn poll_until<T>(&mut self, peer: usize, mut test: impl FnMut() -> Option<T>) -> Result<T, CommError> {
        let mut clock = WaitClock::new();
        loop {
            if let Some(done) = test() {
                return Ok(done);
            }
            match clock.tick(&self.policy, peer) {
                Tick::Poll => {}
                Tick::Serve => {
                    self.activity.waiting_on = Some(peer);
                    self.serve_status();
                }
                Tick::Fail(e) => return Err(e),
            }
        }
    }

    /// Test `reqs` until all are complete, or the policy says stop.
    pub(super) fn wait_all(&mut self, reqs: &mut [ffi::MPI_Request], peer: usize) -> Result<(), CommError> {
        self.poll_until(peer, || {
            let mut flag: c_int = 0;
            // SAFETY: valid request handles; completed ones become MPI_REQUEST_NULL.
            unsafe { ffi::MPI_Testall(reqs.len() as c_int, reqs.as_mut_ptr(), &mut flag, ffi::RSMPI_STATUSES_IGNORE) };
            (flag != 0).then_some(())
        })
    }

    /// Test one request until it completes, returning its status.
    pub(super) fn wait_status(
        &mut self,
        req: &mut ffi::MPI_Request,
        peer: usize,
    ) -> Result<ffi::MPI_Status, CommError> {
        self.poll_until(peer, || {
            let mut flag: c_int = 0;
            // SAFETY: an all-zero MPI_Status is a valid value to be overwritten.
            let mut status: ffi::MPI_Status = unsafe { std::mem::zeroed() };
            // SAFETY: valid request handle.
            unsafe { ffi::MPI_Test(req, &mut flag, &mut status) };
            (flag != 0).then_some(status)
        })
    }

    pub(super) fn received_bytes(status: &ffi::MPI_Status) -> usize {
        let mut n: c_int = 0;
        // SAFETY: a status filled in by a completed receive.
        unsafe { ffi::MPI_Get_count(status, ffi::RSMPI_UINT8_T, &mut n) };
        n.max(0) as usize
    }
}

impl Transport for Mpi {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.size
    }

    fn hosts(&self) -> &[usize] {
        &self.hosts
    }

    fn send(&mut self, to: usize, tag: Tag, data: &[u8]) -> Result<(), CommError> {
        self.check_peer(to)?;
        let byte = unsafe { ffi::RSMPI_UINT8_T };
        // SAFETY: data outlives the wait below.
        let mut req = [unsafe { self.isend_raw(data.as_ptr().cast(), data.len(), byte, to, tag) }];
        self.wait_all(&mut req, to)
    }

    fn recv(&mut self, from: usize, tag: Tag, buf: &mut [u8]) -> Result<(), CommError> {
        self.check_peer(from)?;
        let byte = unsafe { ffi::RSMPI_UINT8_T };
        // SAFETY: buf outlives the wait below.
        let mut req = unsafe { self.irecv_raw(buf.as_mut_ptr().cast(), buf.len(), byte, from, tag) };
        let status = self.wait_status(&mut req, from)?;
        let got = Self::received_bytes(&status);
        if got != buf.len() {
            return Err(CommError::Protocol(format!(
                "message from rank {from} (tag {tag}) has {got} bytes, expected {}: the ranks \
                 issued different collectives",
                buf.len()
            )));
        }
        Ok(())
    }

    fn recv_vec(&mut self, from: usize, tag: Tag) -> Result<Vec<u8>, CommError> {
        let src = self.check_peer(from)?;
        let comm = self.comm;
        let len = self.poll_until(from, || {
            let mut flag: c_int = 0;
            // SAFETY: zeroed status is valid to overwrite; valid communicator.
            let mut status: ffi::MPI_Status = unsafe { std::mem::zeroed() };
            unsafe { ffi::MPI_Iprobe(src, tag, comm, &mut flag, &mut status) };
            (flag != 0).then(|| Self::received_bytes(&status))
        })?;
        let mut buf = vec![0u8; len];
        self.recv(from, tag, &mut buf)?;
        Ok(buf)
    }

    fn sendrecv(&mut self, to: usize, data: &[u8], from: usize, buf: &mut [u8], tag: Tag) -> Result<(), CommError> {
        self.check_peer(to)?;
        self.check_peer(from)?;
        let byte = unsafe { ffi::RSMPI_UINT8_T };
        // SAFETY: both buffers outlive the wait below.
        let mut reqs = unsafe {
            [
                self.irecv_raw(buf.as_mut_ptr().cast(), buf.len(), byte, from, tag),
                self.isend_raw(data.as_ptr().cast(), data.len(), byte, to, tag),
            ]
        };
        self.wait_all(&mut reqs, from)
    }

    fn exchange(&mut self, buf: &mut [f32], send: SendEnd, recv: RecvEnd, tag: Tag) -> Result<(), CommError> {
        self.exchange_impl(buf, send, recv, tag)
    }

    fn native_allreduce_sum(&mut self, data: &mut [f32]) -> Result<(), CommError> {
        if data.is_empty() {
            return Ok(());
        }
        // MPI_IN_PLACE is ((void *) 1) in Open MPI and MPICH.
        let in_place = std::ptr::without_provenance::<c_void>(1);
        // SAFETY: valid buffer of data.len() floats; blocking call.
        unsafe {
            ffi::MPI_Allreduce(
                in_place,
                data.as_mut_ptr().cast(),
                count(data.len()),
                ffi::RSMPI_FLOAT,
                ffi::RSMPI_SUM,
                self.comm,
            )
        };
        Ok(())
    }

    fn activity(&mut self) -> &mut Activity {
        &mut self.activity
    }

    fn set_policy(&mut self, policy: WaitPolicy) {
        self.policy = policy;
    }

    fn serve_status(&mut self) {
        self.serve_status_impl()
    }

    fn query_status(&mut self, grace: Duration) -> Vec<Option<StatusReply>> {
        self.query_status_impl(grace)
    }

    fn abort(&mut self, code: i32) -> ! {
        // SAFETY: valid communicator; MPI_Abort does not return.
        unsafe { ffi::MPI_Abort(self.comm, code) };
        std::process::exit(code)
    }
}
