//! The run's middle phases: `run_epoch` runs the steps of one epoch (each with its metrics
//! line, consistency check and checkpoint), `end_epoch` closes a complete one (running
//! statistics averaged, its sample grid and line, its checkpoint).

use super::Run;
use crate::backend::Backend;
use crate::comm::PeerFailed;
use crate::comm::cpu_clock::{RunDelayClock, thread_cpu_time};
use crate::data::EpochOrder;
use crate::eval::evaluate::Score;
use crate::record::metrics::MoreQuality;
use crate::record::summary::EpochQuality;
use crate::record::{EpochRecord, LineType, Losses, ProgressChoice, StepRecord};
use crate::report::progress::{EpochSpan, Progress as ProgressBar, ProgressMode};
use crate::train::ddp::sync;
use crate::train::interrupt::StepInterrupted;
use crate::train::timeline::Track;
use anyhow::Result;
use std::time::{Duration, Instant};

/// The display `--progress` asks for on rank 0 (`auto`: a bar on a terminal, else lines).
fn display_for(choice: ProgressChoice) -> ProgressMode {
    match choice {
        ProgressChoice::Auto => ProgressMode::detect(),
        ProgressChoice::Bar => ProgressMode::Bar,
        ProgressChoice::Lines => ProgressMode::Plain,
        ProgressChoice::None => ProgressMode::Off,
    }
}

/// How an epoch's steps went.
pub(super) struct EpochDone {
    /// Every step of the epoch has run (it was not cut short by a stop or --max-steps).
    pub complete: bool,
    steps: u64,
    /// The epoch's steps run before this invocation (a resume part-way through it).
    steps_before: u64,
    started: Instant,
    bar: ProgressBar,
    /// The losses the progress shows (G's of the last generator step between WGAN-GP's).
    shown: Losses,
}

impl<B: Backend> Run<'_, B> {
    /// The step the ranks went (or go) parallel at.
    fn parallel_from(&self) -> u64 {
        self.args.parallel.distributed_after
    }

    /// `--checkpoint-every`: whether a checkpoint follows step `n` (counted from 1).
    fn checkpoint_due(&self, n: u64) -> bool {
        self.args.checkpoints.checkpoint_every.is_some_and(|k| n.is_multiple_of(k))
    }

    /// `--check-consistency`: whether the ranks are compared after step `n`.
    fn consistency_due(&self, n: u64) -> bool {
        let k = self.args.parallel.check_consistency;
        k > 0 && n.is_multiple_of(k)
    }

    /// `--sync-every`: land the sync the previous step started, if any (this step's moves
    /// carried on); after the step that ends a block, average the models (block momentum),
    /// or with `overlap` start averaging them for the next step to land, or with `defer`
    /// leave that start to `start_deferred_sync` (a checkpoint or a stop comes first).
    /// Returns the time it took: communication the step waited for.
    fn end_block_if_due(&mut self, overlap: bool, defer: bool) -> Result<Duration> {
        let (from, job) = (self.parallel_from(), self.job);
        let Some(block) = self.block.as_mut() else { return Ok(Duration::ZERO) };
        let due = block.due(self.trainer.step, from);
        if !due && !block.pending() {
            return Ok(Duration::ZERO);
        }
        let t0 = Instant::now();
        let t = &mut self.trainer;
        t.finish_pending();
        let mut sent = block.finish_sync(job, &t.be, [&mut t.model.g.store, &mut t.model.d.store])?;
        if due && defer {
            self.progress.block_sync_due = true;
        } else if due && overlap {
            block.start_sync(job, &t.be, [&t.model.g.store, &t.model.d.store], true);
        } else if due {
            sent += block.sync(job, &t.be, [&mut t.model.g.store, &mut t.model.d.store])?;
        }
        self.facts.block_sent += sent;
        let t1 = Instant::now();
        t.timeline.span(Track::Compute, "block-sync", "models", t0, t1);
        Ok(t1 - t0)
    }

    /// Start the overlapped sync of the block whose end a checkpoint came before (see `step`;
    /// on a resume from such a checkpoint, before its first step), for the next step to land.
    /// Only an overlapping run defers a sync, and a resume cannot change `--no-overlap`.
    /// Collective.
    pub(super) fn start_deferred_sync(&mut self) {
        let (job, t) = (self.job, &mut self.trainer);
        let Some(block) = self.block.as_mut().filter(|_| self.progress.block_sync_due) else { return };
        let t0 = Instant::now();
        block.start_sync(job, &t.be, [&t.model.g.store, &t.model.d.store], true);
        self.progress.block_sync_due = false;
        t.timeline.span(Track::Compute, "block-sync", "models", t0, Instant::now());
    }

    /// The steps of `epoch` from its step `first` (0-based) to its end, a stop or the run's
    /// last step.
    pub(super) fn run_epoch(&mut self, epoch: u64, first: usize, epochs_reached: u64) -> Result<EpochDone> {
        let order = self.shard.epoch(epoch);
        let solo_order = self.solo_order(epoch);
        let steps_per_epoch = self.shard.batches_per_epoch();
        let max_steps = self.args.max_steps.unwrap_or(u64::MAX);
        let span = EpochSpan::of(first, steps_per_epoch, self.trainer.step, max_steps);
        let mode = if self.job.is_root() { display_for(self.args.progress_choice()) } else { ProgressMode::Off };
        let mut done = EpochDone {
            complete: false,
            steps: 0,
            steps_before: first as u64,
            started: Instant::now(),
            bar: ProgressBar::new(mode, epoch, epochs_reached, span),
            shown: self.last.losses,
        };
        for i in span.first..span.end {
            self.go_parallel_if_due(true)?;
            let order = match (&solo_order, self.trainer.solo) {
                (Some(solo), true) => solo,
                _ => &order,
            };
            self.step(epoch, i, order, &mut done)?;
            // Inside a block of --sync-every the ranks' models differ by design.
            let between_blocks = self.block.as_ref().is_none_or(|b| b.due(self.trainer.step, self.parallel_from()));
            if self.consistency_due(self.trainer.step) && between_blocks {
                self.trainer.finish_pending();
                let (t, p) = (&self.trainer, &self.args.parallel);
                sync::check_consistency(self.job, &t.be, [&t.model.g, &t.model.d], t.step, !p.no_exchange)?;
            }
            if self.last.stop {
                // Out of the epoch, but through its end's bookkeeping should this step have
                // been its last (the run may be complete: see `finish`).
                self.stopped = true;
                break;
            }
            if self.checkpoint_due(self.trainer.step) {
                self.save_checkpoint();
            }
            self.start_deferred_sync();
        }
        done.complete = self.progress.batch_in_epoch as usize == steps_per_epoch && self.progress.epoch == epoch;
        Ok(done)
    }

    /// Step `i` of `epoch`: its batch, the GAN step, and what it measured.
    fn step(&mut self, epoch: u64, i: usize, order: &EpochOrder, done: &mut EpochDone) -> Result<()> {
        let (t0, waited_before) = (Instant::now(), self.trainer.waited());
        let (cpu0, delay0) = (thread_cpu_time(), self.run_delay.as_ref().and_then(RunDelayClock::read));
        if let Some(nap) = self.faults.slow_rank {
            std::thread::sleep(nap);
        }
        let side = self.args.model.image_size;
        self.data.fill_batch(order.batch(i), side, &mut self.images);
        let lr = self.settings.lr_at(self.trainer.step);
        let stop = self.stop.requested() || self.faults.stop_at_step == Some(self.trainer.step + 1);
        if self.faults.signal_in_step == Some(self.trainer.step + 1) {
            signal_hook::low_level::raise(signal_hook::consts::SIGTERM)?;
        }
        // A diverging loss is the same on every rank (the metrics are averaged): rank 0 says so.
        self.last = match self.trainer.step(&self.images, lr, lr, stop) {
            Ok(m) => m,
            Err(e) if e.is::<StepInterrupted>() => return Err(self.dropped_step(self.trainer.step + 1)),
            Err(e) if self.job.is_root() => return Err(e),
            Err(_) => return Err(PeerFailed.into()),
        };
        // A block's sync overlaps the next step, unless what follows this step (the
        // consistency check, the epoch's end, the run's) needs the models synced now. A
        // checkpoint or a stop is saved before the sync instead, which starts after it (or, on
        // the resume, before its first step): the run goes on as it would have without them.
        let n = self.trainer.step;
        let settled_now = i + 1 == self.shard.batches_per_epoch()
            || n >= self.args.max_steps.unwrap_or(u64::MAX)
            || self.consistency_due(n);
        let overlap = !self.args.parallel.no_overlap && !settled_now;
        let defer = overlap && (self.checkpoint_due(n) || self.last.stop);
        let synced = self.end_block_if_due(overlap, defer)?;
        let ms = t0.elapsed().as_secs_f64() * 1e3;
        let wait_ms = (self.trainer.waited() - waited_before + synced).as_secs_f64() * 1e3;
        let cpu_ms = (thread_cpu_time() - cpu0).as_secs_f64() * 1e3;
        let delay1 = self.run_delay.as_ref().and_then(RunDelayClock::read);
        let descheduled_ms = delay0.zip(delay1).map(|(a, b)| (b - a).as_secs_f64() * 1e3);
        let f = &mut self.facts;
        f.step_ms.push(ms);
        f.compute_ms.push(ms - wait_ms);
        f.cpu_ms.push(cpu_ms);
        f.descheduled_ms.extend(descheduled_ms);
        done.steps += 1;
        (self.progress.epoch, self.progress.batch_in_epoch, self.progress.step) =
            (epoch, i as u64 + 1, self.trainer.step);
        let Some(out) = self.outputs.as_mut() else { return Ok(()) };
        let (step, m) = (self.trainer.step, self.last);
        let rec = StepRecord { kind: LineType::Step, step, epoch, metrics: m, lr, ms, wait_ms, cpu_ms, descheduled_ms };
        self.job.or_fail(out.step(&rec));
        let ips = (done.steps as usize * self.settings.global_batch) as f64 / done.started.elapsed().as_secs_f64();
        done.shown = m.losses.with_loss_g_of(&done.shown);
        done.bar.update(i, &done.shown.short_text(), ips);
        Ok(())
    }

    /// Collective: the sample quality after epoch `epoch` where it is due (rank 0 gets the
    /// figures, and the line that tells them): G's, and with `--g-ema` the averaged
    /// generator's.
    fn measure_quality(&mut self, epoch: u64) -> Result<Option<(EpochQuality, String)>> {
        let (job, t) = (self.job, &mut self.trainer);
        let Some(q) = self.quality.as_mut().filter(|q| q.due(epoch)) else { return Ok(None) };
        let trained = q.evaluate(job, t, false)?;
        let averaged = if t.g_ema.is_some() { q.evaluate(job, t, true)? } else { None };
        let Some((s, secs)) = trained else { return Ok(None) };
        let seconds = secs + averaged.as_ref().map_or(0.0, |(_, a)| *a);
        let line = |s: &Score| {
            let m = &s.manifold;
            format!("FID {:.3}, KID {:.5}, precision {:.3}, recall {:.3}", s.fid, s.kid.mean, m.precision, m.recall)
        };
        let ema = averaged.as_ref().map_or(String::new(), |(a, _)| format!("; averaged G (--g-ema): {}", line(a)));
        let told = format!("epoch {}: {}{ema} ({} images, {seconds:.1} s)", epoch + 1, line(&s), s.n);
        let (m, a) = (&s.manifold, averaged.as_ref().map(|(a, _)| &a.manifold));
        let more = MoreQuality {
            fid_ema: averaged.as_ref().map(|(a, _)| a.fid),
            kid_ema: averaged.as_ref().map(|(a, _)| a.kid.mean),
            precision: Some(m.precision),
            recall: Some(m.recall),
            density: Some(m.density),
            coverage: Some(m.coverage),
            precision_ema: a.map(|a| a.precision),
            recall_ema: a.map(|a| a.recall),
            density_ema: a.map(|a| a.density),
            coverage_ema: a.map(|a| a.coverage),
        };
        Ok(Some((EpochQuality { epoch, fid: s.fid, kid: s.kid.mean, kid_std: s.kid.std, n: s.n, seconds, more }, told)))
    }

    /// The end of a complete epoch: running statistics averaged (unless --sync-bn kept them
    /// equal), the sample quality when it is due, its sample grid and line, and its checkpoint.
    pub(super) fn end_epoch(&mut self, epoch: u64, mut done: EpochDone) -> Result<()> {
        let (job, t) = (self.job, &mut self.trainer);
        t.finish_pending();
        t.share_pipeline_models()?;
        if !self.args.parallel.sync_bn {
            sync::average_running_stats(job, &t.be, &mut t.model.g.store)?;
            sync::average_running_stats(job, &t.be, &mut t.model.d.store)?;
        }
        t.share_average_statistics(job)?;
        // The whole epoch's, where a resume entered it part-way: its earlier steps from their
        // lines (rank 0's, which writes the epoch's line and summary.json).
        let before = self.outputs.as_mut().map_or(0.0, |o| o.earlier_part_of(epoch)) / 1e3;
        let (seconds, steps) = (done.started.elapsed().as_secs_f64() + before, done.steps_before + done.steps);
        let images_per_s = (steps as usize * self.settings.global_batch) as f64 / seconds.max(1e-9);
        self.facts.epoch_seconds.push(seconds);
        (self.progress.epoch, self.progress.batch_in_epoch) = (epoch + 1, 0);
        let (quality, told) = self.measure_quality(epoch)?.unzip();
        let beaten = self.judge_epoch(epoch, quality.as_ref())?;
        if let Some(told) = told {
            let best = if beaten.is_some() { "; the best so far, kept as checkpoints/best" } else { "" };
            eprintln!("{told}{best}");
        }
        self.facts.quality.extend(quality.clone());
        if let Some(out) = self.outputs.as_mut() {
            done.bar.finish_epoch(seconds, images_per_s);
            let images = self.trainer.sample(&self.grid_noise);
            let name = format!("epoch-{:03}", epoch + 1);
            let (path, grid) = job.or_fail(out.grid(&name, &images, self.args.model.image_size));
            let sample = path.display().to_string();
            let q = quality.as_ref();
            let rec = EpochRecord {
                kind: LineType::Epoch,
                epoch,
                steps,
                seconds,
                images_per_s,
                sample,
                fid: q.map(|q| q.fid),
                kid: q.map(|q| q.kid),
                eval_seconds: q.map(|q| q.seconds),
                kid_std: q.map(|q| q.kid_std),
                eval_n: q.map(|q| q.n),
                feature_net: q.and(self.quality.as_ref()).map(|f| f.digest.clone()),
                more: q.map(|q| q.more).unwrap_or_default(),
            };
            job.or_fail(out.epoch(&rec, self.trainer.step, grid));
        }
        // An epoch's end is checkpointed unless --checkpoint-every places the checkpoints, and
        // a best epoch's always; on one rank a periodic save on this very step already holds
        // its state (every rank records its saves' progress alike), while on several that
        // save came before the running statistics the figure was measured with were averaged.
        let (step, one_rank) = (self.progress.step, self.job.world.size == 1);
        let periodic = self.last_checkpoint.0.as_ref().filter(|(saved, _)| one_rank && saved.step == step);
        let dir = match (self.args.checkpoints.checkpoint_every, beaten, periodic) {
            (None, _, _) | (Some(_), Some(_), None) => self.save_checkpoint(),
            (Some(_), _, periodic) => periodic.and_then(|(_, dir)| dir.clone()),
        };
        if let Some(fid) = beaten {
            self.mark_best(epoch, fid, dir.as_deref());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_choices_give_their_displays() {
        // `bar` is a bar wherever stderr goes (under mpiexec it is a pipe), `lines` lines.
        assert_eq!(display_for(ProgressChoice::Bar), ProgressMode::Bar);
        assert_eq!(display_for(ProgressChoice::Lines), ProgressMode::Plain);
        assert_eq!(display_for(ProgressChoice::None), ProgressMode::Off);
        assert_eq!(display_for(ProgressChoice::Auto), ProgressMode::detect());
    }
}
