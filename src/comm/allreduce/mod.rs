//! The allreduce algorithms, all written against `Transport`: sum vectors (f32, or bf16 under
//! `--wire bf16`) over all ranks, then scale by 1/N, in place, with bitwise identical results
//! on every rank.
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

use crate::codec::bf16;
use crate::comm::reduce;
use crate::comm::transport::{CommError, RecvEnd, SendEnd, Tag, Transport, bf16_wire};
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

/// The values an allreduce averages: f32, or the bf16 bits of `--wire bf16`
/// (`transport::bf16_wire`). The algorithms are written once over this.
pub trait Value: Copy {
    /// `Transport::exchange` for a buffer of these values.
    fn exchange<T: Transport + ?Sized>(
        t: &mut T,
        buf: &mut [Self],
        send: SendEnd,
        recv: RecvEnd,
        tag: Tag,
    ) -> Result<(), CommError>;
    /// The sum over ranks by the library's MPI_Allreduce (in f32), times `scale`.
    fn native_mean<T: Transport + ?Sized>(t: &mut T, data: &mut [Self], scale: f32) -> Result<(), CommError>;
}

impl Value for f32 {
    fn exchange<T: Transport + ?Sized>(
        t: &mut T,
        buf: &mut [f32],
        send: SendEnd,
        recv: RecvEnd,
        tag: Tag,
    ) -> Result<(), CommError> {
        t.exchange(buf, send, recv, tag)
    }
    fn native_mean<T: Transport + ?Sized>(t: &mut T, data: &mut [f32], scale: f32) -> Result<(), CommError> {
        t.native_allreduce_sum(data)?;
        reduce::scale(data, scale);
        Ok(())
    }
}

/// bf16 bits: `bf16_wire::exchange`, made of the transport's `send`, `recv` and `sendrecv`.
impl Value for u16 {
    fn exchange<T: Transport + ?Sized>(
        t: &mut T,
        buf: &mut [u16],
        send: SendEnd,
        recv: RecvEnd,
        tag: Tag,
    ) -> Result<(), CommError> {
        bf16_wire::exchange(t, buf, send, recv, tag)
    }
    /// The library has no bf16 sum here: it sums the values widened to f32.
    fn native_mean<T: Transport + ?Sized>(t: &mut T, data: &mut [u16], scale: f32) -> Result<(), CommError> {
        let mut wide = vec![0.0; data.len()];
        bf16::decode_into(data, &mut wide);
        f32::native_mean(t, &mut wide, scale)?;
        bf16::encode_into(&wide, data);
        Ok(())
    }
}

/// Average `data` over all ranks in place with `algo`: the sum over ranks times 1/N, the
/// same bits on every rank. Every rank must call this with the same length, algorithm and
/// tag. One rank or an empty vector: nothing to do.
pub fn allreduce_mean<V: Value, T: Transport + ?Sized>(
    t: &mut T,
    algo: Algorithm,
    data: &mut [V],
    tag: Tag,
) -> Result<(), CommError> {
    let p = t.size();
    if p == 1 || data.is_empty() {
        return Ok(());
    }
    let s = inv_ranks(p);
    match algo {
        Algorithm::Tree => tree::allreduce(t, data, tag, s),
        Algorithm::Rd => recursive_doubling::allreduce(t, data, tag, s),
        Algorithm::Vhd => vector_halving::allreduce(t, data, tag, s),
        Algorithm::Ring => ring::allreduce(t, data, tag, s),
        Algorithm::Hier => hierarchical::allreduce(t, data, tag, s),
        Algorithm::Mpi => V::native_mean(t, data, s),
    }
}
