//! The exchange step on MPI: messages cut by length alone (eager pieces or chunks), copies
//! received straight into place, reductions pipelined through small scratch slots.

use super::Mpi;
use crate::comm::reduce::combine;
use crate::comm::transport::{Combine, CommError, RecvEnd, SendEnd, Tag, skip_empty};
use mpi::ffi;
use std::ops::Range;

impl Mpi {
    /// How a message of `len` floats is cut (a function of the length alone, so that sender
    /// and receiver agree): eager-sized pieces for mid-size messages, chunks for large ones.
    pub(super) fn piece_len(&self, len: usize) -> usize {
        let p = if len > self.piece && len <= self.eager_max { self.piece } else { self.chunk };
        p.min(len).max(1)
    }

    /// One request per piece of `r`, cut as `piece_len` says, each from `post(piece)`.
    /// Sends and receives are both cut here, so both sides agree on the pieces whatever the
    /// receiver does with them.
    fn post_pieces(
        &self,
        r: &Range<usize>,
        reqs: &mut Vec<ffi::MPI_Request>,
        mut post: impl FnMut(Range<usize>) -> ffi::MPI_Request,
    ) {
        let step = self.piece_len(r.len());
        reqs.extend((0..r.len().div_ceil(step)).map(|i| post(nth_piece(r, step, i))));
    }

    /// Post the sends of `buf[r]`, piece by piece.
    ///
    /// # Safety
    /// `base[r]` must stay valid and unmodified until the requests complete.
    pub(super) unsafe fn post_sends(
        &self,
        base: *const f32,
        r: &Range<usize>,
        to: usize,
        tag: Tag,
        reqs: &mut Vec<ffi::MPI_Request>,
    ) {
        let float = unsafe { ffi::RSMPI_FLOAT };
        // SAFETY: every piece lies inside base[r], which the caller keeps alive.
        self.post_pieces(r, reqs, |p| unsafe { self.isend_raw(base.add(p.start).cast(), p.len(), float, to, tag) });
    }

    /// Post receives straight into `buf[r]`, piece by piece.
    ///
    /// # Safety
    /// `base[r]` must stay valid and untouched until the requests complete.
    pub(super) unsafe fn post_recvs(
        &self,
        base: *mut f32,
        r: &Range<usize>,
        from: usize,
        tag: Tag,
        reqs: &mut Vec<ffi::MPI_Request>,
    ) {
        let float = unsafe { ffi::RSMPI_FLOAT };
        // SAFETY: every piece lies inside base[r], which the caller keeps alive.
        self.post_pieces(r, reqs, |p| unsafe { self.irecv_raw(base.add(p.start).cast(), p.len(), float, from, tag) });
    }

    /// The reduction case of `exchange`, pipelined in chunks through scratch slots.
    pub(super) fn exchange_reduce(
        &mut self,
        buf: &mut [f32],
        send: SendEnd,
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
        let depth = if chunk == self.piece { nchunks } else { self.depth.min(nchunks) };
        let aliased = match &send {
            Some((_, sr)) if sr.start < rr.end && rr.start < sr.end => {
                assert_eq!(*sr, rr, "exchange: overlapping send and receive ranges must be equal");
                true
            }
            _ => false,
        };
        if self.scratch.len() < depth * chunk {
            self.scratch.resize(depth * chunk, 0.0);
        }
        let base = buf.as_mut_ptr();
        let slots = self.scratch.as_mut_ptr();
        let piece = |i: usize| nth_piece(&rr, chunk, i);
        // Receives first (an expected message is cheaper to take), then every send.
        let mut recvs = std::mem::take(&mut self.recvs);
        recvs.clear();
        for i in 0..depth {
            let p = piece(i);
            // SAFETY: slot i lies inside scratch, which is not touched until the request completes.
            recvs.push(unsafe { self.irecv_raw(slots.add(i * chunk).cast(), p.len(), float, from, tag) });
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
                    (std::slice::from_raw_parts_mut(base.add(rr.start), len), std::slice::from_raw_parts(slots, len))
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
                    recvs[slot] = unsafe { self.irecv_raw(slots.add(slot * chunk).cast(), q.len(), float, from, tag) };
                }
            }
            self.wait_all(&mut sends, to)
        })();
        self.sends = sends;
        self.recvs = recvs;
        result
    }

    pub(super) fn exchange_impl(
        &mut self,
        buf: &mut [f32],
        send: SendEnd,
        recv: RecvEnd,
        tag: Tag,
    ) -> Result<(), CommError> {
        let (send, recv) = skip_empty(send, recv);
        for peer in send.iter().map(|s| s.0).chain(recv.iter().map(|r| r.0)) {
            self.check_peer(peer)?;
        }
        let n = buf.len();
        assert!(send.as_ref().is_none_or(|(_, r)| r.end <= n), "send range out of bounds");
        assert!(recv.as_ref().is_none_or(|(_, r, _)| r.end <= n), "receive range out of bounds");
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
}

/// Piece i of `r` cut into pieces of `step` floats (the last one shorter).
fn nth_piece(r: &Range<usize>, step: usize, i: usize) -> Range<usize> {
    let s = r.start + i * step;
    s..(s + step).min(r.end)
}
