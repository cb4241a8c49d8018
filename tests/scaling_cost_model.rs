//! The cost model's closed forms (src/scaling/cost.rs) against the hand-written algorithms
//! themselves: every algorithm runs on the in-process `Local` transport behind a wrapper that
//! counts, per rank, the exchange steps (alpha), the bytes moved per step (beta: the larger of
//! what is sent and what is received, the links being full duplex) and the bytes reduced
//! (gamma). The busiest rank's counts must be what the model charges, at every rank count
//! from 2 to 16 (powers of two and the folded ones). Also what a rank sends plus receives,
//! halved, which the replay charges the exchange's CPU by.

use dcgan_train::comm::Algorithm;
use dcgan_train::comm::Wire;
use dcgan_train::comm::allreduce::allreduce_mean;
use dcgan_train::comm::status::{Activity, StatusReply};
use dcgan_train::comm::transport::{Combine, CommError, Local, Tag, Transport, WaitPolicy};
use dcgan_train::scaling::cost::{Terms, bytes_moved_on, terms};
use dcgan_train::scaling::two_level::{Message, Placement, Schedule, schedule};
use std::ops::Range;
use std::time::Duration;

#[derive(Default, Clone, Copy, Debug)]
struct Counts {
    steps: f64,
    bytes_moved: f64,
    bytes_reduced: f64,
    /// Bytes sent to ranks on another host.
    bytes_across: f64,
    /// Bytes sent plus bytes received.
    bytes_through: f64,
}

struct Counting {
    inner: Local,
    c: Counts,
}

impl Transport for Counting {
    fn rank(&self) -> usize {
        self.inner.rank()
    }
    fn size(&self) -> usize {
        self.inner.size()
    }
    fn hosts(&self) -> &[usize] {
        self.inner.hosts()
    }
    fn send(&mut self, to: usize, tag: Tag, data: &[u8]) -> Result<(), CommError> {
        self.inner.send(to, tag, data)
    }
    fn recv(&mut self, from: usize, tag: Tag, buf: &mut [u8]) -> Result<(), CommError> {
        self.inner.recv(from, tag, buf)
    }
    fn recv_vec(&mut self, from: usize, tag: Tag) -> Result<Vec<u8>, CommError> {
        self.inner.recv_vec(from, tag)
    }
    fn sendrecv(&mut self, to: usize, data: &[u8], from: usize, buf: &mut [u8], tag: Tag) -> Result<(), CommError> {
        self.inner.sendrecv(to, data, from, buf, tag)
    }
    fn exchange(
        &mut self,
        buf: &mut [f32],
        send: Option<(usize, Range<usize>)>,
        recv: Option<(usize, Range<usize>, Combine)>,
        tag: Tag,
    ) -> Result<(), CommError> {
        let s = send.as_ref().map_or(0, |(_, r)| r.len());
        let r = recv.as_ref().map_or(0, |(_, r, _)| r.len());
        if s + r > 0 {
            self.c.steps += 1.0;
            self.c.bytes_moved += 4.0 * s.max(r) as f64;
            self.c.bytes_through += 4.0 * (s + r) as f64;
        }
        if let Some((to, range)) = &send {
            let hosts = self.inner.hosts();
            if !hosts.is_empty() && hosts[*to] != hosts[self.inner.rank()] {
                self.c.bytes_across += 4.0 * range.len() as f64;
            }
        }
        if let Some((_, range, Combine::Add | Combine::AddScale(_))) = &recv {
            self.c.bytes_reduced += 4.0 * range.len() as f64;
        }
        self.inner.exchange(buf, send, recv, tag)
    }
    fn native_allreduce_sum(&mut self, data: &mut [f32]) -> Result<(), CommError> {
        self.inner.native_allreduce_sum(data)
    }
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
}

/// Per-rank counts of one allreduce of `n` floats on `p` ranks (and a check of its result).
fn count(algo: Algorithm, p: usize, n: usize) -> Vec<Counts> {
    count_on(algo, Local::group(p), n)
}

/// `count` on a group that knows its ranks' hosts.
fn count_on(algo: Algorithm, group: Vec<Local>, n: usize) -> Vec<Counts> {
    let p = group.len();
    let handles: Vec<_> = group
        .into_iter()
        .map(|t| {
            std::thread::spawn(move || {
                let mut t = Counting { inner: t, c: Counts::default() };
                let r = t.rank();
                let mut data: Vec<f32> = (0..n).map(|i| (i % 7 + r) as f32).collect();
                allreduce_mean(&mut t, algo, &mut data, 7).unwrap();
                // The mean of (i % 7 + r) over r = i % 7 + (p - 1) / 2: the counted run is a real one.
                for (i, v) in data.iter().enumerate() {
                    let want = (i % 7) as f32 + (p as f32 - 1.0) / 2.0;
                    assert!((v - want).abs() < 1e-4, "{algo:?} p={p}: element {i} is {v}, want {want}");
                }
                t.c
            })
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

fn busiest(c: &[Counts]) -> Terms {
    Terms {
        messages: c.iter().map(|x| x.steps).fold(0.0, f64::max),
        bytes_sent: c.iter().map(|x| x.bytes_moved).fold(0.0, f64::max),
        bytes_reduced: c.iter().map(|x| x.bytes_reduced).fold(0.0, f64::max),
    }
}

#[test]
fn closed_forms_match_what_the_algorithms_do() {
    // 3 * 5 * 7 * 16 floats: the parts of every p below are nearly equal, within one float.
    let n = 1680 * 4;
    for algo in [Algorithm::Tree, Algorithm::Rd, Algorithm::Vhd, Algorithm::Ring] {
        for p in 2..=16 {
            let counted = busiest(&count(algo, p, n));
            let model = terms(algo, (n * 4) as f64, p).unwrap();
            let ctx = format!("{algo:?} at p = {p}: counted {counted:?}, model {model:?}");
            assert_eq!(counted.messages, model.messages, "{ctx}");
            // Parts differ by at most one float per step.
            let slack = 4.0 * counted.messages;
            assert!((counted.bytes_sent - model.bytes_sent).abs() <= slack, "{ctx}");
            assert!((counted.bytes_reduced - model.bytes_reduced).abs() <= slack, "{ctx}");
            // What the busiest rank sends plus receives, halved (the tree's root, the fold's
            // partner): what the exchange's CPU is charged by.
            let through = count(algo, p, n).iter().map(|c| c.bytes_through / 2.0).fold(0.0, f64::max);
            let nodes = Placement { hosts: p, ranks_per_host: 1 };
            let each_way = bytes_moved_on(algo, (n * 4) as f64, nodes, Wire::F32);
            assert!((through - each_way).abs() <= slack, "{ctx}: each way {through}, model {each_way}");
        }
    }
}

#[test]
fn one_rank_moves_nothing() {
    for algo in [Algorithm::Tree, Algorithm::Rd, Algorithm::Vhd, Algorithm::Ring] {
        let c = busiest(&count(algo, 1, 64));
        assert_eq!((c.messages, c.bytes_sent), (0.0, 0.0));
        assert_eq!(terms(algo, 256.0, 1).unwrap(), Terms::default());
    }
}

#[test]
fn hier_with_one_rank_per_host_is_what_the_model_charges() {
    // The model's nodes hold one rank each; there hier is rd for small messages, vhd above.
    for p in 2..=9 {
        let hosts: Vec<usize> = (0..p).collect();
        for n in [100, 1680 * 4] {
            let counted = busiest(&count_on(Algorithm::Hier, Local::on_hosts(&hosts), n));
            let model = terms(Algorithm::Hier, (n * 4) as f64, p).unwrap();
            let ctx = format!("hier at p = {p}, {n} floats: counted {counted:?}, model {model:?}");
            assert_eq!(counted.messages, model.messages, "{ctx}");
            assert!((counted.bytes_sent - model.bytes_sent).abs() <= 4.0 * counted.messages, "{ctx}");
        }
    }
}

#[test]
fn hier_sends_each_host_s_share_across_hosts_once_whatever_its_ranks() {
    // 2, 4 hosts with 2 and 4 ranks each: what leaves each host, per algorithm.
    let n = 1680 * 4;
    let bytes = (n * 4) as f64;
    for (h, l) in [(2usize, 2usize), (4, 2), (2, 4)] {
        let hosts: Vec<usize> = (0..h * l).map(|r| r / l).collect();
        let leaving = |algo| {
            let c = count_on(algo, Local::on_hosts(&hosts), n);
            (0..h)
                .map(|host| c[host * l..(host + 1) * l].iter().map(|x| x.bytes_across).sum::<f64>())
                .fold(0.0, f64::max)
        };
        let (hier, vhd, ring) = (leaving(Algorithm::Hier), leaving(Algorithm::Vhd), leaving(Algorithm::Ring));
        // Each rank sends its part of n/L across, 2 (n/L)(H-1)/H: the host, 2 n (H-1)/H.
        let share = 2.0 * bytes * (h as f64 - 1.0) / h as f64;
        let ctx = format!("{h} hosts x {l} ranks: bytes leaving the busiest host: hier {hier}, vhd {vhd}, ring {ring}");
        assert!((hier - share).abs() <= 8.0 * (h * l) as f64, "{ctx}");
        // vhd's first steps send every rank's half across at once: about L times the share.
        assert!(vhd >= 0.9 * l as f64 * share, "{ctx}");
        // ring with consecutive ranks per host: one rank per host sends n/p across at each of
        // its 2 (p-1) steps, near hier's share, but with 2 (p-1) latency terms.
        let p = (h * l) as f64;
        assert!((ring - 2.0 * bytes * (p - 1.0) / p).abs() <= 8.0 * p, "{ctx}");
    }
}

/// Bytes (as f32) that leave host `h` over the whole allreduce, as the model's rounds send them.
fn bytes_leaving(s: &Schedule, place: Placement, h: usize) -> f64 {
    let leaves = |m: &&Message| place.host_of(m.from) == h && place.host_of(m.to) != h;
    s.rounds.iter().map(|x| x.repeat as f64 * x.messages.iter().filter(leaves).map(|m| m.bytes).sum::<f64>()).sum()
}

#[test]
fn two_level_rounds_are_what_the_algorithms_do_on_hosts_of_several_ranks() {
    // The model's rounds (src/scaling/two_level.rs) are written apart from the code; on hosts
    // of several ranks, every rank must take part in as many rounds as it makes exchanges,
    // and each host must send off itself the bytes the code sends.
    let n = 1680 * 4;
    let bytes = (n * 4) as f64;
    for (h, l) in [(2usize, 2usize), (4, 2), (2, 4), (3, 2), (2, 3), (3, 3), (1, 4), (5, 1)] {
        let place = Placement { hosts: h, ranks_per_host: l };
        for algo in [Algorithm::Tree, Algorithm::Rd, Algorithm::Vhd, Algorithm::Ring, Algorithm::Hier] {
            let counted = count_on(algo, Local::on_hosts(&place.host_numbers()), n);
            let model = schedule(algo, bytes, place).unwrap();
            for (r, c) in counted.iter().enumerate() {
                assert_eq!(model.rounds_of(r) as f64, c.steps, "{algo:?} on {h} hosts x {l}: rank {r}'s rounds");
            }
            for (r, c) in counted.iter().enumerate() {
                let slack = 4.0 * c.steps;
                let each_way = c.bytes_through / 2.0;
                assert!(
                    (model.bytes_moved_by(r) - each_way).abs() <= slack,
                    "{algo:?} on {h} hosts x {l}: rank {r} moved {each_way} each way, model {}",
                    model.bytes_moved_by(r)
                );
            }
            for host in 0..h {
                let sent: f64 = counted[host * l..(host + 1) * l].iter().map(|c| c.bytes_across).sum();
                let leaving = bytes_leaving(&model, place, host);
                // Parts differ by at most one float per step.
                let slack = 4.0 * counted.iter().map(|c| c.steps).sum::<f64>();
                assert!(
                    (sent - leaving).abs() <= slack,
                    "{algo:?} on {h} hosts x {l}: host {host} sent {sent}, model {leaving}"
                );
            }
        }
    }
}
