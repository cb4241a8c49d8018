//! `tree`: binomial-tree reduce to rank 0 (rank r receives from r+1, r+2, r+4, ... while those
//! bits of r are clear, then sends to its parent), then the binomial broadcast of the result
//! from rank 0. 2 lg p steps and the root handles n lg p bytes: the simple reference.

use super::Value;
use crate::comm::transport::{Combine, CommError, Tag, Transport};

pub fn allreduce<V: Value, T: Transport + ?Sized>(
    t: &mut T,
    data: &mut [V],
    tag: Tag,
    scale: f32,
) -> Result<(), CommError> {
    let (p, r, n) = (t.size(), t.rank(), data.len());
    // Reduce.
    let mut mask = 1;
    while mask < p {
        if r & mask != 0 {
            V::exchange(t, data, Some((r - mask, 0..n)), None, tag)?;
            break;
        }
        let child = r | mask;
        if child < p {
            // The root's last child completes the sum: fold in the 1/N scaling there.
            let how = if r == 0 && mask * 2 >= p { Combine::AddScale(scale) } else { Combine::Add };
            V::exchange(t, data, None, Some((child, 0..n, how)), tag)?;
        }
        mask <<= 1;
    }
    // Broadcast: receive from the parent (clear the lowest set bit), then send to the
    // children below that bit, largest subtree first.
    let mut mask = if r == 0 {
        p.next_power_of_two()
    } else {
        let low = r & r.wrapping_neg();
        V::exchange(t, data, None, Some((r - low, 0..n, Combine::Copy)), tag)?;
        low
    };
    mask >>= 1;
    while mask > 0 {
        if r + mask < p {
            V::exchange(t, data, Some((r + mask, 0..n)), None, tag)?;
        }
        mask >>= 1;
    }
    Ok(())
}
