//! dcgan-train: data-parallel DCGAN training over MPI with hand-written allreduce algorithms
//! and CUDA kernels. The binary is a thin layer over this library (see `main.rs`).

pub mod backend;
pub mod ops;
