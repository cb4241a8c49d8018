//! Elementwise axpy (batch norm accumulates its dgamma/dbeta with it). CPU side in `cpu.rs`,
//! CUDA in `cuda.rs`.

pub mod cpu;
#[cfg(feature = "cuda")]
pub mod cuda;
