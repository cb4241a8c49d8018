//! `Mpi`: the transport over MPI point-to-point (rsmpi's raw bindings), owned by the comm
//! thread, which initialized MPI and finalizes it when this is dropped. Every wait is a
//! nonblocking request tested in a loop, so that a stalled peer is noticed and status
//! queries are answered. Reductions of large messages are pipelined in chunks: the receive of
//! chunk k+1 is in flight while chunk k (in a small, cache-resident scratch slot) is added.
//!
//! Messages are cut the same way on both sides, by length only:
//! - up to `DCGAN_ALLREDUCE_EAGER_MAX` (default 64KiB): pieces of `DCGAN_ALLREDUCE_PIECE`
//!   bytes (default 4032), small enough for Open MPI's shared-memory eager protocol (4 KiB with
//!   headers), so no piece pays the rendezvous handshake; all pieces are in flight at once;
//! - larger: chunks of `DCGAN_ALLREDUCE_CHUNK` bytes (default 1MiB), `DCGAN_ALLREDUCE_DEPTH`
//!   (default 2, at most 8) receives in flight.
//!
//! The knobs are read from the environment and must be the same on every rank.

use super::{Combine, CommError, Tag, Tick, Transport, WaitClock, WaitPolicy};
use super::{TAG_STATUS_QUERY, TAG_STATUS_REPLY};
use crate::comm::WorldInfo;
use crate::comm::reduce::combine;
use crate::comm::status::{Activity, REPLY_BYTES, StatusReply};
use anyhow::{anyhow, bail};
use mpi::environment::Universe;
use mpi::ffi;
use mpi::topology::Communicator;
use mpi::traits::*;
use std::ffi::{c_int, c_void};
use std::ops::Range;
use std::time::{Duration, Instant};

const MAX_DEPTH: usize = 8;
const DEFAULT_CHUNK_BYTES: usize = 1 << 20;
const DEFAULT_DEPTH: usize = 2;
const DEFAULT_PIECE_BYTES: usize = 4032;
const DEFAULT_EAGER_MAX_BYTES: usize = 64 << 10;

pub struct Mpi {
    comm: ffi::MPI_Comm,
    rank: usize,
    size: usize,
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

fn env_usize(name: &str) -> Option<usize> {
    std::env::var(name)
        .ok()
        .and_then(|v| crate::cli::size::parse_bytes(&v).ok())
}

impl Mpi {
    /// Initialize MPI on this thread and learn who we are. Asks for MPI_THREAD_MULTIPLE;
    /// needs at least MPI_THREAD_FUNNELED (every call comes from this thread, the one that
    /// initialized MPI).
    pub fn init() -> anyhow::Result<(Mpi, WorldInfo)> {
        let (universe, level) = mpi::initialize_with_threading(mpi::Threading::Multiple)
            .ok_or_else(|| anyhow!("MPI was already initialized in this process"))?;
        if level < mpi::Threading::Funneled {
            bail!(
                "the MPI library granted thread level {level:?}; dcgan-train needs at least \
                 Funneled (MPI calls come from the comm thread): use an MPI built with thread \
                 support"
            );
        }
        let world = universe.world();
        let rank = world.rank() as usize;
        let size = world.size() as usize;
        let local = world.split_shared(rank as c_int);
        let (local_rank, local_size) = (local.rank() as usize, local.size() as usize);
        drop(local);
        let host = crate::comm::hostname();
        const HOST_BYTES: usize = 256;
        let mut mine = [0u8; HOST_BYTES];
        let n = host.len().min(HOST_BYTES);
        mine[..n].copy_from_slice(&host.as_bytes()[..n]);
        let mut all = vec![0u8; HOST_BYTES * size];
        world.all_gather_into(&mine[..], &mut all[..]);
        let hosts = all
            .chunks_exact(HOST_BYTES)
            .map(|c| {
                let end = c.iter().position(|&b| b == 0).unwrap_or(c.len());
                String::from_utf8_lossy(&c[..end]).into_owned()
            })
            .collect();
        let library = mpi::environment::library_version()
            .unwrap_or_else(|_| "unknown MPI".into())
            .trim_end_matches(char::from(0))
            .to_string()
            .lines()
            .next()
            .unwrap_or("unknown MPI")
            .trim()
            .to_string();
        let info = WorldInfo {
            rank,
            size,
            local_rank,
            local_size,
            hostname: host,
            hosts,
            mpi_library: library,
            thread_level: format!("{level:?}").to_lowercase(),
        };
        let chunk_bytes = env_usize("DCGAN_ALLREDUCE_CHUNK").unwrap_or(DEFAULT_CHUNK_BYTES);
        let depth = env_usize("DCGAN_ALLREDUCE_DEPTH").unwrap_or(DEFAULT_DEPTH);
        let piece_bytes = env_usize("DCGAN_ALLREDUCE_PIECE").unwrap_or(DEFAULT_PIECE_BYTES);
        let eager_max = env_usize("DCGAN_ALLREDUCE_EAGER_MAX").unwrap_or(DEFAULT_EAGER_MAX_BYTES);
        let t = Mpi {
            // SAFETY: reading an extern constant initialized by the MPI shim.
            comm: unsafe { ffi::RSMPI_COMM_WORLD },
            rank,
            size,
            policy: WaitPolicy::default(),
            activity: Activity::new(),
            scratch: Vec::new(),
            chunk: (chunk_bytes / 4).max(1),
            depth: depth.clamp(1, MAX_DEPTH),
            piece: (piece_bytes / 4).max(1),
            eager_max: eager_max / 4,
            recvs: Vec::new(),
            sends: Vec::new(),
            _universe: universe,
        };
        Ok((t, info))
    }

    fn check_peer(&self, peer: usize) -> Result<c_int, CommError> {
        if peer >= self.size {
            return Err(CommError::Protocol(format!(
                "rank {peer} does not exist (the job has {} ranks)",
                self.size
            )));
        }
        Ok(peer as c_int)
    }

    /// # Safety
    /// `ptr..ptr+len` must stay valid and unmodified until the request completes.
    unsafe fn isend_raw(
        &self,
        ptr: *const c_void,
        len: usize,
        dtype: ffi::MPI_Datatype,
        to: usize,
        tag: Tag,
    ) -> ffi::MPI_Request {
        let mut req = null_request();
        // SAFETY: the caller keeps the buffer alive; the communicator is valid.
        unsafe {
            ffi::MPI_Isend(
                ptr,
                count(len),
                dtype,
                to as c_int,
                tag,
                self.comm,
                &mut req,
            )
        };
        req
    }

    /// # Safety
    /// `ptr..ptr+len` must stay valid and untouched until the request completes.
    unsafe fn irecv_raw(
        &self,
        ptr: *mut c_void,
        len: usize,
        dtype: ffi::MPI_Datatype,
        from: usize,
        tag: Tag,
    ) -> ffi::MPI_Request {
        let mut req = null_request();
        // SAFETY: as above.
        unsafe {
            ffi::MPI_Irecv(
                ptr,
                count(len),
                dtype,
                from as c_int,
                tag,
                self.comm,
                &mut req,
            )
        };
        req
    }

    /// How a message of `len` floats is cut (a function of the length alone, so that sender
    /// and receiver agree): eager-sized pieces for mid-size messages, chunks for large ones.
    fn piece_len(&self, len: usize) -> usize {
        let p = if len > self.piece && len <= self.eager_max {
            self.piece
        } else {
            self.chunk
        };
        p.min(len).max(1)
    }

    /// Post the sends of `buf[r]` cut as `piece_len` says. Every message is cut this way,
    /// whatever the receiver does with it, so both sides agree on the pieces.
    ///
    /// # Safety
    /// `base[r]` must stay valid and unmodified until the requests complete.
    unsafe fn post_sends(
        &self,
        base: *const f32,
        r: &Range<usize>,
        to: usize,
        tag: Tag,
        reqs: &mut Vec<ffi::MPI_Request>,
    ) {
        let float = unsafe { ffi::RSMPI_FLOAT };
        let step = self.piece_len(r.len());
        let mut s = r.start;
        while s < r.end {
            let e = (s + step).min(r.end);
            // SAFETY: inside base[r], which the caller keeps alive.
            reqs.push(unsafe { self.isend_raw(base.add(s).cast(), e - s, float, to, tag) });
            s = e;
        }
    }

    /// Post receives straight into `buf[r]`, chunked as `post_sends` cuts the message.
    ///
    /// # Safety
    /// `base[r]` must stay valid and untouched until the requests complete.
    unsafe fn post_recvs(
        &self,
        base: *mut f32,
        r: &Range<usize>,
        from: usize,
        tag: Tag,
        reqs: &mut Vec<ffi::MPI_Request>,
    ) {
        let float = unsafe { ffi::RSMPI_FLOAT };
        let step = self.piece_len(r.len());
        let mut s = r.start;
        while s < r.end {
            let e = (s + step).min(r.end);
            // SAFETY: inside base[r], which the caller keeps alive.
            reqs.push(unsafe { self.irecv_raw(base.add(s).cast(), e - s, float, from, tag) });
            s = e;
        }
    }

    /// Test `reqs` until all are complete, or the policy says stop.
    fn wait_all(&mut self, reqs: &mut [ffi::MPI_Request], peer: usize) -> Result<(), CommError> {
        let mut clock = WaitClock::new();
        loop {
            let mut flag: c_int = 0;
            // SAFETY: valid request handles; completed ones become MPI_REQUEST_NULL.
            unsafe {
                ffi::MPI_Testall(
                    reqs.len() as c_int,
                    reqs.as_mut_ptr(),
                    &mut flag,
                    ffi::RSMPI_STATUSES_IGNORE,
                )
            };
            if flag != 0 {
                return Ok(());
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

    /// Test one request, returning its status.
    fn wait_status(
        &mut self,
        req: &mut ffi::MPI_Request,
        peer: usize,
    ) -> Result<ffi::MPI_Status, CommError> {
        let mut clock = WaitClock::new();
        loop {
            let mut flag: c_int = 0;
            // SAFETY: an all-zero MPI_Status is a valid value to be overwritten.
            let mut status: ffi::MPI_Status = unsafe { std::mem::zeroed() };
            // SAFETY: valid request handle.
            unsafe { ffi::MPI_Test(req, &mut flag, &mut status) };
            if flag != 0 {
                return Ok(status);
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

    fn received_bytes(status: &ffi::MPI_Status) -> usize {
        let mut n: c_int = 0;
        // SAFETY: a status filled in by a completed receive.
        unsafe { ffi::MPI_Get_count(status, ffi::RSMPI_UINT8_T, &mut n) };
        n.max(0) as usize
    }

    /// The reduction case of `exchange`, pipelined in chunks through scratch slots.
    fn exchange_reduce(
        &mut self,
        buf: &mut [f32],
        send: Option<(usize, Range<usize>)>,
        from: usize,
        rr: Range<usize>,
        how: Combine,
        tag: Tag,
    ) -> Result<(), CommError> {
        let float = unsafe { ffi::RSMPI_FLOAT };
        let len = rr.len();
        let chunk = self.piece_len(len);
        let nchunks = len.div_ceil(chunk);
        // Eager pieces: all in flight at once. Chunks: `depth` at a time through small slots.
        let depth = if chunk == self.piece {
            nchunks
        } else {
            self.depth.min(nchunks)
        };
        let aliased = match &send {
            Some((_, sr)) if sr.start < rr.end && rr.start < sr.end => {
                assert_eq!(
                    *sr, rr,
                    "exchange: overlapping send and receive ranges must be equal"
                );
                true
            }
            _ => false,
        };
        if self.scratch.len() < depth * chunk {
            self.scratch.resize(depth * chunk, 0.0);
        }
        let base = buf.as_mut_ptr();
        let slots = self.scratch.as_mut_ptr();
        let piece = |i: usize| -> Range<usize> {
            let s = rr.start + i * chunk;
            s..(s + chunk).min(rr.end)
        };
        // Receives first (an expected message is cheaper to take), then every send.
        let mut recvs = std::mem::take(&mut self.recvs);
        recvs.clear();
        for i in 0..depth {
            let p = piece(i);
            // SAFETY: slot i lies inside scratch, which is not touched until the request completes.
            recvs.push(unsafe {
                self.irecv_raw(slots.add(i * chunk).cast(), p.len(), float, from, tag)
            });
        }
        let mut sends = std::mem::take(&mut self.sends);
        sends.clear();
        let to = send.as_ref().map(|(to, _)| *to).unwrap_or(from);
        if let Some((to, sr)) = &send {
            // SAFETY: buf[sr] is only written after its send completed (aliased case) or not
            // at all here (disjoint ranges).
            unsafe { self.post_sends(base, sr, *to, tag, &mut sends) };
        }
        let result = (|| {
            if nchunks == 1 {
                // Small message: wait for the receive and the send(s) at once, then add.
                sends.push(recvs[0]);
                self.wait_all(&mut sends, from)?;
                // SAFETY: the receive completed; rr lies inside buf.
                let (dst, src) = unsafe {
                    (
                        std::slice::from_raw_parts_mut(base.add(rr.start), len),
                        std::slice::from_raw_parts(slots, len),
                    )
                };
                combine(dst, src, how);
                return Ok(());
            }
            for i in 0..nchunks {
                let slot = i % depth;
                self.wait_all(&mut recvs[slot..slot + 1], from)?;
                if aliased {
                    self.wait_all(&mut sends[i..i + 1], to)?;
                }
                let p = piece(i);
                // SAFETY: the slot's receive completed; p lies inside buf and no request
                // reads it any more (disjoint from every send, or its own send completed).
                let (dst, src) = unsafe {
                    (
                        std::slice::from_raw_parts_mut(base.add(p.start), p.len()),
                        std::slice::from_raw_parts(slots.add(slot * chunk), p.len()),
                    )
                };
                combine(dst, src, how);
                if i + depth < nchunks {
                    let q = piece(i + depth);
                    // SAFETY: the slot is free again (its data was just consumed).
                    recvs[slot] = unsafe {
                        self.irecv_raw(slots.add(slot * chunk).cast(), q.len(), float, from, tag)
                    };
                }
            }
            self.wait_all(&mut sends, to)
        })();
        self.sends = sends;
        self.recvs = recvs;
        result
    }
}

impl Transport for Mpi {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.size
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
        let mut req =
            unsafe { self.irecv_raw(buf.as_mut_ptr().cast(), buf.len(), byte, from, tag) };
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
        let mut clock = WaitClock::new();
        let len = loop {
            let mut flag: c_int = 0;
            // SAFETY: zeroed status is valid to overwrite; valid communicator.
            let mut status: ffi::MPI_Status = unsafe { std::mem::zeroed() };
            unsafe { ffi::MPI_Iprobe(src, tag, self.comm, &mut flag, &mut status) };
            if flag != 0 {
                break Self::received_bytes(&status);
            }
            match clock.tick(&self.policy, from) {
                Tick::Poll => {}
                Tick::Serve => {
                    self.activity.waiting_on = Some(from);
                    self.serve_status();
                }
                Tick::Fail(e) => return Err(e),
            }
        };
        let mut buf = vec![0u8; len];
        self.recv(from, tag, &mut buf)?;
        Ok(buf)
    }

    fn sendrecv(
        &mut self,
        to: usize,
        data: &[u8],
        from: usize,
        buf: &mut [u8],
        tag: Tag,
    ) -> Result<(), CommError> {
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

    fn exchange(
        &mut self,
        buf: &mut [f32],
        send: Option<(usize, Range<usize>)>,
        recv: Option<(usize, Range<usize>, Combine)>,
        tag: Tag,
    ) -> Result<(), CommError> {
        let send = send.filter(|(_, r)| !r.is_empty());
        let recv = recv.filter(|(_, r, _)| !r.is_empty());
        for peer in send.iter().map(|s| s.0).chain(recv.iter().map(|r| r.0)) {
            self.check_peer(peer)?;
        }
        let n = buf.len();
        assert!(
            send.as_ref().is_none_or(|(_, r)| r.end <= n),
            "send range out of bounds"
        );
        assert!(
            recv.as_ref().is_none_or(|(_, r, _)| r.end <= n),
            "receive range out of bounds"
        );
        let base = buf.as_mut_ptr();
        match recv {
            None if send.is_none() => Ok(()),
            None | Some((_, _, Combine::Copy)) => {
                let mut reqs = std::mem::take(&mut self.sends);
                reqs.clear();
                let mut peer = 0;
                if let Some((from, rr, _)) = &recv {
                    if let Some((_, sr)) = &send {
                        assert!(
                            sr.end <= rr.start || rr.end <= sr.start,
                            "exchange: a copy must not overwrite what is being sent"
                        );
                    }
                    // Straight into place: no copy through scratch.
                    // SAFETY: buf outlives the wait below; disjoint from the sends.
                    unsafe { self.post_recvs(base, rr, *from, tag, &mut reqs) };
                    peer = *from;
                }
                if let Some((to, sr)) = &send {
                    // SAFETY: buf outlives the wait below and is not written meanwhile.
                    unsafe { self.post_sends(base, sr, *to, tag, &mut reqs) };
                    if recv.is_none() {
                        peer = *to;
                    }
                }
                let r = self.wait_all(&mut reqs, peer);
                self.sends = reqs;
                r
            }
            Some((from, rr, how)) => self.exchange_reduce(buf, send, from, rr, how, tag),
        }
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

    fn policy(&self) -> &WaitPolicy {
        &self.policy
    }

    fn serve_status(&mut self) {
        loop {
            let mut flag: c_int = 0;
            // SAFETY: zeroed status is valid to overwrite.
            let mut status: ffi::MPI_Status = unsafe { std::mem::zeroed() };
            unsafe {
                ffi::MPI_Iprobe(
                    ffi::RSMPI_ANY_SOURCE,
                    TAG_STATUS_QUERY,
                    self.comm,
                    &mut flag,
                    &mut status,
                )
            };
            if flag == 0 {
                return;
            }
            let src = status.MPI_SOURCE;
            let mut byte = 0u8;
            let reply = self.activity.reply().encode();
            // SAFETY: the probed 1-byte query; the reply is small (sent eagerly, so MPI_Send
            // returns without waiting for the asker).
            unsafe {
                ffi::MPI_Recv(
                    (&mut byte as *mut u8).cast(),
                    1,
                    ffi::RSMPI_UINT8_T,
                    src,
                    TAG_STATUS_QUERY,
                    self.comm,
                    ffi::RSMPI_STATUS_IGNORE,
                );
                ffi::MPI_Send(
                    reply.as_ptr().cast(),
                    count(reply.len()),
                    ffi::RSMPI_UINT8_T,
                    src,
                    TAG_STATUS_REPLY,
                    self.comm,
                );
            }
        }
    }

    fn query_status(&mut self, grace: Duration) -> Vec<Option<StatusReply>> {
        let byte = unsafe { ffi::RSMPI_UINT8_T };
        let query = [1u8];
        let mut out: Vec<Option<StatusReply>> = vec![None; self.size];
        let mut answered = vec![false; self.size];
        let mut bufs = vec![vec![0u8; REPLY_BYTES]; self.size];
        let mut recvs = vec![null_request(); self.size];
        let mut sends = vec![null_request(); self.size];
        for r in (0..self.size).filter(|&r| r != self.rank) {
            // SAFETY: bufs and query outlive the requests (waited or cancelled below).
            unsafe {
                recvs[r] = self.irecv_raw(
                    bufs[r].as_mut_ptr().cast(),
                    REPLY_BYTES,
                    byte,
                    r,
                    TAG_STATUS_REPLY,
                );
                sends[r] = self.isend_raw(query.as_ptr().cast(), 1, byte, r, TAG_STATUS_QUERY);
            }
        }
        let deadline = Instant::now() + grace;
        let mut missing = self.size - 1;
        while missing > 0 && Instant::now() < deadline {
            // Other stalled ranks may be asking this one at the same time.
            self.serve_status();
            for r in 0..self.size {
                if r == self.rank || answered[r] {
                    continue;
                }
                let mut flag: c_int = 0;
                // SAFETY: zeroed status is valid to overwrite; recvs[r] is a live request.
                let mut status: ffi::MPI_Status = unsafe { std::mem::zeroed() };
                unsafe { ffi::MPI_Test(&mut recvs[r], &mut flag, &mut status) };
                if flag != 0 {
                    let n = Self::received_bytes(&status);
                    out[r] = StatusReply::decode(&bufs[r][..n]);
                    answered[r] = true;
                    missing -= 1;
                }
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        for r in (0..self.size).filter(|&r| r != self.rank) {
            // SAFETY: live or null requests; a cancelled receive completes at once.
            unsafe {
                if !answered[r] {
                    ffi::MPI_Cancel(&mut recvs[r]);
                    ffi::MPI_Wait(&mut recvs[r], ffi::RSMPI_STATUS_IGNORE);
                }
                // The 1-byte query is sent eagerly; do not wait for a dead rank to take it.
                ffi::MPI_Request_free(&mut sends[r]);
            }
        }
        out
    }

    fn abort(&mut self, code: i32) -> ! {
        // SAFETY: valid communicator; MPI_Abort does not return.
        unsafe { ffi::MPI_Abort(self.comm, code) };
        std::process::exit(code)
    }
}
