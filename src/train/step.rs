//! One GAN step, the PyTorch DCGAN example's, ordered so that communication hides:
//!
//! 1. D forward + backward on real images (label 1). It needs nothing from G, so it runs
//!    while G's buckets from the previous step are still being averaged.
//! 2. G forward on fresh noise, finishing G's previous update stage by stage: each stage
//!    waits only for its own bucket (and runs its Adam) right before it runs, so G.1's forward
//!    hides the tail of G's later buckets (the MPI paper's "overtaking").
//! 3. D forward + backward on the fakes (label 0), accumulating D's gradients; each D bucket
//!    leaves as soon as backward completes it.
//! 4. D's update, bucket by bucket as each arrives.
//! 5. D forward on the same fakes with the updated D (label 1), backward to the images only
//!    (D's weight gradients are not computed), then G backward; G's buckets leave as they
//!    complete and are waited for in step 2 of the next step (or at once with
//!    `overlap_steps = false`).

use super::ddp::exchange::{Exchange, NetId, Update};
use super::interrupt::{Interrupt, StepInterrupted};
use super::signals::StopFlag;
use super::timeline::{Timeline, Track};
use crate::backend::{Backend, View, ViewMut};
use crate::model::dcgan::Dcgan;
use crate::model::net::{Net, Observer, Phase};
use crate::model::noise::step_noise;
use crate::nn::BnSync;
use crate::nn::params::ParamStore;
use crate::nn::stage::Stage;
use crate::record::{Losses, StepMetrics};
use anyhow::{Result, bail};
use std::time::{Duration, Instant};

/// How a pass scores D's outputs.
#[derive(Clone, Copy, Debug)]
pub(super) enum Score {
    /// Binary cross-entropy against this label (out: loss, mean sigmoid).
    Bce(f32),
    /// The mean output, its gradient times this sign (WGAN-GP's critic; out: the mean).
    Mean(f32),
}

pub struct StepConfig {
    pub seed: u64,
    pub rank: usize,
    pub world: usize,
    /// Leave G's buckets in flight into the next step (see the module doc).
    pub overlap_steps: bool,
}

pub struct GanTrainer<B: Backend> {
    pub be: B,
    pub model: Dcgan<B>,
    pub exchange: Box<dyn Exchange<B>>,
    /// `--distributed-after`: still training as one worker would (noise keyed as rank 0 of
    /// one).
    pub solo: bool,
    pub timeline: Timeline,
    pub cfg: StepConfig,
    /// Steps completed (the next step's index).
    pub step: u64,
    /// `[B]`: d loss / d logits.
    pub(super) dlogits: B::Buf,
    /// `[2]` each: (mean loss, mean sigmoid) of the real pass, the fake pass and the G pass.
    pub(super) out_real: B::Buf,
    pub(super) out_fake: B::Buf,
    pub(super) out_g: B::Buf,
    /// [nz, B] host noise, reused every step.
    pub(super) noise: Vec<f32>,
    /// G's learning rate for the update still in flight, if any.
    pub(super) g_pending: Option<f32>,
    /// `--sync-bn`: batch-norm statistics over all ranks.
    pub bn_sync: Option<Box<dyn BnSync<B>>>,
    /// Time blocked at the end of each step for the metrics averaged over ranks: the other
    /// ranks finishing their step (the gradient waits are in the exchange's stats).
    pub metrics_wait: Duration,
    /// Drops a long step between layers when a stop cannot wait for its end.
    pub interrupt: Option<Interrupt>,
    /// SIGINT and SIGTERM, read again when the step's metrics leave: a signal during the step
    /// then stops the run after this step rather than after the next.
    pub stop_flag: Option<StopFlag>,
    /// `--loss wgan-gp`: the critic's buffers (None: the DCGAN step).
    pub wgan: Option<super::wgan_step::WganParts<B>>,
    /// `--micro-batches M` with M > 1, or a pipeline's (None: the batch in one pass).
    pub micro: Option<super::micro_step::MicroBatches<B>>,
    /// `--pipeline`: this rank's stage (None: the whole step here).
    pub pipeline: Option<super::pipeline::PipelineStage>,
    /// `--g-ema`: the average of G's weights, folded in as each of G's updates lands.
    pub g_ema: Option<super::ema::GeneratorAverage<B>>,
}

/// The optional sync as the networks take it (a coercion site for the trait object's lifetime).
fn sync_of<B: Backend>(s: &mut Option<Box<dyn BnSync<B>>>) -> Option<&mut dyn BnSync<B>> {
    match s {
        Some(b) => Some(b.as_mut()),
        None => None,
    }
}

/// Routes a network's events to the timeline and, when `submit`, its groups to the exchange.
struct StepObserver<'a, B: Backend> {
    exchange: &'a mut dyn Exchange<B>,
    timeline: &'a mut Timeline,
    net: NetId,
    submit: bool,
    /// This network's update still in flight, which its forward lands stage by stage.
    pending: Option<Update>,
    interrupt: Option<&'a mut Interrupt>,
}

impl<B: Backend> Observer<B> for StepObserver<'_, B> {
    fn span(&mut self, _net: &'static str, stage: &Stage<B>, phase: Phase, start: Instant, end: Instant) {
        let cat = match phase {
            Phase::Forward => "forward",
            Phase::BackwardBn => "backward-bn",
            Phase::BackwardData => "backward-data",
            Phase::BackwardWeight => "backward-weight",
            Phase::PenaltyForward => "penalty-forward",
            Phase::PenaltyWeight => "penalty-weight",
            Phase::PenaltyAdjoint => "penalty-adjoint",
        };
        self.timeline.span(Track::Compute, cat, stage.label, start, end);
    }
    fn group_ready(&mut self, be: &B, store: &ParamStore<B>, stage: usize) {
        if self.submit {
            self.exchange.group_ready(be, self.net, store, stage, self.timeline);
        }
    }
    fn before_forward(&mut self, be: &B, store: &mut ParamStore<B>, stage: usize) {
        if let Some(u) = self.pending {
            self.exchange.finish_stage(be, self.net, store, stage, u, self.timeline);
        }
    }
    fn interrupted(&mut self) -> bool {
        self.interrupt.as_mut().is_some_and(|i| i.due())
    }
}

impl<B: Backend> GanTrainer<B> {
    /// (rank, ranks) the step's random streams are keyed by: one worker's while `solo`; with
    /// M micro-batches, micro-batch i of rank r is rank r M + i of M times as many.
    pub(super) fn noise_place(&self) -> (usize, usize) {
        let (rank, world) = if self.solo { (0, 1) } else { (self.cfg.rank, self.cfg.world) };
        match &self.micro {
            Some(mb) => (rank * mb.count + mb.at, world * mb.count),
            None => (rank, world),
        }
    }

    pub fn new(
        be: B,
        model: Dcgan<B>,
        exchange: Box<dyn Exchange<B>>,
        cfg: StepConfig,
        timeline: Timeline,
    ) -> Result<Self> {
        let batch = model.d.batch;
        Ok(GanTrainer {
            dlogits: be.alloc(batch)?,
            out_real: be.alloc(2)?,
            out_fake: be.alloc(2)?,
            out_g: be.alloc(2)?,
            noise: vec![0.0; model.nz * batch],
            be,
            model,
            exchange,
            solo: false,
            timeline,
            cfg,
            step: 0,
            g_pending: None,
            bn_sync: None,
            metrics_wait: Duration::ZERO,
            interrupt: None,
            stop_flag: None,
            wgan: None,
            micro: None,
            pipeline: None,
            g_ema: None,
        })
    }

    pub fn exchange_stats(&self) -> super::ddp::exchange::ExchangeStats {
        self.exchange.stats()
    }

    /// Time blocked on other ranks so far: waiting for gradient buckets, for the metrics and
    /// for the other stage of a pipeline.
    /// A step's wall time less what it adds here is the time the step computed.
    pub fn waited(&self) -> Duration {
        self.exchange.exposed() + self.metrics_wait + self.pipeline.as_ref().map_or(Duration::ZERO, |p| p.idle)
    }

    /// Wait for the device (timing).
    pub fn sync_device(&self) {
        self.be.synchronize();
    }

    pub fn peak_device_bytes(&self) -> Option<usize> {
        self.be.peak_bytes()
    }

    pub fn be_describe(&self) -> String {
        self.be.describe()
    }

    /// Images per step on this rank (every micro-batch's).
    pub fn batch(&self) -> usize {
        self.model.d.batch * self.micro.as_ref().map_or(1, |m| m.count)
    }

    /// D forward + backward against a constant label, through `out` (loss, mean prob).
    /// `weights`: Some(accumulate) for D's gradients, None for the input gradient only.
    fn d_pass(&mut self, target: f32, weights: Option<bool>, submit: bool, which: usize) {
        self.d_pass_scored(Score::Bce(target), weights, submit, which);
    }

    /// D forward, its output scored by `score` into output buffer `which` (0: real, 1: fake,
    /// 2: G's pass), and backward: `weights` Some(accumulate) for D's gradients, None for the
    /// input gradient only; `submit` sends D's groups to the exchange as they complete.
    pub(super) fn d_pass_scored(&mut self, score: Score, weights: Option<bool>, submit: bool, which: usize) {
        self.d_forward_scored(score, which);
        if self.micro.is_some() {
            self.add_micro_pass(which);
        } else {
            let d = &mut self.model.d;
            self.be.copy(View::whole(&self.dlogits), ViewMut::whole(d.d_output_mut()));
        }
        let mut obs = StepObserver {
            exchange: &mut *self.exchange,
            timeline: &mut self.timeline,
            net: NetId::D,
            submit,
            pending: None,
            interrupt: self.interrupt.as_mut(),
        };
        self.model.d.backward(&self.be, weights, weights.is_none(), sync_of(&mut self.bn_sync), &mut obs);
    }

    /// D forward, its output scored by `score` into `dlogits` and output buffer `which` (with
    /// micro-batches, into the micro-batch's own).
    fn d_forward_scored(&mut self, score: Score, which: usize) {
        // `--deferred-bn` keeps each kind of pass's statistics apart.
        self.model.d.set_bn_slot(which);
        let be = &self.be;
        let d: &mut Net<B> = &mut self.model.d;
        let mut obs = StepObserver {
            exchange: &mut *self.exchange,
            timeline: &mut self.timeline,
            net: NetId::D,
            submit: false,
            pending: None,
            interrupt: self.interrupt.as_mut(),
        };
        d.forward(be, true, sync_of(&mut self.bn_sync), &mut obs);
        // With micro-batches a pass's outputs are one part of the step's (`add_micro_pass`).
        let out = match (&mut self.micro, which) {
            (Some(mb), _) => &mut mb.out_one,
            (None, 0) => &mut self.out_real,
            (None, 1) => &mut self.out_fake,
            (None, _) => &mut self.out_g,
        };
        let t0 = Instant::now();
        let (logits, dlogits) = (View::whole(d.output()), ViewMut::whole(&mut self.dlogits));
        let name = match score {
            Score::Bce(target) => {
                be.bce_with_logits(logits, target, dlogits, ViewMut::whole(out));
                "bce"
            }
            Score::Mean(sign) => {
                be.critic_mean(logits, sign, dlogits, ViewMut::whole(out));
                "critic mean"
            }
        };
        obs.timeline.span(Track::Compute, "loss", name, t0, Instant::now());
    }

    /// The step dropped (`StepInterrupted`) once its interrupt has tripped.
    pub(super) fn check_interrupt(&self) -> Result<()> {
        match &self.interrupt {
            Some(i) if i.tripped() => Err(StepInterrupted { step: self.step + 1 }.into()),
            _ => Ok(()),
        }
    }

    /// Complete G's update left in flight by the previous step.
    pub fn finish_pending(&mut self) {
        if let Some(lr) = self.g_pending.take() {
            let store = &mut self.model.g.store;
            let u = Update::next(store, lr);
            self.exchange.finish(&self.be, NetId::G, store, u, &mut self.timeline);
            self.g_update_landed();
        }
    }

    /// G forward in training mode on this step's noise (keyed by `noise_seed`), landing G's
    /// update left in flight stage by stage, each just before the stage runs.
    pub(super) fn g_forward(&mut self, noise_seed: u64) {
        let (rank, world) = self.noise_place();
        let pending = self.g_pending.take().map(|lr| Update::next(&mut self.model.g.store, lr));
        let t0 = Instant::now();
        step_noise(noise_seed, self.step, rank, world, self.model.nz, &mut self.noise);
        self.be.upload(&self.noise, ViewMut::whole(self.model.g.input_mut()));
        self.timeline.span(Track::Compute, "upload", "noise", t0, Instant::now());
        {
            let mut obs = StepObserver {
                exchange: &mut *self.exchange,
                timeline: &mut self.timeline,
                net: NetId::G,
                submit: false,
                pending,
                interrupt: self.interrupt.as_mut(),
            };
            self.model.g.forward(&self.be, true, sync_of(&mut self.bn_sync), &mut obs);
        }
        if let Some(u) = pending
            && !self.interrupt.as_ref().is_some_and(|i| i.tripped())
        {
            // Every stage has landed its bucket; this closes the update.
            self.exchange.finish(&self.be, NetId::G, &mut self.model.g.store, u, &mut self.timeline);
            self.g_update_landed();
        }
    }

    /// G backward from the gradient in its output's gradient, its buckets leaving as they
    /// complete; the update is left in flight for the next G forward (or landed now without
    /// overlap).
    pub(super) fn g_backward(&mut self, lr_g: f32) -> Result<()> {
        self.g_backward_pass(false, true);
        self.check_interrupt()?;
        self.close_g_step(lr_g);
        Ok(())
    }

    /// G backward from its output's gradient: its weight gradients added to the store's when
    /// `accumulate`, its groups sent to the exchange as they complete when `submit`.
    pub(super) fn g_backward_pass(&mut self, accumulate: bool, submit: bool) {
        let mut obs = StepObserver {
            exchange: &mut *self.exchange,
            timeline: &mut self.timeline,
            net: NetId::G,
            submit,
            pending: None,
            interrupt: self.interrupt.as_mut(),
        };
        self.model.g.backward(&self.be, Some(accumulate), false, sync_of(&mut self.bn_sync), &mut obs);
    }

    /// G's gradients are all sent: its update left in flight for the next G forward (or
    /// landed now without overlap).
    pub(super) fn close_g_step(&mut self, lr_g: f32) {
        self.exchange.flush(&self.be, NetId::G, &self.model.g.store, &mut self.timeline);
        self.g_pending = Some(lr_g);
        if !self.cfg.overlap_steps {
            self.finish_pending();
        }
    }

    /// The step's metrics, started with `exchange.start_metrics(raw)`, averaged over ranks
    /// and read as `like`'s kind of losses; a loss that is not finite ends the run. Counts
    /// the step.
    pub(super) fn end_step(&mut self, raw: &mut [f32; 6], like: Losses) -> Result<StepMetrics> {
        let t_wait = Instant::now();
        self.exchange.finish_metrics(raw);
        let t_done = Instant::now();
        self.metrics_wait += t_done - t_wait;
        if self.cfg.world > 1 {
            // One rank copies its own metrics: nothing to wait for, nothing to draw.
            self.timeline.span(Track::Compute, "wait", "metrics", t_wait, t_done);
        }
        let residuals = self.exchange.residual_norms(&self.be);
        let metrics = StepMetrics {
            losses: like.from_raw(&raw[..5]),
            stop: raw[5] > 0.0,
            residual_g: residuals[0],
            residual_d: residuals[1],
        };
        let (a, b) = metrics.losses.pair();
        if !(a.is_finite() && b.is_finite()) {
            // A critic whose gradient norm the penalty does not hold grows without bound.
            let fix = match metrics.losses {
                Losses::WganGp { .. } => "lower --lr, raise --gp-lambda, or check the data",
                Losses::Dcgan { .. } => "lower --lr or check the data",
            };
            bail!(
                "the loss became {} at step {} ({}): {fix}",
                if a.is_nan() || b.is_nan() { "NaN" } else { "infinite" },
                self.step + 1,
                metrics.losses.short_text()
            );
        }
        self.step += 1;
        Ok(metrics)
    }

    /// One step on this rank's `images` [B, H, W] (in [-1, 1]). `stop` asks every rank to
    /// stop after this step (the answer comes back in the metrics).
    pub fn step(&mut self, images: &[f32], lr_d: f32, lr_g: f32, stop: bool) -> Result<StepMetrics> {
        // Bracketed, so that `--cuda-graphs` can replay the step's kernels (backend/cuda/graph.rs);
        // an interrupted step ends the bracket too.
        self.be.begin_step(self.step_kind());
        if let Some(i) = self.interrupt.as_mut() {
            i.step_begins();
        }
        let metrics = if self.wgan.is_some() {
            self.wgan_step(images, lr_d, lr_g, stop)
        } else if self.pipeline.is_some() {
            self.pipeline_step(images, lr_d, lr_g, stop)
        } else if self.micro.is_some() {
            self.micro_step(images, lr_d, lr_g, stop)
        } else {
            self.dcgan_step(images, lr_d, lr_g, stop)
        };
        self.be.end_step();
        metrics
    }

    /// Which kernels the next step launches, as a number: steps of one kind launch the same
    /// ones in the same order. They differ in whether G's update is in flight (its forward
    /// lands it) and, with WGAN-GP, whether the step includes the generator's and the
    /// penalty (bench-step takes turns with and without it).
    fn step_kind(&self) -> u64 {
        let generator_step = self.wgan.as_ref().is_none_or(|w| (self.step + 1).is_multiple_of(w.n_critic));
        let penalty = self.wgan.as_ref().is_some_and(|w| w.has_penalty());
        u64::from(self.g_pending.is_some()) | u64::from(generator_step) << 1 | u64::from(penalty) << 2
    }

    /// The DCGAN example's step (the module doc).
    fn dcgan_step(&mut self, images: &[f32], lr_d: f32, lr_g: f32, stop: bool) -> Result<StepMetrics> {
        self.timeline.step = self.step;

        // 1. D on real images; its gradients wait for the fake pass to be added.
        let t0 = Instant::now();
        self.be.upload(images, ViewMut::whole(self.model.d.input_mut()));
        self.timeline.span(Track::Compute, "upload", "real images", t0, Instant::now());
        self.d_pass(1.0, Some(false), false, 0);
        self.check_interrupt()?;

        // 2. G forward, each stage's weights made current just before it runs.
        self.g_forward(self.cfg.seed);
        self.check_interrupt()?;
        // 3. D on the fakes (detached: G gets nothing from this pass).
        let Dcgan { g, d, .. } = &mut self.model;
        self.be.copy(View::whole(g.output()), ViewMut::whole(d.input_mut()));
        self.d_pass(0.0, Some(true), true, 1);
        self.check_interrupt()?;
        self.exchange.flush(&self.be, NetId::D, &self.model.d.store, &mut self.timeline);

        // 4. D's update. D's next forward starts at D.1, whose bucket leaves last, so D gains
        //    nothing from landing it stage by stage; D[1] travels alone so that what is
        //    left to wait for here is 4 KB, not all of D (see train/ddp/buckets.rs).
        let store = &mut self.model.d.store;
        let u = Update::next(store, lr_d);
        self.exchange.finish(&self.be, NetId::D, store, u, &mut self.timeline);

        // 5. G's loss through the updated D, and G's backward. The metrics leave first so that
        //    they do not wait behind G's buckets.
        self.d_pass(1.0, None, false, 2);
        self.check_interrupt()?;
        let mut raw = self.read_metrics(stop);
        self.exchange.start_metrics(&raw);
        let Dcgan { g, d, .. } = &mut self.model;
        self.be.copy(View::whole(d.d_input()), ViewMut::whole(g.d_output_mut()));
        self.g_backward(lr_g)?;
        let like = Losses::Dcgan { loss_d: 0.0, loss_g: 0.0, d_x: 0.0, d_g_z: 0.0, d_g_z2: 0.0 };
        self.end_step(&mut raw, like)
    }

    /// This rank's [loss_d, loss_g, d_x, d_g_z, d_g_z2, stop].
    pub(super) fn read_metrics(&self, stop: bool) -> [f32; 6] {
        let mut r = [0.0f32; 2];
        let mut f = [0.0f32; 2];
        let mut g = [0.0f32; 2];
        self.be.download(View::whole(&self.out_real), &mut r);
        self.be.download(View::whole(&self.out_fake), &mut f);
        self.be.download(View::whole(&self.out_g), &mut g);
        [r[0] + f[0], g[0], r[1], f[1], g[1], self.stop_metric(stop)]
    }

    /// The metrics' stop entry: 1 where the step was asked to stop at its start (`stop`) or a
    /// signal has come since.
    pub(super) fn stop_metric(&self, stop: bool) -> f32 {
        let signalled = self.stop_flag.as_ref().is_some_and(StopFlag::requested);
        if stop || signalled { 1.0 } else { 0.0 }
    }
}

#[cfg(test)]
#[path = "step_tests.rs"]
pub(crate) mod tests;
