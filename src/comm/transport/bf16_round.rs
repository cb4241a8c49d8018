//! f32 to bfloat16 and back for `--wire bf16`, element-wise and branch-free so that the
//! compiler vectorizes it (AVX2 where the CPU has it). The comm thread converts every
//! gradient byte it sends and receives, beside compute that needs the same cores, so these
//! loops are on the exchange's CPU bill: `half`'s one-value conversion branches on NaN and on
//! the rounding bit and stays scalar, several times slower (`cargo bench --bench bf16_wire`;
//! measured: docs/performance/overlap.md).
//!
//! The rounding is `half::bf16::from_f32`'s, bit for bit (the tests check every class of
//! value against it): round to nearest, ties to even, overflow to infinity, and a NaN stays
//! NaN with its top mantissa bit set (quiet). Decoding is `half`'s too for every value the
//! encoding makes; it skips `half`'s quieting of signalling NaNs, which the encoding never
//! sends and which would slow every conversion here.

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

/// The f32 of bf16 encoding `b` (exact: every bf16 is an f32).
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

    /// Every exponent and sign with the dropped half at each rounding boundary (zero, the
    /// least, just under half, half, just over half, the most), which covers zeros,
    /// subnormals, ties with even and odd kept parts, the largest finite values (which round
    /// to infinity), infinities and NaNs of both signs; then random bit patterns.
    fn every_class_of_f32() -> Vec<f32> {
        let mut bits = Vec::new();
        for high in 0..=u16::MAX {
            for low in [0x0000, 0x0001, 0x7FFF, 0x8000, 0x8001, 0xFFFF] {
                bits.push(u32::from(high) << 16 | low);
            }
        }
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        for _ in 0..20_000 {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            bits.push((state >> 32) as u32);
        }
        bits.into_iter().map(f32::from_bits).collect()
    }

    type Encoder = fn(&mut [f32], &mut [u16]);
    type Rounder = fn(&mut [f32]);
    type Decoder = fn(&mut [f32], &[u16], Combine);

    /// The run-time dispatch (AVX2 here where the CPU has it) and the plain loops, which
    /// other machines run.
    const ENCODERS: [(&str, Encoder, Rounder); 2] = [
        ("dispatch", round_and_encode, round_in_place),
        ("plain", |x, o| round_and_encode_plain(x, o), |x| round_in_place_plain(x)),
    ];
    const DECODERS: [(&str, Decoder); 2] =
        [("dispatch", decode_combine), ("plain", |d, s, h| decode_combine_plain(d, s, h))];

    #[test]
    fn encoding_matches_half_bit_for_bit() {
        let x = every_class_of_f32();
        for (path, encode_into, round) in ENCODERS {
            let mut rounded = x.clone();
            let mut out = vec![0u16; x.len()];
            encode_into(&mut rounded, &mut out);
            let mut in_place = x.clone();
            round(&mut in_place);
            for i in 0..x.len() {
                let want = bf16::from_f32(x[i]);
                let at = x[i].to_bits();
                assert_eq!(out[i], want.to_bits(), "{path}: encoding of {at:#010x}");
                assert_eq!(rounded[i].to_bits(), want.to_f32().to_bits(), "{path}: rounding of {at:#010x}");
                assert_eq!(in_place[i].to_bits(), want.to_f32().to_bits(), "{path}: in place, {at:#010x}");
            }
        }
    }

    #[test]
    fn decoding_matches_half_and_combines_as_reduce_does() {
        // Every bf16 value the encoding makes (it never sends a signalling NaN: the
        // encoding test holds it to `half`, which quiets them), against destinations of
        // every class.
        let signalling_nan = |b: u16| (b & 0x7FFF) > 0x7F80 && b & 0x0040 == 0;
        let src: Vec<u16> = (0..=u16::MAX).filter(|&b| !signalling_nan(b)).collect();
        let classes = every_class_of_f32();
        let dst: Vec<f32> = (0..src.len()).map(|i| classes[(i * 7919) % classes.len()]).collect();
        let s = 1.0f32 / 3.0;
        for (path, decode_into) in DECODERS {
            for how in [Combine::Copy, Combine::Add, Combine::AddScale(s)] {
                let mut d = dst.clone();
                decode_into(&mut d, &src, how);
                for i in 0..src.len() {
                    let v = bf16::from_bits(src[i]).to_f32();
                    // The same arithmetic as reduce::combine (no FMA).
                    let want = match how {
                        Combine::Copy => v,
                        Combine::Add => dst[i] + v,
                        Combine::AddScale(k) => (dst[i] + v) * k,
                    };
                    // Which NaN an addition of NaNs returns is the hardware's choice; a
                    // copy must be exact.
                    let adds = !matches!(how, Combine::Copy);
                    let same = d[i].to_bits() == want.to_bits() || (adds && d[i].is_nan() && want.is_nan());
                    assert!(
                        same,
                        "{path} {how:?}: {:#06x} into {:#010x} gave {:#010x}, want {:#010x}",
                        src[i],
                        dst[i].to_bits(),
                        d[i].to_bits(),
                        want.to_bits()
                    );
                }
            }
            let mut empty: [f32; 0] = [];
            decode_into(&mut empty, &[], Combine::Add);
        }
    }
}
