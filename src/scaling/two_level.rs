//! The cost model on hosts that run several ranks each: every algorithm written out as rounds
//! of messages between ranks placed in blocks on hosts, each round timed by the link its
//! messages take (shared memory inside a host, the network between hosts), where the messages
//! that leave or enter one host in the same round share that host's link.
//!
//! Why rounds and not closed forms: with one rank per host every message has a link of its
//! own and the closed forms of `cost.rs` are exact. With L ranks per host, vhd's first round
//! sends all L ranks' halves off the host at once (L times the bytes on one link), while ring
//! crosses with one rank per host per round; the closed forms cannot tell those apart. With
//! one rank per host, this model gives the closed forms back (tested), so it extends them.

use super::cost::Link;
use crate::comm::Algorithm;
use crate::comm::Wire;
use crate::comm::allreduce::fold::pow2_floor;
use crate::comm::allreduce::hierarchical::{HostLayout, across_hosts};

/// Ranks in blocks: host h runs ranks h L .. (h+1) L (mpiexec's default, `--map-by slot`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Placement {
    pub hosts: usize,
    pub ranks_per_host: usize,
}

impl Placement {
    pub fn ranks(&self) -> usize {
        self.hosts * self.ranks_per_host
    }

    pub fn host_of(&self, rank: usize) -> usize {
        rank / self.ranks_per_host
    }

    /// The host number of every rank (`Transport::hosts`' form).
    pub fn host_numbers(&self) -> Vec<usize> {
        (0..self.ranks()).map(|r| self.host_of(r)).collect()
    }
}

/// The network between hosts and the shared memory inside one. gamma (the CPU's sums) is
/// taken from `between`: both are measured on the same machines.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Links {
    pub between: Link,
    pub within: Link,
}

/// One message: `bytes` as f32 (the wire may send fewer), added into the receiver's values
/// when `reduced`, else copied.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Message {
    pub from: usize,
    pub to: usize,
    pub bytes: f64,
    pub reduced: bool,
}

/// Messages sent at the same time, `repeat` rounds in a row.
#[derive(Clone, Debug, PartialEq)]
pub struct Round {
    pub repeat: usize,
    pub messages: Vec<Message>,
}

/// One allreduce as rounds, in order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Schedule {
    pub rounds: Vec<Round>,
}

impl Schedule {
    /// Seconds of the whole schedule: each round lasts as long as its slowest message, a
    /// message between hosts taking alpha plus beta times all the bytes its host's link
    /// carries that round in its direction (links are full duplex), plus gamma for what the
    /// receiver adds.
    pub fn seconds(&self, place: Placement, links: &Links, wire: Wire) -> f64 {
        let on_wire = wire.size_ratio();
        let (mut leaving, mut entering) = (vec![0.0; place.hosts], vec![0.0; place.hosts]);
        let mut total = 0.0;
        for round in &self.rounds {
            leaving.iter_mut().chain(entering.iter_mut()).for_each(|b| *b = 0.0);
            for m in round.messages.iter().filter(|m| place.host_of(m.from) != place.host_of(m.to)) {
                leaving[place.host_of(m.from)] += m.bytes * on_wire;
                entering[place.host_of(m.to)] += m.bytes * on_wire;
            }
            let slowest = round
                .messages
                .iter()
                .map(|m| {
                    let (hf, ht) = (place.host_of(m.from), place.host_of(m.to));
                    let moving = if hf == ht {
                        links.within.alpha + m.bytes * on_wire * links.within.beta
                    } else {
                        links.between.alpha + leaving[hf].max(entering[ht]) * links.between.beta
                    };
                    moving + if m.reduced { m.bytes * links.between.gamma } else { 0.0 }
                })
                .fold(0.0, f64::max);
            total += round.repeat as f64 * slowest;
        }
        total
    }

    /// Rounds rank `r` sends or receives in (the model's alpha count for that rank).
    pub fn rounds_of(&self, r: usize) -> usize {
        self.rounds.iter().filter(|x| x.messages.iter().any(|m| m.from == r || m.to == r)).map(|x| x.repeat).sum()
    }

    /// Bytes (as f32) rank `r` sends plus receives over the whole allreduce, halved.
    pub fn bytes_moved_by(&self, r: usize) -> f64 {
        let mine = |m: &&Message| m.from == r || m.to == r;
        self.rounds
            .iter()
            .map(|x| x.repeat as f64 * x.messages.iter().filter(mine).map(|m| m.bytes).sum::<f64>())
            .sum::<f64>()
            / 2.0
    }
}

/// The rounds of one allreduce of `n` bytes with `algo` on the ranks of `place` (None for
/// `Mpi`, the library's algorithm). The same steps as the code in `comm/allreduce/`, which
/// tests/scaling_cost_model.rs checks by counting what the code sends.
pub fn schedule(algo: Algorithm, n: f64, place: Placement) -> Option<Schedule> {
    let all: Vec<usize> = (0..place.ranks()).collect();
    let rounds = match algo {
        Algorithm::Mpi => return None,
        _ if n == 0.0 || all.len() < 2 => Vec::new(),
        Algorithm::Hier => hier(n, place),
        flat => flat_rounds(flat, n, &all),
    };
    Some(Schedule { rounds })
}

/// A one-level algorithm among `g` (`g[i]` is the rank that plays rank i).
fn flat_rounds(algo: Algorithm, n: f64, g: &[usize]) -> Vec<Round> {
    match algo {
        Algorithm::Tree => tree(n, g),
        Algorithm::Rd => folded(n, g, |core| rd(n, core)),
        Algorithm::Vhd => folded(n, g, |core| vhd(n, core)),
        Algorithm::Ring => [ring_half(n, g, true), ring_half(n, g, false)].concat(),
        Algorithm::Hier | Algorithm::Mpi => unreachable!("not one-level: {algo:?}"),
    }
}

fn round(messages: Vec<Message>) -> Round {
    Round { repeat: 1, messages }
}

fn msg(from: usize, to: usize, bytes: f64, reduced: bool) -> Message {
    Message { from, to, bytes, reduced }
}

/// Binomial reduce to `g[0]` (one round per bit), then the binomial broadcast from it.
fn tree(n: f64, g: &[usize]) -> Vec<Round> {
    let p = g.len();
    let mut rounds = Vec::new();
    let mut mask = 1;
    while mask < p {
        // Senders: the bit `mask` set and every bit below it clear.
        rounds.push(round((mask..p).step_by(2 * mask).map(|r| msg(g[r], g[r - mask], n, true)).collect()));
        mask <<= 1;
    }
    let mut mask = p.next_power_of_two() / 2;
    while mask > 0 {
        rounds.push(round(
            (0..p).step_by(2 * mask).filter(|r| r + mask < p).map(|r| msg(g[r], g[r + mask], n, false)).collect(),
        ));
        mask /= 2;
    }
    rounds
}

/// `fold.rs`: the first 2 rem ranks pair up, the even one hands its vector to the odd one,
/// which stands for both in the power-of-two core, and gets the result back.
fn folded(n: f64, g: &[usize], core: impl FnOnce(&[usize]) -> Vec<Round>) -> Vec<Round> {
    let p = g.len();
    let p2 = pow2_floor(p);
    let rem = p - p2;
    let in_core: Vec<usize> = (0..p2).map(|v| g[if v < rem { 2 * v + 1 } else { v + rem }]).collect();
    let mut rounds = Vec::new();
    if rem > 0 {
        rounds.push(round((0..rem).map(|i| msg(g[2 * i], g[2 * i + 1], n, true)).collect()));
    }
    rounds.extend(core(&in_core));
    if rem > 0 {
        rounds.push(round((0..rem).map(|i| msg(g[2 * i + 1], g[2 * i], n, false)).collect()));
    }
    rounds
}

/// Every rank swaps its whole vector with the one `mask` away, mask = 1, 2, ...
fn rd(n: f64, g: &[usize]) -> Vec<Round> {
    let p = g.len();
    let mut rounds = Vec::new();
    let mut mask = 1;
    while mask < p {
        rounds.push(round((0..p).map(|v| msg(g[v], g[v ^ mask], n, true)).collect()));
        mask <<= 1;
    }
    rounds
}

/// Halving at distance p/2, p/4, ..., 1 (mask parts of p each), then doubling back.
fn vhd(n: f64, g: &[usize]) -> Vec<Round> {
    let p = g.len();
    let swap = |mask: usize, reduced| {
        round((0..p).map(|v| msg(g[v], g[v ^ mask], n * mask as f64 / p as f64, reduced)).collect())
    };
    // p/2, p/4, ..., 1
    let halving: Vec<usize> = std::iter::successors(Some(p / 2), |m| (*m > 1).then_some(m / 2)).collect();
    let mut rounds: Vec<Round> = halving.iter().map(|&m| swap(m, true)).collect();
    rounds.extend(halving.iter().rev().map(|&m| swap(m, false)));
    rounds
}

/// One half of ring: p-1 rounds of n/p to the right neighbour, added (reduce-scatter) or
/// copied (allgather).
fn ring_half(n: f64, g: &[usize], reduced: bool) -> Vec<Round> {
    let p = g.len();
    if p < 2 {
        return Vec::new();
    }
    vec![Round { repeat: p - 1, messages: (0..p).map(|i| msg(g[i], g[(i + 1) % p], n / p as f64, reduced)).collect() }]
}

/// `hierarchical.rs`: a ring reduce-scatter on every host at once, the L parts averaged across
/// hosts at once (each by the ranks of one local index), a ring allgather on every host.
fn hier(n: f64, place: Placement) -> Vec<Round> {
    let (h, l) = (place.hosts, place.ranks_per_host);
    // The grouping the code itself uses.
    let layout = HostLayout::new(&place.host_numbers(), place.ranks());
    let across = |n: f64, g: &[usize]| flat_rounds(across_hosts(n as usize, h), n, g);
    if h == 1 {
        return flat_rounds(Algorithm::Ring, n, layout.host(0));
    }
    if l == 1 {
        return across(n, &layout.peers(0));
    }
    let every_host = |half: bool| concurrent((0..h).map(|x| ring_half(n, layout.host(x), half)).collect());
    let mut rounds = every_host(true);
    rounds.extend(concurrent((0..l).map(|x| across(n / l as f64, &layout.peers(x))).collect()));
    rounds.extend(every_host(false));
    rounds
}

/// Schedules of the same shape on disjoint ranks, run at the same time: round k of all of
/// them is one round.
fn concurrent(parts: Vec<Vec<Round>>) -> Vec<Round> {
    let mut merged = parts[0].clone();
    for other in &parts[1..] {
        // Parts of one shape by construction (every part is n/L bytes); a mismatch would
        // silently drop rounds from the model.
        assert_eq!(merged.len(), other.len(), "concurrent schedules of different lengths");
        for (m, o) in merged.iter_mut().zip(other) {
            assert_eq!(m.repeat, o.repeat, "concurrent rounds of different repeats");
            m.messages.extend_from_slice(&o.messages);
        }
    }
    merged
}

/// Seconds of one allreduce of `bytes` with `algo` on `place` (None for `Mpi`).
pub fn allreduce_seconds(algo: Algorithm, bytes: f64, place: Placement, links: &Links, wire: Wire) -> Option<f64> {
    schedule(algo, bytes, place).map(|s| s.seconds(place, links, wire))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scaling::cost::terms;

    const NET: Link = Link { alpha: 15e-6, beta: 8e-9, gamma: 0.3e-9 };
    const SHM: Link = Link { alpha: 0.5e-6, beta: 0.1e-9, gamma: 0.3e-9 };
    const LINKS: Links = Links { between: NET, within: SHM };

    fn seconds(algo: Algorithm, n: f64, hosts: usize, l: usize, wire: Wire) -> f64 {
        allreduce_seconds(algo, n, Placement { hosts, ranks_per_host: l }, &LINKS, wire).unwrap()
    }

    #[test]
    fn one_rank_per_host_gives_the_closed_forms_back() {
        // Rounds and closed forms are two descriptions of each algorithm written apart: with
        // a link per rank they must agree, at powers of two and at folded counts.
        for algo in [Algorithm::Tree, Algorithm::Rd, Algorithm::Vhd, Algorithm::Ring, Algorithm::Hier] {
            for p in 1..=33 {
                for n in [64.0, 65536.0, 4e6] {
                    for wire in [Wire::F32, Wire::Bf16] {
                        let rounds = seconds(algo, n, p, 1, wire);
                        let closed = terms(algo, n, p).unwrap().on_wire(wire).time(&NET);
                        assert!(
                            (rounds - closed).abs() <= 1e-9 * closed.max(1e-9),
                            "{algo:?} p={p} n={n}: {rounds} vs {closed}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn two_hosts_of_two_ranks_by_hand() {
        // n bytes on ranks 0,1 | 2,3. vhd: halves at distance 2 cross (both ranks at once, n
        // on each link direction), quarters at distance 1 stay; back the same way.
        let n = 4e6;
        let (a, b, ai, bi, g) = (NET.alpha, NET.beta, SHM.alpha, SHM.beta, NET.gamma);
        let vhd = 2.0 * (a + n * b) + (n / 2.0) * g + 2.0 * (ai + n / 4.0 * bi) + (n / 4.0) * g;
        assert!((seconds(Algorithm::Vhd, n, 2, 2, Wire::F32) - vhd).abs() < 1e-12);
        // ring: 6 rounds, each with one rank per host crossing n/4.
        let ring = 6.0 * (a + n / 4.0 * b) + 3.0 * (n / 4.0) * g;
        assert!((seconds(Algorithm::Ring, n, 2, 2, Wire::F32) - ring).abs() < 1e-12);
        // hier: a 2-rank ring inside each host (n/2 each way); each half averaged across
        // the 2 hosts by vhd, one round each way of n/4 per rank, both ranks of a host on its
        // link at once (n/2); then the allgather inside.
        let hier = 2.0 * (ai + n / 2.0 * bi) + (n / 2.0) * g + 2.0 * (a + n / 2.0 * b) + (n / 4.0) * g;
        assert!((seconds(Algorithm::Hier, n, 2, 2, Wire::F32) - hier).abs() < 1e-12);
        // The bytes on each host's link (docs/performance/allreduce.md, 2 hosts x 2): vhd 2n,
        // ring 1.5n, hier n.
        let place = Placement { hosts: 2, ranks_per_host: 2 };
        let leaving = |algo| {
            let leaves = |m: &&Message| place.host_of(m.from) == 0 && place.host_of(m.to) != 0;
            let rounds = schedule(algo, n, place).unwrap().rounds;
            rounds
                .iter()
                .map(|x| x.repeat as f64 * x.messages.iter().filter(leaves).map(|m| m.bytes).sum::<f64>())
                .sum()
        };
        assert_eq!(
            (leaving(Algorithm::Vhd), leaving(Algorithm::Ring), leaving(Algorithm::Hier)),
            (2.0 * n, 1.5 * n, n)
        );
    }

    #[test]
    fn three_hosts_of_three_ranks_hier_by_hand() {
        // An odd L and H: a 3-rank ring inside each host (2 rounds of n/3 each way); each third
        // averaged across the 3 hosts by ring (H is not a power of two), the three groups at
        // once, so every round puts 3 messages of n/9 on each host's link; the allgather inside.
        let n = 9e6;
        let (a, b, ai, bi, g) = (NET.alpha, NET.beta, SHM.alpha, SHM.beta, NET.gamma);
        let inside = 4.0 * (ai + n / 3.0 * bi) + 2.0 * (n / 3.0) * g;
        let across = 4.0 * (a + 3.0 * (n / 9.0) * b) + 2.0 * (n / 9.0) * g;
        let got = seconds(Algorithm::Hier, n, 3, 3, Wire::F32);
        assert!((got - (inside + across)).abs() < 1e-12, "{got} vs {}", inside + across);
    }

    #[test]
    fn more_ranks_per_host_cost_flat_algorithms_link_time_but_not_hier() {
        // 8 hosts: from 1 to 8 ranks each, vhd's link time grows with L, hier's does not.
        let n = 16e6;
        let hier: Vec<f64> = [1, 2, 4, 8].iter().map(|&l| seconds(Algorithm::Hier, n, 8, l, Wire::F32)).collect();
        let vhd: Vec<f64> = [1, 2, 4, 8].iter().map(|&l| seconds(Algorithm::Vhd, n, 8, l, Wire::F32)).collect();
        assert!(vhd.windows(2).all(|w| w[1] > 1.5 * w[0]), "{vhd:?}");
        assert!(hier.iter().all(|&t| t < 1.1 * hier[0]), "{hier:?}");
        assert!(hier[3] < vhd[3] / 4.0, "{hier:?} {vhd:?}");
    }

    #[test]
    fn nothing_to_send_costs_nothing_and_mpi_is_not_modelled() {
        assert_eq!(seconds(Algorithm::Ring, 0.0, 4, 2, Wire::F32), 0.0);
        assert_eq!(seconds(Algorithm::Hier, 1e6, 1, 1, Wire::F32), 0.0);
        assert!(schedule(Algorithm::Mpi, 1e6, Placement { hosts: 2, ranks_per_host: 2 }).is_none());
    }
}
