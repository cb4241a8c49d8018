//! `Local`: N ranks as N endpoints in one process, connected by channels. Sends never block
//! (like MPI's buffered small messages); receives match on (source, tag) in arrival order,
//! as MPI does. Used by the unit tests to run every algorithm at any rank count, and as the
//! one-rank transport when there is no MPI.

use super::{Combine, CommError, RecvEnd, SendEnd, Tag, Transport, WaitPolicy, f32_bytes, skip_empty};
use crate::comm::reduce::combine_bytes;
use crate::comm::status::{Activity, StatusReply};
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel};
use std::time::{Duration, Instant};

struct Msg {
    tag: Tag,
    data: Vec<u8>,
}

struct Query {
    reply: Sender<(usize, StatusReply)>,
}

/// One rank's endpoint. Create a whole group with `Local::group(n)` and move one endpoint to
/// each thread.
pub struct Local {
    rank: usize,
    size: usize,
    /// `to[j]`: messages from this rank to rank j.
    to: Vec<Sender<Msg>>,
    /// `from[j]`: messages from rank j to this rank.
    from: Vec<Receiver<Msg>>,
    /// Messages from rank j that arrived before a receive with their tag was posted.
    early: Vec<VecDeque<Msg>>,
    queries_to: Vec<Sender<Query>>,
    queries: Receiver<Query>,
    policy: WaitPolicy,
    activity: Activity,
    /// `Transport::hosts`: empty (one host) unless made by `on_hosts`.
    hosts: Vec<usize>,
}

/// How long one blocking receive sleeps before it checks the abort flag, the stall timeout
/// and status queries again.
const POLL: Duration = Duration::from_millis(5);

impl Local {
    /// `n` connected endpoints, rank i at index i.
    pub fn group(n: usize) -> Vec<Local> {
        assert!(n >= 1, "a group has at least one rank");
        // senders[i][j] / receivers[j][i]: the channel from rank i to rank j.
        let mut senders: Vec<Vec<Sender<Msg>>> = (0..n).map(|_| Vec::with_capacity(n)).collect();
        let mut receivers: Vec<Vec<Option<Receiver<Msg>>>> = (0..n).map(|_| (0..n).map(|_| None).collect()).collect();
        for (i, row) in senders.iter_mut().enumerate() {
            for inbox in receivers.iter_mut() {
                let (tx, rx) = channel();
                row.push(tx);
                inbox[i] = Some(rx);
            }
        }
        let (qtx, qrx): (Vec<_>, Vec<_>) = (0..n).map(|_| channel::<Query>()).unzip();
        senders
            .into_iter()
            .zip(receivers)
            .zip(qrx)
            .enumerate()
            .map(|(rank, ((to, from), queries))| Local {
                rank,
                size: n,
                to,
                from: from.into_iter().map(|r| r.expect("every channel made")).collect(),
                early: (0..n).map(|_| VecDeque::new()).collect(),
                queries_to: qtx.clone(),
                queries,
                policy: WaitPolicy::default(),
                activity: Activity::new(),
                hosts: Vec::new(),
            })
            .collect()
    }

    /// A group whose rank r says it runs on host `hosts[r]` (for tests of topology-aware
    /// algorithms; the messages still go through channels).
    pub fn on_hosts(hosts: &[usize]) -> Vec<Local> {
        let mut group = Local::group(hosts.len());
        for t in &mut group {
            t.hosts = super::host_numbers(hosts);
        }
        group
    }

    fn check_peer(&self, peer: usize) -> Result<(), CommError> {
        if peer >= self.size {
            return Err(CommError::Protocol(format!("rank {peer} does not exist (the job has {} ranks)", self.size)));
        }
        Ok(())
    }

    /// The next message from `from` with `tag`, waiting as long as the policy allows.
    fn take(&mut self, from: usize, tag: Tag) -> Result<Vec<u8>, CommError> {
        self.check_peer(from)?;
        if let Some(pos) = self.early[from].iter().position(|m| m.tag == tag) {
            return Ok(self.early[from].remove(pos).expect("position is valid").data);
        }
        let start = Instant::now();
        loop {
            match self.from[from].recv_timeout(POLL) {
                Ok(m) if m.tag == tag => return Ok(m.data),
                Ok(m) => self.early[from].push_back(m),
                Err(RecvTimeoutError::Timeout) => {
                    let code = self.policy.abort.load(Ordering::Relaxed);
                    if code != 0 {
                        return Err(CommError::Aborted { code });
                    }
                    let waited = start.elapsed();
                    if waited > self.policy.stall_timeout {
                        return Err(CommError::Stalled { peer: from, waited });
                    }
                    self.activity.waiting_on = Some(from);
                    self.serve_status();
                }
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(CommError::Disconnected { peer: from });
                }
            }
        }
    }
}

fn length_error(from: usize, tag: Tag, expected: usize, got: usize) -> CommError {
    CommError::Protocol(format!(
        "message from rank {from} (tag {tag}) has {got} bytes, expected {expected}: \
         the ranks issued different collectives"
    ))
}

impl Transport for Local {
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
        self.to[to].send(Msg { tag, data: data.to_vec() }).map_err(|_| CommError::Disconnected { peer: to })
    }

    fn recv(&mut self, from: usize, tag: Tag, buf: &mut [u8]) -> Result<(), CommError> {
        let data = self.take(from, tag)?;
        if data.len() != buf.len() {
            return Err(length_error(from, tag, buf.len(), data.len()));
        }
        buf.copy_from_slice(&data);
        Ok(())
    }

    fn recv_vec(&mut self, from: usize, tag: Tag) -> Result<Vec<u8>, CommError> {
        self.take(from, tag)
    }

    fn sendrecv(&mut self, to: usize, data: &[u8], from: usize, buf: &mut [u8], tag: Tag) -> Result<(), CommError> {
        self.send(to, tag, data)?;
        self.recv(from, tag, buf)
    }

    fn exchange(&mut self, buf: &mut [f32], send: SendEnd, recv: RecvEnd, tag: Tag) -> Result<(), CommError> {
        let (send, recv) = skip_empty(send, recv);
        if let Some((to, r)) = send {
            self.send(to, tag, f32_bytes(&buf[r]))?;
        }
        if let Some((from, r, how)) = recv {
            let data = self.take(from, tag)?;
            if data.len() != r.len() * 4 {
                return Err(length_error(from, tag, r.len() * 4, data.len()));
            }
            combine_bytes(&mut buf[r], &data, how);
        }
        Ok(())
    }

    /// Reference sum: rank 0 adds the vectors in rank order and sends the result back.
    fn native_allreduce_sum(&mut self, data: &mut [f32]) -> Result<(), CommError> {
        if self.size == 1 || data.is_empty() {
            return Ok(());
        }
        let n = data.len();
        if self.rank == 0 {
            for r in 1..self.size {
                self.exchange(data, None, Some((r, 0..n, Combine::Add)), super::TAG_NATIVE)?;
            }
            for r in 1..self.size {
                self.exchange(data, Some((r, 0..n)), None, super::TAG_NATIVE)?;
            }
        } else {
            self.exchange(data, Some((0, 0..n)), None, super::TAG_NATIVE)?;
            self.exchange(data, None, Some((0, 0..n, Combine::Copy)), super::TAG_NATIVE)?;
        }
        Ok(())
    }

    fn activity(&mut self) -> &mut Activity {
        &mut self.activity
    }

    fn set_policy(&mut self, policy: WaitPolicy) {
        self.policy = policy;
    }

    fn serve_status(&mut self) {
        while let Ok(q) = self.queries.try_recv() {
            let _ = q.reply.send((self.rank, self.activity.reply()));
        }
    }

    fn query_status(&mut self, grace: Duration) -> Vec<Option<StatusReply>> {
        let (tx, rx) = channel();
        let mut out: Vec<Option<StatusReply>> = vec![None; self.size];
        let mut missing = 0;
        for (peer, q) in self.queries_to.iter().enumerate() {
            if peer != self.rank && q.send(Query { reply: tx.clone() }).is_ok() {
                missing += 1;
            }
        }
        let deadline = Instant::now() + grace;
        while missing > 0 {
            // Other stalled ranks may be asking this one at the same time.
            self.serve_status();
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            if let Ok((peer, reply)) = rx.recv_timeout(left.min(POLL)) {
                out[peer] = Some(reply);
                missing -= 1;
            }
        }
        out
    }

    fn abort(&mut self, code: i32) -> ! {
        std::process::exit(code)
    }
}
