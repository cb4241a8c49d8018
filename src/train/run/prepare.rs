//! The run's first phase: what every rank must agree on before the first step (each check is
//! a collective `agree`, so that a rank that fails does not leave the others waiting), the
//! trainer built on this rank's backend, and rank 0's state (fresh or resumed) everywhere.

use super::solo_start::Parked;
use super::{Faults, LastCheckpoint, Run};
use crate::backend::{Backend, View};
use crate::checkpoint::{self, Checkpoint, Keep, Progress};
use crate::comm::cpu_clock::RunDelayClock;
use crate::data::{DataSource, Dataset, Shard};
use crate::fault_hooks;
use crate::model::dcgan::Dcgan;
use crate::model::noise::fixed_noise;
use crate::nn::BnSync;
use crate::record::summary::EpochQuality;
use crate::record::{EpochRecord, GanLoss, Summary, TrainOptions};
use crate::report::trace::Trace;
use crate::train::config::{self, Settings, block_settings, data_place};
use crate::train::ddp::block_momentum::BlockMomentum;
use crate::train::ddp::comm_exchange::CommExchange;
use crate::train::ddp::exchange::{Exchange, SoloExchange, plan_buckets};
use crate::train::ddp::over_ranks::{CommBnSync, MetricsOverRanks};
use crate::train::ddp::{device_packing, residuals, sync};
use crate::train::interrupt::Interrupt;
use crate::train::job::Job;
use crate::train::memory_plan::{self, MemoryLimits};
use crate::train::outputs::{Outputs, default_dir};
use crate::train::pipeline::PipelineStage;
use crate::train::preflight::{same_data_as_the_run, same_data_everywhere, same_options_everywhere};
use crate::train::quality::Quality;
use crate::train::recorded_options::{self, TEST_DATA_FINGERPRINT, THREADS_PER_RANK};
use crate::train::resume::{ResumeFrom, regroup};
use crate::train::signals::StopFlag;
use crate::train::step::{GanTrainer, StepConfig};
use crate::train::summary::RunFacts;
use crate::train::timeline::Timeline;
use anyhow::{Context, Result, anyhow, bail};
use std::time::Instant;

/// Images in a sample grid (8 x 8).
const GRID: usize = 64;

/// What the ranks agreed on before building anything.
struct Agreed {
    stop: StopFlag,
    threads: usize,
    settings: Settings,
    data: Dataset,
    data_fingerprint: String,
    baseline: Option<(Summary, String)>,
}

impl<'a, B: Backend> Run<'a, B> {
    /// Settle, build and restore; every rank returns together, with an error or ready to train.
    pub(super) fn prepare(job: &'a Job, args: &'a TrainOptions, from: Option<&ResumeFrom>, be: B) -> Result<Self> {
        let started = Instant::now();
        let agreed = agree_on_setup(job, args, from)?;
        let (world, batch) = (&job.world, agreed.settings.per_rank_batch);
        // Before anything big is allocated: a batch that cannot fit is one line, not minutes
        // of growth and then the system's kill (and it says more than that the data is short).
        let memory = job.agree(match MemoryLimits::now(&be, world.local_size) {
            Some(l) => {
                let resumed = args.checkpoints.resume.is_some();
                memory_plan::check(&be, &args.model, batch, world.size, &l, resumed).map(Some)
            }
            None => Ok(None),
        })?;
        // A pipeline's two stages take the same batch: the pair is one data-parallel place.
        let (place, places) = data_place(args, world.rank, world.size);
        let shard = job.agree(Shard::new(agreed.data.count, place, places, batch, args.model.seed))?;
        let solo_shard = Shard::new(agreed.data.count, 0, 1, batch, args.model.seed)?;
        // Before the run directory is made: a refusal leaves nothing behind.
        let compressed_from = crate::train::config::compressed_from(args, shard.batches_per_epoch());
        let frozen = job.agree(crate::train::config::variance_frozen_after(args, compressed_from))?;
        let Built { trainer, outputs, ck, parked } = build(job, args, from, &agreed.settings, be, solo_shard)?;
        let (batch, side) = (agreed.settings.per_rank_batch, args.model.image_size);
        let steps_per_epoch = shard.batches_per_epoch();
        let progress = fresh_progress(args, job.world.size, batch, steps_per_epoch, &agreed.data_fingerprint);
        let mut run = Run {
            job,
            args,
            grid_noise: fixed_noise(args.model.seed, GRID, trainer.model.nz),
            images: vec![0.0f32; batch * side * side],
            settings: agreed.settings,
            data: agreed.data,
            data_fingerprint: agreed.data_fingerprint,
            shard,
            trainer,
            outputs,
            progress,
            facts: RunFacts { baseline: agreed.baseline, threads: agreed.threads, memory, ..RunFacts::default() },
            stop: agreed.stop,
            last: Default::default(),
            last_checkpoint: LastCheckpoint::default(),
            stopped: false,
            started,
            steps_at_start: 0,
            run_delay: RunDelayClock::of_this_thread(),
            faults: Faults {
                slow_rank: fault_hooks::slow_rank_nap(job.world.rank),
                stop_at_step: fault_hooks::stop_at_step(),
                signal_in_step: fault_hooks::signal_in_step(),
            },
            quality: None,
            best: Default::default(),
            parked,
            block: None,
        };
        if job.is_root() {
            // Rank 0 alone drops a long step and aborts the job (see `Run::dropped_step`): the
            // other ranks stop with it, wherever they are in the step.
            run.trainer.interrupt = Some(Interrupt::new(run.stop.clone()));
        }
        run.trainer.stop_flag = Some(run.stop.clone());
        match run.parked.as_mut() {
            Some(p) => p.exchange.compress_from(compressed_from),
            None => run.trainer.exchange.compress_from(compressed_from),
        }
        if let Some([g, d]) = frozen {
            run.trainer.model.g.store.freeze_variance_after = Some(g);
            run.trainer.model.d.store.freeze_variance_after = Some(d);
        }
        run.restore_everywhere(ck.as_ref())?;
        let measured_against = from.and_then(|f| f.test_data_fingerprint.clone());
        run.quality = Quality::prepare(job, &run.trainer.be, args, measured_against.as_deref())?;
        // What the run's samples are measured against, in every checkpoint (rank 0 writes
        // them); a resume that measures nothing keeps the run's.
        let measured = run.quality.as_ref().and_then(|q| q.test_fingerprint.clone()).or(measured_against);
        if let Some(test) = measured {
            run.progress.config[TEST_DATA_FINGERPRINT] = test.into();
        }
        // Every rank's threads, on rank 0, which writes the checkpoints.
        let threads = job.comm.gather_bytes((run.facts.threads as u64).to_le_bytes().to_vec())?;
        if let Some(all) = threads {
            let count = |b: &Vec<u8>| b.as_slice().try_into().map(u64::from_le_bytes).unwrap_or(0);
            run.progress.config[THREADS_PER_RANK] = all.iter().map(count).collect::<Vec<u64>>().into();
        }
        run.facts.feature_net = run.quality.as_ref().map(|q| q.path.clone());
        run.agree_on_best()?;
        run.refuse_if_stopped_early()?;
        let earlier = job.agree(run.outputs.as_mut().map_or(Ok(Vec::new()), |o| o.begin()))?;
        run.facts.quality = earlier_quality(earlier, run.quality.as_ref());
        if let Some(out) = run.outputs.as_mut() {
            job.or_fail(out.text(run.progress.step, "options", &super::super::outputs::options_markdown(args)));
        }
        run.announce();
        Ok(run)
    }

    /// Rank 0's weights (or its checkpoint) and progress on every rank.
    fn restore_everywhere(&mut self, ck: Option<&Checkpoint>) -> Result<()> {
        let (job, t) = (self.job, &mut self.trainer);
        if let Some(ck) = ck {
            sync::restore(&t.be, &mut t.model.g.store, &ck.g, &ck.g_adam);
            sync::restore(&t.be, &mut t.model.d.store, &ck.d, &ck.d_adam);
            self.progress = ck.progress.clone();
            // What the resume changed (a longer --max-steps, say) is the run's from now on.
            self.progress.config =
                recorded_options::recorded_config(self.args, self.shard.batches_per_epoch(), &self.data_fingerprint);
        }
        let resume = self.args.checkpoints.resume.is_some();
        for store in [&mut t.model.g.store, &mut t.model.d.store] {
            sync::broadcast_from_root(job, &t.be, store, resume)?;
        }
        if let Some(avg) = t.g_ema.as_mut() {
            // The run's average (rank 0 holds the checkpoint), or G's weights at the start.
            match ck.and_then(|c| c.g_ema.as_ref()) {
                Some(a) => avg.restore(&t.be, &a.net.values, a.images_seen),
                None => avg.set_values(&t.be, View::whole(&t.model.g.store.value)),
            }
            avg.take_from_root(job, &t.be)?;
        }
        if resume {
            let stores = [&mut t.model.g.store, &mut t.model.d.store];
            sync::scatter_rank_states(job, &t.be, stores, ck.map(|c| &c.rank_states[..]))?;
        }
        if job.world.size > 1 {
            let bytes = job.comm.broadcast_bytes(0, serde_json::to_vec(&self.progress)?)?;
            self.progress = serde_json::from_slice(&bytes)?;
        }
        t.step = self.progress.step;
        self.steps_at_start = t.step;
        // Every rank holds rank 0's state already: a resume past the solo steps goes parallel.
        self.go_parallel_if_due(false)?;
        if resume {
            let t = &mut self.trainer;
            let lens = [t.model.g.store.layout.param_len(), t.model.d.store.layout.param_len()];
            if let Some(r) = residuals::scatter(job, ck.map(|c| &c.residuals[..]), lens)? {
                t.exchange.set_residuals(&t.be, &r)?;
            }
            if let Some(settings) = block_settings(self.args, job.world.size) {
                let stores = [&mut t.model.g.store, &mut t.model.d.store];
                self.block = BlockMomentum::restore(settings, job, &t.be, stores, ck.and_then(|c| c.block.as_ref()))?;
            }
            // Saved at a block's end before its sync: start it, as the run did after the save.
            self.start_deferred_sync();
        }
        self.start_blocks_if_parallel();
        Ok(())
    }

    /// Rank 0 says what is about to run.
    fn announce(&self) {
        if !self.job.is_root() {
            return;
        }
        let (w, p) = (&self.job.world, &self.args.parallel);
        eprintln!("data: {}", self.data.description);
        let resuming = match self.args.checkpoints.resume {
            Some(_) => format!(", resuming at step {}", self.progress.step),
            None => String::new(),
        };
        eprintln!(
            "dcgan-train: {} rank(s) on {} host(s), {}, batch {} per rank ({} global), lr {}{resuming}",
            w.size,
            w.host_count(),
            self.trainer.be.describe(),
            self.settings.per_rank_batch,
            self.settings.global_batch,
            self.settings.lr,
        );
        if p.no_exchange && w.size > 1 {
            eprintln!(
                "--no-exchange: benchmarking only; gradients are not averaged, so the ranks' models drift apart (the losses still are)"
            );
        }
        if self.args.comm.wire == crate::comm::Wire::Bf16 && p.exchanges_gradients(w.size) {
            eprintln!(
                "--wire bf16: gradients travel as bfloat16 (half the bytes; each value rounded to 8 significant bits)"
            );
        }
        if self.args.comm.wire == crate::comm::Wire::OneBit && p.exchanges_gradients(w.size) {
            let from = crate::train::config::compressed_from(self.args, self.shard.batches_per_epoch());
            eprintln!(
                "--wire 1bit: gradients travel as f32 for the first {from} steps (--wire-warmup-steps), then as 1 bit a value with error feedback"
            );
        }
    }
}

/// Every rank reaches each `agree` (a collective): an error before the first one would leave
/// the others in a collective this rank never joins.
fn agree_on_setup(job: &Job, args: &TrainOptions, from: Option<&ResumeFrom>) -> Result<Agreed> {
    let (world, root) = (&job.world, job.is_root());
    let stop = job.agree(StopFlag::install())?;
    let threads = job.agree(crate::backend::threads::setup_threads(args.model.threads, world.local_size))?;
    job.agree(same_options_everywhere(job, args))?;
    let settings = job.agree(Settings::resolve(args, world.size))?;
    let data = job.agree(DataSource::parse(args.data.as_deref()).and_then(|s| Dataset::load(&s)))?;
    let data_fingerprint = job.agree(same_data_everywhere(job, &data))?;
    // Rank 0 holds the checkpoint; the others' images are rank 0's (checked just above).
    job.agree(match (from, &args.checkpoints.resume) {
        (Some(from), Some(asked)) => {
            let shown = args.data.as_deref().unwrap_or(crate::data::DEFAULT_DIR);
            same_data_as_the_run(asked, shown, from.data_fingerprint.as_deref(), &data_fingerprint)
        }
        _ => Ok(()),
    })?;
    let p = &args.parallel;
    let baseline = job.agree(match &p.baseline_summary {
        Some(path) if root => Summary::read(path, "--baseline-summary").map(|s| Some((s, path.display().to_string()))),
        _ => Ok(None),
    })?;
    job.agree(match &p.trace {
        Some(path) if root => crate::report::check_writable(path, "--trace"),
        _ => Ok(()),
    })?;
    Ok(Agreed { stop, threads, settings, data, data_fingerprint, baseline })
}

/// What `build` makes.
struct Built<B: Backend> {
    trainer: GanTrainer<B>,
    /// Rank 0's run directory.
    outputs: Option<Outputs>,
    /// The checkpoint to resume from (rank 0).
    ck: Option<Checkpoint>,
    parked: Option<Parked<B>>,
}

/// The trainer on `be`, rank 0's outputs, and the checkpoint to resume from (rank 0).
fn build<B: Backend>(
    job: &Job,
    args: &TrainOptions,
    from: Option<&ResumeFrom>,
    settings: &Settings,
    be: B,
    solo_shard: Shard,
) -> Result<Built<B>> {
    let (world, root, m, p) = (&job.world, job.is_root(), &args.model, &args.parallel);
    // With micro-batches the networks are built for one of them.
    let batch = settings.per_rank_batch / m.micro_batches as usize;
    // Building can fail on one rank alone (its GPU's memory): agreed, like every step above.
    let built = match fault_hooks::fail_build_on(world.rank) {
        true => Err(anyhow!("building the model failed on rank {} (DCGAN_TEST_FAIL_BUILD_ON_RANK)", world.rank)),
        false => Dcgan::new(&be, m.image_size, config::widths(m), batch, m.seed, config::discriminator(m))
            .with_context(|| format!("building the model for batch {batch} per rank on {}", be.describe())),
    };
    let mut model = job.agree(built)?;
    model.set_adam(m.adam_beta1, m.adam_beta2, m.adam_eps);
    let layouts = (&model.g.store.layout.clone(), &model.d.store.layout.clone());
    let loaded = from.map(|f| checkpoint::load(&f.checkpoint, layouts).and_then(|ck| lacks_average(f, ck, m)));
    let ck = job.agree(loaded.transpose())?.map(|c| regroup(c, world.size, settings.per_rank_batch));
    // On a resume, the run's own unless the command line gave it (`resume.rs`).
    let keep = Keep::from_option(args.checkpoints.keep_checkpoints.unwrap_or(1));
    let outputs = job.agree(match (root, &ck, from) {
        (false, _, _) => Ok(None),
        (true, Some(ck), Some(f)) => {
            Outputs::resume(f, ck.progress.step, ck.progress.epoch, keep, !args.no_tensorboard).map(Some)
        }
        _ => args
            .out
            .clone()
            .map_or_else(default_dir, Ok)
            .and_then(|dir| Outputs::create(&dir, keep, !args.no_tensorboard))
            .map(Some),
    })?;

    let buckets = plan_buckets(&model, p.bucket_bytes);
    let solo_over_ranks =
        || SoloExchange::new(buckets.clone()).with_metrics_over_ranks(MetricsOverRanks::new(job.comm.clone()));
    // Block momentum exchanges models, not gradients: each rank's Adam runs on its own.
    if p.pipeline && world.size > 2 {
        // Pipelines side by side: each stage averages its network with its replicas only.
        let members = (world.rank % 2..world.size).step_by(2).collect();
        job.or_fail(job.comm.set_bucket_group(members));
    }
    let mut exchange: Box<dyn Exchange<B>> = if world.size == 1 {
        Box::new(SoloExchange::new(buckets.clone()))
    } else if p.no_exchange || p.sync_every > 0 || (p.pipeline && world.size == 2) {
        Box::new(solo_over_ranks())
    } else {
        let stages = (model.g.stages.len(), model.d.stages.len());
        let on_device = be.packs_wire() && device_packing::on_device_allowed();
        let pack = if on_device { args.comm.wire } else { crate::comm::Wire::F32 };
        let exchange = CommExchange::new(&be, job.comm.clone(), buckets.clone(), stages, !p.no_overlap, pack);
        Box::new(job.agree(exchange)?)
    };
    let solo_first = p.exchanges_gradients(world.size) && p.distributed_after > 0;
    let mut parked = None;
    if solo_first {
        let bn_sync: Option<Box<dyn BnSync<B>>> = match p.sync_bn {
            true => Some(Box::new(CommBnSync::new(job.comm.clone()))),
            false => None,
        };
        let parallel = std::mem::replace(&mut exchange, Box::new(solo_over_ranks()));
        parked = Some(Parked { exchange: parallel, bn_sync, solo_shard });
    }
    let timeline = match &p.trace {
        Some(_) => {
            Timeline::new(Trace::enabled(world.rank, 200usize.saturating_mul(p.trace_steps as usize)), p.trace_steps)
        }
        None => Timeline::disabled(),
    };
    // With --no-overlap nothing is hidden: G's buckets are also waited for in their step.
    let (place, places) = data_place(args, world.rank, world.size);
    let cfg = StepConfig { seed: m.seed, rank: place, world: places, overlap_steps: !p.no_overlap };
    let trainer = GanTrainer::new(be, model, exchange, cfg, timeline).and_then(|mut t| {
        if m.loss == GanLoss::WganGp {
            t.use_wgan_gp(m.n_critic, m.gp_lambda)?;
        }
        // A pipeline's stages always go by micro-batches (one is the step split in two).
        if m.micro_batches > 1 || p.pipeline {
            t.use_micro_batches(m.micro_batches as usize, m.recompute)?;
        }
        if p.pipeline {
            t.pipeline = Some(PipelineStage::of_rank(world.rank, job.comm.clone()));
        }
        if m.deferred_bn {
            t.model.g.defer_bn();
            t.model.d.defer_bn();
        }
        if m.g_ema > 0 {
            // A solo step is one worker's: one rank's batch.
            let images = if solo_first { settings.per_rank_batch } else { settings.global_batch };
            t.use_g_ema(m.g_ema, images)?;
        }
        Ok(t)
    });
    let mut trainer = job.agree(trainer)?;
    if p.sync_bn && world.size > 1 && !solo_first {
        trainer.bn_sync = Some(Box::new(CommBnSync::new(job.comm.clone())));
    }
    trainer.solo = solo_first;
    Ok(Built { trainer, outputs, ck, parked })
}

/// A checkpoint of a run that keeps `--g-ema`'s average, refused where it has lost it.
fn lacks_average(from: &ResumeFrom, ck: Checkpoint, m: &crate::record::ModelOptions) -> Result<Checkpoint> {
    if m.g_ema > 0 && ck.g_ema.is_none() {
        bail!(
            "--resume {}: the checkpoint {} has no G_ema.safetensors, which a run with --g-ema keeps: resume from an earlier checkpoint of the run, or start a new run with --out",
            from.run.display(),
            from.checkpoint.display()
        );
    }
    Ok(ck)
}

/// The sample quality of a resumed run's earlier epochs that summary.json lists: those the
/// feature network this run measures with measured (a note says where others did), or where
/// it measures nothing, those of the network that measured last.
fn earlier_quality<B: Backend>(epochs: Vec<EpochRecord>, quality: Option<&Quality<B>>) -> Vec<EpochQuality> {
    let last = || epochs.iter().rev().find_map(|e| e.feature_net.clone()).unwrap_or_default();
    let digest = quality.map_or_else(last, |q| q.digest.clone());
    let measured = epochs.iter().filter(|e| e.fid.is_some()).count();
    let same: Vec<EpochQuality> = epochs.iter().filter_map(|e| e.quality(&digest)).collect();
    if same.len() < measured && quality.is_some() {
        eprintln!(
            "note: {} of the run's earlier evaluations were measured with another feature network (or recorded less than summary.json lists): summary.json's quality lists this network's alone, metrics.jsonl all of them",
            measured - same.len()
        );
    }
    same
}

/// The progress of a run that has not started.
fn fresh_progress(
    args: &TrainOptions,
    ranks: usize,
    batch_per_rank: usize,
    steps_per_epoch: usize,
    data_fingerprint: &str,
) -> Progress {
    Progress {
        step: 0,
        epoch: 0,
        batch_in_epoch: 0,
        seed: args.model.seed,
        ranks,
        batch_per_rank,
        image_size: args.model.image_size,
        ngf: args.model.ngf,
        rng: "counter-based: noise from ChaCha8(seed, step, sample), data order from ChaCha8(seed, epoch)".into(),
        config: recorded_options::recorded_config(args, steps_per_epoch, data_fingerprint),
        block_sync_due: false,
    }
}
