//! One WGAN-GP step (Gulrajani et al. 2017, Algorithm 1) per batch of real images: a critic
//! step, and after every n_critic-th a generator step. Each rank scores its share of the
//! batch and its gradients are averaged with the others', which is the global-batch mean: the
//! penalty is a mean over samples, and each rank draws its own samples' z and e from the
//! counter-based streams, so N ranks with B/N draw what one rank with B draws.
//!
//! The critic step, ordered so that communication hides as in the DCGAN step:
//!
//! 1. The critic on the real images: -mean D(x), its weight gradient written. It needs
//!    nothing from G, so it runs while G's buckets of the last generator step travel.
//! 2. G forward on fresh noise, landing G's update stage by stage.
//! 3. The gradient penalty at x^ = e x + (1 - e) G(z) (model/penalty.rs), its weight gradient
//!    added.
//! 4. The critic on the fakes: +mean D(G(z)), added; D's buckets leave as backward completes
//!    them. Then D's update.
//! 5. Every n_critic-th step, the generator step: -mean D(G(z')) on new noise, backward
//!    through the critic to the images, then G backward; G's buckets leave as they complete
//!    and land during the next step's G forward.

use super::ddp::exchange::{NetId, Update};
use super::step::{GanTrainer, Score};
use super::timeline::Track;
use crate::backend::{Backend, View, ViewMut};
use crate::model::dcgan::{Dcgan, seed_for};
use crate::model::net::Observer;
use crate::model::noise::step_uniform;
use crate::model::penalty::GradientPenalty;
use crate::record::{Losses, StepMetrics};
use anyhow::Result;
use std::time::Instant;

/// `seed_for` purposes of the generator step's noise and of the interpolation weights, apart
/// from the critic step's noise (keyed by the run's seed itself).
const GENERATOR_NOISE: u64 = 0x67656e;
const INTERPOLATION: u64 = 0x696e74;

/// The buffers and settings of the WGAN-GP step.
pub struct WganParts<B: Backend> {
    pub n_critic: u64,
    penalty: GradientPenalty<B>,
    /// [1, B, H, W]: this step's real images, kept for the interpolates.
    real: B::Buf,
    /// `[B]`: each sample's interpolation weight e, on the backend and on the host.
    eps: B::Buf,
    eps_host: Vec<f32>,
}

impl<B: Backend> WganParts<B> {
    /// Whether the step computes the gradient penalty (not at `--gp-lambda 0`).
    pub fn has_penalty(&self) -> bool {
        self.penalty.lambda > 0.0
    }

    /// The step's buffers for `model`, whose D must be a critic (no batch norm).
    pub fn new(be: &B, model: &Dcgan<B>, n_critic: u64, lambda: f32) -> Result<Self> {
        let batch = model.d.batch;
        let side = model.image_size;
        Ok(WganParts {
            n_critic: n_critic.max(1),
            penalty: GradientPenalty::new(be, &model.d, lambda)?,
            real: be.alloc(batch * side * side)?,
            eps: be.alloc(batch)?,
            eps_host: vec![0.0; batch],
        })
    }
}

/// Records the penalty's passes on the timeline as its own spans.
struct PenaltyObserver<'a> {
    timeline: &'a mut super::timeline::Timeline,
    interrupt: Option<&'a mut super::interrupt::Interrupt>,
}

impl<B: Backend> Observer<B> for PenaltyObserver<'_> {
    fn span(
        &mut self,
        _net: &'static str,
        stage: &crate::nn::stage::Stage<B>,
        phase: crate::model::net::Phase,
        start: Instant,
        end: Instant,
    ) {
        use crate::model::net::Phase;
        let cat = match phase {
            Phase::Forward => "penalty-critic-forward",
            Phase::BackwardBn | Phase::BackwardData => "penalty-input-gradient",
            Phase::BackwardWeight | Phase::PenaltyWeight => "penalty-weight",
            Phase::PenaltyForward => "penalty-forward",
            Phase::PenaltyAdjoint => "penalty-adjoint",
        };
        self.timeline.span(Track::Compute, cat, stage.label, start, end);
    }
    fn interrupted(&mut self) -> bool {
        self.interrupt.as_mut().is_some_and(|i| i.due())
    }
}

impl<B: Backend> GanTrainer<B> {
    /// Makes every step WGAN-GP's: n_critic critic steps per generator step, the penalty
    /// weighted by `lambda`. The model's D must be a critic (no batch norm).
    pub fn use_wgan_gp(&mut self, n_critic: u64, lambda: f32) -> Result<()> {
        self.wgan = Some(WganParts::new(&self.be, &self.model, n_critic, lambda)?);
        Ok(())
    }

    /// The penalty's weight from the next step on (0 skips the penalty).
    pub fn set_gp_lambda(&mut self, lambda: f32) {
        if let Some(w) = self.wgan.as_mut() {
            w.penalty.lambda = lambda;
        }
    }

    /// One critic step on this rank's `images` [B, H, W] (in [-1, 1]), and the generator step
    /// when it is due (the module doc).
    pub(super) fn wgan_step(&mut self, images: &[f32], lr_d: f32, lr_g: f32, stop: bool) -> Result<StepMetrics> {
        self.timeline.step = self.step;
        let (seed, (rank, world)) = (self.cfg.seed, self.noise_place());
        let w = self.wgan.as_mut().expect("the WGAN-GP step has its buffers");

        // 1. The real images: -mean D(x), D's gradient written (the others add to it).
        let t0 = Instant::now();
        self.be.upload(images, ViewMut::whole(&mut w.real));
        self.be.copy(View::whole(&w.real), ViewMut::whole(self.model.d.input_mut()));
        step_uniform(seed_for(seed, INTERPOLATION), self.step, rank, world, &mut w.eps_host);
        self.be.upload(&w.eps_host, ViewMut::whole(&mut w.eps));
        self.timeline.span(Track::Compute, "upload", "real images", t0, Instant::now());
        self.d_pass_scored(Score::Mean(-1.0), Some(false), false, 0);
        self.check_interrupt()?;

        // 2. The fakes.
        self.g_forward(seed);
        self.check_interrupt()?;

        // 3. The penalty at the interpolates (none at lambda 0).
        let w = self.wgan.as_mut().expect("the WGAN-GP step has its buffers");
        let Dcgan { g, d, .. } = &mut self.model;
        if w.penalty.lambda > 0.0 {
            let t0 = Instant::now();
            let (real, fake, eps) = (View::whole(&w.real), View::whole(g.output()), View::whole(&w.eps));
            self.be.interpolate(real, fake, 1, eps, ViewMut::whole(d.input_mut()));
            self.timeline.span(Track::Compute, "penalty-interpolate", "x^", t0, Instant::now());
            let mut obs = PenaltyObserver { timeline: &mut self.timeline, interrupt: self.interrupt.as_mut() };
            w.penalty.run(&self.be, d, true, &mut obs);
            self.check_interrupt()?;
        }

        // 4. The fakes: +mean D(G(z)); then D's update.
        let Dcgan { g, d, .. } = &mut self.model;
        self.be.copy(View::whole(g.output()), ViewMut::whole(d.input_mut()));
        self.d_pass_scored(Score::Mean(1.0), Some(true), true, 1);
        self.check_interrupt()?;
        self.exchange.flush(&self.be, NetId::D, &self.model.d.store, &mut self.timeline);
        let store = &mut self.model.d.store;
        let u = Update::next(store, lr_d);
        self.exchange.finish(&self.be, NetId::D, store, u, &mut self.timeline);

        // 5. The generator step, every n_critic-th.
        let n_critic = self.wgan.as_ref().map_or(1, |w| w.n_critic);
        if (self.step + 1).is_multiple_of(n_critic) {
            self.g_forward(seed_for(seed, GENERATOR_NOISE));
            self.check_interrupt()?;
            let Dcgan { g, d, .. } = &mut self.model;
            self.be.copy(View::whole(g.output()), ViewMut::whole(d.input_mut()));
            self.d_pass_scored(Score::Mean(-1.0), None, false, 2);
            self.check_interrupt()?;
            let mut raw = self.wgan_raw(Some(-self.read_first(2)), stop);
            self.exchange.start_metrics(&raw);
            let Dcgan { g, d, .. } = &mut self.model;
            self.be.copy(View::whole(d.d_input()), ViewMut::whole(g.d_output_mut()));
            self.g_backward(lr_g)?;
            return self.end_step(&mut raw, wgan_losses(Some(0.0)));
        }
        let mut raw = self.wgan_raw(None, stop);
        self.exchange.start_metrics(&raw);
        self.end_step(&mut raw, wgan_losses(None))
    }

    /// `out[0]` of output buffer `which` (0: real, 1: fake, 2: G's pass).
    fn read_first(&self, which: usize) -> f32 {
        let buf = match which {
            0 => &self.out_real,
            1 => &self.out_fake,
            _ => &self.out_g,
        };
        let mut v = [0.0f32; 2];
        self.be.download(View::whole(buf), &mut v);
        v[0]
    }

    /// This rank's [loss_c, loss_g (0 without a generator step), wasserstein, gp, grad_norm,
    /// stop].
    fn wgan_raw(&self, loss_g: Option<f32>, stop: bool) -> [f32; 6] {
        let w = self.wgan.as_ref().expect("the WGAN-GP step has its buffers");
        let (real, fake) = (self.read_first(0), self.read_first(1));
        let mut gp = [0.0f32; 2];
        self.be.download(View::whole(&w.penalty.out), &mut gp);
        [fake - real + gp[0], loss_g.unwrap_or(0.0), real - fake, gp[0], gp[1], self.stop_metric(stop)]
    }
}

/// The kind of losses the WGAN-GP step reports, with G's loss where `loss_g` is Some.
fn wgan_losses(loss_g: Option<f32>) -> Losses {
    Losses::WganGp { loss_c: 0.0, loss_g, wasserstein: 0.0, gp: 0.0, grad_norm: 0.0 }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::cpu::{Cpu, allocated};
    use crate::model::dcgan::{Discriminator, Widths, architecture};
    use crate::model::penalty::plan_floats;

    #[test]
    fn the_memory_plan_counts_what_the_step_allocates() {
        for (side, batch, layer_norm) in [(28, 3, false), (28, 3, true), (64, 2, true)] {
            let kind = Discriminator::Critic { layer_norm };
            let model = Dcgan::new(&Cpu, side, Widths::DCGAN, batch, 1, kind).unwrap();
            let before = allocated::floats();
            let parts = WganParts::new(&Cpu, &model, 5, 10.0).unwrap();
            let built = allocated::floats() - before;
            let (_, d) = architecture(side, Widths::DCGAN, kind).unwrap();
            // train/memory_plan.rs: the penalty's floats, the real images and the weights e.
            let planned = plan_floats(&d, batch, (1, side, side)).unwrap() + batch * side * side + batch;
            assert_eq!(built, planned, "{side}x{side}, layer norm {layer_norm}");
            drop(parts);
        }
        let (side, batch) = (28, 3);
        // A discriminator with batch norm is refused.
        let dcgan = Dcgan::new(&Cpu, side, Widths::DCGAN, batch, 1, Discriminator::Dcgan).unwrap();
        assert!(WganParts::new(&Cpu, &dcgan, 5, 10.0).is_err());
    }
}
