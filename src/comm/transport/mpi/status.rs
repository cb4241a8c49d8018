//! The stall detector's messages on MPI: answering "where are you?" and asking it.

use super::{Mpi, count, null_request};
use crate::comm::status::{REPLY_BYTES, StatusReply};
use crate::comm::transport::{TAG_STATUS_QUERY, TAG_STATUS_REPLY};
use mpi::ffi;
use std::ffi::c_int;
use std::time::{Duration, Instant};

impl Mpi {
    pub(super) fn serve_status_impl(&mut self) {
        loop {
            let mut flag: c_int = 0;
            // SAFETY: zeroed status is valid to overwrite.
            let mut status: ffi::MPI_Status = unsafe { std::mem::zeroed() };
            unsafe { ffi::MPI_Iprobe(ffi::RSMPI_ANY_SOURCE, TAG_STATUS_QUERY, self.comm, &mut flag, &mut status) };
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

    pub(super) fn query_status_impl(&mut self, grace: Duration) -> Vec<Option<StatusReply>> {
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
                recvs[r] = self.irecv_raw(bufs[r].as_mut_ptr().cast(), REPLY_BYTES, byte, r, TAG_STATUS_REPLY);
                sends[r] = self.isend_raw(query.as_ptr().cast(), 1, byte, r, TAG_STATUS_QUERY);
            }
        }
        let deadline = Instant::now() + grace;
        let mut missing = self.size - 1;
        while missing > 0 && Instant::now() < deadline {
            // Other stalled ranks may be asking this one at the same time.
            self.serve_status_impl();
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
}
