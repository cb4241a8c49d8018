//! `dcgan-train [train]` on every rank: a `Run` goes through named phases. `prepare` settles
//! what every rank must agree on and builds the trainer (`prepare.rs`); `run_epoch` runs the
//! steps of one epoch and `end_epoch` closes it (`epoch.rs`); `finish` writes the last
//! checkpoint, the trace and the summary (`finish.rs`).

mod best;
mod epoch;
mod finish;
mod prepare;
mod solo_start;

use super::config::Settings;
use super::ddp::block_momentum::BlockMomentum;
use super::ddp::{residuals, sync};
use super::job::Job;
use super::outputs::Outputs;
use super::quality::Quality;
use super::resume::{self, ResumeFrom};
use super::signals::StopFlag;
use super::step::GanTrainer;
use super::summary::RunFacts;
use crate::backend::Backend;
use crate::checkpoint::{Checkpoint, Progress};
use crate::comm::cpu_clock::RunDelayClock;
use crate::comm::{CommConfig, PeerFailed};
use crate::data::{Dataset, Shard};
use crate::device::OnBackend;
use crate::record::{StepMetrics, TrainOptions};
use anyhow::{Result, anyhow};
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::rc::Rc;
use std::time::{Duration, Instant};

/// Train as `args` say, on every rank of the job. `given`: the options the command line gave
/// explicitly (by field name), which a resume applies over the run's own.
pub fn run(args: &TrainOptions, given: &BTreeSet<String>) -> Result<()> {
    crate::report::trace::init_clock();
    let mut job = Job::new(Rc::new(crate::comm::start(CommConfig::from_options(&args.comm)?)?));
    let mut result = resume::settle(&mut job, args, given).and_then(|(args, from)| train(&job, &args, from.as_ref()));
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
    let comm = Rc::try_unwrap(job.comm).map_err(|_| anyhow!("internal error: the comm handle is still in use"))?;
    let shutdown = comm.shutdown();
    result?;
    shutdown
}

/// Pick this rank's backend (every rank must manage), then train on it; `from`: rank 0's
/// checkpoint to resume from.
fn train(job: &Job, args: &TrainOptions, from: Option<&ResumeFrom>) -> Result<()> {
    let (device, notice) =
        job.agree(crate::device::select(args.model.device, args.model.cuda_settings(), job.world.local_rank))?;
    if let Some(n) = notice.filter(|_| job.is_root()) {
        eprintln!("{n}");
    }
    device.run(TrainOn { job, args, from })
}

struct TrainOn<'a> {
    job: &'a Job,
    args: &'a TrainOptions,
    from: Option<&'a ResumeFrom>,
}

impl OnBackend for TrainOn<'_> {
    type Out = Result<()>;
    fn run<B: Backend>(self, be: B) -> Result<()> {
        Run::prepare(self.job, self.args, self.from, be)?.train()
    }
}

/// One training run on this rank, from its prepared state to its summary.
struct Run<'a, B: Backend> {
    job: &'a Job,
    args: &'a TrainOptions,
    settings: Settings,
    data: Dataset,
    /// `data.fingerprint()`, which every checkpoint records.
    data_fingerprint: String,
    shard: Shard,
    trainer: GanTrainer<B>,
    /// Rank 0's run directory; None on the other ranks.
    outputs: Option<Outputs>,
    /// Where the run is, as a checkpoint records it.
    progress: Progress,
    facts: RunFacts,
    stop: StopFlag,
    /// The noise of the sample grids, [64, nz].
    grid_noise: Vec<f32>,
    /// This rank's batch, [batch, side, side].
    images: Vec<f32>,
    last: StepMetrics,
    last_checkpoint: LastCheckpoint,
    /// A signal (or the stop hook) ended the run before its end.
    stopped: bool,
    started: Instant,
    steps_at_start: u64,
    /// This thread runs every step: its clock of time spent waiting for a core.
    run_delay: Option<RunDelayClock>,
    faults: Faults,
    /// Sample quality after epochs (`--eval-every`), on every rank.
    quality: Option<Quality<B>>,
    /// The best FID of the run's checkpoints so far (`checkpoints/best`), on every rank.
    best: best::BestSoFar,
    /// `--distributed-after`: the parallel phase's exchange, until it starts.
    parked: Option<solo_start::Parked<B>>,
    /// `--sync-every`: block momentum's state, once the ranks train in parallel.
    block: Option<BlockMomentum>,
}

/// The test hooks this rank obeys (`fault_hooks`), read once.
struct Faults {
    slow_rank: Option<Duration>,
    stop_at_step: Option<u64>,
    signal_in_step: Option<u64>,
}

/// The progress of the last checkpoint written, and where (rank 0).
#[derive(Default)]
struct LastCheckpoint(Option<(Progress, Option<PathBuf>)>);

impl<B: Backend> Run<'_, B> {
    /// Every epoch from where the run stands, then the end.
    fn train(mut self) -> Result<()> {
        let max_steps = self.args.max_steps.unwrap_or(u64::MAX);
        let epochs = self.args.epoch_limit().unwrap_or(u64::MAX);
        let (start_epoch, first) = (self.progress.epoch, self.progress.batch_in_epoch as usize);
        let steps_per_epoch = self.shard.batches_per_epoch();
        let epochs_reached = crate::report::progress::EpochSpan::epochs_reached(
            start_epoch,
            first,
            steps_per_epoch,
            self.trainer.step,
            max_steps,
            epochs,
        );
        let train_started = Instant::now();
        for epoch in start_epoch..epochs {
            let first = if epoch == start_epoch { first } else { 0 };
            let done = self.run_epoch(epoch, first, epochs_reached)?;
            if done.complete {
                self.end_epoch(epoch, done)?;
            }
            if let Some(e) = self.facts.early_stop.filter(|_| self.job.is_root()) {
                eprintln!(
                    "stopping early (--patience {}): no evaluation since epoch {} beat its FID {:.3}; its checkpoint is checkpoints/best",
                    e.patience,
                    e.best_epoch + 1,
                    e.best_fid
                );
            }
            if self.stopped || self.trainer.step >= max_steps || self.facts.early_stop.is_some() {
                break;
            }
        }
        self.finish(train_started.elapsed().as_secs_f64())
    }

    /// Rank 0 writes a checkpoint of the current state (every rank holds the same weights; the
    /// running statistics of every rank are gathered). Collective.
    /// A save of the progress `last_checkpoint` already holds is skipped (every rank decides
    /// alike: the progress is the same everywhere): a run that ends where an epoch ends would
    /// otherwise write the same checkpoint twice.
    fn save_checkpoint(&mut self) -> Option<PathBuf> {
        if let Some((saved, dir)) = &self.last_checkpoint.0
            && *saved == self.progress
        {
            return dir.clone();
        }
        let (job, trainer) = (self.job, &mut self.trainer);
        trainer.finish_pending();
        job.or_fail(trainer.share_pipeline_models());
        if let Some(block) = self.block.as_mut() {
            let stores = [&mut trainer.model.g.store, &mut trainer.model.d.store];
            job.or_fail(block.finish_sync(job, &trainer.be, stores));
        }
        let stores = [&trainer.model.g.store, &trainer.model.d.store];
        let rank_states = job.or_fail(sync::gather_rank_states(job, &trainer.be, stores));
        let lens = stores.map(|s| s.layout.param_len());
        let mine = job.or_fail(trainer.exchange.residuals(&trainer.be));
        let residuals = job.or_fail(residuals::gather(job, mine, lens));
        let block = self.block.as_ref().and_then(|b| job.or_fail(b.gather(job, &trainer.be, stores)));
        // Recorded on every rank, so that all skip the same saves.
        self.last_checkpoint.0 = Some((self.progress.clone(), None));
        let (out, rank_states, residuals) = (self.outputs.as_mut()?, rank_states?, residuals?);
        let g_ema = trainer.averaged_generator();
        let (g, g_adam) = sync::snapshot(&trainer.be, &trainer.model.g.store);
        let (d, d_adam) = sync::snapshot(&trainer.be, &trainer.model.d.store);
        let progress = self.progress.clone();
        let ck = Checkpoint { g, d, g_ema, g_adam, d_adam, progress, rank_states, residuals, block };
        let layouts = (&trainer.model.g.store.layout, &trainer.model.d.store.layout);
        let dir = job.or_fail(out.checkpoint(layouts, &ck));
        self.last_checkpoint.0 = Some((self.progress.clone(), Some(dir.clone())));
        Some(dir)
    }
}
