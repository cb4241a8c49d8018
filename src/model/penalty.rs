//! WGAN-GP's gradient penalty (Gulrajani et al. 2017) and its weight gradient, through a
//! critic of convolutions and piecewise-linear activations, without autograd.
//!
//! The critic is D = L_k o ... o L_1 with L_i(h) = act(W_i h) and slope masks m_i. Its input
//! gradient at the interpolates is the backward chain g = W_1^T M_1 ... W_k^T 1, which leaves
//! delta_i, the gradient at stage i's conv output, in each stage. The penalty is
//! P = lambda / B sum_b (||g_b|| - 1)^2 with seed u = dP/dg. The masks are piecewise constant,
//! so W_i enters P only through g, and <u, g> = <delta_i, W_i v_{i-1}> with v_0 = u and
//! v_i = m_i * (W_i v_{i-1}): u travels forward through the same convolutions and masks, and
//! dP/dW_i = delta_i v_{i-1}^T, the ordinary weight-gradient product of stage i with v_{i-1}
//! as its input. That is one more forward and one more weight-gradient pass per critic step.
//! Batch norm breaks it (it ties each sample's gradient to the rest of the batch): the critic
//! has none.
//!
//! Layer norm (`--critic-norm layer`) keeps samples apart but is not linear in its input, so
//! W_i enters P also through the values. In general <u, g> is the critic's derivative along
//! u, computed by carrying u forward beside the values as a tangent (through layer norm,
//! t -> gamma J t, J its Jacobian at the values); P's gradient is the backward of that
//! tangent pass. The tangent's adjoint is still the backward chain from ones (delta_i), and
//! the values get an adjoint of their own, zero above the topmost layer norm: each layer norm
//! turns the tangent's adjoint into one for the values (`ln_penalty_adjoint`), which then
//! travels down through the convolutions and slopes as an ordinary backward does. Stage i's
//! weight gradient is delta_i v_{i-1}^T + a_i x_{i-1}^T, with a_i the values' adjoint at its
//! conv output and x_{i-1} its input; gamma's and beta's come the same way. That adds one
//! more data-gradient and weight-gradient pass below the topmost layer norm.

use super::net::{Net, Norm, Observer, Phase, StageSpec, stage_geometry};
use crate::backend::{Backend, View, ViewMut};
use anyhow::{Result, ensure};
use std::time::Instant;

/// The penalty's buffers for one critic.
pub struct GradientPenalty<B: Backend> {
    /// [C, B, H, W]: the seed u = dP/dg at the critic's input (v_0).
    seed: B::Buf,
    /// v_1 .. v_{k-1}: `[C_i, B, OH_i, OW_i]`, the seed's stream after every stage but the last.
    streams: Vec<B::Buf>,
    /// Per stage, with layer norm: the tangent at its conv output and after the normalization
    /// (ta, tn), and the values' adjoint at its conv output; each `[C_i, B, OH_i, OW_i]`.
    ln_buffers: Vec<Option<LnPenaltyBuffers<B>>>,
    /// The values' adjoint at the output of every stage below the topmost layer norm
    /// (`[C_i, B, OH_i, OW_i]`); none without layer norm.
    adjoints: Vec<B::Buf>,
    /// The topmost layer-norm stage, where the values' adjoint starts.
    top_ln: Option<usize>,
    /// [B]: ||g_b||.
    norms: B::Buf,
    /// `[B]`: ones, the output gradient that makes the critic's backward give each sample's own
    /// gradient of D(x^_b).
    ones: B::Buf,
    /// `[2]`: (the penalty lambda mean (||g_b|| - 1)^2, the mean ||g_b||), on the backend; zeros
    /// before the first run.
    pub out: B::Buf,
    pub lambda: f32,
}

/// A layer-norm stage's tangent and adjoint.
struct LnPenaltyBuffers<B: Backend> {
    ta: B::Buf,
    tn: B::Buf,
    da: B::Buf,
}

/// The floats `GradientPenalty::new` allocates for a critic of `specs` at `batch` images of
/// `input` (C, H, W).
pub fn plan_floats(specs: &[StageSpec], batch: usize, input: (usize, usize, usize)) -> Result<usize> {
    let geoms = stage_geometry(specs, batch, input)?;
    let inner: usize = geoms[..geoms.len() - 1].iter().map(|g| g.y_len()).sum();
    let is_ln = |s: &StageSpec| s.norm == Norm::Layer;
    let ln: usize = specs.iter().zip(&geoms).filter(|(s, _)| is_ln(s)).map(|(_, g)| 3 * g.y_len()).sum();
    let top = specs.iter().rposition(is_ln).unwrap_or(0);
    let below_top: usize = geoms[..top].iter().map(|g| g.y_len()).sum();
    Ok(input.0 * batch * input.1 * input.2 + inner + ln + below_top + 2 * batch + 2)
}

impl<B: Backend> GradientPenalty<B> {
    pub fn new(be: &B, critic: &Net<B>, lambda: f32) -> Result<Self> {
        ensure!(critic.stages.iter().all(|s| s.bn.is_none()), "the gradient penalty needs a critic without batch norm");
        let batch = critic.batch;
        let first = &critic.stages[0].conv;
        ensure!(!first.transposed, "the critic starts with a convolution");
        let last = critic.stages.last().expect("a network has stages");
        ensure!(last.ln.is_none(), "the critic's last stage has no norm");
        let streams = critic.stages[..critic.stages.len() - 1]
            .iter()
            .map(|s| be.alloc(s.conv.output_len()))
            .collect::<Result<Vec<_>>>()?;
        let alloc_ln = |n: usize| -> Result<LnPenaltyBuffers<B>> {
            Ok(LnPenaltyBuffers { ta: be.alloc(n)?, tn: be.alloc(n)?, da: be.alloc(n)? })
        };
        let ln_buffers = critic
            .stages
            .iter()
            .map(|s| s.ln.as_ref().map(|_| alloc_ln(s.conv.output_len())).transpose())
            .collect::<Result<Vec<_>>>()?;
        let top_ln = critic.stages.iter().rposition(|s| s.ln.is_some());
        let below_top = &critic.stages[..top_ln.unwrap_or(0)];
        let adjoints = below_top.iter().map(|s| be.alloc(s.conv.output_len())).collect::<Result<_>>()?;
        let mut ones = be.alloc(batch)?;
        be.upload(&vec![1.0; batch], ViewMut::whole(&mut ones));
        // Zeros until the first run (and for good where lambda is 0 and it never runs).
        let mut out = be.alloc(2)?;
        be.upload(&[0.0, 0.0], ViewMut::whole(&mut out));
        let seed = be.alloc(first.geom.x_len())?;
        let norms = be.alloc(batch)?;
        Ok(GradientPenalty { seed, streams, ln_buffers, adjoints, top_ln, norms, ones, out, lambda })
    }

    /// With the interpolates x^ in the critic's input: its forward, its backward to the input
    /// from ones (g = grad_x^ D per sample), the penalty and its seed, then dP/dW of every
    /// stage, written into the critic's gradients or added to them (`accumulate`). Returns
    /// false when the observer interrupted it.
    pub fn run(&mut self, be: &B, critic: &mut Net<B>, accumulate: bool, obs: &mut dyn Observer<B>) -> bool {
        critic.forward(be, true, None, obs);
        be.copy(View::whole(&self.ones), ViewMut::whole(critic.d_output_mut()));
        critic.backward(be, None, true, None, obs);
        if obs.interrupted() {
            return false;
        }
        let channels = critic.stages[0].conv.geom.c_in;
        be.gradient_penalty(
            View::whole(critic.d_input()),
            channels,
            self.lambda,
            ViewMut::whole(&mut self.seed),
            ViewMut::whole(&mut self.norms),
            ViewMut::whole(&mut self.out),
        );
        let last = critic.stages.len() - 1;
        for i in 0..=last {
            if obs.interrupted() {
                return false;
            }
            let t0 = Instant::now();
            let (before, after) = self.streams.split_at_mut(i);
            let v_in = if i == 0 { &self.seed } else { &before[i - 1] };
            let stage = &critic.stages[i];
            stage.backward_weight(be, &mut critic.store, View::whole(v_in), accumulate);
            let t1 = Instant::now();
            obs.span(critic.name, stage, Phase::PenaltyWeight, t0, t1);
            if i < last {
                let tangent = self.ln_buffers[i].as_mut().map(|b| (&mut b.ta, &mut b.tn));
                stage.penalty_forward(be, &critic.store, View::whole(v_in), tangent, ViewMut::whole(&mut after[0]));
                obs.span(critic.name, stage, Phase::PenaltyForward, t1, Instant::now());
            }
        }
        match self.top_ln {
            Some(top) => self.values_adjoint(be, critic, top, accumulate, obs),
            None => true,
        }
    }

    /// With layer norm: the values' adjoint from the topmost layer norm (where the tangent's
    /// adjoint starts it) down to the critic's input, and each stage's weight gradient from it
    /// added to the tangent's (module doc). Returns false when the observer interrupted it.
    fn values_adjoint(
        &mut self,
        be: &B,
        critic: &mut Net<B>,
        top: usize,
        accumulate: bool,
        obs: &mut dyn Observer<B>,
    ) -> bool {
        for i in (0..=top).rev() {
            if obs.interrupted() {
                return false;
            }
            let t0 = Instant::now();
            let at = i.min(self.adjoints.len());
            let (below, here) = self.adjoints.split_at_mut(at);
            let d_out = if i == top { None } else { Some(&mut here[0]) };
            let ln = self.ln_buffers[i].as_mut();
            let (tangent, da) = match ln {
                Some(b) => (Some((&b.ta, &b.tn)), Some(&mut b.da)),
                None => (None, None),
            };
            critic.stages[i].penalty_adjoint(be, &mut critic.store, d_out, tangent, da, accumulate);
            // The values' adjoint at stage i's conv output: layer norm's, or the slopes' in place.
            let a: &B::Buf = match &self.ln_buffers[i] {
                Some(b) => &b.da,
                None => &here[0],
            };
            if i > 0 {
                let (store, dx) = (&critic.store, ViewMut::whole(&mut below[i - 1]));
                critic.stages[i].conv.backward_data(be, store, View::whole(a), dx);
            }
            let t1 = Instant::now();
            obs.span(critic.name, &critic.stages[i], Phase::PenaltyAdjoint, t0, t1);
            critic.add_weight_grad(be, i, View::whole(a));
            obs.span(critic.name, &critic.stages[i], Phase::PenaltyWeight, t1, Instant::now());
        }
        true
    }
}
