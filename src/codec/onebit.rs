//! CNTK's column quantizer with error feedback: each column of `COLUMN` values (the last one
//! shorter) travels as one sign bit per value and two reconstruction values, the mean of its
//! non-negative values and the mean of its negative ones; what the reconstruction misses stays
//! behind in a residual that is added to the next values quantized in its place.
//!
//! Encoded column: `[r+ f32][r- f32][ceil(len/32) u32 words]`, little-endian, bit i of the
//! column in word i/32 at bit i%32 (set: non-negative, decoded as r+).

/// One column of a column table: `len` values from value `start` on, encoded from byte
/// `byte` of the encoding on. A device quantizes a whole bucket (every stripe of every
/// fragment, each a vector of its own) in one launch by such a table (`ops::wire`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Column {
    pub start: usize,
    pub len: usize,
    pub byte: usize,
}

/// The columns of vectors `(value start, length, encoding's first byte)`, each encoded as
/// `quantize` encodes a vector: its columns one after the other.
pub fn columns(vectors: impl IntoIterator<Item = (usize, usize, usize)>) -> Vec<Column> {
    let mut out = Vec::new();
    for (start, len, byte) in vectors {
        let mut at = byte;
        for c in (0..len).step_by(COLUMN) {
            let n = COLUMN.min(len - c);
            out.push(Column { start: start + c, len: n, byte: at });
            at += column_bytes(n);
        }
    }
    out
}

/// The table as the kernels read it: start, length and first 32-bit word of each column.
pub fn column_words(cols: &[Column]) -> Vec<u32> {
    let word = |v: usize| u32::try_from(v).expect("a 1-bit column table past 2^32");
    cols.iter().flat_map(|c| [word(c.start), word(c.len), word(c.byte / 4)]).collect()
}

/// `quantize` by a column table: each column of `values` + `residual` into `out` at its
/// byte, `residual` left with what the encoding misses.
pub fn quantize_columns(cols: &[Column], values: &[f32], residual: &mut [f32], out: &mut [u8]) {
    for c in cols {
        let r = c.start..c.start + c.len;
        quantize_column(&values[r.clone()], &mut residual[r], &mut out[c.byte..c.byte + column_bytes(c.len)]);
    }
}

/// `decode` by a column table.
pub fn decode_columns(cols: &[Column], enc: &[u8], out: &mut [f32], land: Land) {
    for c in cols {
        decode(&enc[c.byte..c.byte + column_bytes(c.len)], &mut out[c.start..c.start + c.len], land);
    }
}

/// Values per column: each costs 8 bytes of reconstruction values, so a column of 512 sends
/// 64 + 8 bytes for 2048 bytes of f32 (28.4x fewer; at 256 it would be 25.6x).
pub const COLUMN: usize = 512;

/// Bytes of one encoded column of `len` values (a multiple of 4).
pub fn column_bytes(len: usize) -> usize {
    8 + len.div_ceil(32) * 4
}

/// Bytes the encoding of `n` values takes.
pub fn encoded_len(n: usize) -> usize {
    let full = n / COLUMN;
    let rest = n % COLUMN;
    full * column_bytes(COLUMN) + if rest > 0 { column_bytes(rest) } else { 0 }
}

/// Quantize `values + residual` into `out` ([encoded_len(values.len())] bytes) and leave in
/// `residual` what the quantized form misses: afterwards decoded + residual = values + the
/// old residual, up to one f32 rounding per value.
pub fn quantize(values: &[f32], residual: &mut [f32], out: &mut [u8]) {
    assert_eq!(values.len(), residual.len(), "quantize: {} values, {} residuals", values.len(), residual.len());
    assert_eq!(out.len(), encoded_len(values.len()), "quantize: output length");
    let mut at = 0;
    for (v, r) in values.chunks(COLUMN).zip(residual.chunks_mut(COLUMN)) {
        let bytes = column_bytes(v.len());
        quantize_column(v, r, &mut out[at..at + bytes]);
        at += bytes;
    }
}

fn quantize_column(values: &[f32], residual: &mut [f32], out: &mut [u8]) {
    // x = value + residual, kept in `residual` until the reconstruction is known.
    let (mut pos_sum, mut pos_n, mut neg_sum) = (0f32, 0usize, 0f32);
    for (r, &v) in residual.iter_mut().zip(values) {
        let x = v + *r;
        *r = x;
        if x >= 0.0 {
            pos_sum += x;
            pos_n += 1;
        } else {
            neg_sum += x;
        }
    }
    let neg_n = values.len() - pos_n;
    let pos = if pos_n > 0 { pos_sum / pos_n as f32 } else { 0.0 };
    let neg = if neg_n > 0 { neg_sum / neg_n as f32 } else { 0.0 };
    out[0..4].copy_from_slice(&pos.to_le_bytes());
    out[4..8].copy_from_slice(&neg.to_le_bytes());
    for (w, xs) in out[8..].chunks_exact_mut(4).zip(residual.chunks_mut(32)) {
        let mut word = 0u32;
        for (i, x) in xs.iter_mut().enumerate() {
            let non_negative = *x >= 0.0;
            word |= u32::from(non_negative) << i;
            *x -= if non_negative { pos } else { neg };
        }
        w.copy_from_slice(&word.to_le_bytes());
    }
}

/// How decoded values land in the output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Land {
    Copy,
    Add,
}

/// Decode `enc` (the encoding of `out.len()` values) into `out`.
pub fn decode(enc: &[u8], out: &mut [f32], land: Land) {
    assert_eq!(enc.len(), encoded_len(out.len()), "decode: {} bytes for {} values", enc.len(), out.len());
    let mut at = 0;
    for col in out.chunks_mut(COLUMN) {
        let bytes = column_bytes(col.len());
        let c = &enc[at..at + bytes];
        let pos = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        let neg = f32::from_le_bytes([c[4], c[5], c[6], c[7]]);
        for (w, xs) in c[8..].chunks_exact(4).zip(col.chunks_mut(32)) {
            let word = u32::from_le_bytes([w[0], w[1], w[2], w[3]]);
            for (i, x) in xs.iter_mut().enumerate() {
                let q = if (word >> i) & 1 == 1 { pos } else { neg };
                match land {
                    Land::Copy => *x = q,
                    Land::Add => *x += q,
                }
            }
        }
        at += bytes;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    fn gradient(rng: &mut ChaCha8Rng, n: usize) -> Vec<f32> {
        // Skewed, so that the two reconstruction values differ in size.
        (0..n).map(|_| rng.random_range(-1.0f32..1.5) * rng.random_range(0.0f32..1.0)).collect()
    }

    #[test]
    fn the_encoding_is_one_bit_a_value_and_two_floats_a_column() {
        assert_eq!(encoded_len(0), 0);
        assert_eq!(encoded_len(1), 12);
        assert_eq!(encoded_len(32), 12);
        assert_eq!(encoded_len(33), 16);
        assert_eq!(encoded_len(COLUMN), 8 + COLUMN / 8);
        assert_eq!(encoded_len(COLUMN + 1), 8 + COLUMN / 8 + 12);
        let n = 1_000_000;
        assert!((n * 4) as f64 / encoded_len(n) as f64 >= 28.0);
    }

    /// One quantization: each value decodes to its column's mean of the values on its side of
    /// zero (computed here in f64 from the definition), and the residual is what it misses.
    #[test]
    fn a_column_decodes_to_the_means_of_its_two_sides() {
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        for n in [1, 5, 31, 32, 33, COLUMN - 1, COLUMN, 3 * COLUMN + 77] {
            let v = gradient(&mut rng, n);
            let mut residual = vec![0.0; n];
            let mut enc = vec![0u8; encoded_len(n)];
            quantize(&v, &mut residual, &mut enc);
            let mut q = vec![0.0; n];
            decode(&enc, &mut q, Land::Copy);
            for (c, (vc, qc)) in v.chunks(COLUMN).zip(q.chunks(COLUMN)).enumerate() {
                let side = |pos: bool| {
                    let xs: Vec<f64> = vc.iter().filter(|&&x| (x >= 0.0) == pos).map(|&x| x as f64).collect();
                    if xs.is_empty() { 0.0 } else { xs.iter().sum::<f64>() / xs.len() as f64 }
                };
                let (pos, neg) = (side(true), side(false));
                for (i, (&x, &got)) in vc.iter().zip(qc).enumerate() {
                    let want = if x >= 0.0 { pos } else { neg };
                    assert!(
                        (got as f64 - want).abs() <= 1e-5 * (1.0 + want.abs()),
                        "n {n} col {c} [{i}]: {got} vs {want}"
                    );
                }
            }
            for i in 0..n {
                assert_eq!(residual[i], v[i] - q[i], "residual [{i}]");
            }
        }
    }

    /// Error feedback: over many steps what was sent adds up to the true gradients' sum less
    /// the final residual (compared in f64 with the rounding of one f32 operation per step).
    #[test]
    fn what_is_sent_adds_up_to_the_gradients_within_the_final_residual() {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let (n, steps) = (2 * COLUMN + 300, 200);
        let mut residual = vec![0.0f32; n];
        let mut enc = vec![0u8; encoded_len(n)];
        let (mut sent, mut truth) = (vec![0.0f64; n], vec![0.0f64; n]);
        let mut q = vec![0.0f32; n];
        for _ in 0..steps {
            let g = gradient(&mut rng, n);
            quantize(&g, &mut residual, &mut enc);
            decode(&enc, &mut q, Land::Copy);
            for i in 0..n {
                sent[i] += q[i] as f64;
                truth[i] += g[i] as f64;
            }
        }
        let mut worst = 0.0f64;
        for i in 0..n {
            worst = worst.max((sent[i] + residual[i] as f64 - truth[i]).abs());
        }
        // Each step rounds x = g + r and r = x - q once each: about 2 eps |x| per step.
        assert!(worst < 2.0 * steps as f64 * f32::EPSILON as f64 * 4.0, "drift {worst}");
        // And the residual stays bounded (it does not swallow the gradient).
        let biggest = residual.iter().fold(0.0f32, |m, r| m.max(r.abs()));
        assert!(biggest < 5.0, "residual grew to {biggest}");
        // Without feedback the sum of what is sent misses by far more.
        let mut no_feedback = vec![0.0f64; n];
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        for _ in 0..steps {
            let g = gradient(&mut rng, n);
            let mut zero = vec![0.0; n];
            quantize(&g, &mut zero, &mut enc);
            decode(&enc, &mut q, Land::Copy);
            no_feedback.iter_mut().zip(&q).for_each(|(s, &x)| *s += x as f64);
        }
        let miss = (0..n).map(|i| (no_feedback[i] - truth[i]).abs()).fold(0.0, f64::max);
        assert!(miss > 100.0 * worst.max(1e-3), "without feedback {miss}, with {worst}");
    }

    #[test]
    fn decoding_adds_or_copies() {
        let v = vec![1.0, -2.0, 3.0, -4.0];
        let mut enc = vec![0u8; encoded_len(4)];
        quantize(&v, &mut [0.0; 4], &mut enc);
        let mut out = vec![10.0; 4];
        decode(&enc, &mut out, Land::Add);
        assert_eq!(out, [12.0, 7.0, 12.0, 7.0]);
        decode(&enc, &mut out, Land::Copy);
        assert_eq!(out, [2.0, -3.0, 2.0, -3.0]);
    }
}
