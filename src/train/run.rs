//! `dcgan-train [train]`: the epoch loop and everything a run writes: metrics.jsonl,
//! summary.json, sample grids, progress on the terminal.

use super::exchange::{SoloExchange, plan_buckets};
use super::noise::fixed_noise;
use super::step::{GanTrainer, StepConfig, StepMetrics};
use super::timeline::Timeline;
use crate::backend::cpu::Cpu;
use crate::cli::TrainArgs;
use crate::data::{DataSource, Dataset, Shard};
use crate::model::dcgan::Dcgan;
use crate::report::jsonl::JsonlWriter;
use crate::report::png::write_grid;
use crate::report::progress::{Progress, ProgressMode};
use anyhow::{Context, Result, bail};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Images in a sample grid (8 x 8).
const GRID: usize = 64;

#[derive(Serialize)]
struct StepRecord<'a> {
    #[serde(rename = "type")]
    kind: &'a str,
    step: u64,
    epoch: u64,
    #[serde(flatten)]
    metrics: StepMetrics,
    ms: f64,
}

#[derive(Serialize, Clone)]
struct EpochRecord {
    #[serde(rename = "type")]
    kind: &'static str,
    epoch: u64,
    steps: u64,
    seconds: f64,
    images_per_s: f64,
    sample: String,
}

/// The run directory: `--out`, or runs/<timestamp>. An existing run is never overwritten.
fn prepare_out_dir(out: Option<&Path>) -> Result<PathBuf> {
    let dir = match out {
        Some(d) => d.to_path_buf(),
        None => PathBuf::from("runs").join(chrono::Local::now().format("%Y%m%d-%H%M%S").to_string()),
    };
    if dir.join("metrics.jsonl").exists() {
        bail!("{} already holds a run (metrics.jsonl): choose another --out, or move the old run away", dir.display());
    }
    std::fs::create_dir_all(dir.join("samples")).with_context(|| format!("cannot create --out {}", dir.display()))?;
    Ok(dir)
}

pub fn run(args: TrainArgs) -> Result<()> {
    let started = Instant::now();
    let m = &args.model;
    let threads = super::setup_threads(m.threads, 1)?;
    let source = DataSource::parse(args.data.as_deref())?;
    let data = Dataset::load(&source)?;
    eprintln!("{}", data.description);
    let batch = m.batch_size as usize;
    let shard = Shard::new(data.count, 0, 1, batch, m.seed)?;
    let out = prepare_out_dir(args.out.as_deref())?;

    let be = Cpu;
    let model = Dcgan::new(&be, m.image_size, batch, m.seed)?;
    let buckets = plan_buckets(&model, 1 << 20);
    let exchange = Box::new(SoloExchange::new(buckets));
    let cfg = StepConfig { seed: m.seed, rank: 0, world: 1, overlap_steps: true };
    let mut trainer = GanTrainer::new(be, model, exchange, cfg, Timeline::new(false))?;

    let size = m.image_size;
    let mut images = vec![0.0f32; batch * size * size];
    let grid_noise = fixed_noise(m.seed, GRID);
    let mut metrics_out = JsonlWriter::create(&out.join("metrics.jsonl"))?;
    let mode = ProgressMode::detect(args.no_progress);
    let steps_per_epoch = shard.batches_per_epoch();
    let max_steps = args.max_steps.unwrap_or(u64::MAX);
    let mut epochs_done = Vec::new();
    let mut last = StepMetrics::default();

    'epochs: for epoch in 0..args.epochs {
        if trainer.step >= max_steps {
            break;
        }
        let order = shard.epoch(epoch);
        let mut progress = Progress::new(mode, epoch, args.epochs, steps_per_epoch);
        let epoch_start = Instant::now();
        let mut steps_in_epoch = 0u64;
        for i in 0..steps_per_epoch {
            if trainer.step >= max_steps {
                finish_epoch(
                    &mut trainer,
                    &mut metrics_out,
                    &mut epochs_done,
                    &out,
                    &grid_noise,
                    epoch,
                    steps_in_epoch,
                    epoch_start,
                    batch,
                    &mut progress,
                )?;
                break 'epochs;
            }
            let t0 = Instant::now();
            data.fill_batch(order.batch(i), size, &mut images);
            last = trainer.step(&images, m.lr as f32, m.lr as f32, false)?;
            let ms = t0.elapsed().as_secs_f64() * 1e3;
            steps_in_epoch += 1;
            metrics_out.write(&StepRecord { kind: "step", step: trainer.step, epoch, metrics: last, ms })?;
            let ips = (steps_in_epoch as usize * batch) as f64 / epoch_start.elapsed().as_secs_f64();
            progress.update(i + 1, last.loss_d, last.loss_g, last.d_x, last.d_g_z, ips);
        }
        finish_epoch(
            &mut trainer,
            &mut metrics_out,
            &mut epochs_done,
            &out,
            &grid_noise,
            epoch,
            steps_in_epoch,
            epoch_start,
            batch,
            &mut progress,
        )?;
    }
    trainer.finish_pending();
    let final_grid = out.join("samples").join("final.png");
    write_grid(&final_grid, &trainer.sample(&grid_noise), GRID, size, size, 8)?;
    metrics_out.flush()?;

    let total_steps = trainer.step;
    let wall = started.elapsed().as_secs_f64();
    let train_seconds: f64 = epochs_done.iter().map(|e: &EpochRecord| e.seconds).sum();
    let summary = serde_json::json!({
        "program": concat!("dcgan-train ", env!("CARGO_PKG_VERSION")),
        "device": trainer.be_describe(),
        "threads": threads,
        "ranks": 1,
        "data": data.description,
        "image_size": size,
        "batch_size_per_rank": batch,
        "global_batch_size": batch,
        "lr": m.lr,
        "seed": m.seed,
        "epochs": epochs_done.len(),
        "steps": total_steps,
        "epoch_seconds": epochs_done.iter().map(|e| e.seconds).collect::<Vec<_>>(),
        "images_per_s": (total_steps as usize * batch) as f64 / train_seconds.max(1e-9),
        "ms_per_step": train_seconds * 1e3 / (total_steps.max(1) as f64),
        "final_metrics": last,
        "wall_seconds": wall,
        "samples": final_grid.display().to_string(),
    });
    std::fs::write(out.join("summary.json"), serde_json::to_string_pretty(&summary)? + "\n")
        .with_context(|| format!("cannot write {}", out.join("summary.json").display()))?;
    eprintln!(
        "done: {total_steps} steps in {wall:.1} s; samples in {}, metrics in {}",
        out.join("samples").display(),
        out.join("metrics.jsonl").display()
    );
    Ok(())
}

/// End of an epoch: complete G's update, write the sample grid and the epoch record.
#[allow(clippy::too_many_arguments)]
fn finish_epoch(
    trainer: &mut GanTrainer<Cpu>,
    metrics_out: &mut JsonlWriter,
    done: &mut Vec<EpochRecord>,
    out: &Path,
    grid_noise: &[f32],
    epoch: u64,
    steps: u64,
    epoch_start: Instant,
    batch: usize,
    progress: &mut Progress,
) -> Result<()> {
    trainer.finish_pending();
    let seconds = epoch_start.elapsed().as_secs_f64();
    let images_per_s = (steps as usize * batch) as f64 / seconds.max(1e-9);
    progress.finish_epoch(seconds, images_per_s);
    let size = trainer.model.image_size;
    let path = out.join("samples").join(format!("epoch-{:03}.png", epoch + 1));
    write_grid(&path, &trainer.sample(grid_noise), GRID, size, size, 8)?;
    let rec = EpochRecord { kind: "epoch", epoch, steps, seconds, images_per_s, sample: path.display().to_string() };
    metrics_out.write(&rec)?;
    metrics_out.flush()?;
    done.push(rec);
    Ok(())
}
