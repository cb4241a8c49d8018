//! `ring`: the vector is cut into p parts; in p-1 reduce-scatter steps each rank sends one part
//! to its right neighbour and adds the part coming from its left, so that rank r ends owning
//! the reduced part r+1; p-1 allgather steps pass the reduced parts around the ring.
//! 2 n (p-1)/p bytes sent per rank at any p, but 2 (p-1) latency terms.
//! The two halves are also used alone, inside one host, by `hierarchical`.

use super::Value;
use super::part;
use crate::comm::transport::{Combine, CommError, Tag, Transport};

pub fn allreduce<V: Value, T: Transport + ?Sized>(
    t: &mut T,
    data: &mut [V],
    tag: Tag,
    scale: f32,
) -> Result<(), CommError> {
    reduce_scatter(t, data, tag, Combine::AddScale(scale))?;
    allgather(t, data, tag)
}

/// The part of p that rank r owns, reduced, after `reduce_scatter`.
pub fn owned_part(r: usize, p: usize) -> usize {
    (r + 1) % p
}

/// Sum every part over the ranks, each part on one rank (`owned_part`); `last` combines the
/// final addition (`AddScale` fuses the 1/N scaling into it). The other parts hold partial
/// sums afterwards.
pub fn reduce_scatter<V: Value, T: Transport + ?Sized>(
    t: &mut T,
    data: &mut [V],
    tag: Tag,
    last: Combine,
) -> Result<(), CommError> {
    let (p, r, n) = (t.size(), t.rank(), data.len());
    let right = (r + 1) % p;
    let left = (r + p - 1) % p;
    for k in 0..p.saturating_sub(1) {
        let send = (r + p - k) % p;
        let recv = (r + 2 * p - k - 1) % p;
        let how = if k == p - 2 { last } else { Combine::Add };
        V::exchange(t, data, Some((right, part(n, p, send))), Some((left, part(n, p, recv), how)), tag)?;
    }
    Ok(())
}

/// Pass every rank's `owned_part` around the ring until every rank holds all of them.
pub fn allgather<V: Value, T: Transport + ?Sized>(t: &mut T, data: &mut [V], tag: Tag) -> Result<(), CommError> {
    let (p, r, n) = (t.size(), t.rank(), data.len());
    let right = (r + 1) % p;
    let left = (r + p - 1) % p;
    for k in 0..p.saturating_sub(1) {
        let send = (r + 1 + p - k) % p;
        let recv = (r + p - k) % p;
        V::exchange(t, data, Some((right, part(n, p, send))), Some((left, part(n, p, recv), Combine::Copy)), tag)?;
    }
    Ok(())
}
