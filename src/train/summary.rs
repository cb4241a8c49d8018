//! summary.json: what ran where, how fast, and where the time went (compute, communication,
//! how much of it was hidden), with the MPI paper's weak-scaling speedup against a baseline.

use super::config::Settings;
use super::exchange::{BucketStats, NetId};
use super::job::Job;
use super::step::{GanTrainer, StepMetrics};
use crate::backend::Backend;
use crate::cli::TrainArgs;
use anyhow::{Context, Result};
use serde_json::{Value, json};
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
    /// `--baseline-summary`, read at start (rank 0).
    pub baseline: Option<Baseline>,
}

/// Options held as f32 (Adam's betas and eps) serialize through f64 with the f32's rounding
/// showing (0.999 as 0.9990000128746033): write each number that is exactly an f32 as the
/// f32's shortest decimal, as it was typed. Numbers that are not f32s stay as they are.
fn f32_as_written(mut v: Value) -> Value {
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

/// The upper median: a step that was measured, not an average of two.
fn median(v: &[f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    s[s.len() / 2]
}

/// Eq. (1) of the MPI paper: s = t_{1,b0} / t_{N,b} * b / b0 * N, from the baseline's step
/// time t_{1,b0} at batch b0 and this run's t_{N,b} at batch b per rank on N ranks.
pub fn weak_scaling_speedup(base_ms: f64, base_batch: f64, ms: f64, batch: f64, ranks: f64) -> f64 {
    base_ms / ms * batch / base_batch * ranks
}

/// A 1-rank run's summary.json (`--baseline-summary`), read when the run starts: a file that
/// is not one ends the run before it trains, not after.
pub struct Baseline {
    file: String,
    ms: f64,
    batch: f64,
    ranks: Value,
}

impl Baseline {
    pub fn read(path: &Path) -> Result<Baseline> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read --baseline-summary {}", path.display()))?;
        let b: Value = serde_json::from_str(&text)
            .with_context(|| format!("--baseline-summary {} is not a summary.json", path.display()))?;
        let (Some(ms), Some(batch)) = (b["ms_per_step"].as_f64(), b["batch_size_per_rank"].as_f64()) else {
            anyhow::bail!(
                "--baseline-summary {} has no ms_per_step / batch_size_per_rank: pass a summary.json of this program",
                path.display()
            );
        };
        Ok(Baseline { file: path.display().to_string(), ms, batch, ranks: b["ranks"].clone() })
    }

    /// The summary's "weak_scaling": this run's step `ms` at `batch` per rank on `ranks`.
    fn weak_scaling(&self, ms: f64, batch: usize, ranks: usize) -> Value {
        let s = weak_scaling_speedup(self.ms, self.batch, ms, batch as f64, ranks as f64);
        json!({
            "file": self.file,
            "baseline_ms_per_step": self.ms,
            "baseline_batch": self.batch,
            "baseline_ranks": self.ranks,
            "speedup_eq1": s,
            "efficiency": s / ranks as f64,
        })
    }
}

#[allow(clippy::too_many_arguments)]
pub fn build_summary<B: Backend>(
    args: &TrainArgs,
    job: &Job,
    settings: &Settings,
    trainer: &GanTrainer<B>,
    data: &str,
    facts: &RunFacts,
    last: &StepMetrics,
    final_grid: &Path,
) -> Result<Value> {
    let w = &job.world;
    let steps = facts.steps_run.max(1) as f64;
    // The median step excludes the epoch ends (sampling, checkpoints) and warm-up outliers.
    let ms = median(&facts.step_ms);
    let ex = trainer.exchange_stats();
    let comm_ms = ex.comm_busy.as_secs_f64() * 1e3 / steps;
    let comm_cpu_ms = ex.comm_cpu.as_secs_f64() * 1e3 / steps;
    let exposed_ms = ex.exposed.as_secs_f64() * 1e3 / steps;
    let device_wait_ms = ex.device_wait.as_secs_f64() * 1e3 / steps;
    let metrics_wait_ms = trainer.metrics_wait.as_secs_f64() * 1e3 / steps;
    let buckets: Vec<Value> = [NetId::G, NetId::D]
        .iter()
        .flat_map(|&n| trainer.exchange.buckets(n).to_vec())
        .map(|b| {
            let stats = ex.buckets.iter().find(|s| s.label == b.label);
            let per_step = |d: fn(&BucketStats) -> Duration| stats.map_or(0.0, |s| d(s).as_secs_f64() * 1e3 / steps);
            json!({
                "bucket": b.label,
                "bytes": b.bytes(),
                "algorithm": stats.map_or("none", |s| s.algorithm),
                "comm_ms_per_step": per_step(|s| s.comm_busy),
                "exposed_ms_per_step": per_step(|s| s.exposed),
            })
        })
        .collect();
    let table: Vec<Value> = job
        .comm
        .selection_table()
        .into_iter()
        .map(|(lo, hi, a)| json!({"min_bytes": lo, "max_bytes": if hi == usize::MAX { Value::Null } else { json!(hi) }, "algorithm": a.name()}))
        .collect();
    let mut s = json!({
        "program": concat!("dcgan-train ", env!("CARGO_PKG_VERSION")),
        "options": f32_as_written(serde_json::to_value(args)?),
        "ranks": w.size,
        "hosts": w.hosts,
        "host_count": w.host_count(),
        "mpi_library": w.mpi_library,
        "device": trainer.be_describe(),
        "peak_device_memory_bytes": trainer.peak_device_bytes(),
        "threads_per_rank": facts.threads,
        "data": data,
        "image_size": args.model.image_size,
        "batch_size_per_rank": settings.per_rank_batch,
        "global_batch_size": settings.global_batch,
        "lr": settings.lr,
        "steps": trainer.step,
        "steps_this_run": facts.steps_run,
        "epoch_seconds": facts.epoch_seconds,
        "ms_per_step": ms,
        "ms_per_step_mean": facts.step_ms.iter().sum::<f64>() / facts.step_ms.len().max(1) as f64,
        // The training loop's wall time per step: the steps, plus checkpoints, sample grids
        // and the epochs' ends between them.
        "wall_ms_per_step": facts.train_seconds * 1e3 / steps,
        // What ms_per_step would be if no rank ever waited for another: the median over steps
        // of each step's wall time less its waits (gradient buckets and the metrics).
        "compute_ms_per_step": median(&facts.compute_ms),
        // Where a step's compute went when cores are shared: the training thread on a core, and
        // runnable but waiting for one (medians over steps; with --threads 1 on the CPU the
        // training thread does all the compute).
        "training_thread_cpu_ms_per_step": median(&facts.cpu_ms),
        "training_thread_descheduled_ms_per_step":
            if facts.descheduled_ms.is_empty() { Value::Null } else { json!(median(&facts.descheduled_ms)) },
        "global_images_per_s": settings.global_batch as f64 / (ms / 1e3),
        "comm": {
            "exchange": if w.size == 1 { "none (one rank)" } else if args.parallel.no_exchange { "skipped (--no-exchange)" } else if args.parallel.no_overlap { "after backward (--no-overlap)" } else { "overlapped with backward" },
            "comm_ms_per_step": comm_ms,
            "comm_thread_cpu_ms_per_step": comm_cpu_ms,
            "exposed_comm_ms_per_step": exposed_ms,
            // Clamped: a wait can also include the comm thread's queue and hand-off, so the
            // exposed time may exceed the time inside collectives (then nothing was hidden).
            "hidden_comm_fraction": if comm_ms > 0.0 { (1.0 - exposed_ms / comm_ms).clamp(0.0, 1.0) } else { 0.0 },
            "device_wait_ms_per_step": device_wait_ms,
            // Blocked at each step's end until every rank's metrics arrived: the slowest rank.
            "metrics_wait_ms_per_step": metrics_wait_ms,
            "bytes_per_step": ex.bytes as f64 / steps,
            "wire": args.comm.wire,
            "wire_bytes_per_step": (ex.bytes as f64 / steps) * args.comm.wire.bytes_per_value() as f64 / 4.0,
            "buckets": buckets,
            "algorithm_by_size": table,
            "sync_bn": args.parallel.sync_bn,
        },
        "final_metrics": last,
        "train_seconds": facts.train_seconds,
        "wall_seconds": facts.wall_seconds,
        "samples": final_grid.display().to_string(),
    });
    if let Some(b) = &facts.baseline {
        s["weak_scaling"] = b.weak_scaling(ms, settings.per_rank_batch, w.size);
    }
    Ok(s)
}

/// The end-of-run line on what a step was made of on several ranks (None on one): its time,
/// the part spent computing and the waits on the other ranks.
pub fn step_line(summary: &Value) -> Option<String> {
    if summary["ranks"].as_u64()? < 2 {
        return None;
    }
    let c = &summary["comm"];
    let cores = match (
        summary["training_thread_cpu_ms_per_step"].as_f64(),
        summary["training_thread_descheduled_ms_per_step"].as_f64(),
    ) {
        (Some(cpu), Some(queued)) => {
            format!("; the training thread ran {cpu:.1} ms on a core and waited {queued:.1} ms for one")
        }
        _ => String::new(),
    };
    Some(format!(
        "step (rank 0, medians): {:.1} ms, {:.1} ms without its waits on other ranks; mean waits per step: {:.1} ms \
         for gradient buckets, {:.1} ms for the other ranks at the step's end{cores}",
        summary["ms_per_step"].as_f64()?,
        summary["compute_ms_per_step"].as_f64()?,
        c["exposed_comm_ms_per_step"].as_f64().unwrap_or(0.0),
        c["metrics_wait_ms_per_step"].as_f64().unwrap_or(0.0),
    ))
}

/// The end-of-run line on where the exchange's time went, from a summary (None without an
/// exchange): what the comm thread spent, what the step waited for, and the buckets waited
/// for longest, which are where overlap fell short.
pub fn exchange_line(summary: &Value) -> Option<String> {
    let c = &summary["comm"];
    let comm = c["comm_ms_per_step"].as_f64().filter(|&v| v > 0.0)?;
    let mut waits: Vec<(&str, f64)> = c["buckets"]
        .as_array()?
        .iter()
        .filter_map(|b| Some((b["bucket"].as_str()?, b["exposed_ms_per_step"].as_f64()?)))
        .filter(|&(_, ms)| ms >= 0.05)
        .collect();
    waits.sort_by(|a, b| b.1.total_cmp(&a.1));
    let most: Vec<String> = waits.iter().take(3).map(|(l, ms)| format!("{l} {ms:.1} ms")).collect();
    Some(format!(
        "exchange (rank 0, per step): {comm:.1} ms averaging on the comm thread ({:.1} ms of CPU), {:.1} ms of it waited for (hidden {:.2}){}",
        c["comm_thread_cpu_ms_per_step"].as_f64().unwrap_or(0.0),
        c["exposed_comm_ms_per_step"].as_f64().unwrap_or(0.0),
        c["hidden_comm_fraction"].as_f64().unwrap_or(0.0),
        if most.is_empty() { String::new() } else { format!("; waited for most: {}", most.join(", ")) }
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f32_options_read_as_written() {
        let v = json!({"a": 0.999f32, "b": 1e-8f32, "lr": 2e-4f64, "n": 7, "x": [0.5f32]});
        let t = f32_as_written(v);
        assert_eq!(t["a"], json!(0.999));
        assert_eq!(t["b"], json!(1e-8));
        // An f64 that is no f32 is left alone; integers too.
        assert_eq!(t["lr"], json!(2e-4));
        assert_eq!(t["n"], json!(7));
        assert_eq!(t["x"], json!([0.5]));
    }

    #[test]
    fn eq1_reproduces_the_mpi_papers_figure() {
        // 256 nodes at b = 256 against one GPU at 256: a step 1.18x longer gives 217x.
        let s = weak_scaling_speedup(1.0, 256.0, 256.0 / 217.0, 256.0, 256.0);
        assert!((s - 217.0).abs() < 1e-9);
        // Half the batch per rank at the same step time counts half.
        assert!((weak_scaling_speedup(100.0, 64.0, 100.0, 32.0, 2.0) - 1.0).abs() < 1e-12);
    }

    #[test]
    fn exchange_line_names_the_buckets_waited_for_longest() {
        let bucket = |l: &str, ms: f64| json!({"bucket": l, "exposed_ms_per_step": ms});
        let s = json!({"comm": {
            "comm_ms_per_step": 140.24,
            "comm_thread_cpu_ms_per_step": 31.04,
            "exposed_comm_ms_per_step": 22.5,
            "hidden_comm_fraction": 0.8396,
            "buckets": [bucket("G[1]", 1.3), bucket("G[2]", 0.01), bucket("G[3]", 0.2), bucket("D[3+2+1]", 21.0)],
        }});
        assert_eq!(
            exchange_line(&s).unwrap(),
            "exchange (rank 0, per step): 140.2 ms averaging on the comm thread (31.0 ms of CPU), 22.5 ms of it waited for \
             (hidden 0.84); waited for most: D[3+2+1] 21.0 ms, G[1] 1.3 ms, G[3] 0.2 ms"
        );
        // One rank, or --no-exchange: nothing to say.
        assert_eq!(exchange_line(&json!({"comm": {"comm_ms_per_step": 0.0, "buckets": []}})), None);
    }

    #[test]
    fn step_line_says_what_the_step_waited_for_on_several_ranks_only() {
        let s = |ranks: u64| {
            json!({"ranks": ranks, "ms_per_step": 262.14, "compute_ms_per_step": 246.04,
                   "comm": {"exposed_comm_ms_per_step": 14.06, "metrics_wait_ms_per_step": 2.96}})
        };
        assert_eq!(
            step_line(&s(2)).unwrap(),
            "step (rank 0, medians): 262.1 ms, 246.0 ms without its waits on other ranks; mean waits per step: \
             14.1 ms for gradient buckets, 3.0 ms for the other ranks at the step's end"
        );
        assert_eq!(step_line(&s(1)), None);
        // Where the kernel says how long the training thread waited for a core, so does the line.
        let mut t = s(2);
        t["training_thread_cpu_ms_per_step"] = json!(229.31);
        t["training_thread_descheduled_ms_per_step"] = json!(16.74);
        assert!(
            step_line(&t).unwrap().ends_with(
                "3.0 ms for the other ranks at the step's end; the training thread ran 229.3 ms on a core and waited \
                 16.7 ms for one"
            ),
            "{}",
            step_line(&t).unwrap()
        );
    }
}
