//! bfloat16 for `--wire bf16`: f32 to bf16 bits and back, element-wise and branch-free so that
//! the compiler vectorizes it (AVX2 where the CPU has it). The comm thread converts gradient
//! fragments it packs itself, beside compute that needs the same cores, and the CPU backend's
//! device-side packing is these loops too; `half`'s one-value conversion branches on NaN and on
//! the rounding bit and stays scalar, several times slower (`cargo bench --bench bf16_wire`).
//!
//! The rounding is `half::bf16::from_f32`'s, bit for bit (the tests check every class of
//! value against it): round to nearest, ties to even, overflow to infinity, and a NaN stays
//! NaN with its top mantissa bit set (quiet). Decoding is `half`'s too for every value the
//! encoding makes; it skips `half`'s quieting of signalling NaNs, which the encoding never
//! makes and which would slow every conversion. kernels/wire.cu rounds the same way.

/// The bf16 encoding of `v`: its top 16 bits after rounding to nearest, ties to even.
#[inline(always)]
pub fn encode(v: f32) -> u16 {
    let x = v.to_bits();
    // Adding 0x7FFF plus the kept part's last bit carries into the kept part exactly when
    // the dropped part is over half, or half with an odd kept part.
    let rounded = x.wrapping_add(0x7FFF + ((x >> 16) & 1)) >> 16;
    let nan = (x & 0x7FFF_FFFF) > 0x7F80_0000;
    (if nan { (x >> 16) | 0x0040 } else { rounded }) as u16
}

/// The f32 of bf16 encoding `b` (exact: every bf16 is an f32).
#[inline(always)]
pub fn decode(b: u16) -> f32 {
    f32::from_bits(u32::from(b) << 16)
}

/// `out[i]` = the bf16 encoding of `x[i]`.
pub fn encode_into(x: &[f32], out: &mut [u16]) {
    assert_eq!(x.len(), out.len(), "bf16 encode_into: length mismatch");
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2 (checked just above).
        return unsafe { encode_into_avx2(x, out) };
    }
    encode_into_plain(x, out)
}

/// `out[i]` = the f32 of bf16 encoding `src[i]`.
pub fn decode_into(src: &[u16], out: &mut [f32]) {
    assert_eq!(src.len(), out.len(), "bf16 decode_into: length mismatch");
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2.
        return unsafe { decode_into_avx2(src, out) };
    }
    decode_into_plain(src, out)
}

/// Floats that hold `n` bf16 values, two to a float.
pub fn floats_for(n: usize) -> usize {
    n.div_ceil(2)
}

/// The floats of `x` as twice as many bf16 values, in memory order (value i at bytes 2i and
/// 2i + 1): how bf16 encodings live in f32 buffers.
pub fn as_bf16_mut(x: &mut [f32]) -> &mut [u16] {
    bytemuck::cast_slice_mut(x)
}

/// `as_bf16_mut`, read-only.
pub fn as_bf16(x: &[f32]) -> &[u16] {
    bytemuck::cast_slice(x)
}

/// The first `floats_for(x.len())` floats of `x` as `x.len()` bf16 values: where a fragment
/// packed to bf16 keeps its values.
pub fn packed_in_mut(x: &mut [f32]) -> &mut [u16] {
    let n = x.len();
    &mut as_bf16_mut(x)[..n]
}

#[inline(always)]
fn encode_into_plain(x: &[f32], out: &mut [u16]) {
    for (v, o) in x.iter().zip(out) {
        *o = encode(*v);
    }
}

#[inline(always)]
fn decode_into_plain(src: &[u16], out: &mut [f32]) {
    for (b, o) in src.iter().zip(out) {
        *o = decode(*b);
    }
}

// The AVX2 copies are the plain loops compiled for wider registers.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn encode_into_avx2(x: &[f32], out: &mut [u16]) {
    encode_into_plain(x, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn decode_into_avx2(src: &[u16], out: &mut [f32]) {
    decode_into_plain(src, out)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use half::bf16;

    /// Every exponent and sign with the dropped half at each rounding boundary (zero, the
    /// least, just under half, half, just over half, the most), which covers zeros,
    /// subnormals, ties with even and odd kept parts, the largest finite values (which round
    /// to infinity), infinities and NaNs of both signs; then random bit patterns.
    pub(crate) fn every_class_of_f32() -> Vec<f32> {
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

    /// Every bf16 the encoding makes: all but the signalling NaNs (the encoding test holds
    /// it to `half`, which quiets them).
    pub(crate) fn every_encoding() -> Vec<u16> {
        let signalling_nan = |b: u16| (b & 0x7FFF) > 0x7F80 && b & 0x0040 == 0;
        (0..=u16::MAX).filter(|&b| !signalling_nan(b)).collect()
    }

    type Encoder = fn(&[f32], &mut [u16]);
    type Decoder = fn(&[u16], &mut [f32]);

    /// The run-time dispatch (AVX2 here where the CPU has it) and the plain loops, which
    /// other machines run.
    const PATHS: [(&str, Encoder, Decoder); 2] = [
        ("dispatch", encode_into, decode_into),
        ("plain", |x, o| encode_into_plain(x, o), |s, o| decode_into_plain(s, o)),
    ];

    #[test]
    fn encoding_matches_half_bit_for_bit() {
        let x = every_class_of_f32();
        for (path, encode, _) in PATHS {
            let mut out = vec![0u16; x.len()];
            encode(&x, &mut out);
            for i in 0..x.len() {
                let want = bf16::from_f32(x[i]).to_bits();
                assert_eq!(out[i], want, "{path}: encoding of {:#010x}", x[i].to_bits());
            }
        }
    }

    #[test]
    fn decoding_matches_half_bit_for_bit() {
        let src = every_encoding();
        for (path, _, decode) in PATHS {
            let mut out = vec![0.0f32; src.len()];
            decode(&src, &mut out);
            for (b, v) in src.iter().zip(&out) {
                assert_eq!(v.to_bits(), bf16::from_bits(*b).to_f32().to_bits(), "{path}: decoding of {b:#06x}");
            }
        }
    }

    #[test]
    fn packed_values_sit_in_the_first_half_of_the_floats() {
        let mut x = vec![0.0f32; 5];
        packed_in_mut(&mut x).copy_from_slice(&[1, 2, 3, 4, 5]);
        // Little-endian pairs: value 2k in the low half of float k.
        let words: Vec<u32> = x.iter().map(|v| v.to_bits()).collect();
        let want = if cfg!(target_endian = "little") {
            [0x0002_0001, 0x0004_0003, 5]
        } else {
            [0x0001_0002, 0x0003_0004, 5 << 16]
        };
        assert_eq!(&words[..floats_for(5)], &want);
        assert_eq!(&words[floats_for(5)..], &[0, 0], "the floats past the packed values are untouched");
    }
}
