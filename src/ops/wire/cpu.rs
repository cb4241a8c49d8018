//! CPU side of the wire formats: the codec's own functions over f32 buffers of raw bits.

use crate::codec::bf16;
use crate::codec::onebit::{self, Column, Land};

fn bytes(x: &[f32]) -> &[u8] {
    // SAFETY: f32 has no invalid byte patterns to expose; u8 has alignment 1; exact length.
    unsafe { std::slice::from_raw_parts(x.as_ptr().cast(), std::mem::size_of_val(x)) }
}

fn bytes_mut(x: &mut [f32]) -> &mut [u8] {
    // SAFETY: as `bytes`, and every byte pattern is a valid f32.
    unsafe { std::slice::from_raw_parts_mut(x.as_mut_ptr().cast(), std::mem::size_of_val(x)) }
}

/// The column table back from its words (start, length, first word of each column).
fn table(cols: &[f32]) -> Vec<Column> {
    cols.chunks_exact(3)
        .map(|c| Column {
            start: c[0].to_bits() as usize,
            len: c[1].to_bits() as usize,
            byte: 4 * c[2].to_bits() as usize,
        })
        .collect()
}

/// out [bf16_floats(x.len())] = the bf16 encodings of x, little-endian pairs.
pub fn bf16_encode(x: &[f32], out: &mut [f32]) {
    assert_eq!(out.len(), super::bf16_floats(x.len()), "bf16_encode: output length");
    for (o, pair) in out.iter_mut().zip(x.chunks(2)) {
        let lo = u32::from(bf16::encode(pair[0]));
        let hi = pair.get(1).map_or(0, |&v| u32::from(bf16::encode(v)));
        *o = f32::from_bits(lo | hi << 16);
    }
}

/// out = the values of bf16 encodings `enc` [bf16_floats(out.len())].
pub fn bf16_decode(enc: &[f32], out: &mut [f32]) {
    assert_eq!(enc.len(), super::bf16_floats(out.len()), "bf16_decode: input length");
    for (pair, e) in out.chunks_mut(2).zip(enc) {
        let w = e.to_bits();
        pair[0] = bf16::decode(w as u16);
        if let Some(v) = pair.get_mut(1) {
            *v = bf16::decode((w >> 16) as u16);
        }
    }
}

/// The 1-bit columns `cols` (a table of words) of values + residual into `out`, and each
/// column's residual's sum of squares (in f64, in order) into col_sq [columns].
pub fn onebit_quantize(cols: &[f32], values: &[f32], residual: &mut [f32], out: &mut [f32], col_sq: &mut [f32]) {
    let table = table(cols);
    assert_eq!(col_sq.len(), table.len(), "onebit_quantize: a square sum per column");
    onebit::quantize_columns(&table, values, residual, bytes_mut(out));
    for (c, sq) in table.iter().zip(col_sq) {
        *sq = residual[c.start..c.start + c.len].iter().map(|&x| f64::from(x) * f64::from(x)).sum::<f64>() as f32;
    }
}

/// The values of the 1-bit columns `cols` of `enc`, into out.
pub fn onebit_decode(cols: &[f32], enc: &[f32], out: &mut [f32]) {
    onebit::decode_columns(&table(cols), bytes(enc), out, Land::Copy);
}
