//! summary.json: what ran where, how fast, and where the time went (compute, communication,
//! how much of it was hidden), with the MPI paper's weak-scaling speedup against a baseline.
//! One struct, written by the run and read by `simulate-scaling`, the tests and anyone else.
//! Figures a run of an older version did not record read as their defaults.

use super::metrics::{MoreQuality, StepMetrics};
use super::options::TrainOptions;
use crate::comm::Wire;
use anyhow::Context;
use serde::{Deserialize, Serialize};
use std::path::Path;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// "dcgan-train VERSION".
    #[serde(default)]
    pub program: String,
    #[serde(serialize_with = "options_as_written")]
    pub options: TrainOptions,
    pub ranks: usize,
    #[serde(default)]
    pub hosts: Vec<String>,
    #[serde(default)]
    pub host_count: usize,
    #[serde(default)]
    pub mpi_library: String,
    #[serde(default)]
    pub device: String,
    /// The device's peak allocation (None on the CPU, which does not count).
    #[serde(default)]
    pub peak_device_memory_bytes: Option<usize>,
    /// `--cuda-graphs`: rank 0's steps recorded, replayed and left part-way, and its graph
    /// launches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cuda_graphs: Option<crate::device::GraphStats>,
    /// Rank 0's most resident memory (VmHWM; on the CPU backend the model's too).
    #[serde(default)]
    pub peak_host_memory_bytes: Option<u64>,
    /// What rank 0 was estimated to hold at its peak before it built the model: host memory,
    /// and on a GPU the device's (compare with the two peaks above).
    #[serde(default)]
    pub host_memory_estimate_bytes: Option<u64>,
    #[serde(default)]
    pub device_memory_estimate_bytes: Option<u64>,
    #[serde(default)]
    pub threads_per_rank: usize,
    /// What the data was ("Fashion-MNIST train, 60000 images from ...").
    #[serde(default)]
    pub data: String,
    #[serde(default)]
    pub image_size: usize,
    pub batch_size_per_rank: usize,
    #[serde(default)]
    pub global_batch_size: usize,
    /// The learning rate after `--lr-scaling`.
    #[serde(default)]
    pub lr: f64,
    /// Steps done, this run and the ones it resumed.
    #[serde(default)]
    pub steps: u64,
    #[serde(default)]
    pub steps_this_run: u64,
    #[serde(default)]
    pub epoch_seconds: Vec<f64>,
    /// The median step (the upper median: a step that was measured). Excludes the epochs'
    /// ends (sample grids, checkpoints, evaluations).
    pub ms_per_step: f64,
    #[serde(default)]
    pub ms_per_step_mean: f64,
    /// The training loop's wall time per step: the steps, plus checkpoints, sample grids,
    /// evaluations (`--eval-every`) and the epochs' ends between them.
    #[serde(default)]
    pub wall_ms_per_step: f64,
    /// What `ms_per_step` would be if no rank ever waited for another: the median over steps
    /// of each step's time less its waits (gradient buckets and the metrics).
    #[serde(default)]
    pub compute_ms_per_step: f64,
    /// The training thread's time on a core, median over steps (with `--threads 1` on the
    /// CPU it does all the compute).
    #[serde(default)]
    pub training_thread_cpu_ms_per_step: Option<f64>,
    /// The training thread's time runnable but waiting for a core, median over steps (None
    /// where the kernel does not say).
    #[serde(default)]
    pub training_thread_descheduled_ms_per_step: Option<f64>,
    #[serde(default)]
    pub global_images_per_s: f64,
    pub comm: CommSummary,
    #[serde(default)]
    pub final_metrics: StepMetrics,
    #[serde(default)]
    pub train_seconds: f64,
    #[serde(default)]
    pub wall_seconds: f64,
    /// The final sample grid.
    #[serde(default)]
    pub samples: String,
    /// Against `--baseline-summary`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weak_scaling: Option<WeakScaling>,
    /// Sample quality after the epochs it was measured (`--eval-every`), the whole run's (a
    /// resume takes the earlier epochs' from their metrics.jsonl lines), and the feature
    /// network this invocation measured with.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub quality: Vec<EpochQuality>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub feature_net: Option<String>,
    /// `--pipeline`: the stages' idle time against GPipe's bubble formula.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pipeline: Option<PipelineSummary>,
    /// `--patience` ended the run before its end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub early_stop: Option<EarlyStop>,
}

/// Where `--patience` ended a run: after `epoch` (0-based), that many evaluations past the
/// best FID, measured after `best_epoch`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct EarlyStop {
    pub epoch: u64,
    pub best_epoch: u64,
    pub best_fid: f64,
    pub patience: u64,
}

/// How much of a pipeline's step each stage spent waiting for the other.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PipelineSummary {
    /// Stages a pipeline (G's, D's), and pipelines side by side.
    pub stages: usize,
    pub pipelines: usize,
    pub micro_batches: usize,
    /// (p - 1) / (m + p - 1): the idle fraction of equal stages under GPipe's schedule.
    pub bubble_formula: f64,
    /// Per rank (G's stage on even ranks, D's on odd): the fraction of its steps' time it
    /// waited for other ranks (measured: the waits for fakes, gradients, replicas' buckets
    /// and at the step's end).
    pub idle_fraction: Vec<f64>,
    /// Per rank: its steps' time less those waits, ms per step (median of the steps).
    pub busy_ms_per_step: Vec<f64>,
}

/// The Fréchet distance and KID to the test split after an epoch (0-based).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EpochQuality {
    pub epoch: u64,
    pub fid: f64,
    pub kid: f64,
    pub kid_std: f64,
    /// Images generated.
    pub n: usize,
    /// The evaluation's wall time (both generators' with `--g-ema`).
    pub seconds: f64,
    #[serde(flatten)]
    pub more: MoreQuality,
}

/// Where the exchange's time went, per step (rank 0's view).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CommSummary {
    /// "overlapped with backward", "after backward (--no-overlap)", "skipped (--no-exchange)"
    /// or "none (one rank)".
    pub exchange: String,
    /// Time the comm thread spent inside collectives.
    pub comm_ms_per_step: f64,
    /// The comm thread's CPU time (polling, socket copies, sums).
    pub comm_thread_cpu_ms_per_step: f64,
    /// Time the training thread waited for gradient buckets.
    pub exposed_comm_ms_per_step: f64,
    /// 1 - exposed / comm, clamped to [0, 1]: a wait also holds the comm thread's queue and
    /// hand-off, so the exposed time may exceed the time inside collectives.
    pub hidden_comm_fraction: f64,
    /// Time waiting for the device before a bucket could be copied out.
    pub device_wait_ms_per_step: f64,
    /// Blocked at each step's end until every rank's metrics arrived: the slowest rank.
    pub metrics_wait_ms_per_step: f64,
    /// Gradient bytes averaged per step (as f32).
    pub bytes_per_step: f64,
    /// Gradient bytes copied to the host per step (as many come back; over PCIe on a GPU):
    /// the wire's form where the device packs it, else f32.
    pub staged_bytes_per_step: f64,
    pub wire: Wire,
    /// Gradient bytes per step in the wire's format (computed from `bytes_per_step`).
    pub wire_bytes_per_step: f64,
    /// Bytes this rank sent for gradients per step, counted where they left (MPI's own
    /// allreduce is not counted).
    pub sent_bytes_per_step: f64,
    /// The same over the steps of 1-bit's f32 warm-up, and over the steps that sent in
    /// `wire`'s form: with --wire 1bit, both measured in the same run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sent_bytes_per_warmup_step: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sent_bytes_per_wire_step: Option<f64>,
    pub buckets: Vec<BucketSummary>,
    /// Which algorithm runs for which message size.
    pub algorithm_by_size: Vec<AlgorithmRange>,
    pub sync_bn: bool,
}

/// One gradient bucket's exchange.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BucketSummary {
    /// `"G[1]"`, `"D[3+2+1]"`: the network and its layers, 1-based.
    pub bucket: String,
    pub bytes: usize,
    /// The algorithm of its first fragment ("none" when it never travelled).
    #[serde(default)]
    pub algorithm: String,
    #[serde(default)]
    pub comm_ms_per_step: f64,
    #[serde(default)]
    pub exposed_ms_per_step: f64,
}

/// Messages of `min_bytes..=max_bytes` (None: no upper bound) use `algorithm`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AlgorithmRange {
    pub min_bytes: usize,
    pub max_bytes: Option<usize>,
    pub algorithm: String,
}

/// Eq. (1) of the MPI paper against a 1-rank run (`--baseline-summary`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WeakScaling {
    pub file: String,
    pub baseline_ms_per_step: f64,
    pub baseline_batch: f64,
    pub baseline_ranks: usize,
    pub speedup_eq1: f64,
    pub efficiency: f64,
}

/// Options held as f32 (Adam's betas and eps) serialize through f64 with the f32's rounding
/// showing (0.999 as 0.9990000128746033): write each number that is exactly an f32 as the
/// f32's shortest decimal, as it was typed. Numbers that are not f32s stay as they are.
fn f32_as_written(mut v: serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    fn walk(v: &mut Value) {
        match v {
            Value::Number(n) => {
                if let Some(x) = n.as_f64().filter(|x| n.is_f64() && (*x as f32) as f64 == *x)
                    && let Some(short) =
                        (x as f32).to_string().parse::<f64>().ok().and_then(serde_json::Number::from_f64)
                {
                    *n = short;
                }
            }
            Value::Array(a) => a.iter_mut().for_each(walk),
            Value::Object(o) => o.values_mut().for_each(walk),
            _ => {}
        }
    }
    walk(&mut v);
    v
}

/// The options with their f32s as typed (`f32_as_written`).
fn options_as_written<S: serde::Serializer>(options: &TrainOptions, s: S) -> Result<S::Ok, S::Error> {
    let v = serde_json::to_value(options).map_err(serde::ser::Error::custom)?;
    f32_as_written(v).serialize(s)
}

/// Eq. (1) of the MPI paper: s = t_{1,b0} / t_{N,b} * b / b0 * N, from the baseline's step
/// time t_{1,b0} at batch b0 and this run's t_{N,b} at batch b per rank on N ranks.
pub fn weak_scaling_speedup(base_ms: f64, base_batch: f64, ms: f64, batch: f64, ranks: f64) -> f64 {
    base_ms / ms * batch / base_batch * ranks
}

impl Summary {
    /// A summary.json; `flag` names where the path came from, for the error.
    pub fn read(path: &Path, flag: &str) -> anyhow::Result<Summary> {
        let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {flag} {}", path.display()))?;
        serde_json::from_str(&text).map_err(|e| {
            anyhow::anyhow!("{flag} {} is not the summary.json of a dcgan-train run ({e})", path.display())
        })
    }

    /// Eq. (1) of this run against `baseline` (a 1-rank run's summary, read from `file`).
    pub fn weak_scaling_against(&self, baseline: &Summary, file: &str) -> WeakScaling {
        let (ms, batch) = (baseline.ms_per_step, baseline.batch_size_per_rank as f64);
        let s = weak_scaling_speedup(ms, batch, self.ms_per_step, self.batch_size_per_rank as f64, self.ranks as f64);
        WeakScaling {
            file: file.to_string(),
            baseline_ms_per_step: ms,
            baseline_batch: batch,
            baseline_ranks: baseline.ranks,
            speedup_eq1: s,
            efficiency: s / self.ranks as f64,
        }
    }

    /// The end-of-run line on what a step was made of on several ranks (None on one): its
    /// time, the part spent computing and the waits on the other ranks.
    pub fn step_line(&self) -> Option<String> {
        if self.ranks < 2 {
            return None;
        }
        let cores = match (self.training_thread_cpu_ms_per_step, self.training_thread_descheduled_ms_per_step) {
            (Some(cpu), Some(queued)) => {
                format!("; the training thread ran {cpu:.1} ms on a core and waited {queued:.1} ms for one")
            }
            _ => String::new(),
        };
        let pipeline = match &self.pipeline {
            Some(p) => {
                let idle: Vec<String> = p.idle_fraction.iter().map(|f| format!("{:.0}%", 100.0 * f)).collect();
                format!(
                    "; idle per rank (G's stage, D's, ...): {} against a bubble of {:.0}% for {} micro-batches",
                    idle.join(", "),
                    100.0 * p.bubble_formula,
                    p.micro_batches
                )
            }
            None => String::new(),
        };
        Some(format!(
            "step (rank 0, medians): {:.1} ms, {:.1} ms without its waits on other ranks; mean waits per step: {:.1} ms \
             for gradient buckets, {:.1} ms for the other ranks at the step's end{cores}{pipeline}",
            self.ms_per_step,
            self.compute_ms_per_step,
            self.comm.exposed_comm_ms_per_step,
            self.comm.metrics_wait_ms_per_step,
        ))
    }

    /// The end-of-run line on `--cuda-graphs` (None without): how many steps replayed their
    /// graphs, and how many kernels each graph launch stood for.
    pub fn graphs_line(&self) -> Option<String> {
        let g = self.cuda_graphs?;
        Some(format!(
            "CUDA graphs (rank 0): {} of {} steps replayed ({} recorded, {} left their record part-way); {} graph \
             launches for {} kernels, {} of them with new arguments",
            g.replayed_steps,
            g.steps(),
            g.recorded_steps,
            g.diverged_steps,
            g.graph_launches,
            g.graphed_kernels,
            g.patched_kernels
        ))
    }

    /// The end-of-run line on where the exchange's time went (None without an exchange): what
    /// the comm thread spent, what the step waited for, and the buckets waited for longest,
    /// which are where overlap fell short.
    pub fn exchange_line(&self) -> Option<String> {
        let c = &self.comm;
        if c.comm_ms_per_step <= 0.0 {
            return None;
        }
        let mut waits: Vec<(&str, f64)> = c
            .buckets
            .iter()
            .map(|b| (b.bucket.as_str(), b.exposed_ms_per_step))
            .filter(|&(_, ms)| ms >= 0.05)
            .collect();
        waits.sort_by(|a, b| b.1.total_cmp(&a.1));
        let most: Vec<String> = waits.iter().take(3).map(|(l, ms)| format!("{l} {ms:.1} ms")).collect();
        Some(format!(
            "exchange (rank 0, per step): {:.1} ms averaging on the comm thread ({:.1} ms of CPU), {:.1} ms of it \
             waited for (hidden {:.2}){}",
            c.comm_ms_per_step,
            c.comm_thread_cpu_ms_per_step,
            c.exposed_comm_ms_per_step,
            c.hidden_comm_fraction,
            if most.is_empty() { String::new() } else { format!("; waited for most: {}", most.join(", ")) }
        ))
    }
}

#[cfg(test)]
mod tests;
