//! The tests that need no GPU kernels of their own, one binary (each file a module), so that
//! the library's generic code is compiled and linked once for all of them rather than once a
//! file. The CUDA tests are binaries apart (`[[test]]` in Cargo.toml): the GPU check carries
//! those alone to a GPU machine.

mod common;

mod allreduce_engine;
mod allreduce_mpi;
mod best_checkpoint;
mod block_momentum;
mod checkpoint;
mod checkpoint_headers;
mod cli_cpu;
mod cluster_emulated;
mod comm_exchange;
mod data_fashion_mnist;
mod docs;
mod elastic_resume;
mod faults;
mod g_ema;
mod gradients;
mod layering;
mod long_steps;
mod memory;
mod micro_batches;
mod parallel;
mod parallel_bad_input;
mod ping_pong;
mod pipeline;
mod quality;
mod report_losses;
mod report_overlap;
mod report_pipeline;
mod report_quality;
mod resume;
mod scaling_cost_model;
mod scaling_report;
mod scaling_report_sections;
mod scaling_simulate;
mod solo_start;
mod tensorboard;
mod trace_report;
mod train_cpu;
mod wires;
