//! `vhd`: vector halving / distance doubling (Rabenseifner). Reduce-scatter by recursive
//! halving: at distance p2/2, p2/4, ..., 1 each rank keeps half of its current part and sends
//! the other half to its partner, which adds it; after lg p2 steps rank v owns the fully reduced
//! part v. Allgather by recursive doubling: at distance 1, 2, ... partners swap what they own.
//! 2 n (p-1)/p bytes sent per rank: the large-message algorithm for power-of-two p.
//! Each element is summed by exactly one rank and then copied, so all ranks agree bit for bit.

use super::Value;
use super::fold::with_fold;
use super::parts;
use crate::comm::transport::{Combine, CommError, Tag, Transport};

pub fn allreduce<V: Value, T: Transport + ?Sized>(
    t: &mut T,
    data: &mut [V],
    tag: Tag,
    scale: f32,
) -> Result<(), CommError> {
    with_fold(t, data, tag, |t, data, core| {
        let (n, p2, v) = (data.len(), core.p2, core.vrank);
        // This rank's parts are j0..j1 of p2 nearly equal parts.
        let (mut j0, mut j1) = (0, p2);
        let mut mask = p2 / 2;
        while mask >= 1 {
            let partner = core.real(v ^ mask);
            let jm = (j0 + j1) / 2;
            let (keep, give) = if v & mask == 0 { ((j0, jm), (jm, j1)) } else { ((jm, j1), (j0, jm)) };
            let how = if mask == 1 { Combine::AddScale(scale) } else { Combine::Add };
            V::exchange(
                t,
                data,
                Some((partner, parts(n, p2, give.0, give.1))),
                Some((partner, parts(n, p2, keep.0, keep.1), how)),
                tag,
            )?;
            (j0, j1) = keep;
            mask /= 2;
        }
        debug_assert_eq!((j0, j1), (v, v + 1));
        let mut mask = 1;
        while mask < p2 {
            let partner = core.real(v ^ mask);
            // Groups of `mask` parts, aligned to `mask`: mine starts at j0, the partner's at j0^mask.
            let theirs = j0 ^ mask;
            V::exchange(
                t,
                data,
                Some((partner, parts(n, p2, j0, j0 + mask))),
                Some((partner, parts(n, p2, theirs, theirs + mask), Combine::Copy)),
                tag,
            )?;
            j0 = j0.min(theirs);
            mask <<= 1;
        }
        Ok(())
    })
}
