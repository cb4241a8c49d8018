//! The gradient wire formats, shared by the comm thread (which sends them) and the device ops
//! that pack and unpack them next to the gradients: bfloat16 and CNTK's 1-bit columns.

pub mod bf16;
pub mod onebit;
