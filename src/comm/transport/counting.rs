//! A Transport wrapper that counts the bytes this rank sends through it: what summary.json
//! reports as the bytes a step put on the wire, measured where they leave rather than
//! computed from the algorithm.

use super::{Activity, CommError, RecvEnd, SendEnd, StatusReply, Tag, Transport, WaitPolicy, skip_empty};
use std::time::Duration;

pub struct Counting<'a> {
    inner: &'a mut dyn Transport,
    /// Bytes handed to the inner transport to send.
    pub sent: u64,
}

impl<'a> Counting<'a> {
    pub fn new(inner: &'a mut dyn Transport) -> Self {
        Counting { inner, sent: 0 }
    }
}

impl Transport for Counting<'_> {
    super::forward_to_inner!(who);
    fn send(&mut self, to: usize, tag: Tag, data: &[u8]) -> Result<(), CommError> {
        self.sent += data.len() as u64;
        self.inner.send(to, tag, data)
    }
    super::forward_to_inner!(receive);
    fn sendrecv(&mut self, to: usize, data: &[u8], from: usize, buf: &mut [u8], tag: Tag) -> Result<(), CommError> {
        self.sent += data.len() as u64;
        self.inner.sendrecv(to, data, from, buf, tag)
    }
    fn exchange(&mut self, buf: &mut [f32], send: SendEnd, recv: RecvEnd, tag: Tag) -> Result<(), CommError> {
        let (send, recv) = skip_empty(send, recv);
        if let Some((_, r)) = &send {
            self.sent += 4 * r.len() as u64;
        }
        self.inner.exchange(buf, send, recv, tag)
    }
    /// The library's own allreduce moves what it chooses, out of sight: not counted.
    fn native_allreduce_sum(&mut self, data: &mut [f32]) -> Result<(), CommError> {
        self.inner.native_allreduce_sum(data)
    }
    super::forward_to_inner!();
}
