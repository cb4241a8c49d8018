//! Small elementwise helpers: fill, scale, axpy. CPU side in `cpu.rs`, CUDA in `cuda.rs`.

pub mod cpu;
#[cfg(feature = "cuda")]
pub mod cuda;
