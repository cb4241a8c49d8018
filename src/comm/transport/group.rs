//! `Group`: some of a transport's ranks seen as a job of their own (member i is rank i of the
//! group), so that an allreduce algorithm written for a whole job runs unchanged among the
//! ranks of one host, or among one rank of every host (`allreduce::hierarchical`).
//!
//! Messages keep their tags and go through the underlying transport (and its wire format)
//! to the members' real ranks; MPI matches on (source, tag), so two groups that share no
//! pair of ranks cannot take each other's messages. Errors name real ranks, the ones a user
//! finds in the logs.

use super::{Activity, CommError, RecvEnd, SendEnd, StatusReply, Tag, Transport, WaitPolicy};
use std::time::Duration;

pub struct Group<'a, T: Transport + ?Sized> {
    inner: &'a mut T,
    /// The real rank of each member, in group order.
    members: &'a [usize],
    /// This rank's index in `members`.
    me: usize,
}

impl<'a, T: Transport + ?Sized> Group<'a, T> {
    /// The group of `members` (real ranks, this one among them).
    pub fn new(inner: &'a mut T, members: &'a [usize]) -> Self {
        let me =
            members.iter().position(|&r| r == inner.rank()).expect("a group's members include the rank that uses it");
        Group { inner, members, me }
    }

    fn real(&self, member: usize) -> Result<usize, CommError> {
        self.members.get(member).copied().ok_or_else(|| {
            CommError::Protocol(format!("group member {member} does not exist (the group has {})", self.members.len()))
        })
    }
}

impl<T: Transport + ?Sized> Transport for Group<'_, T> {
    fn rank(&self) -> usize {
        self.me
    }

    fn size(&self) -> usize {
        self.members.len()
    }

    // `hosts` stays empty: an algorithm that runs inside a group treats it as flat.

    fn send(&mut self, to: usize, tag: Tag, data: &[u8]) -> Result<(), CommError> {
        let to = self.real(to)?;
        self.inner.send(to, tag, data)
    }

    fn recv(&mut self, from: usize, tag: Tag, buf: &mut [u8]) -> Result<(), CommError> {
        let from = self.real(from)?;
        self.inner.recv(from, tag, buf)
    }

    fn recv_vec(&mut self, from: usize, tag: Tag) -> Result<Vec<u8>, CommError> {
        let from = self.real(from)?;
        self.inner.recv_vec(from, tag)
    }

    fn sendrecv(&mut self, to: usize, data: &[u8], from: usize, buf: &mut [u8], tag: Tag) -> Result<(), CommError> {
        let (to, from) = (self.real(to)?, self.real(from)?);
        self.inner.sendrecv(to, data, from, buf, tag)
    }

    fn exchange(&mut self, buf: &mut [f32], send: SendEnd, recv: RecvEnd, tag: Tag) -> Result<(), CommError> {
        let send = match send {
            Some((peer, range)) => Some((self.real(peer)?, range)),
            None => None,
        };
        let recv = match recv {
            Some((peer, range, how)) => Some((self.real(peer)?, range, how)),
            None => None,
        };
        self.inner.exchange(buf, send, recv, tag)
    }

    fn native_allreduce_sum(&mut self, _data: &mut [f32]) -> Result<(), CommError> {
        Err(CommError::Protocol("MPI_Allreduce runs over the whole job, not over a group of its ranks".into()))
    }
    super::forward_to_inner!();
}
