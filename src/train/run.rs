//! `dcgan-train [train]` on every rank: set-up that all ranks agree on, the epoch loop,
//! checkpoints, and what rank 0 writes.

use super::comm_exchange::{CommBnSync, CommExchange, MetricsOverRanks};
use super::config::{Settings, training_config};
use super::exchange::{Exchange, SoloExchange, plan_buckets};
use super::job::{Job, PeerFailed};
use super::noise::fixed_noise;
use super::outputs::{EpochRecord, Outputs, StepRecord, default_dir};
use super::preflight::{load_resume, same_data_everywhere, same_options_everywhere};
use super::signals::StopFlag;
use super::step::{GanTrainer, StepConfig, StepMetrics};
use super::summary::{Baseline, RunFacts, build_summary};
use super::sync;
use super::timeline::Timeline;
use crate::backend::Backend;
use crate::checkpoint::{Checkpoint, Keep, Progress};
use crate::cli::TrainArgs;
use crate::comm::CommConfig;
use crate::comm::cpu_clock::{RunDelayClock, thread_cpu_time};
use crate::data::{DataSource, Dataset, Shard};
use crate::device::OnBackend;
use crate::model::dcgan::Dcgan;
use crate::report::progress::{EpochSpan, Progress as ProgressBar, ProgressMode};
use crate::report::trace::Trace;
use anyhow::{Context, Result, anyhow, bail};
use std::rc::Rc;
use std::time::Instant;

/// Images in a sample grid (8 x 8).
const GRID: usize = 64;

pub fn run(args: TrainArgs) -> Result<()> {
    crate::report::trace::init_clock();
    let comm = Rc::new(crate::comm::start(CommConfig::from_args(&args.comm)?)?);
    let job = Job::new(comm.clone());
    let mut result = train(&job, &args);
    // Every error that reaches here, every rank has (errors of one rank alone end the job
    // inside `train`): the ranks that failed themselves say why, then all wait for each
    // other, so that no rank's exit ends the job before those lines are out.
    if job.world.size > 1
        && let Err(e) = &result
    {
        if e.downcast_ref::<PeerFailed>().is_none() {
            eprintln!("error: {e:#}");
            result = Err(PeerFailed.into());
        }
        let _ = job.comm.barrier();
    }
    drop(job);
    let comm = Rc::try_unwrap(comm).map_err(|_| anyhow!("internal error: the comm handle is still in use"))?;
    let shutdown = comm.shutdown();
    result?;
    shutdown
}

/// Pick this rank's backend (every rank must manage), then train on it.
fn train(job: &Job, args: &TrainArgs) -> Result<()> {
    let (device, notice) = job.agree(crate::device::select(args.model.device, job.world.local_rank))?;
    if let Some(n) = notice.filter(|_| job.is_root()) {
        eprintln!("{n}");
    }
    device.run(TrainOn { job, args })
}

struct TrainOn<'a> {
    job: &'a Job,
    args: &'a TrainArgs,
}

impl OnBackend for TrainOn<'_> {
    type Out = Result<()>;
    fn run<B: Backend>(self, be: B) -> Result<()> {
        train_on(self.job, self.args, be)
    }
}

fn train_on<B: Backend>(job: &Job, args: &TrainArgs, be: B) -> Result<()> {
    let started = Instant::now();
    let (world, root) = (&job.world, job.is_root());
    // Every rank reaches each `agree` (a collective): an error before the first one would
    // leave the others in a collective this rank never joins.
    let stop = job.agree(StopFlag::install())?;
    let threads = job.agree(super::setup_threads(args.model.threads, world.local_size))?;
    job.agree(same_options_everywhere(job, args))?;
    let settings = job.agree(Settings::resolve(args, world.size))?;
    let data = job.agree(DataSource::parse(args.data.as_deref()).and_then(|s| Dataset::load(&s)))?;
    job.agree(same_data_everywhere(job, &data))?;
    let shard = job.agree(Shard::new(data.count, world.rank, world.size, settings.per_rank_batch, args.model.seed))?;
    let (m, p) = (&args.model, &args.parallel);
    let baseline = job.agree(match &p.baseline_summary {
        Some(path) if root => Baseline::read(path).map(Some),
        _ => Ok(None),
    })?;
    job.agree(match &p.trace {
        Some(path) if root => crate::report::check_writable(path, "--trace"),
        _ => Ok(()),
    })?;
    let size = m.image_size;
    let batch = settings.per_rank_batch;

    // Building can fail on one rank alone (its GPU's memory): agreed, like every step above.
    let built = match test_fail_build(world.rank) {
        true => Err(anyhow!("building the model failed on rank {} (DCGAN_TEST_FAIL_BUILD_ON_RANK)", world.rank)),
        false => Dcgan::new(&be, size, batch, m.seed)
            .with_context(|| format!("building the model for batch {batch} per rank on {}", be.describe())),
    };
    let mut model = job.agree(built)?;
    model.set_adam(m.adam_beta1, m.adam_beta2, m.adam_eps);
    let layouts = (&model.g.store.layout.clone(), &model.d.store.layout.clone());
    let resume = args.checkpoints.resume.is_some();
    let ck = job.agree(if root && resume { load_resume(args, job, layouts).map(Some) } else { Ok(None) })?;
    // A resume that does not say keeps what the run kept, not the default's one.
    let run_kept = ck.as_ref().and_then(|c| c.progress.config["keep_checkpoints"].as_u64());
    let keep = Keep::from_option(args.checkpoints.keep_checkpoints.or(run_kept.map(|k| k as usize)).unwrap_or(1));
    let mut outputs = job.agree(match (root, &ck) {
        (false, _) => Ok(None),
        (true, Some(ck)) => {
            let dir = args.checkpoints.resume.as_ref().expect("resuming");
            Outputs::resume(dir, ck.progress.step, ck.progress.epoch, keep).map(Some)
        }
        (true, None) => Outputs::create(&args.out.clone().unwrap_or_else(default_dir), keep).map(Some),
    })?;

    let buckets = plan_buckets(&model, p.bucket_bytes);
    let exchange: Box<dyn Exchange<B>> = if world.size == 1 {
        Box::new(SoloExchange::new(buckets))
    } else if p.no_exchange {
        Box::new(SoloExchange::new(buckets).with_metrics_over_ranks(MetricsOverRanks::new(job.comm.clone())))
    } else {
        let stages = (model.g.stages.len(), model.d.stages.len());
        Box::new(job.agree(CommExchange::new(&be, job.comm.clone(), buckets, stages, !p.no_overlap))?)
    };
    let timeline = match &p.trace {
        Some(_) => Timeline::new(Trace::enabled(world.rank, 200 * p.trace_steps as usize), p.trace_steps),
        None => Timeline::disabled(),
    };
    // With --no-overlap nothing is hidden: G's buckets are also waited for in their step.
    let cfg = StepConfig { seed: m.seed, rank: world.rank, world: world.size, overlap_steps: !p.no_overlap };
    let mut trainer = job.agree(GanTrainer::new(be, model, exchange, cfg, timeline))?;
    if p.sync_bn && world.size > 1 {
        trainer.bn_sync = Some(Box::new(CommBnSync::new(job.comm.clone())));
    }

    // Rank 0's weights (or its checkpoint) everywhere.
    let mut progress = Progress {
        step: 0,
        epoch: 0,
        batch_in_epoch: 0,
        seed: m.seed,
        ranks: world.size,
        batch_per_rank: batch,
        image_size: size,
        rng: "counter-based: noise from ChaCha8(seed, step, sample), data order from ChaCha8(seed, epoch)".into(),
        config: training_config(args),
    };
    if let Some(ck) = &ck {
        sync::restore(&trainer.be, &mut trainer.model.g.store, &ck.g, &ck.g_adam);
        sync::restore(&trainer.be, &mut trainer.model.d.store, &ck.d, &ck.d_adam);
        progress = ck.progress.clone();
    }
    for store in [&mut trainer.model.g.store, &mut trainer.model.d.store] {
        sync::broadcast_from_root(job, &trainer.be, store, resume)?;
    }
    if resume {
        let stores = [&mut trainer.model.g.store, &mut trainer.model.d.store];
        sync::scatter_rank_states(job, &trainer.be, stores, ck.as_ref().map(|c| &c.rank_states[..]))?;
    }
    if world.size > 1 {
        let bytes = job.comm.broadcast_bytes(0, serde_json::to_vec(&progress)?)?;
        progress = serde_json::from_slice(&bytes)?;
    }
    trainer.step = progress.step;

    if root {
        eprintln!("data: {}", data.description);
        eprintln!(
            "dcgan-train: {} rank(s) on {} host(s), {}, batch {} per rank ({} global), lr {}{}",
            world.size,
            world.host_count(),
            trainer.be.describe(),
            batch,
            settings.global_batch,
            settings.lr,
            if resume { format!(", resuming at step {}", progress.step) } else { String::new() }
        );
        if p.no_exchange && world.size > 1 {
            eprintln!(
                "--no-exchange: benchmarking only; gradients are not averaged, so the ranks' models drift apart (the losses still are)"
            );
        }
        if args.comm.wire == crate::cli::comm::Wire::Bf16 && world.size > 1 && !p.no_exchange {
            eprintln!(
                "--wire bf16: gradients travel as bfloat16 (half the bytes; each value rounded to 8 significant bits)"
            );
        }
    }

    let mut facts = RunFacts { baseline, ..RunFacts::default() };
    let mut images = vec![0.0f32; batch * size * size];
    let grid_noise = fixed_noise(m.seed, GRID, trainer.model.nz);
    let mode = if root { ProgressMode::detect(args.no_progress) } else { ProgressMode::Off };
    let steps_per_epoch = shard.batches_per_epoch();
    let max_steps = args.max_steps.unwrap_or(u64::MAX);
    let slow_rank = test_slow_rank(world.rank);
    let stop_at = test_stop_at_step();
    let train_started = Instant::now();
    let steps_at_start = trainer.step;
    let mut last = StepMetrics::default();
    let mut stopped = false;
    let mut last_checkpoint = LastCheckpoint::default();
    // This thread runs every step: its clock of time spent waiting for a core.
    let run_delay = RunDelayClock::of_this_thread();

    // Where this run enters the epochs (mid-epoch when resumed); `progress` moves on below.
    let (start_epoch, first) = (progress.epoch, progress.batch_in_epoch as usize);
    let epochs_reached =
        EpochSpan::epochs_reached(start_epoch, first, steps_per_epoch, trainer.step, max_steps, args.epochs);
    for epoch in progress.epoch..args.epochs {
        let order = shard.epoch(epoch);
        let epoch_start = Instant::now();
        let first = if epoch == start_epoch { first } else { 0 };
        let span = EpochSpan::of(first, steps_per_epoch, trainer.step, max_steps);
        let mut bar = ProgressBar::new(mode, epoch, epochs_reached, span);
        let mut steps_in_epoch = 0u64;
        for i in span.first..span.end {
            let t0 = Instant::now();
            let (cpu0, delay0) = (thread_cpu_time(), run_delay.as_ref().and_then(RunDelayClock::read));
            let waited_before = trainer.waited();
            if let Some(nap) = slow_rank {
                std::thread::sleep(nap);
            }
            data.fill_batch(order.batch(i), size, &mut images);
            let lr = settings.lr_at(trainer.step);
            // A diverging loss is the same on every rank (the metrics are averaged): rank 0 says so.
            last = trainer
                .step(&images, lr, lr, stop.requested() || stop_at == Some(trainer.step + 1))
                .map_err(|e| if root { e } else { PeerFailed.into() })?;
            let ms = t0.elapsed().as_secs_f64() * 1e3;
            let wait_ms = (trainer.waited() - waited_before).as_secs_f64() * 1e3;
            let cpu_ms = (thread_cpu_time() - cpu0).as_secs_f64() * 1e3;
            let delay1 = run_delay.as_ref().and_then(RunDelayClock::read);
            let descheduled_ms = delay0.zip(delay1).map(|(a, b)| (b - a).as_secs_f64() * 1e3);
            facts.step_ms.push(ms);
            facts.compute_ms.push(ms - wait_ms);
            facts.cpu_ms.push(cpu_ms);
            facts.descheduled_ms.extend(descheduled_ms);
            steps_in_epoch += 1;
            progress.epoch = epoch;
            progress.batch_in_epoch = i as u64 + 1;
            progress.step = trainer.step;
            if let Some(out) = outputs.as_mut() {
                let rec = StepRecord {
                    kind: "step",
                    step: trainer.step,
                    epoch,
                    metrics: last,
                    lr,
                    ms,
                    wait_ms,
                    cpu_ms,
                    descheduled_ms,
                };
                job.or_fail(out.step(&rec));
                let ips =
                    (steps_in_epoch as usize * settings.global_batch) as f64 / epoch_start.elapsed().as_secs_f64();
                bar.update(i, last.loss_d, last.loss_g, last.d_x, last.d_g_z, ips);
            }
            if p.check_consistency > 0 && trainer.step % p.check_consistency == 0 {
                trainer.finish_pending();
                let nets = [&trainer.model.g, &trainer.model.d];
                sync::check_consistency(job, &trainer.be, nets, trainer.step, !p.no_exchange)?;
            }
            if last.stop {
                // Out of the epoch, but through its end's bookkeeping should this step have
                // been its last (the run may be complete: see `finished` below).
                stopped = true;
                break;
            }
            if args.checkpoints.checkpoint_every.is_some_and(|n| trainer.step % n == 0) {
                save_checkpoint(job, &mut trainer, outputs.as_mut(), &progress, &mut last_checkpoint);
            }
        }
        if progress.batch_in_epoch as usize == steps_per_epoch && progress.epoch == epoch {
            // The epoch is complete.
            trainer.finish_pending();
            if !p.sync_bn {
                sync::average_running_stats(job, &trainer.be, &mut trainer.model.g.store)?;
                sync::average_running_stats(job, &trainer.be, &mut trainer.model.d.store)?;
            }
            let seconds = epoch_start.elapsed().as_secs_f64();
            let images_per_s = (steps_in_epoch as usize * settings.global_batch) as f64 / seconds.max(1e-9);
            facts.epoch_seconds.push(seconds);
            progress.epoch = epoch + 1;
            progress.batch_in_epoch = 0;
            if let Some(out) = outputs.as_mut() {
                bar.finish_epoch(seconds, images_per_s);
                let path =
                    job.or_fail(out.grid(&format!("epoch-{:03}", epoch + 1), &trainer.sample(&grid_noise), size));
                let rec = EpochRecord {
                    kind: "epoch",
                    epoch,
                    steps: steps_in_epoch,
                    seconds,
                    images_per_s,
                    sample: path.display().to_string(),
                };
                job.or_fail(out.epoch(&rec));
            }
            if args.checkpoints.checkpoint_every.is_none() {
                save_checkpoint(job, &mut trainer, outputs.as_mut(), &progress, &mut last_checkpoint);
            }
        }
        if stopped || trainer.step >= max_steps {
            break;
        }
    }

    trainer.finish_pending();
    let train_seconds = train_started.elapsed().as_secs_f64();
    let ck_dir = save_checkpoint(job, &mut trainer, outputs.as_mut(), &progress, &mut last_checkpoint);
    if let Some(path) = &p.trace {
        let parts = job.comm.gather_bytes(trainer.timeline.trace.to_json_events())?;
        if let Some(parts) = parts {
            job.or_fail(
                Trace::write_merged(path, &parts).with_context(|| format!("cannot write --trace {}", path.display())),
            );
        }
    }
    // A stop that came with the last step is the run's end, not an interruption: resuming
    // would find nothing left to run.
    let finished = trainer.step >= max_steps || progress.epoch >= args.epochs;
    if stopped && !finished {
        let Some(out) = outputs.as_mut() else {
            return Err(PeerFailed.into());
        };
        let dir = out.dir.display().to_string();
        let ck = ck_dir.map(|d| d.display().to_string()).unwrap_or_default();
        let under = if world.size > 1 { format!(", under mpiexec -n {}", world.size) } else { String::new() };
        let resume = format!("dcgan-train --resume {dir} (with the same options but --out{under})");
        // Also in the run itself: mpiexec may stop relaying output while the job ends.
        job.or_fail(
            out.note(&serde_json::json!({"type": "stopped", "step": trainer.step, "checkpoint": ck, "resume": resume})),
        );
        bail!("stopped by a signal after step {}; checkpoint in {ck}: continue with {resume}", trainer.step);
    }
    if let Some(out) = outputs.as_mut() {
        let final_grid = job.or_fail(out.grid("final", &trainer.sample(&grid_noise), size));
        facts.steps_run = trainer.step - steps_at_start;
        facts.train_seconds = train_seconds;
        facts.wall_seconds = started.elapsed().as_secs_f64();
        facts.threads = threads;
        let summary =
            job.or_fail(build_summary(args, job, &settings, &trainer, &data.description, &facts, &last, &final_grid));
        job.or_fail(out.summary(&summary));
        for line in [super::summary::step_line(&summary), super::summary::exchange_line(&summary)].into_iter().flatten()
        {
            eprintln!("{line}");
        }
        let ck = ck_dir.as_ref().and_then(|d| d.file_name()).map(|n| n.to_string_lossy().to_string());
        eprintln!(
            "done: {} steps in {:.1} s; in {}: summary.json, metrics.jsonl, samples/, checkpoints/{}",
            facts.steps_run,
            facts.wall_seconds,
            out.dir.display(),
            ck.unwrap_or_default()
        );
    }
    Ok(())
}

/// For the test of a failure on one rank alone while the others build their model (on a
/// GPU: its memory): `DCGAN_TEST_FAIL_BUILD_ON_RANK=r`.
fn test_fail_build(rank: usize) -> bool {
    std::env::var("DCGAN_TEST_FAIL_BUILD_ON_RANK").ok().and_then(|v| v.parse::<usize>().ok()) == Some(rank)
}

/// For the test of a stop that lands on the run's last step (a signal cannot be aimed that
/// well): `DCGAN_TEST_STOP_AT_STEP=n` asks to stop in step n (1-based), as SIGTERM would.
fn test_stop_at_step() -> Option<u64> {
    std::env::var("DCGAN_TEST_STOP_AT_STEP").ok()?.parse().ok()
}

/// For the integration test of the wait accounting: `DCGAN_TEST_SLOW_RANK=r:ms` makes rank
/// r start every step ms milliseconds late, so that the others wait for it.
fn test_slow_rank(rank: usize) -> Option<std::time::Duration> {
    let v = std::env::var("DCGAN_TEST_SLOW_RANK").ok()?;
    let (r, ms) = v.split_once(':')?;
    (r.parse::<usize>().ok()? == rank).then_some(std::time::Duration::from_millis(ms.parse().ok()?))
}

/// Rank 0 writes a checkpoint of the current state (every rank holds the same weights; the
/// running statistics of every rank are gathered). Collective.
/// A save of the progress `last` already holds is skipped (every rank decides alike: the
/// progress is the same everywhere): a run that ends where an epoch ends would otherwise
/// write the same checkpoint twice.
fn save_checkpoint<B: Backend>(
    job: &Job,
    trainer: &mut GanTrainer<B>,
    outputs: Option<&mut Outputs>,
    progress: &Progress,
    last: &mut LastCheckpoint,
) -> Option<std::path::PathBuf> {
    if let Some((saved, dir)) = &last.0
        && saved == progress
    {
        return dir.clone();
    }
    trainer.finish_pending();
    let stores = [&trainer.model.g.store, &trainer.model.d.store];
    let rank_states = job.or_fail(sync::gather_rank_states(job, &trainer.be, stores));
    // Recorded on every rank, so that all skip the same saves.
    last.0 = Some((progress.clone(), None));
    let (out, rank_states) = (outputs?, rank_states?);
    let (g, g_adam) = sync::snapshot(&trainer.be, &trainer.model.g.store);
    let (d, d_adam) = sync::snapshot(&trainer.be, &trainer.model.d.store);
    let ck = Checkpoint { g, d, g_adam, d_adam, progress: progress.clone(), rank_states };
    let layouts = (&trainer.model.g.store.layout, &trainer.model.d.store.layout);
    let dir = job.or_fail(out.checkpoint(layouts, &ck));
    last.0 = Some((progress.clone(), Some(dir.clone())));
    Some(dir)
}

/// The progress of the last checkpoint written, and where (rank 0).
#[derive(Default)]
struct LastCheckpoint(Option<(Progress, Option<std::path::PathBuf>)>);
