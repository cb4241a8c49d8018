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
//! Batch norm breaks it (its backward is not linear in its input): the critic has none.

use super::net::{Net, Observer, Phase, StageSpec, stage_geometry};
use crate::backend::{Backend, View, ViewMut};
use anyhow::{Result, ensure};
use std::time::Instant;

/// The penalty's buffers for one critic.
pub struct GradientPenalty<B: Backend> {
    /// [C, B, H, W]: the seed u = dP/dg at the critic's input (v_0).
    seed: B::Buf,
    /// v_1 .. v_{k-1}: [C_i, B, OH_i, OW_i], the seed's stream after every stage but the last.
    streams: Vec<B::Buf>,
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

/// The floats `GradientPenalty::new` allocates for a critic of `specs` at `batch` images of
/// `input` (C, H, W).
pub fn plan_floats(specs: &[StageSpec], batch: usize, input: (usize, usize, usize)) -> Result<usize> {
    let geoms = stage_geometry(specs, batch, input)?;
    let inner: usize = geoms[..geoms.len() - 1].iter().map(|g| g.y_len()).sum();
    Ok(input.0 * batch * input.1 * input.2 + inner + 2 * batch + 2)
}

impl<B: Backend> GradientPenalty<B> {
    pub fn new(be: &B, critic: &Net<B>, lambda: f32) -> Result<Self> {
        ensure!(critic.stages.iter().all(|s| s.bn.is_none()), "the gradient penalty needs a critic without batch norm");
        let batch = critic.batch;
        let first = &critic.stages[0].conv;
        ensure!(!first.transposed, "the critic starts with a convolution");
        let streams = critic.stages[..critic.stages.len() - 1]
            .iter()
            .map(|s| be.alloc(s.conv.output_len()))
            .collect::<Result<Vec<_>>>()?;
        let mut ones = be.alloc(batch)?;
        be.upload(&vec![1.0; batch], ViewMut::whole(&mut ones));
        // Zeros until the first run (and for good where lambda is 0 and it never runs).
        let mut out = be.alloc(2)?;
        be.upload(&[0.0, 0.0], ViewMut::whole(&mut out));
        Ok(GradientPenalty { seed: be.alloc(first.geom.x_len())?, streams, norms: be.alloc(batch)?, ones, out, lambda })
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
                stage.penalty_forward(be, &critic.store, View::whole(v_in), ViewMut::whole(&mut after[0]));
                obs.span(critic.name, stage, Phase::PenaltyForward, t1, Instant::now());
            }
        }
        true
    }
}
