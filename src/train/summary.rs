//! The run's summary.json, built from what the run measured (`RunFacts`) and what the trainer
//! and the comm thread counted.

use super::config::Settings;
use super::ddp::exchange::{BucketStats, NetId};
use super::job::Job;
use super::memory_plan::MemoryEstimate;
use super::step::GanTrainer;
use crate::backend::Backend;
use crate::record::summary::{AlgorithmRange, BucketSummary, CommSummary, EarlyStop, EpochQuality};
use crate::record::{StepMetrics, Summary, TrainOptions};
use std::path::Path;
use std::time::Duration;

/// Measurements collected during the run.
#[derive(Default)]
pub struct RunFacts {
    pub step_ms: Vec<f64>,
    /// Per step: its wall time less the time it was blocked on other ranks.
    pub compute_ms: Vec<f64>,
    /// Per step: the training thread's CPU time.
    pub cpu_ms: Vec<f64>,
    /// Per step: the training thread's time waiting for a core (empty where not measured).
    pub descheduled_ms: Vec<f64>,
    pub epoch_seconds: Vec<f64>,
    pub steps_run: u64,
    pub train_seconds: f64,
    pub wall_seconds: f64,
    pub threads: usize,
    /// `--baseline-summary`, read at start (rank 0), and its path.
    pub baseline: Option<(Summary, String)>,
    /// The memory this rank was estimated to take at its peak, before it was built.
    pub memory: Option<MemoryEstimate>,
    /// Sample quality after the epochs it was measured (rank 0).
    pub quality: Vec<EpochQuality>,
    /// The feature network's file, where quality was measured.
    pub feature_net: Option<String>,
    /// `--sync-every`: bytes this rank sent averaging the models.
    pub block_sent: u64,
    /// `--pipeline`: every rank's (idle fraction, busy ms per step), gathered on rank 0.
    pub pipeline_stages: Vec<(f64, f64)>,
    /// `--patience` ended the run (every rank).
    pub early_stop: Option<EarlyStop>,
}

/// The upper median: a step that was measured, not an average of two.
pub fn median(v: &[f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    s[s.len() / 2]
}

/// What the comm thread and the exchange counted, per step.
fn comm_summary<B: Backend>(
    args: &TrainOptions,
    job: &Job,
    trainer: &GanTrainer<B>,
    facts: &RunFacts,
    steps: f64,
) -> CommSummary {
    let ex = trainer.exchange_stats();
    let per_step = |d: Duration| d.as_secs_f64() * 1e3 / steps;
    let (comm_ms, exposed_ms) = (per_step(ex.comm_busy), per_step(ex.exposed));
    let buckets = [NetId::G, NetId::D]
        .iter()
        .flat_map(|&n| trainer.exchange.buckets(n).to_vec())
        .map(|b| {
            let stats = ex.buckets.iter().find(|s| s.label == b.label);
            let ms = |d: fn(&BucketStats) -> Duration| stats.map_or(0.0, |s| per_step(d(s)));
            BucketSummary {
                bucket: b.label.to_string(),
                bytes: b.bytes(),
                algorithm: stats.map_or("none", |s| s.algorithm).to_string(),
                comm_ms_per_step: ms(|s| s.comm_busy),
                exposed_ms_per_step: ms(|s| s.exposed),
            }
        })
        .collect();
    let algorithm_by_size = job
        .comm
        .selection_table()
        .into_iter()
        .map(|(lo, hi, a)| AlgorithmRange {
            min_bytes: lo,
            max_bytes: (hi != usize::MAX).then_some(hi),
            algorithm: a.name().to_string(),
        })
        .collect();
    let p = &args.parallel;
    let exchange = match () {
        _ if job.world.size == 1 => "none (one rank)",
        _ if p.no_exchange => "skipped (--no-exchange)",
        _ if p.sync_every > 0 => "models averaged every --sync-every steps (block momentum)",
        _ if p.no_overlap => "after backward (--no-overlap)",
        _ => "overlapped with backward",
    };
    let wire = args.comm.wire;
    CommSummary {
        exchange: exchange.to_string(),
        comm_ms_per_step: comm_ms,
        comm_thread_cpu_ms_per_step: per_step(ex.comm_cpu),
        exposed_comm_ms_per_step: exposed_ms,
        // Clamped: a wait can also include the comm thread's queue and hand-off, so the
        // exposed time may exceed the time inside collectives (then nothing was hidden).
        hidden_comm_fraction: if comm_ms > 0.0 { (1.0 - exposed_ms / comm_ms).clamp(0.0, 1.0) } else { 0.0 },
        device_wait_ms_per_step: per_step(ex.device_wait),
        metrics_wait_ms_per_step: per_step(trainer.metrics_wait),
        bytes_per_step: ex.bytes as f64 / steps,
        staged_bytes_per_step: ex.staged as f64 / steps,
        wire,
        wire_bytes_per_step: (ex.bytes as f64 / steps) * wire.size_ratio(),
        sent_bytes_per_step: (ex.sent[0] + ex.sent[1] + facts.block_sent) as f64 / steps,
        sent_bytes_per_warmup_step: (ex.sent_steps[0] > 0).then(|| ex.sent[0] as f64 / ex.sent_steps[0] as f64),
        sent_bytes_per_wire_step: (ex.sent_steps[1] > 0).then(|| ex.sent[1] as f64 / ex.sent_steps[1] as f64),
        buckets,
        algorithm_by_size,
        sync_bn: p.sync_bn,
    }
}

/// What the run left for rank 0 to describe: its measurements, last metrics and final grid.
pub struct RunEnd<'a> {
    pub data: &'a str,
    pub facts: &'a RunFacts,
    pub last: &'a StepMetrics,
    pub final_grid: &'a Path,
}

pub fn build_summary<B: Backend>(
    args: &TrainOptions,
    job: &Job,
    settings: &Settings,
    trainer: &GanTrainer<B>,
    end: RunEnd,
) -> Summary {
    let (w, facts) = (&job.world, end.facts);
    let steps = facts.steps_run.max(1) as f64;
    // The median step excludes the epoch ends (sampling, checkpoints) and warm-up outliers.
    let ms = median(&facts.step_ms);
    let mut s = Summary {
        program: crate::version::PROGRAM.to_string(),
        options: args.clone(),
        ranks: w.size,
        hosts: w.hosts.clone(),
        host_count: w.host_count(),
        mpi_library: w.mpi_library.clone(),
        device: trainer.be_describe(),
        peak_device_memory_bytes: trainer.peak_device_bytes(),
        cuda_graphs: trainer.be.graph_stats(),
        peak_host_memory_bytes: crate::memory::peak_resident_bytes(),
        host_memory_estimate_bytes: facts.memory.map(|m| m.host_bytes),
        device_memory_estimate_bytes: facts.memory.and_then(|m| m.device_bytes),
        threads_per_rank: facts.threads,
        data: end.data.to_string(),
        image_size: args.model.image_size,
        batch_size_per_rank: settings.per_rank_batch,
        global_batch_size: settings.global_batch,
        lr: settings.lr,
        steps: trainer.step,
        steps_this_run: facts.steps_run,
        epoch_seconds: facts.epoch_seconds.clone(),
        ms_per_step: ms,
        ms_per_step_mean: facts.step_ms.iter().sum::<f64>() / facts.step_ms.len().max(1) as f64,
        wall_ms_per_step: facts.train_seconds * 1e3 / steps,
        compute_ms_per_step: median(&facts.compute_ms),
        training_thread_cpu_ms_per_step: Some(median(&facts.cpu_ms)),
        training_thread_descheduled_ms_per_step: (!facts.descheduled_ms.is_empty())
            .then(|| median(&facts.descheduled_ms)),
        global_images_per_s: settings.global_batch as f64 / (ms / 1e3),
        comm: comm_summary(args, job, trainer, facts, steps),
        final_metrics: *end.last,
        train_seconds: facts.train_seconds,
        wall_seconds: facts.wall_seconds,
        samples: end.final_grid.display().to_string(),
        weak_scaling: None,
        quality: facts.quality.clone(),
        pipeline: (!facts.pipeline_stages.is_empty()).then(|| crate::record::summary::PipelineSummary {
            stages: 2,
            pipelines: facts.pipeline_stages.len() / 2,
            micro_batches: args.model.micro_batches as usize,
            bubble_formula: crate::train::pipeline::bubble_formula(2, args.model.micro_batches as usize),
            idle_fraction: facts.pipeline_stages.iter().map(|s| s.0).collect(),
            busy_ms_per_step: facts.pipeline_stages.iter().map(|s| s.1).collect(),
        }),
        feature_net: facts.feature_net.clone(),
        early_stop: facts.early_stop,
    };
    if let Some((baseline, file)) = &facts.baseline {
        s.weak_scaling = Some(s.weak_scaling_against(baseline, file));
    }
    s
}
