//! `--wire bf16`: a Transport wrapper that sends the allreduce's floats as bfloat16, half the
//! bytes of f32 (Horovod's fp16 compression, with bf16's f32 exponent range so gradients
//! cannot overflow). The comm thread puts it around its transport for gradient buckets only;
//! the small helper collectives (batch-norm statistics, checks) stay exact.
//!
//! Why every rank still ends with the same bits: before a range of the vector leaves, the
//! sender rounds it to bf16 *in place*, so the sender keeps exactly the values the receiver
//! gets. Every value two ranks share began as such a send, so the algorithms' symmetric
//! steps (recursive doubling adds own + received on both sides) add the same two numbers,
//! and a copied result equals its source. Sums are still formed in f32; only what travels is
//! rounded (8 significant bits, relative error at most 2^-8 per send).

use super::bf16_round::{decode_combine, round_and_encode, round_in_place};
use super::{Activity, CommError, RecvEnd, SendEnd, StatusReply, Tag, Transport, WaitPolicy, skip_empty};
use std::time::Duration;

/// The encode and decode buffers, kept by the comm thread between collectives.
#[derive(Default)]
pub struct Bf16Stage {
    /// The bf16 encoding of the range being sent.
    out: Vec<u16>,
    /// The bf16 values being received.
    inb: Vec<u16>,
}

pub struct Bf16Wire<'a> {
    inner: &'a mut dyn Transport,
    stage: &'a mut Bf16Stage,
}

impl<'a> Bf16Wire<'a> {
    pub fn new(inner: &'a mut dyn Transport, stage: &'a mut Bf16Stage) -> Self {
        Bf16Wire { inner, stage }
    }
}

fn bytes(x: &[u16]) -> &[u8] {
    // SAFETY: any u16 is valid bytes; u8 has alignment 1; the length is exact.
    unsafe { std::slice::from_raw_parts(x.as_ptr().cast(), std::mem::size_of_val(x)) }
}

fn bytes_mut(x: &mut [u16]) -> &mut [u8] {
    // SAFETY: as `bytes`; every byte pattern is a valid u16.
    unsafe { std::slice::from_raw_parts_mut(x.as_mut_ptr().cast(), std::mem::size_of_val(x)) }
}

impl Transport for Bf16Wire<'_> {
    super::forward_to_inner!(who);
    fn send(&mut self, to: usize, tag: Tag, data: &[u8]) -> Result<(), CommError> {
        self.inner.send(to, tag, data)
    }
    super::forward_to_inner!(receive);
    fn sendrecv(&mut self, to: usize, data: &[u8], from: usize, buf: &mut [u8], tag: Tag) -> Result<(), CommError> {
        self.inner.sendrecv(to, data, from, buf, tag)
    }

    fn exchange(&mut self, buf: &mut [f32], send: SendEnd, recv: RecvEnd, tag: Tag) -> Result<(), CommError> {
        let (send, recv) = skip_empty(send, recv);
        if let Some((_, sr)) = &send {
            self.stage.out.resize(sr.len(), 0);
            round_and_encode(&mut buf[sr.clone()], &mut self.stage.out);
        }
        if let Some((_, rr, _)) = &recv {
            self.stage.inb.resize(rr.len(), 0);
        }
        match (send, recv) {
            (None, None) => Ok(()),
            (Some((to, _)), None) => self.inner.send(to, tag, bytes(&self.stage.out)),
            (None, Some((from, rr, how))) => {
                self.inner.recv(from, tag, bytes_mut(&mut self.stage.inb))?;
                decode_combine(&mut buf[rr], &self.stage.inb, how);
                Ok(())
            }
            (Some((to, _)), Some((from, rr, how))) => {
                self.inner.sendrecv(to, bytes(&self.stage.out), from, bytes_mut(&mut self.stage.inb), tag)?;
                decode_combine(&mut buf[rr], &self.stage.inb, how);
                Ok(())
            }
        }
    }

    fn settle(&mut self, data: &mut [f32]) {
        round_in_place(data);
    }

    /// The library's MPI_Allreduce has no bf16 sum here: it runs in f32, uncompressed.
    fn native_allreduce_sum(&mut self, data: &mut [f32]) -> Result<(), CommError> {
        self.inner.native_allreduce_sum(data)
    }
    super::forward_to_inner!();
}
