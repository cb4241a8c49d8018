//! `--wire bf16`: gradients averaged as bfloat16 values, half the bytes of f32 on every link
//! (Horovod's fp16 compression, with bf16's f32 exponent range so gradients cannot overflow).
//! Each rank's gradients are rounded to bf16 once, before the allreduce (by the device that
//! holds them, or by the comm thread: `codec::bf16`); the algorithms then move bf16 bits as
//! they are and, where they reduce, add in f32 and round the result back to bf16
//! (`combine`). Copies cost nothing beyond the bytes, and nothing is converted to send.
//!
//! Every rank ends with the same bits: each sum is formed once and copied (ring, vhd, tree),
//! or formed on both sides from the same two operands (rd: a + b = b + a exactly).
//! Error: half a bf16 unit (2^-9 relative) per rounding, one for each input and one for each
//! addition on a value's way (ring: p - 1).

use super::{Combine, CommError, RecvEnd, SendEnd, Tag, Transport, skip_empty};
use crate::codec::bf16::{decode, encode};
use bytemuck::{cast_slice, cast_slice_mut};
use std::cell::RefCell;

thread_local! {
    /// The values being received, kept between exchanges (the comm thread's, in a job).
    static RECEIVED: RefCell<Vec<u16>> = const { RefCell::new(Vec::new()) };
}

/// `Transport::exchange` for buffers of bf16 values: send `buf[send.1]` as it is while
/// receiving `recv.1.len()` values and combining them into `buf[recv.1]` (`combine`).
pub fn exchange<T: Transport + ?Sized>(
    t: &mut T,
    buf: &mut [u16],
    send: SendEnd,
    recv: RecvEnd,
    tag: Tag,
) -> Result<(), CommError> {
    match skip_empty(send, recv) {
        (None, None) => Ok(()),
        (Some((to, sr)), None) => t.send(to, tag, cast_slice(&buf[sr])),
        (None, Some((from, rr, Combine::Copy))) => t.recv(from, tag, cast_slice_mut(&mut buf[rr])),
        (send, Some((from, rr, how))) => RECEIVED.with_borrow_mut(|got| {
            got.resize(rr.len(), 0);
            match send {
                Some((to, sr)) => t.sendrecv(to, cast_slice(&buf[sr]), from, cast_slice_mut(got), tag)?,
                None => t.recv(from, tag, cast_slice_mut(got))?,
            }
            combine(&mut buf[rr], got, how);
            Ok(())
        }),
    }
}

/// `dst = bf16(combine(dst, src))` element-wise: the arithmetic of `reduce::combine` in f32
/// (no FMA, so `(a + b) * s` rounds twice on every machine), rounded back to bf16.
pub fn combine(dst: &mut [u16], src: &[u16], how: Combine) {
    assert_eq!(dst.len(), src.len(), "bf16 combine: length mismatch");
    if how == Combine::Copy {
        return dst.copy_from_slice(src);
    }
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2 (checked just above).
        return unsafe { combine_avx2(dst, src, how) };
    }
    combine_plain(dst, src, how)
}

#[inline(always)]
fn combine_plain(dst: &mut [u16], src: &[u16], how: Combine) {
    match how {
        Combine::Copy => dst.copy_from_slice(src),
        Combine::Add => dst.iter_mut().zip(src).for_each(|(d, &b)| *d = encode(decode(*d) + decode(b))),
        Combine::AddScale(s) => dst.iter_mut().zip(src).for_each(|(d, &b)| *d = encode((decode(*d) + decode(b)) * s)),
    }
}

// The AVX2 copy is the plain loop compiled for wider registers.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn combine_avx2(dst: &mut [u16], src: &[u16], how: Combine) {
    combine_plain(dst, src, how)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::bf16::tests::every_encoding;
    use half::bf16;

    type Combiner = fn(&mut [u16], &[u16], Combine);

    /// The run-time dispatch (AVX2 here where the CPU has it) and the plain loop.
    const PATHS: [(&str, Combiner); 2] = [("dispatch", combine), ("plain", |d, s, h| combine_plain(d, s, h))];

    #[test]
    fn combining_is_f32_arithmetic_rounded_as_half_rounds() {
        // Every bf16 the encoding makes, against destinations drawn from all of them.
        let src = every_encoding();
        let dst: Vec<u16> = (0..src.len()).map(|i| src[(i * 7919 + 13) % src.len()]).collect();
        let s = 1.0f32 / 3.0;
        for (path, combine) in PATHS {
            for how in [Combine::Copy, Combine::Add, Combine::AddScale(s)] {
                let mut d = dst.clone();
                combine(&mut d, &src, how);
                for i in 0..src.len() {
                    let (a, b) = (bf16::from_bits(dst[i]).to_f32(), bf16::from_bits(src[i]).to_f32());
                    let sum = match how {
                        Combine::Copy => b,
                        Combine::Add => a + b,
                        Combine::AddScale(k) => (a + b) * k,
                    };
                    let want = bf16::from_f32(sum);
                    // Which NaN an addition of NaNs returns is the hardware's choice; a copy
                    // must be exact.
                    let adds = how != Combine::Copy;
                    let same = d[i] == want.to_bits() || (adds && bf16::from_bits(d[i]).is_nan() && want.is_nan());
                    assert!(
                        same,
                        "{path} {how:?}: {:#06x} into {:#06x} gave {:#06x}, want {:#06x}",
                        src[i],
                        dst[i],
                        d[i],
                        want.to_bits()
                    );
                }
            }
        }
        let mut empty: [u16; 0] = [];
        combine(&mut empty, &[], Combine::Add);
    }
}
