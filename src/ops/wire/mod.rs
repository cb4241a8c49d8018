//! The gradient wire formats on the device (`--wire bf16|1bit`, formats in `codec`): packed
//! next to the gradients before they are copied to the host, unpacked after the copy back.
//! Encodings live in f32 buffers as raw bits: bf16 two values to a float (value 2j in the low
//! half of float j), the 1-bit columns as `codec::onebit` lays out their bytes. CPU side in
//! `cpu.rs` (the codec itself), CUDA in `cuda.rs`.

pub mod cpu;
#[cfg(feature = "cuda")]
pub mod cuda;

/// Floats that hold the bf16 encoding of `n` values.
pub fn bf16_floats(n: usize) -> usize {
    n.div_ceil(2)
}

/// Floats of a 1-bit column table of `cols` columns (`codec::onebit::column_words`).
pub fn column_table_floats(cols: usize) -> usize {
    3 * cols
}
