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
//!
//! Where a device quantizes (step 1) beside the gradients, it hands over the encodings
//! instead of the values, laid out by `packed_layout`, and takes back the quantized means in
//! the same layout to decode them itself (`allreduce_mean_packed`): the same bits either way.

use crate::codec::onebit::{Land, decode, encoded_len, quantize};
use crate::comm::allreduce::{inv_ranks, part};
use crate::comm::reduce;
use crate::comm::transport::{CommError, Tag, Transport};

/// The error feedback of one vector on one rank: what the quantizations missed so far.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Residuals {
    /// This rank's gradient's residual (`[n]`).
    pub own: Vec<f32>,
    /// The residual of the mean of the stripe this rank owns (`[n]`; only its stripe is used,
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

/// This rank's residuals of one vector (or of one fragment of it), `[n]` each.
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
    let (p, n) = (t.size(), data.len());
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
    exchange(t, n, res.stripe, stage, tag, |j, enc| decode(enc, &mut data[part(n, p, j)], Land::Copy))
}

/// Where a device puts its quantization of a fragment of `n` values for `p` ranks
/// (`BucketRequest::packed`): for each stripe, (first value, length, first byte of its
/// encoding) within the fragment, the encodings one after the other from its first byte on.
pub fn packed_layout(n: usize, p: usize) -> Vec<(usize, usize, usize)> {
    let mut byte = 0;
    (0..p)
        .map(|j| {
            let s = part(n, p, j);
            let stripe = (s.start, s.len(), byte);
            byte += encoded_len(s.len());
            stripe
        })
        .collect()
}

/// Whether the packed encodings of a fragment of `n` values fit in its own f32 bytes (not
/// when stripes are only a few values long: a column costs 12 bytes at least).
pub fn packed_fits(n: usize, p: usize) -> bool {
    packed_layout(n, p).last().is_none_or(|&(_, len, byte)| byte + encoded_len(len) <= 4 * n)
}

/// `allreduce_mean` of a fragment a device has quantized already: `data` holds, as raw bytes
/// laid out by `packed_layout`, this rank's quantization of each stripe (with the residual the
/// device keeps), and afterwards, in the same layout, the quantized means every rank decodes
/// into the same bits. `stripe_res` is the owner's residual ([data.len()], its stripe used).
pub fn allreduce_mean_packed<T: Transport + ?Sized>(
    t: &mut T,
    data: &mut [f32],
    stripe_res: &mut [f32],
    stage: &mut OneBitStage,
    tag: Tag,
) -> Result<usize, CommError> {
    let (p, n) = (t.size(), data.len());
    assert!(packed_fits(n, p), "1-bit: {n} values packed for {p} ranks do not fit");
    if p == 1 || n == 0 {
        return Ok(0);
    }
    let layout = packed_layout(n, p);
    let bytes = crate::codec::f32_bytes_mut(data);
    stage.out.resize_with(p, Vec::new);
    for (out, &(_, len, at)) in stage.out.iter_mut().zip(&layout) {
        out.clear();
        out.extend_from_slice(&bytes[at..at + encoded_len(len)]);
    }
    exchange(t, n, stripe_res, stage, tag, |j, enc| {
        let at = layout[j].2;
        bytes[at..at + enc.len()].copy_from_slice(enc);
    })
}

/// Steps 2 to 4 from this rank's quantized stripes in `stage.out`: each stripe's quantized
/// mean goes to `land(stripe, encoding)`, this rank's own first.
fn exchange<T: Transport + ?Sized>(
    t: &mut T,
    n: usize,
    stripe_res: &mut [f32],
    stage: &mut OneBitStage,
    tag: Tag,
    mut land: impl FnMut(usize, &[u8]),
) -> Result<usize, CommError> {
    let (p, r) = (t.size(), t.rank());
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
    quantize(&stage.sum, &mut stripe_res[mine], &mut owned);
    land(r, &owned);
    for k in 1..p {
        let (to, from) = ((r + k) % p, (r + p - k) % p);
        stage.inb.resize(encoded_len(part(n, p, from).len()), 0);
        t.sendrecv(to, &owned, from, &mut stage.inb, tag)?;
        sent += owned.len();
        land(from, &stage.inb);
    }
    stage.out[r] = owned;
    Ok(sent)
}
