//! The allreduce algorithms, all written against `Transport`: sum f32 vectors over all ranks,
//! then scale by 1/N, in place, with bitwise identical results on every rank.
//!
//! | algorithm | messages (latency terms) | bytes sent per rank | best for |
//! |---|---|---|---|
//! | `tree` binomial reduce + broadcast | 2 lg p | 2 n lg p | (reference) |
//! | `rd` recursive doubling | lg p | n lg p | small messages |
//! | `vhd` halving/doubling (Rabenseifner) | 2 lg p | 2 n (p-1)/p | large, p = 2^k |
//! | `ring` reduce-scatter + allgather | 2 (p-1) | 2 n (p-1)/p | large, any p |
//! | `hier` ring in each host, then across hosts | 2 (L-1) + across | 2 n (L-1)/L + 2 (n/L) (H-1)/H | L ranks on each of H hosts |
//! | `mpi` MPI_Allreduce | the library's | | the baseline |

pub mod fold;
pub mod hierarchical;
pub mod recursive_doubling;
pub mod ring;
pub mod select;
pub mod tree;
pub mod vector_halving;

#[cfg(test)]
pub(crate) mod tests;

use crate::comm::reduce;
use crate::comm::transport::{CommError, Tag, Transport};
use std::ops::Range;

/// One way of averaging a vector over the ranks (the names are `--allreduce`'s values).
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, clap::ValueEnum, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Algorithm {
    /// Binomial-tree reduce to rank 0, then binomial broadcast.
    Tree,
    /// Butterfly recursive doubling: lg p exchanges of the whole vector.
    Rd,
    /// Vector halving / distance doubling (Rabenseifner): recursive-halving reduce-scatter,
    /// then recursive-doubling allgather.
    Vhd,
    /// Ring reduce-scatter, then ring allgather.
    Ring,
    /// Two levels for several ranks per host: reduce-scatter inside each host, each part
    /// averaged across hosts by one rank per host, allgather inside each host.
    Hier,
    /// The MPI library's own MPI_Allreduce (the baseline).
    Mpi,
}

impl Algorithm {
    /// Every algorithm, in the order of the table above.
    pub fn all() -> &'static [Algorithm] {
        <Algorithm as clap::ValueEnum>::value_variants()
    }

    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Tree => "tree",
            Algorithm::Rd => "rd",
            Algorithm::Vhd => "vhd",
            Algorithm::Ring => "ring",
            Algorithm::Hier => "hier",
            Algorithm::Mpi => "mpi",
        }
    }

    pub fn from_name(s: &str) -> Option<Algorithm> {
        Algorithm::all().iter().copied().find(|a| a.name() == s)
    }
}

impl std::fmt::Display for Algorithm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The factor every algorithm multiplies the sum by. Computed once, the same way everywhere,
/// so that all algorithms (and the checks) agree bit for bit.
pub fn inv_ranks(p: usize) -> f32 {
    1.0 / p as f32
}

/// Part `j` of `n` elements cut into `k` nearly equal parts (sizes differ by at most one).
pub fn part(n: usize, k: usize, j: usize) -> Range<usize> {
    (j * n / k)..((j + 1) * n / k)
}

/// Elements `[part(n,k,j0).start, part(n,k,j1-1).end)`: the parts j0..j1 together.
pub fn parts(n: usize, k: usize, j0: usize, j1: usize) -> Range<usize> {
    (j0 * n / k)..(j1 * n / k)
}

/// Average `data` over all ranks in place with `algo`: the sum over ranks times 1/N, the
/// same bits on every rank. Every rank must call this with the same length, algorithm and
/// tag. One rank or an empty vector: nothing to do.
pub fn allreduce_mean<T: Transport + ?Sized>(
    t: &mut T,
    algo: Algorithm,
    data: &mut [f32],
    tag: Tag,
) -> Result<(), CommError> {
    let p = t.size();
    if p == 1 || data.is_empty() {
        return Ok(());
    }
    let s = inv_ranks(p);
    match algo {
        Algorithm::Tree => tree::allreduce(t, data, tag, s)?,
        Algorithm::Rd => recursive_doubling::allreduce(t, data, tag, s)?,
        Algorithm::Vhd => vector_halving::allreduce(t, data, tag, s)?,
        Algorithm::Ring => ring::allreduce(t, data, tag, s)?,
        Algorithm::Hier => hierarchical::allreduce(t, data, tag, s)?,
        Algorithm::Mpi => {
            t.native_allreduce_sum(data)?;
            reduce::scale(data, s);
            return Ok(());
        }
    }
    t.settle(data);
    Ok(())
}
