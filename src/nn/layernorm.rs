//! Layer norm with a per-channel scale and shift (PyTorch's `nn.GroupNorm(1, C)`): each sample
//! normalized over its own C x H x W values, so a sample's output never depends on the rest
//! of the batch (what WGAN-GP's per-sample gradient penalty needs of a critic's norm).

use super::params::ParamStore;
use crate::backend::{Backend, View, ViewMut};
use crate::ops::layernorm::LnGeom;
use anyhow::Result;
use std::ops::Range;

pub struct LayerNormLayer<B: Backend> {
    pub geom: LnGeom,
    /// gamma `[C]` then beta `[C]`, contiguous in the ParamStore.
    pub gamma_beta: Range<usize>,
    /// `[C, B, P]`: the last forward's normalized input, before the scale and shift.
    pub norm: B::Buf,
    /// `[2B]`: the last forward's per-sample mean, then 1/std.
    pub stats: B::Buf,
}

/// The floats `LayerNormLayer::new` allocates for `geom`.
pub fn buffer_floats(geom: &LnGeom) -> usize {
    geom.len() + 2 * geom.batch
}

impl<B: Backend> LayerNormLayer<B> {
    pub fn new(be: &B, geom: LnGeom, gamma_beta: Range<usize>) -> Result<Self> {
        Ok(LayerNormLayer { geom, gamma_beta, norm: be.alloc(geom.len())?, stats: be.alloc(2 * geom.batch)? })
    }

    pub fn gamma_beta<'a>(&self, p: &'a ParamStore<B>) -> View<'a, B> {
        p.value(&self.gamma_beta)
    }

    /// y = gamma LN(x) + beta (training and evaluation alike: there are no running statistics).
    pub fn forward(&mut self, be: &B, p: &ParamStore<B>, x: View<B>, y: ViewMut<B>) {
        be.ln_normalize(&self.geom, x, ViewMut::whole(&mut self.norm), ViewMut::whole(&mut self.stats));
        be.ln_affine(&self.geom, View::whole(&self.norm), self.gamma_beta(p), true, y);
    }

    /// dx from dy, the gradient at y; gamma and beta gradients go to the store (added when
    /// `Some(true)`), or nowhere when `param_grads` is None.
    pub fn backward(&self, be: &B, p: &mut ParamStore<B>, dy: View<B>, dx: ViewMut<B>, param_grads: Option<bool>) {
        if let Some(accumulate) = param_grads {
            let dst = p.grad_mut(&self.gamma_beta);
            be.ln_param_grad(&self.geom, View::whole(&self.norm), dy, true, dst, accumulate);
        }
        let (norm, stats) = (View::whole(&self.norm), View::whole(&self.stats));
        be.ln_backward_data(&self.geom, norm, stats, self.gamma_beta(p), true, dy, dx);
    }
}
