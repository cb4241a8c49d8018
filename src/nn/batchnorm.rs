//! BatchNorm2d with a fused activation, in training (batch statistics, optionally averaged
//! over ranks) and evaluation (running statistics) modes.

use super::BnSync;
use super::params::ParamStore;
use crate::backend::{Backend, View, ViewMut};
use crate::ops::activation::Activation;
use crate::ops::batchnorm::BnGeom;
use anyhow::Result;
use std::ops::Range;

pub struct BatchNormLayer<B: Backend> {
    pub geom: BnGeom,
    pub act: Activation,
    /// gamma `[C]` then beta `[C]`, contiguous in the ParamStore.
    pub gamma_beta: Range<usize>,
    /// running_mean `[C]` then running_var `[C]`, contiguous in the state buffer.
    pub running: Range<usize>,
    /// Saved for backward: mean `[C]` then 1/std `[C]`.
    saved: B::Buf,
    /// Forward statistics or backward sums, `[2C]`; averaged over ranks with --sync-bn.
    sums: B::Buf,
    /// `--deferred-bn`: the running statistics wait for a whole batch of micro-batches.
    pub deferred: Option<DeferredStats>,
}

/// torchgpipe's deferred batch norm: each micro-batch is normalized by its own statistics,
/// but the running statistics move once per pass over the whole batch, from the sums of all
/// its micro-batches. A network's passes of one kind (D's real, fake and generator passes)
/// each keep their own slot, so the running statistics move as often, and in the same order,
/// as without micro-batches.
#[derive(Clone, Debug, Default)]
pub struct DeferredStats {
    /// The pass the next forwards belong to.
    pub slot: usize,
    /// Per slot: (sum x, sum x^2) per channel `[2C]` in f64, and the elements they cover.
    sums: [Vec<f64>; 3],
    counts: [f64; 3],
}

/// The floats `BatchNormLayer::new` allocates for `channels` channels.
pub fn buffer_floats(channels: usize) -> usize {
    4 * channels
}

impl<B: Backend> BatchNormLayer<B> {
    pub fn new(be: &B, geom: BnGeom, act: Activation, gamma_beta: Range<usize>, running: Range<usize>) -> Result<Self> {
        Ok(BatchNormLayer {
            geom,
            act,
            gamma_beta,
            running,
            saved: be.alloc(2 * geom.channels)?,
            sums: be.alloc(2 * geom.channels)?,
            deferred: None,
        })
    }

    /// Exchange the statistics saved for backward with `other` `[2C]` (a micro-batch's stash).
    pub fn swap_saved(&mut self, other: &mut B::Buf) {
        std::mem::swap(&mut self.saved, other);
    }

    fn gamma_range(&self) -> Range<usize> {
        self.gamma_beta.start..self.gamma_beta.start + self.geom.channels
    }
    fn beta_range(&self) -> Range<usize> {
        self.gamma_beta.start + self.geom.channels..self.gamma_beta.end
    }

    /// Training-mode forward: y = act(BN(x)) with batch statistics (over all ranks when
    /// `sync` is given); updates the running statistics in the store.
    pub fn forward_train(
        &mut self,
        be: &B,
        p: &mut ParamStore<B>,
        x: View<B>,
        y: ViewMut<B>,
        sync: Option<&mut dyn BnSync<B>>,
    ) {
        be.bn_forward_stats(&self.geom, x, ViewMut::whole(&mut self.sums));
        // Summed over ranks, the statistics cover ranks x count elements (which also sets the
        // unbiased variance of the running statistics).
        let ranks = sync.map_or(1, |s| s.all_sum(be, ViewMut::whole(&mut self.sums)));
        let (gr, br) = (self.gamma_range(), self.beta_range());
        // Deferred, the running statistics stay (momentum 0 leaves them exactly) and the
        // sums wait for the rest of the batch.
        let mut geom = self.geom;
        if let Some(d) = self.deferred.as_mut() {
            let mut host = vec![0.0f32; 2 * geom.channels];
            be.download(View::whole(&self.sums), &mut host);
            let acc = &mut d.sums[d.slot];
            acc.resize(host.len(), 0.0);
            acc.iter_mut().zip(&host).for_each(|(a, &h)| *a += h as f64);
            d.counts[d.slot] += (geom.count * ranks) as f64;
            geom.momentum = 0.0;
        }
        let ParamStore { value, state, .. } = p;
        be.bn_forward_apply(
            &geom,
            x,
            View::whole(&self.sums),
            (self.geom.count * ranks) as f64,
            View::range(value, gr),
            View::range(value, br),
            self.act,
            y,
            ViewMut::whole(&mut self.saved),
            ViewMut::range(state, self.running.clone()),
        );
    }

    /// `--deferred-bn`: move the running statistics once per slot that saw forwards, in slot
    /// order, from the sums of all its micro-batches (as one pass over them would); then
    /// start afresh.
    pub fn apply_deferred(&mut self, be: &B, p: &mut ParamStore<B>) {
        let Some(d) = self.deferred.as_mut() else { return };
        let (ch, m) = (self.geom.channels, self.geom.momentum as f64);
        let mut running = vec![0.0f32; 2 * ch];
        be.download(View::range(&p.state, self.running.clone()), &mut running);
        for (sums, n) in d.sums.iter().zip(d.counts).filter(|(_, n)| *n > 0.0) {
            let unbias = if n > 1.0 { n / (n - 1.0) } else { 1.0 };
            for c in 0..ch {
                let (mean, var) = crate::ops::batchnorm::mean_var(sums[c], sums[ch + c], n);
                running[c] = ((1.0 - m) * running[c] as f64 + m * mean) as f32;
                running[ch + c] = ((1.0 - m) * running[ch + c] as f64 + m * var * unbias) as f32;
            }
        }
        be.upload(&running, ViewMut::range(&mut p.state, self.running.clone()));
        self.discard_deferred();
    }

    /// Forget the sums gathered since the last `apply_deferred` (forwards computed again).
    pub fn discard_deferred(&mut self) {
        if let Some(d) = self.deferred.as_mut() {
            *d = DeferredStats { slot: d.slot, ..DeferredStats::default() };
        }
    }

    /// Evaluation-mode forward with the running statistics.
    pub fn forward_eval(&self, be: &B, p: &ParamStore<B>, x: View<B>, y: ViewMut<B>) {
        be.bn_forward_eval(
            &self.geom,
            x,
            p.value(&self.gamma_range()),
            p.value(&self.beta_range()),
            View::range(&p.state, self.running.clone()),
            self.act,
            y,
        );
    }

    /// Backward through act and BN. `dy` (gradient of y) is turned into dz in place; dx gets
    /// the input gradient. gamma/beta gradients go to the store (added when `accumulate`),
    /// or nowhere when `param_grads` is false.
    #[allow(clippy::too_many_arguments)]
    pub fn backward(
        &mut self,
        be: &B,
        p: &mut ParamStore<B>,
        x: View<B>,
        y: View<B>,
        mut dy: ViewMut<B>,
        dx: ViewMut<B>,
        param_grads: Option<bool>,
        sync: Option<&mut dyn BnSync<B>>,
    ) {
        be.bn_backward_reduce(
            &self.geom,
            x,
            y,
            self.act,
            View::whole(&self.saved),
            dy.rb(),
            ViewMut::whole(&mut self.sums),
        );
        // This rank's sums are its dgamma/dbeta; the bucket exchange averages those later.
        if let Some(accumulate) = param_grads {
            let dst = p.grad_mut(&self.gamma_beta.clone());
            if accumulate {
                be.axpy(1.0, View::whole(&self.sums), dst);
            } else {
                be.copy(View::whole(&self.sums), dst);
            }
        }
        let ranks = sync.map_or(1, |s| s.all_sum(be, ViewMut::whole(&mut self.sums)));
        be.bn_backward_data(
            &self.geom,
            x,
            dy.as_view(),
            View::whole(&self.saved),
            p.value(&self.gamma_range()),
            View::whole(&self.sums),
            (self.geom.count * ranks) as f64,
            dx,
        );
    }
}
