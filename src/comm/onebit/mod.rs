//! `--wire 1bit`: gradients quantized to one bit a value with error feedback (CNTK's 1-bit
//! SGD): the column quantizer (`quantize`) and the allreduce over stripe owners that sums
//! quantized values in f32 and requantizes the sum (`stripes`).

pub mod stripes;

pub use crate::codec::onebit as quantize;

#[cfg(test)]
mod tests;

pub use stripes::{
    OneBitStage, Residuals, ResidualsMut, allreduce_mean, allreduce_mean_packed, packed_fits, packed_layout,
};
