//! The wire packed on the device, beside the gradients, so that the copies to the host and
//! back and the comm thread carry the small form; the result is the same bits as the comm
//! thread's own packing would give.
//!
//! `--wire 1bit`: each bucket's own quantization (the first step of the 1-bit allreduce,
//! `comm::onebit`) runs as one kernel, the encodings are about 1/28 of the f32 bytes, and the
//! quantized means come back encoded and are decoded by the device. The device keeps this
//! rank's own residual of the bucket; the comm thread keeps the residuals of the stripes this
//! rank owns (`onebit::allreduce_mean_packed`).
//!
//! `--wire bf16`: each fragment rounded to bf16 (half the bytes), averaged as bf16 by the comm
//! thread (`transport::bf16_wire`), and widened back by the device: the comm thread converts
//! nothing but the sums it forms.

use crate::backend::{Backend, View, ViewMut};
use crate::codec::bf16::floats_for;
use crate::codec::onebit::{column_words, columns, encoded_len};
use crate::comm::Wire;
use crate::comm::onebit::{packed_fits, packed_layout};
use anyhow::Result;
use std::ops::Range;

/// `DCGAN_WIRE_PACKING=host` leaves the packing (1-bit, bf16) to the comm thread on every
/// backend (to measure what packing on the device saves); read once.
pub fn on_device_allowed() -> bool {
    static HOST: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    !*HOST.get_or_init(|| std::env::var("DCGAN_WIRE_PACKING").is_ok_and(|v| v == "host"))
}

/// One bucket's device side of the packed 1-bit exchange.
pub struct OneBitBucket<B: Backend> {
    /// The column table of every stripe of every fragment ([3 * columns] words as f32 bits).
    table: B::Buf,
    /// Per fragment: its columns (a range of the table's) and the floats its encodings take
    /// from the fragment's first value on.
    fragments: Vec<(Range<usize>, usize)>,
    /// The encodings [bucket floats]: each fragment's where its values are.
    enc: B::Buf,
    /// This rank's own residual [bucket floats].
    residual: B::Buf,
    /// Each column's residual's sum of squares after the last quantization [columns].
    col_sq: B::Buf,
    /// Where `col_sq` goes in the exchange's sums of every packed bucket as each exchange
    /// ends (the metrics report the residuals after the last exchange finished, while the
    /// next may be in flight already), so that one download a step reads them all.
    sums_at: Range<usize>,
    /// A resumed residual's sum of squares, reported until an exchange of the bucket ends.
    resumed_sq: Option<f64>,
}

impl<B: Backend> OneBitBucket<B> {
    /// The device side of a bucket of `len` values cut into `fragments`, for `ranks` ranks,
    /// its column sums from `*sums` on in the exchange's (which it moves past them); None
    /// where a fragment's encodings would not fit in its own floats (stripes of a few
    /// values): that bucket is quantized by the comm thread.
    pub fn new(be: &B, len: usize, fragments: &[Range<usize>], ranks: usize, sums: &mut usize) -> Result<Option<Self>> {
        if !fragments.iter().all(|f| packed_fits(f.len(), ranks)) {
            return Ok(None);
        }
        let (mut all, mut per_fragment) = (Vec::new(), Vec::new());
        for f in fragments {
            let layout = packed_layout(f.len(), ranks);
            let cols = columns(layout.iter().map(|&(start, n, byte)| (f.start + start, n, 4 * f.start + byte)));
            let floats = layout.last().map_or(0, |&(_, n, byte)| (byte + encoded_len(n)) / 4);
            per_fragment.push((all.len()..all.len() + cols.len(), floats));
            all.extend(cols);
        }
        let sums_at = *sums..*sums + all.len();
        *sums = sums_at.end;
        let words: Vec<f32> = column_words(&all).into_iter().map(f32::from_bits).collect();
        let mut table = be.alloc(words.len())?;
        be.upload(&words, ViewMut::whole(&mut table));
        Ok(Some(OneBitBucket {
            table,
            fragments: per_fragment,
            enc: be.alloc(len)?,
            residual: be.alloc(len)?,
            col_sq: be.alloc(all.len())?,
            sums_at,
            resumed_sq: None,
        }))
    }

    /// Quantize the bucket's gradients `grad` [bucket floats] with the residual.
    pub fn pack(&mut self, be: &B, grad: View<B>) {
        let (res, sq) = (ViewMut::whole(&mut self.residual), ViewMut::whole(&mut self.col_sq));
        be.wire_onebit_quantize(View::whole(&self.table), grad, res, ViewMut::whole(&mut self.enc), sq);
    }

    /// Floats of fragment `k` (values `f`) that hold its encodings.
    fn encoded(&self, k: usize, f: &Range<usize>) -> Range<usize> {
        f.start..f.start + self.fragments[k].1
    }

    /// Fragment `k`'s encodings, to copy to the host at the fragment's start.
    pub fn encodings(&self, k: usize, f: &Range<usize>) -> View<'_, B> {
        View::range(&self.enc, self.encoded(k, f))
    }

    /// Where fragment `k`'s quantized means come back from the host.
    pub fn encodings_mut(&mut self, k: usize, f: &Range<usize>) -> ViewMut<'_, B> {
        let r = self.encoded(k, f);
        ViewMut::range(&mut self.enc, r)
    }

    /// Decode fragment `k`'s quantized means (back in `enc`) into grad [bucket floats].
    pub fn unpack(&self, be: &B, k: usize, grad: ViewMut<B>) {
        let c = &self.fragments[k].0;
        be.wire_onebit_decode(View::range(&self.table, 3 * c.start..3 * c.end), View::whole(&self.enc), grad);
    }

    /// The exchange of the last quantization is over: its residual is the one to report, its
    /// column sums copied into the exchange's `sums` (on the device).
    pub fn exchanged(&mut self, be: &B, sums: &mut B::Buf) {
        self.resumed_sq = None;
        be.copy(View::whole(&self.col_sq), ViewMut::range(sums, self.sums_at.clone()));
    }

    /// The sum of squares of the residual as of the last exchange finished, from the
    /// exchange's column sums downloaded (`sums`).
    pub fn residual_sq(&self, sums: &[f32]) -> f64 {
        self.resumed_sq.unwrap_or_else(|| sums[self.sums_at.clone()].iter().map(|&s| f64::from(s)).sum())
    }

    /// This rank's own residual [bucket floats].
    pub fn residual(&self, be: &B) -> Vec<f32> {
        let mut out = vec![0.0; crate::backend::DeviceBuf::len(&self.residual)];
        be.download(View::whole(&self.residual), &mut out);
        out
    }

    /// Continue from residual `r` [bucket floats] (a checkpoint's).
    pub fn set_residual(&mut self, be: &B, r: &[f32]) {
        be.upload(r, ViewMut::whole(&mut self.residual));
        self.resumed_sq = Some(r.iter().map(|&x| f64::from(x) * f64::from(x)).sum());
    }
}

/// One bucket's device side of the packed bf16 exchange.
pub struct Bf16Bucket<B: Backend> {
    /// The comm thread's fragments of the bucket (values within it).
    fragments: Vec<Range<usize>>,
    /// The encodings [bucket floats]: fragment f's in its first floats_for(f.len()) floats.
    enc: B::Buf,
}

/// The floats of a bucket's bf16 encodings that hold fragment `f`'s: its first ones.
fn bf16_floats(f: &Range<usize>) -> Range<usize> {
    f.start..f.start + floats_for(f.len())
}

/// A bucket packed on the device, in the form of its wire.
pub enum PackedBucket<B: Backend> {
    OneBit(OneBitBucket<B>),
    Bf16(Bf16Bucket<B>),
}

impl<B: Backend> PackedBucket<B> {
    /// The device side of a bucket of `len` values cut into `fragments` under `wire`, for
    /// `ranks` ranks (1-bit: `OneBitBucket::new`, its column sums from `*sums` on); None where
    /// the comm thread packs it (f32, or 1-bit stripes too small to pack).
    pub fn new(
        be: &B,
        wire: Wire,
        len: usize,
        fragments: &[Range<usize>],
        ranks: usize,
        sums: &mut usize,
    ) -> Result<Option<Self>> {
        Ok(match wire {
            Wire::F32 => None,
            Wire::OneBit => OneBitBucket::new(be, len, fragments, ranks, sums)?.map(PackedBucket::OneBit),
            Wire::Bf16 => Some(PackedBucket::Bf16(Bf16Bucket { fragments: fragments.to_vec(), enc: be.alloc(len)? })),
        })
    }

    /// Pack the gradients of values `bucket` of `grad`.
    pub fn pack(&mut self, be: &B, grad: &B::Buf, bucket: &Range<usize>) {
        match self {
            PackedBucket::OneBit(pk) => pk.pack(be, View::range(grad, bucket.clone())),
            PackedBucket::Bf16(pk) => {
                for f in &pk.fragments {
                    let values = View::range(grad, bucket.start + f.start..bucket.start + f.end);
                    be.wire_bf16_encode(values, ViewMut::range(&mut pk.enc, bf16_floats(f)));
                }
            }
        }
    }

    /// Fragment `k`'s (values `f`) encodings, to copy to the host at the fragment's start.
    pub fn encodings(&self, k: usize, f: &Range<usize>) -> View<'_, B> {
        match self {
            PackedBucket::OneBit(pk) => pk.encodings(k, f),
            PackedBucket::Bf16(pk) => View::range(&pk.enc, bf16_floats(f)),
        }
    }

    /// Where fragment `k`'s averaged encodings come back from the host.
    pub fn encodings_mut(&mut self, k: usize, f: &Range<usize>) -> ViewMut<'_, B> {
        match self {
            PackedBucket::OneBit(pk) => pk.encodings_mut(k, f),
            PackedBucket::Bf16(pk) => ViewMut::range(&mut pk.enc, bf16_floats(f)),
        }
    }

    /// Unpack fragment `k`'s averaged encodings into values `bucket` of `grad`.
    pub fn unpack(&self, be: &B, k: usize, grad: &mut B::Buf, bucket: &Range<usize>) {
        match self {
            PackedBucket::OneBit(pk) => pk.unpack(be, k, ViewMut::range(grad, bucket.clone())),
            PackedBucket::Bf16(pk) => {
                let f = &pk.fragments[k];
                let out = ViewMut::range(grad, bucket.start + f.start..bucket.start + f.end);
                be.wire_bf16_decode(View::range(&pk.enc, bf16_floats(f)), out);
            }
        }
    }

    /// The 1-bit side, which has residuals.
    pub fn one_bit(&self) -> Option<&OneBitBucket<B>> {
        match self {
            PackedBucket::OneBit(pk) => Some(pk),
            PackedBucket::Bf16(_) => None,
        }
    }

    pub fn one_bit_mut(&mut self) -> Option<&mut OneBitBucket<B>> {
        match self {
            PackedBucket::OneBit(pk) => Some(pk),
            PackedBucket::Bf16(_) => None,
        }
    }
}
