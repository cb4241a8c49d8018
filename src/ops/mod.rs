//! One folder per op family: the shape arithmetic and parameters shared by both sides, the
//! CPU implementation (the reference) and the CUDA launchers next to each other.

pub mod activation;
pub mod adam;
pub mod batchnorm;
pub mod conv;
pub mod cpu_helpers;
pub mod cpu_scratch;
pub mod elementwise;
pub mod layernorm;
pub mod loss;
pub mod penalty;
pub mod wire;
