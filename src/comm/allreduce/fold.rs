//! Rank counts that are not a power of two, for `rd` and `vhd`: with p = p2 + rem
//! (p2 = 2^floor(lg p)), ranks 0..2*rem pair up (2i with 2i+1); the even rank hands its
//! vector to the odd one and sits out, the p2 remaining ranks run the power-of-two
//! algorithm under "virtual" ranks 0..p2, and the odd ranks hand the result back.

use super::Value;
use crate::comm::transport::{Combine, CommError, Tag, Transport};

/// This rank's place among the p2 ranks that run the power-of-two algorithm.
pub struct Core {
    /// Virtual rank, 0..p2.
    pub vrank: usize,
    pub p2: usize,
    rem: usize,
}

impl Core {
    /// The real rank of virtual rank `v`.
    pub fn real(&self, v: usize) -> usize {
        if v < self.rem { 2 * v + 1 } else { v + self.rem }
    }
}

/// Largest power of two not above `p` (p >= 1).
pub fn pow2_floor(p: usize) -> usize {
    1 << (usize::BITS - 1 - p.leading_zeros())
}

/// Run `core` (a power-of-two algorithm) on every rank count: fold the extra ranks in before
/// and hand them the result after.
pub fn with_fold<V: Value, T: Transport + ?Sized>(
    t: &mut T,
    data: &mut [V],
    tag: Tag,
    core: impl FnOnce(&mut T, &mut [V], &Core) -> Result<(), CommError>,
) -> Result<(), CommError> {
    let (p, r, n) = (t.size(), t.rank(), data.len());
    let p2 = pow2_floor(p);
    let rem = p - p2;
    if r < 2 * rem {
        if r % 2 == 0 {
            V::exchange(t, data, Some((r + 1, 0..n)), None, tag)?;
            return V::exchange(t, data, None, Some((r + 1, 0..n, Combine::Copy)), tag);
        }
        V::exchange(t, data, None, Some((r - 1, 0..n, Combine::Add)), tag)?;
        core(t, data, &Core { vrank: r / 2, p2, rem })?;
        V::exchange(t, data, Some((r - 1, 0..n)), None, tag)
    } else {
        core(t, data, &Core { vrank: r - rem, p2, rem })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn virtual_ranks_map_back_to_distinct_real_ranks() {
        for p in 1..40 {
            let p2 = pow2_floor(p);
            assert!(p2 <= p && p < 2 * p2);
            let rem = p - p2;
            let c = Core { vrank: 0, p2, rem };
            let mut real: Vec<usize> = (0..p2).map(|v| c.real(v)).collect();
            // Each core rank's own virtual rank maps back to itself.
            for r in 0..p {
                let v = if r < 2 * rem {
                    if r % 2 == 0 {
                        continue;
                    }
                    r / 2
                } else {
                    r - rem
                };
                assert_eq!(c.real(v), r);
            }
            real.sort();
            real.dedup();
            assert_eq!(real.len(), p2);
            assert!(real.iter().all(|&r| r < p));
        }
    }
}
