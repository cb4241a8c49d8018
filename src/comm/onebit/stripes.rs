//! The 1-bit allreduce (CNTK's aggregation of quantized gradients). One-bit values cannot be
//! summed on the way around a ring, so each rank owns a stripe (`part(n, p, r)`):
//!
//! 1. every rank quantizes its whole vector with its own residual, stripe by stripe;
//! 2. reduce-scatter: in p-1 pairwise steps rank r sends stripe r+k to rank r+k and receives
//!    its own stripe from rank r-k; it decodes the p quantized stripes (its own too) and sums
//!    them in f32, then scales by 1/p;
//! 3. the owner quantizes that mean with a second residual, its stripe's own;
//! 4. allgather: in p-1 pairwise steps every rank receives every other stripe's quantized
//!    mean and decodes all of them, its own from the same bytes, so every rank ends with the
//!    same bits.
//!
//! Each rank sends 2 (p-1) stripes of n/p values at about 1/28 of their f32 size.

use crate::codec::onebit::{Land, decode, encoded_len, quantize};
use crate::comm::allreduce::{inv_ranks, part};
use crate::comm::reduce;
use crate::comm::transport::{CommError, Tag, Transport};

/// The error feedback of one vector on one rank: what the quantizations missed so far.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Residuals {
    /// This rank's gradient's residual ([n]).
    pub own: Vec<f32>,
    /// The residual of the mean of the stripe this rank owns ([n]; only its stripe is used,
    /// so that the layout does not depend on the rank).
    pub stripe: Vec<f32>,
}

impl Residuals {
    pub fn zeros(n: usize) -> Self {
        Residuals { own: vec![0.0; n], stripe: vec![0.0; n] }
    }

    /// The sum of squares of both parts.
    pub fn sum_of_squares(&self) -> f64 {
        self.own.iter().chain(&self.stripe).map(|&x| (x as f64) * (x as f64)).sum()
    }
}

/// Buffers kept between calls (the encodings of the stripes going out and coming in).
#[derive(Default)]
pub struct OneBitStage {
    out: Vec<Vec<u8>>,
    inb: Vec<u8>,
    sum: Vec<f32>,
}

/// This rank's residuals of one vector (or of one fragment of it), [n] each.
pub struct ResidualsMut<'a> {
    pub own: &'a mut [f32],
    pub stripe: &'a mut [f32],
}

impl Residuals {
    /// The residuals of elements `r` of the vector.
    pub fn range_mut(&mut self, r: std::ops::Range<usize>) -> ResidualsMut<'_> {
        ResidualsMut { own: &mut self.own[r.clone()], stripe: &mut self.stripe[r] }
    }
}

/// Average `data` over the ranks through the 1-bit stripes, updating `res` (this rank's
/// residuals for `data`, zeros at first). Returns the bytes this rank sent. Every rank must
/// call it with the same length and tag.
pub fn allreduce_mean<T: Transport + ?Sized>(
    t: &mut T,
    data: &mut [f32],
    res: ResidualsMut,
    stage: &mut OneBitStage,
    tag: Tag,
) -> Result<usize, CommError> {
    let (p, r, n) = (t.size(), t.rank(), data.len());
    assert_eq!((res.own.len(), res.stripe.len()), (n, n), "1-bit residuals of another length");
    if p == 1 || n == 0 {
        return Ok(0);
    }
    stage.out.resize_with(p, Vec::new);
    for j in 0..p {
        let s = part(n, p, j);
        stage.out[j].resize(encoded_len(s.len()), 0);
        quantize(&data[s.clone()], &mut res.own[s], &mut stage.out[j]);
    }
    let mine = part(n, p, r);
    stage.sum.resize(mine.len(), 0.0);
    decode(&stage.out[r], &mut stage.sum, Land::Copy);
    stage.inb.resize(encoded_len(mine.len()), 0);
    let mut sent = 0;
    for k in 1..p {
        let (to, from) = ((r + k) % p, (r + p - k) % p);
        t.sendrecv(to, &stage.out[to], from, &mut stage.inb, tag)?;
        sent += stage.out[to].len();
        decode(&stage.inb, &mut stage.sum, Land::Add);
    }
    reduce::scale(&mut stage.sum, inv_ranks(p));
    // The owner's quantized mean replaces its stripe's encoding: what goes out to everyone.
    let mut owned = std::mem::take(&mut stage.out[r]);
    quantize(&stage.sum, &mut res.stripe[mine.clone()], &mut owned);
    decode(&owned, &mut data[mine], Land::Copy);
    for k in 1..p {
        let (to, from) = ((r + k) % p, (r + p - k) % p);
        let theirs = part(n, p, from);
        stage.inb.resize(encoded_len(theirs.len()), 0);
        t.sendrecv(to, &owned, from, &mut stage.inb, tag)?;
        sent += owned.len();
        decode(&stage.inb, &mut data[theirs], Land::Copy);
    }
    stage.out[r] = owned;
    Ok(sent)
}
