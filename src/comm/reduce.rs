//! The arithmetic of the allreduce: combining received values into a buffer, element by
//! element (vectorized with AVX2 where the CPU has it). Every rank and every algorithm uses
//! these, so the same operands always give the same bits.

use crate::comm::transport::Combine;

/// `dst = combine(dst, src)` element-wise.
pub fn combine(dst: &mut [f32], src: &[f32], how: Combine) {
    assert_eq!(dst.len(), src.len(), "combine: length mismatch");
    match how {
        Combine::Copy => dst.copy_from_slice(src),
        Combine::Add => add(dst, src),
        Combine::AddScale(s) => add_scale(dst, src, s),
    }
}

/// `dst = combine(dst, src)` where `src` arrives as raw bytes (native-endian f32).
pub fn combine_bytes(dst: &mut [f32], src: &[u8], how: Combine) {
    assert_eq!(dst.len() * 4, src.len(), "combine_bytes: length mismatch");
    // The same arithmetic as `combine`, one element at a time.
    let vals = src.chunks_exact(4).map(|b| f32::from_ne_bytes([b[0], b[1], b[2], b[3]]));
    match how {
        Combine::Copy => dst.iter_mut().zip(vals).for_each(|(d, v)| *d = v),
        Combine::Add => dst.iter_mut().zip(vals).for_each(|(d, v)| *d += v),
        Combine::AddScale(s) => dst.iter_mut().zip(vals).for_each(|(d, v)| *d = (*d + v) * s),
    }
}

/// `x *= s` element-wise.
pub fn scale(x: &mut [f32], s: f32) {
    if s == 1.0 {
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2 (checked just above).
        return unsafe { scale_avx2(x, s) };
    }
    scale_plain(x, s)
}

fn add(dst: &mut [f32], src: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2.
        return unsafe { add_avx2(dst, src) };
    }
    add_plain(dst, src)
}

fn add_scale(dst: &mut [f32], src: &[f32], s: f32) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2.
        return unsafe { add_scale_avx2(dst, src, s) };
    }
    add_scale_plain(dst, src, s)
}

// The plain loops are written so that the compiler vectorizes them; the AVX2 copies are the
// same source compiled for wider registers. No FMA: (a + b) * s stays two roundings, the same
// on every machine.
#[inline(always)]
fn add_plain(dst: &mut [f32], src: &[f32]) {
    for (d, s) in dst.iter_mut().zip(src) {
        *d += *s;
    }
}

#[inline(always)]
fn add_scale_plain(dst: &mut [f32], src: &[f32], k: f32) {
    for (d, s) in dst.iter_mut().zip(src) {
        *d = (*d + *s) * k;
    }
}

#[inline(always)]
fn scale_plain(x: &mut [f32], k: f32) {
    for v in x {
        *v *= k;
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn add_avx2(dst: &mut [f32], src: &[f32]) {
    add_plain(dst, src)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn add_scale_avx2(dst: &mut [f32], src: &[f32], k: f32) {
    add_scale_plain(dst, src, k)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn scale_avx2(x: &mut [f32], k: f32) {
    scale_plain(x, k)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernels_match_scalar_definition() {
        let n = 1037; // not a multiple of any vector width
        let a: Vec<f32> = (0..n).map(|i| (i as f32).sin() * 3.0).collect();
        let b: Vec<f32> = (0..n).map(|i| (i as f32 * 0.7).cos()).collect();
        let mut d = a.clone();
        combine(&mut d, &b, Combine::Add);
        for i in 0..n {
            assert_eq!(d[i].to_bits(), (a[i] + b[i]).to_bits());
        }
        let mut d = a.clone();
        combine(&mut d, &b, Combine::AddScale(1.0 / 3.0));
        for i in 0..n {
            assert_eq!(d[i].to_bits(), ((a[i] + b[i]) * (1.0f32 / 3.0)).to_bits());
        }
        let mut d = a.clone();
        combine_bytes(&mut d, crate::comm::transport::f32_bytes(&b), Combine::AddScale(0.25));
        for i in 0..n {
            assert_eq!(d[i].to_bits(), ((a[i] + b[i]) * 0.25).to_bits());
        }
        let mut d = a.clone();
        scale(&mut d, 0.5);
        for i in 0..n {
            assert_eq!(d[i], a[i] * 0.5);
        }
        let mut d = a.clone();
        combine(&mut d, &b, Combine::Copy);
        assert_eq!(d, b);
    }
}
