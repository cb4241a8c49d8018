//! What a training run records, as typed structs shared by the run that writes them and
//! everything that reads them (`simulate-scaling`, the tests): its options, summary.json and
//! the lines of metrics.jsonl.

pub mod metrics;
pub mod options;
pub mod summary;

pub use metrics::{EpochRecord, LineType, Losses, StepMetrics, StepRecord, StoppedRecord};
pub use options::{
    CheckpointOptions, CriticNorm, EvalOptions, GanLoss, LrScaling, ModelOptions, ParallelOptions, ProgressChoice,
    TrainOptions,
};
pub use summary::Summary;
