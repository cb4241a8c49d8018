//! dcgan-train: data-parallel DCGAN training over MPI with hand-written allreduce algorithms
//! and CUDA kernels. The binary is a thin layer over this library (see `main.rs`); the layers,
//! from the top: `commands` (the command line) -> `train` (the run, the GAN step, data
//! parallelism) and `scaling` (the cost model) -> `model`/`nn` -> `ops`/`backend`, with `comm`,
//! `record`, `data`, `report` and `checkpoint` below `train`. Imports run downward only
//! (docs/architecture.md).

pub mod backend;
pub mod checkpoint;
pub mod codec;
pub mod comm;
pub mod commands;
pub mod data;
pub mod device;
pub mod eval;
pub mod fault_hooks;
pub mod memory;
pub mod model;
pub mod nn;
pub mod ops;
pub mod record;
pub mod report;
pub mod scaling;
pub mod train;
pub mod units;
pub mod version;
