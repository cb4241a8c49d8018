//! `hier`: a two-level allreduce for jobs with several ranks on each host (Horovod's
//! hierarchical allreduce, NCCL's 2D): a ring reduce-scatter among the L ranks of each host,
//! so that local rank l holds its host's sum of part l of L; an allreduce of that part among
//! the H ranks with local index l, one per host (rd for small parts, else vhd, or ring when
//! H is not a power of two); a ring allgather within each host.
//!
//! Why: a flat algorithm over p = H L ranks sends about 2n per rank, and where all L ranks of
//! a host send off the host at once (vhd's first steps) their host's link carries about 2nL.
//! Here each rank sends only its part between hosts, 2 (n/L)(H-1)/H, so a host's link
//! carries about 2n whatever L is; the rest goes between ranks of one host, through shared
//! memory. The latency terms are 2(L-1) inside the host plus the part's algorithm's across.
//!
//! Every layout works: with one rank per host this is the between-hosts algorithm on the
//! whole vector; on one host, ring. Hosts with different numbers of ranks fall back to ring
//! over the whole job (the parts would not line up across hosts).

use super::Value;
use super::{Algorithm, part, recursive_doubling, ring, select, vector_halving};
use crate::comm::transport::{Combine, CommError, Group, Tag, Transport};

/// Parts smaller than this cross hosts by recursive doubling (auto's default threshold).
const RD_BELOW_BYTES: usize = 8 << 10;

/// The algorithm that averages a part of `bytes` among `hosts` ranks, one per host.
pub fn across_hosts(bytes: usize, hosts: usize) -> Algorithm {
    if bytes < RD_BELOW_BYTES { Algorithm::Rd } else { select::large_message_algorithm(hosts) }
}

/// Ranks grouped by host: `ranks[h]` are host h's ranks in rank order.
#[derive(Debug, PartialEq)]
pub struct HostLayout {
    ranks: Vec<Vec<usize>>,
}

impl HostLayout {
    /// From `Transport::hosts` (empty: all `p` ranks on one host).
    pub fn new(hosts: &[usize], p: usize) -> HostLayout {
        if hosts.is_empty() {
            return HostLayout { ranks: vec![(0..p).collect()] };
        }
        let mut ranks: Vec<Vec<usize>> = vec![Vec::new(); hosts.iter().max().map_or(0, |h| h + 1)];
        for (r, &h) in hosts.iter().enumerate() {
            ranks[h].push(r);
        }
        ranks.retain(|g| !g.is_empty());
        HostLayout { ranks }
    }

    pub fn host_count(&self) -> usize {
        self.ranks.len()
    }

    /// Ranks per host, when every host has the same number.
    pub fn ranks_per_host(&self) -> Option<usize> {
        let l = self.ranks[0].len();
        self.ranks.iter().all(|g| g.len() == l).then_some(l)
    }

    /// (host, local index) of `rank`.
    pub fn position(&self, rank: usize) -> (usize, usize) {
        self.ranks
            .iter()
            .enumerate()
            .find_map(|(h, g)| g.iter().position(|&r| r == rank).map(|l| (h, l)))
            .expect("every rank is on a host")
    }

    /// The ranks of host `h`.
    pub fn host(&self, h: usize) -> &[usize] {
        &self.ranks[h]
    }

    /// The rank with local index `l` on every host, in host order.
    pub fn peers(&self, l: usize) -> Vec<usize> {
        self.ranks.iter().map(|g| g[l]).collect()
    }

    /// "HxL" where H hosts each run L consecutive ranks (mpiexec's default, by slot, and the
    /// placement the two-level cost model assumes), else "mixed".
    pub fn placement(&self) -> String {
        let p = self.ranks.iter().map(Vec::len).sum();
        let in_order = self.ranks.iter().flatten().copied().eq(0..p);
        match self.ranks_per_host().filter(|_| in_order) {
            Some(l) => format!("{}x{l}", self.host_count()),
            None => "mixed".into(),
        }
    }
}

pub fn allreduce<V: Value, T: Transport + ?Sized>(
    t: &mut T,
    data: &mut [V],
    tag: Tag,
    scale: f32,
) -> Result<(), CommError> {
    let layout = HostLayout::new(t.hosts(), t.size());
    let Some(l_count) = layout.ranks_per_host() else {
        return ring::allreduce(t, data, tag, scale);
    };
    let h_count = layout.host_count();
    let (h, l) = layout.position(t.rank());
    let n = data.len();
    let local = layout.host(h);

    // 1. Within the host: local rank l ends holding the host's sum of part `mine`. On a
    //    single host this is the last addition, so it also scales.
    let mine = if l_count > 1 {
        let last = if h_count == 1 { Combine::AddScale(scale) } else { Combine::Add };
        ring::reduce_scatter(&mut Group::new(t, local), data, tag, last)?;
        part(n, l_count, ring::owned_part(l, l_count))
    } else {
        0..n
    };

    // 2. Across hosts: the ranks that hold the same part, one per host, average it.
    if h_count > 1 {
        let peers = layout.peers(l);
        let mut across = Group::new(t, &peers);
        let piece = &mut data[mine];
        // By the f32 size whatever the wire, as `scaling` models it.
        match across_hosts(piece.len() * 4, h_count) {
            Algorithm::Rd => recursive_doubling::allreduce(&mut across, piece, tag, scale)?,
            Algorithm::Vhd => vector_halving::allreduce(&mut across, piece, tag, scale)?,
            _ => ring::allreduce(&mut across, piece, tag, scale)?,
        }
    }

    // 3. Within the host: every rank gets every part.
    if l_count > 1 {
        ring::allgather(&mut Group::new(t, local), data, tag)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_group_ranks_by_host_in_rank_order() {
        let blocks = HostLayout::new(&[0, 0, 1, 1, 2, 2], 6);
        assert_eq!(blocks.host_count(), 3);
        assert_eq!(blocks.ranks_per_host(), Some(2));
        assert_eq!(blocks.position(3), (1, 1));
        assert_eq!(blocks.peers(0), vec![0, 2, 4]);
        // Round-robin placement (mpiexec --map-by node): host h holds ranks h, h+H, ...
        let cyclic = HostLayout::new(&[0, 1, 0, 1], 4);
        assert_eq!(cyclic.host(1), &[1, 3]);
        assert_eq!(cyclic.peers(1), vec![2, 3]);
        assert_eq!(cyclic.position(2), (0, 1));
        assert_eq!(HostLayout::new(&[0, 0, 1], 3).ranks_per_host(), None);
        assert_eq!((blocks.placement(), cyclic.placement()), ("3x2".to_string(), "mixed".to_string()));
        assert_eq!(HostLayout::new(&[0, 0, 1], 3).placement(), "mixed");
        assert_eq!(HostLayout::new(&[], 4).placement(), "1x4");
        // Host numbers need not start at 0, be dense, or follow rank order: hosts are
        // ordered by number, ranks within a host by rank.
        let unordered = HostLayout::new(&[5, 5, 2, 2], 4);
        assert_eq!(unordered.host_count(), 2);
        assert_eq!(unordered.host(0), &[2, 3]);
        assert_eq!(unordered.position(0), (1, 0));
        assert_eq!(unordered.peers(1), vec![3, 1]);
        assert_eq!(HostLayout::new(&[], 4).host(0), &[0, 1, 2, 3]);
    }
}
