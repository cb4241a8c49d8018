//! `rd`: butterfly recursive doubling. In step k every rank exchanges its whole vector with
//! the rank 2^k away and adds: lg p steps, the fewest latency terms, but n lg p bytes sent
//! per rank, so it is the small-message algorithm. Both partners add the same two operands
//! (a + b = b + a exactly in IEEE arithmetic), so every rank ends with the same bits.

use super::Value;
use super::fold::with_fold;
use crate::comm::transport::{Combine, CommError, Tag, Transport};

pub fn allreduce<V: Value, T: Transport + ?Sized>(
    t: &mut T,
    data: &mut [V],
    tag: Tag,
    scale: f32,
) -> Result<(), CommError> {
    with_fold(t, data, tag, |t, data, core| {
        let n = data.len();
        let mut mask = 1;
        while mask < core.p2 {
            let partner = core.real(core.vrank ^ mask);
            // The last step folds in the 1/N scaling.
            let how = if mask * 2 >= core.p2 { Combine::AddScale(scale) } else { Combine::Add };
            V::exchange(t, data, Some((partner, 0..n)), Some((partner, 0..n, how)), tag)?;
            mask <<= 1;
        }
        Ok(())
    })
}
