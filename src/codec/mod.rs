//! The gradient wire formats (1-bit and bf16), shared by the comm thread (which sends them)
//! and the device ops that pack and unpack them next to the gradients, and the bytes f32
//! values travel as.

pub mod bf16;
pub mod onebit;

/// The bytes of a float slice (native byte order).
pub fn f32_bytes(x: &[f32]) -> &[u8] {
    bytemuck::cast_slice(x)
}

/// The bytes of a float slice, writable: every byte pattern is a valid f32.
pub fn f32_bytes_mut(x: &mut [f32]) -> &mut [u8] {
    bytemuck::cast_slice_mut(x)
}
