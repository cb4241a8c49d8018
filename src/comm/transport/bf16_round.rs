//! f32 to bfloat16 and back for `--wire bf16`, element-wise and branch-free so that the
//! compiler vectorizes it (AVX2 where the CPU has it). The comm thread converts every
//! gradient byte it sends and receives, beside compute that needs the same cores, so these
//! loops are on the exchange's CPU bill: `half`'s one-value conversion branches on NaN and on
//! the rounding bit and stays scalar, 2.3-2.8x slower on a 1 MiB fragment
//! (`cargo bench --bench bf16_wire`).
//!
//! The rounding is `half::bf16::from_f32`'s, bit for bit (the tests check every class of
//! value against it): round to nearest, ties to even, NaN kept NaN with its top mantissa bit
//! set, overflow to infinity.

use crate::comm::transport::Combine;

/// The bf16 encoding of `v`: its top 16 bits after rounding to nearest, ties to even.
#[inline(always)]
fn encode(v: f32) -> u16 {
    let x = v.to_bits();
    // Adding 0x7FFF plus the kept part's last bit carries into the kept part exactly when
    // the dropped part is over half, or half with an odd kept part.
    let rounded = x.wrapping_add(0x7FFF + ((x >> 16) & 1)) >> 16;
    let nan = (x & 0x7FFF_FFFF) > 0x7F80_0000;
    (if nan { (x >> 16) | 0x0040 } else { rounded }) as u16
}

#[inline(always)]
fn decode(b: u16) -> f32 {
    f32::from_bits(u32::from(b) << 16)
}

/// Round every value of `x` to the nearest bf16, in place.
pub fn round_in_place(x: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2 (checked just above).
        return unsafe { round_in_place_avx2(x) };
    }
    round_in_place_plain(x)
}

/// Round every value of `x` to bf16 in place and write its encoding to `out`
/// ([x.len()] u16).
pub fn round_and_encode(x: &mut [f32], out: &mut [u16]) {
    assert_eq!(x.len(), out.len(), "round_and_encode: length mismatch");
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2.
        return unsafe { round_and_encode_avx2(x, out) };
    }
    round_and_encode_plain(x, out)
}

/// `dst = combine(dst, decode(src))`, with the arithmetic of `reduce::combine` (no FMA, so
/// `(a + b) * s` rounds twice on every machine).
pub fn decode_combine(dst: &mut [f32], src: &[u16], how: Combine) {
    assert_eq!(dst.len(), src.len(), "decode_combine: length mismatch");
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2.
        return unsafe { decode_combine_avx2(dst, src, how) };
    }
    decode_combine_plain(dst, src, how)
}

#[inline(always)]
fn round_in_place_plain(x: &mut [f32]) {
    for v in x {
        *v = decode(encode(*v));
    }
}

#[inline(always)]
fn round_and_encode_plain(x: &mut [f32], out: &mut [u16]) {
    for (v, o) in x.iter_mut().zip(out) {
        let b = encode(*v);
        *v = decode(b);
        *o = b;
    }
}

#[inline(always)]
fn decode_combine_plain(dst: &mut [f32], src: &[u16], how: Combine) {
    match how {
        Combine::Copy => dst.iter_mut().zip(src).for_each(|(d, &b)| *d = decode(b)),
        Combine::Add => dst.iter_mut().zip(src).for_each(|(d, &b)| *d += decode(b)),
        Combine::AddScale(s) => dst.iter_mut().zip(src).for_each(|(d, &b)| *d = (*d + decode(b)) * s),
    }
}

// The AVX2 copies are the plain loops compiled for wider registers.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn round_in_place_avx2(x: &mut [f32]) {
    round_in_place_plain(x)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn round_and_encode_avx2(x: &mut [f32], out: &mut [u16]) {
    round_and_encode_plain(x, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn decode_combine_avx2(dst: &mut [f32], src: &[u16], how: Combine) {
    decode_combine_plain(dst, src, how)
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::bf16;

    /// Every class of f32: zeros, subnormals, ties (even and odd kept part), values just
    /// either side of a tie, the largest finite values (which round to infinity),
    /// infinities, quiet and signalling NaNs of both signs, and a spread of random bits.
    fn awkward_values() -> Vec<f32> {
        let mut bits: Vec<u32> = vec![
            0x0000_0000,
            0x8000_0000,
            0x0000_0001,
            0x0000_8000,
            0x0001_8000,
            0x807F_FFFF,
            0x3F80_8000, // 1 + half an ulp of bf16, kept part even: stays
            0x3F81_8000, // kept part odd: rounds up
            0x3F80_8001,
            0x3F80_7FFF,
            0x7F7F_FFFF,
            0xFF7F_FFFF,
            0x7F7F_8000,
            0x7F80_0000,
            0xFF80_0000,
            0x7FC0_0000,
            0x7F80_0001,
            0xFF80_0001,
            0x7FFF_FFFF,
            0xFFFF_FFFF,
        ];
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        for _ in 0..20_000 {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            bits.push((state >> 32) as u32);
        }
        bits.into_iter().map(f32::from_bits).collect()
    }

    #[test]
    fn encoding_matches_half_bit_for_bit() {
        let x = awkward_values();
        let mut rounded = x.clone();
        let mut out = vec![0u16; x.len()];
        round_and_encode(&mut rounded, &mut out);
        let mut in_place = x.clone();
        round_in_place(&mut in_place);
        for i in 0..x.len() {
            let want = bf16::from_f32(x[i]);
            assert_eq!(out[i], want.to_bits(), "encoding of {:#010x}", x[i].to_bits());
            assert_eq!(rounded[i].to_bits(), want.to_f32().to_bits(), "rounding of {:#010x}", x[i].to_bits());
            assert_eq!(in_place[i].to_bits(), want.to_f32().to_bits(), "in place, {:#010x}", x[i].to_bits());
        }
    }

    #[test]
    fn decode_combine_matches_scalar_definition() {
        let n = 1037; // not a multiple of any vector width
        let a: Vec<f32> = (0..n).map(|i| (i as f32).sin() * 3.0).collect();
        let b: Vec<u16> = (0..n).map(|i| bf16::from_f32((i as f32 * 0.7).cos()).to_bits()).collect();
        let v = |i: usize| bf16::from_bits(b[i]).to_f32();
        for (how, want) in [
            (Combine::Copy, &(|_: f32, v: f32| v) as &dyn Fn(f32, f32) -> f32),
            (Combine::Add, &|d, v| d + v),
            (Combine::AddScale(1.0 / 3.0), &|d, v| (d + v) * (1.0f32 / 3.0)),
        ] {
            let mut d = a.clone();
            decode_combine(&mut d, &b, how);
            for i in 0..n {
                assert_eq!(d[i].to_bits(), want(a[i], v(i)).to_bits(), "{how:?} at {i}");
            }
        }
    }
}
