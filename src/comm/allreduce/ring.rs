//! `ring`: the vector is cut into p parts; in p-1 reduce-scatter steps each rank sends one part
//! to its right neighbour and adds the part coming from its left, so that rank r ends owning
//! the reduced part r+1; p-1 allgather steps pass the reduced parts around the ring.
//! 2 n (p-1)/p bytes sent per rank at any p, but 2 (p-1) latency terms.

use super::part;
use crate::comm::transport::{Combine, CommError, Tag, Transport};

pub fn allreduce<T: Transport + ?Sized>(t: &mut T, data: &mut [f32], tag: Tag, scale: f32) -> Result<(), CommError> {
    let (p, r, n) = (t.size(), t.rank(), data.len());
    let right = (r + 1) % p;
    let left = (r + p - 1) % p;
    for k in 0..p - 1 {
        let send = (r + p - k) % p;
        let recv = (r + 2 * p - k - 1) % p;
        let how = if k == p - 2 { Combine::AddScale(scale) } else { Combine::Add };
        t.exchange(data, Some((right, part(n, p, send))), Some((left, part(n, p, recv), how)), tag)?;
    }
    for k in 0..p - 1 {
        let send = (r + 1 + p - k) % p;
        let recv = (r + p - k) % p;
        t.exchange(data, Some((right, part(n, p, send))), Some((left, part(n, p, recv), Combine::Copy)), tag)?;
    }
    Ok(())
}
