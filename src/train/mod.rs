//! Training: the run and its phases, the GAN step, data parallelism (`ddp`) and the step
//! benchmark.

pub mod bench;
pub mod config;
pub mod ddp;
pub mod ema;
pub mod interrupt;
pub mod job;
pub mod memory_plan;
pub mod micro_step;
pub mod outputs;
pub mod pipeline;
pub mod preflight;
pub mod quality;
pub mod recorded_options;
pub mod resume;
pub mod run;
pub mod signals;
pub mod step;
pub mod summary;
pub mod timeline;
pub mod wgan_step;
