//! bfloat16, one value at a time: the definition every bf16 path follows (the comm thread's
//! vectorized loops, `transport::bf16_round`, and the device's `ops::wire` kernels, are
//! tested against it).

/// The bf16 encoding of `v`: its top 16 bits after rounding to nearest, ties to even;
/// overflow goes to infinity and a NaN stays NaN with its top mantissa bit set (quiet).
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
