//! The cost model of DESIGN.md ("Communication"): the time of one allreduce of n bytes on p
//! ranks from alpha (seconds per message), beta (seconds per byte sent) and gamma (seconds per
//! byte reduced), along the critical path of each hand-written algorithm, including the fold
//! of the extra ranks when p is not a power of two, and a bucket cut into fragments as the
//! comm thread cuts it. Nodes that run several ranks each are `two_level`'s.

use crate::comm::Algorithm;
use crate::comm::Wire;
use crate::comm::allreduce::fold::pow2_floor;
use crate::comm::allreduce::hierarchical;
use crate::comm::allreduce::select::SelectionTable;
use crate::comm::handle::fragments;
use crate::scaling::two_level::{self, Links, Placement};

/// Link and CPU constants of the model.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Link {
    /// Seconds per message (latency).
    pub alpha: f64,
    /// Seconds per byte sent (1 / bandwidth).
    pub beta: f64,
    /// Seconds per byte reduced (one f32 add per 4 bytes).
    pub gamma: f64,
}

/// How many of each term one allreduce costs: `alpha` messages, `beta` bytes sent and
/// `gamma` bytes reduced, each counted along the critical path (the busiest rank).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Terms {
    pub messages: f64,
    pub bytes_sent: f64,
    pub bytes_reduced: f64,
}

impl Terms {
    pub fn time(&self, l: &Link) -> f64 {
        self.messages * l.alpha + self.bytes_sent * l.beta + self.bytes_reduced * l.gamma
    }

    /// The same allreduce with `wire` on the links: `--wire bf16` sends half the bytes, while
    /// the sums are still formed over the same f32 values.
    pub fn on_wire(self, wire: Wire) -> Terms {
        Terms { bytes_sent: self.bytes_sent * wire.size_ratio(), ..self }
    }
}

/// Two allreduces one after the other (the fragments of one bucket).
impl std::ops::Add for Terms {
    type Output = Terms;
    fn add(self, o: Terms) -> Terms {
        Terms {
            messages: self.messages + o.messages,
            bytes_sent: self.bytes_sent + o.bytes_sent,
            bytes_reduced: self.bytes_reduced + o.bytes_reduced,
        }
    }
}

fn lg(p: usize) -> f64 {
    (p as f64).log2()
}

/// ceil(lg p): the depth of a binomial tree over p ranks.
fn depth(p: usize) -> f64 {
    p.next_power_of_two().trailing_zeros() as f64
}

/// The terms of one allreduce of `n` bytes on `p` ranks with `algo` (`Mpi`: None, the
/// library's algorithm is not modelled). One rank or nothing to send: zero.
pub fn terms(algo: Algorithm, n: f64, p: usize) -> Option<Terms> {
    if p <= 1 || n == 0.0 {
        return Some(Terms::default());
    }
    let pf = p as f64;
    // rd and vhd fold the extra ranks of a non-power-of-two count: one whole-vector message
    // (reduced) before the power-of-two core and one after.
    let p2 = pow2_floor(p);
    let fold = if p2 == p { Terms::default() } else { Terms { messages: 2.0, bytes_sent: 2.0 * n, bytes_reduced: n } };
    let p2f = p2 as f64;
    let t = match algo {
        // Binomial reduce, then binomial broadcast: the root receives and sends the whole
        // vector ceil(lg p) times each.
        Algorithm::Tree => {
            Terms { messages: 2.0 * depth(p), bytes_sent: 2.0 * depth(p) * n, bytes_reduced: depth(p) * n }
        }
        Algorithm::Rd => Terms {
            messages: fold.messages + lg(p2),
            bytes_sent: fold.bytes_sent + lg(p2) * n,
            bytes_reduced: fold.bytes_reduced + lg(p2) * n,
        },
        Algorithm::Vhd => Terms {
            messages: fold.messages + 2.0 * lg(p2),
            bytes_sent: fold.bytes_sent + 2.0 * (p2f - 1.0) / p2f * n,
            bytes_reduced: fold.bytes_reduced + (p2f - 1.0) / p2f * n,
        },
        Algorithm::Ring => Terms {
            messages: 2.0 * (pf - 1.0),
            bytes_sent: 2.0 * (pf - 1.0) / pf * n,
            bytes_reduced: (pf - 1.0) / pf * n,
        },
        // With one rank per node `hier` is its between-hosts algorithm on the whole vector;
        // nodes of several ranks need a second link (shared memory): `two_level`.
        Algorithm::Hier => return terms(hierarchical::across_hosts(n as usize, p), n, p),
        Algorithm::Mpi => return None,
    };
    Some(t)
}

/// Seconds of one allreduce of `bytes` (as f32) on the ranks of `place`, its values
/// travelling as `wire` (None for `Mpi`): the closed forms where every node runs one rank,
/// the rounds of `two_level` where nodes run several.
pub fn allreduce_seconds_on(algo: Algorithm, bytes: f64, place: Placement, links: &Links, wire: Wire) -> Option<f64> {
    if place.ranks_per_host == 1 {
        terms(algo, bytes, place.hosts).map(|t| t.on_wire(wire).time(&links.between))
    } else {
        two_level::allreduce_seconds(algo, bytes, place, links, wire)
    }
}

/// How the comm thread averages a bucket: cut into fragments, each its own allreduce with the
/// algorithm the table picks for the (first) fragment's size.
#[derive(Clone, Debug)]
pub enum Choice {
    Fixed(Algorithm),
    /// `auto`: the selection table at this rank count.
    Auto(SelectionTable),
}

/// The algorithm the comm thread uses for a bucket of `bytes` (as f32) and the f32 bytes of
/// each fragment it cuts it into; Mpi is not modelled and is priced as the power-of-two
/// optimum, vhd (documented as such).
fn bucket_plan(choice: &Choice, bytes: usize, fragment_bytes: usize) -> (Algorithm, Algorithm, Vec<f64>) {
    let frags = fragments(bytes / 4, fragment_bytes);
    let algo = match choice {
        Choice::Fixed(a) => *a,
        Choice::Auto(table) => table.pick(frags[0].len() * 4),
    };
    let modelled = if algo == Algorithm::Mpi { Algorithm::Vhd } else { algo };
    (algo, modelled, frags.iter().map(|f| (f.len() * 4) as f64).collect())
}

/// (algorithm, seconds) of averaging a bucket of `bytes` (as f32) on the ranks of `place`, its
/// values travelling as `wire`. Fragments and the algorithm follow the f32 size, as on the
/// comm thread.
pub fn bucket_time(
    choice: &Choice,
    bytes: usize,
    fragment_bytes: usize,
    place: Placement,
    links: &Links,
    wire: Wire,
) -> (Algorithm, f64) {
    let (algo, modelled, frags) = bucket_plan(choice, bytes, fragment_bytes);
    let secs = frags.iter().map(|&f| allreduce_seconds_on(modelled, f, place, links, wire).expect("not mpi")).sum();
    (algo, secs)
}

/// Bytes the busiest rank moves each way (on the wire, over either link) averaging a bucket as
/// `bucket_time` does: the measure of the exchange's CPU cost, which grows with what a rank
/// pushes through its network stack and takes out of it.
pub fn bucket_bytes_moved(choice: &Choice, bytes: usize, fragment_bytes: usize, place: Placement, wire: Wire) -> f64 {
    let (_, modelled, frags) = bucket_plan(choice, bytes, fragment_bytes);
    frags.iter().map(|&f| bytes_moved_on(modelled, f, place, wire)).sum()
}

/// Of the ranks of `place`, the most bytes one sends plus receives in one allreduce of `bytes`
/// (as f32) with `algo` (not Mpi), halved: what one rank moves each way.
pub fn bytes_moved_on(algo: Algorithm, bytes: f64, place: Placement, wire: Wire) -> f64 {
    let on_wire = wire.size_ratio();
    let p = place.ranks();
    if p <= 1 || bytes == 0.0 {
        return 0.0;
    }
    if place.ranks_per_host > 1 {
        let s = two_level::schedule(algo, bytes, place).expect("not mpi");
        return (0..p).map(|r| s.bytes_moved_by(r)).fold(0.0, f64::max) * on_wire;
    }
    // One rank per node: closed forms (the busiest rank is the tree's root, the fold's partner).
    let n = bytes;
    let p2 = pow2_floor(p);
    let fold = if p2 == p { 0.0 } else { n };
    let each_way = match algo {
        Algorithm::Tree => depth(p) * n,
        Algorithm::Rd => fold + lg(p2) * n,
        Algorithm::Vhd => fold + 2.0 * (p2 as f64 - 1.0) / p2 as f64 * n,
        Algorithm::Ring => 2.0 * (p as f64 - 1.0) / p as f64 * n,
        Algorithm::Hier => return bytes_moved_on(hierarchical::across_hosts(n as usize, p), bytes, place, wire),
        Algorithm::Mpi => panic!("the library's allreduce is not modelled"),
    };
    each_way * on_wire
}

#[cfg(test)]
mod tests {
    use super::*;

    const L: Link = Link { alpha: 10e-6, beta: 8e-9, gamma: 0.25e-9 };
    const ONE_LINK: Links = Links { between: L, within: L };

    fn nodes(p: usize) -> Placement {
        Placement { hosts: p, ranks_per_host: 1 }
    }

    /// Seconds of one allreduce (None for `Mpi`).
    fn allreduce_time(algo: Algorithm, bytes: usize, p: usize, link: &Link) -> Option<f64> {
        terms(algo, bytes as f64, p).map(|t| t.time(link))
    }

    #[test]
    fn power_of_two_rows_of_the_design_table() {
        // p = 8, n = 1 MB: compare with the table's rows written out by hand.
        let (n, p) = (1e6, 8);
        let t = |a| terms(a, n, p).unwrap();
        assert_eq!(t(Algorithm::Tree), Terms { messages: 6.0, bytes_sent: 6.0 * n, bytes_reduced: 3.0 * n });
        assert_eq!(t(Algorithm::Rd), Terms { messages: 3.0, bytes_sent: 3.0 * n, bytes_reduced: 3.0 * n });
        assert_eq!(t(Algorithm::Vhd), Terms { messages: 6.0, bytes_sent: 1.75 * n, bytes_reduced: 0.875 * n });
        assert_eq!(t(Algorithm::Ring), Terms { messages: 14.0, bytes_sent: 1.75 * n, bytes_reduced: 0.875 * n });
        assert!(terms(Algorithm::Mpi, n, p).is_none());
    }

    #[test]
    fn one_rank_costs_nothing_and_fragments_add_up() {
        assert_eq!(allreduce_time(Algorithm::Ring, 1 << 20, 1, &L), Some(0.0));
        // 4 MiB in 1 MiB fragments = 4 allreduces of 1 MiB.
        let (a, t4) = bucket_time(&Choice::Fixed(Algorithm::Vhd), 4 << 20, 1 << 20, nodes(4), &ONE_LINK, Wire::F32);
        let t1 = allreduce_time(Algorithm::Vhd, 1 << 20, 4, &L).unwrap();
        assert_eq!(a, Algorithm::Vhd);
        assert!((t4 - 4.0 * t1).abs() < 1e-12);
    }

    #[test]
    fn bf16_halves_only_the_bytes_on_the_wire() {
        // vhd on 4 ranks, 1 MiB: 4 messages, 1.5 MiB sent, 0.75 MiB reduced; bf16 sends 0.75 MiB.
        let n = (1 << 20) as f64;
        let choice = Choice::Fixed(Algorithm::Vhd);
        let (_, f32_s) = bucket_time(&choice, 1 << 20, 1 << 20, nodes(4), &ONE_LINK, Wire::F32);
        let (_, bf16_s) = bucket_time(&choice, 1 << 20, 1 << 20, nodes(4), &ONE_LINK, Wire::Bf16);
        let by_hand = |sent: f64| 4.0 * L.alpha + sent * L.beta + 0.75 * n * L.gamma;
        assert!((f32_s - by_hand(1.5 * n)).abs() < 1e-12, "{f32_s}");
        assert!((bf16_s - by_hand(0.75 * n)).abs() < 1e-12, "{bf16_s}");
    }

    #[test]
    fn bytes_moved_by_hand_and_as_the_rounds_count_them() {
        // vhd on 4 nodes, 4 MiB in 1 MiB fragments, bf16: 4 x 1.5 MiB / 2.
        let mib = (1 << 20) as f64;
        let vhd = Choice::Fixed(Algorithm::Vhd);
        assert_eq!(bucket_bytes_moved(&vhd, 4 << 20, 1 << 20, nodes(4), Wire::Bf16), 3.0 * mib);
        // Two nodes of two ranks, ring over all four: each rank sends 2 (p-1)/p n, by hand.
        let ring = Choice::Fixed(Algorithm::Ring);
        let two_by_two = Placement { hosts: 2, ranks_per_host: 2 };
        assert_eq!(bucket_bytes_moved(&ring, 1 << 20, 1 << 20, two_by_two, Wire::F32), 1.5 * mib);
        // The tree's root takes the whole vector in once per level and sends it out once per level.
        assert_eq!(bytes_moved_on(Algorithm::Tree, mib, nodes(8), Wire::F32), 3.0 * mib);
        // The closed forms agree with the rounds, folds included.
        for algo in [Algorithm::Tree, Algorithm::Rd, Algorithm::Vhd, Algorithm::Ring, Algorithm::Hier] {
            for p in 2..=13 {
                let s = two_level::schedule(algo, mib, nodes(p)).unwrap();
                let rounds = (0..p).map(|r| s.bytes_moved_by(r)).fold(0.0, f64::max);
                let closed = bytes_moved_on(algo, mib, nodes(p), Wire::F32);
                assert!((closed - rounds).abs() < 1e-6 * mib, "{algo:?} p={p}: {closed} against {rounds}");
            }
        }
    }

    #[test]
    fn large_messages_favour_vhd_small_ones_rd() {
        let p = 64;
        let small = |a| allreduce_time(a, 64, p, &L).unwrap();
        let large = |a| allreduce_time(a, 64 << 20, p, &L).unwrap();
        assert!(small(Algorithm::Rd) < small(Algorithm::Vhd) && small(Algorithm::Rd) < small(Algorithm::Ring));
        assert!(large(Algorithm::Vhd) < large(Algorithm::Rd) && large(Algorithm::Vhd) < large(Algorithm::Tree));
    }
}
