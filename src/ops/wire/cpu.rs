//! CPU side of the wire encodings: the codecs' own functions over f32 buffers of raw bits.

use crate::codec::bf16;
use crate::codec::onebit::{self, Column, Land};
use crate::codec::{f32_bytes, f32_bytes_mut};

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

/// The 1-bit columns `cols` (a table of words) of values + residual into `out`, and each
/// column's residual's sum of squares (in f64, in order) into col_sq `[columns]`.
pub fn onebit_quantize(cols: &[f32], values: &[f32], residual: &mut [f32], out: &mut [f32], col_sq: &mut [f32]) {
    let table = table(cols);
    assert_eq!(col_sq.len(), table.len(), "onebit_quantize: a square sum per column");
    onebit::quantize_columns(&table, values, residual, f32_bytes_mut(out));
    for (c, sq) in table.iter().zip(col_sq) {
        *sq = residual[c.start..c.start + c.len].iter().map(|&x| f64::from(x) * f64::from(x)).sum::<f64>() as f32;
    }
}

/// The values of the 1-bit columns `cols` of `enc`, into out.
pub fn onebit_decode(cols: &[f32], enc: &[f32], out: &mut [f32]) {
    onebit::decode_columns(&table(cols), f32_bytes(enc), out, Land::Copy);
}

/// out `[floats_for(n)]` = the bf16 encodings of x `[n]`, two to a float.
pub fn bf16_encode(x: &[f32], out: &mut [f32]) {
    super::check_bf16_floats(x.len(), out.len());
    bf16::encode_into(x, &mut bf16::as_bf16_mut(out)[..x.len()]);
}

/// out `[n]` = the values of the bf16 encodings enc `[floats_for(n)]`, two to a float.
pub fn bf16_decode(enc: &[f32], out: &mut [f32]) {
    super::check_bf16_floats(out.len(), enc.len());
    let n = out.len();
    bf16::decode_into(&bf16::as_bf16(enc)[..n], out);
}
