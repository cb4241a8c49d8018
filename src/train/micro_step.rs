//! `--micro-batches M`: one DCGAN step computed in M micro-batches of b = B/M images, their
//! gradients summed. Each micro-batch is what one of M data-parallel ranks would compute
//! (its batch-norm statistics, its noise stream, every M-th image of the batch), so a rank
//! with M micro-batches computes what M ranks of b images compute, up to the order of the
//! sums; and the two stages of a pipeline compute the same thing split over two ranks.
//!
//! D's step runs the micro-batches one after the other (real pass, G forward, fake pass),
//! putting each micro-batch's G forward aside (`Net::swap_saved`: no copies) for G's step,
//! which after D's update takes each back for D's pass on the fakes and G's backward. With
//! `--recompute` nothing is put aside: G's forward of each micro-batch runs again before its
//! backward (the same weights and noise give the same activations), and the running
//! statistics it would move a second time are put back.

use super::ddp::exchange::{NetId, Update};
use super::step::GanTrainer;
use crate::backend::{Backend, DeviceBuf, View, ViewMut};
use crate::model::dcgan::Dcgan;
use crate::model::net::NetSaved;
use crate::record::{Losses, StepMetrics};
use anyhow::Result;

/// The micro-batches of a trainer, and what G's step needs of D's.
pub struct MicroBatches<B: Backend> {
    /// M
    pub count: usize,
    pub recompute: bool,
    /// `[M]` G's forward of each micro-batch, put aside until its backward (none with
    /// recompute).
    pub(super) saved: Vec<NetSaved<B>>,
    /// [b, H, W]: one micro-batch's real images on the host.
    pub(super) images: Vec<f32>,
    /// `[b]` zeros on the device: clears an output gradient (and `[2]` outputs) before a scaled
    /// sum into it, with no host copy in the step.
    zeros: B::Buf,
    /// `[2]`: one micro-batch's (loss, mean sigmoid) before it is averaged in.
    pub(super) out_one: B::Buf,
    /// The micro-batch running (its noise stream and whether outputs start afresh).
    pub(super) at: usize,
}

/// The images of micro-batch `i` of `m` from a batch `images` [B, plane]: every m-th image
/// from the i-th (as the sampler deals a global batch to ranks), into `out` [B/m, plane].
pub fn gather_micro_batch(images: &[f32], plane: usize, i: usize, m: usize, out: &mut [f32]) {
    for (j, dst) in out.chunks_exact_mut(plane).enumerate() {
        let k = i + j * m;
        dst.copy_from_slice(&images[k * plane..(k + 1) * plane]);
    }
}

impl<B: Backend> GanTrainer<B> {
    /// Compute each step in `count` micro-batches of the model's batch (the model was built
    /// for one micro-batch). Allocates G's saved forwards unless `recompute`.
    pub fn use_micro_batches(&mut self, count: usize, recompute: bool) -> Result<()> {
        let b = self.model.d.batch;
        let saved = match recompute {
            true => Vec::new(),
            false => (0..count).map(|_| self.model.g.new_saved(&self.be)).collect::<Result<_>>()?,
        };
        let plane = self.model.image_size * self.model.image_size;
        self.micro = Some(MicroBatches {
            count,
            recompute,
            saved,
            images: vec![0.0; b * plane],
            zeros: self.be.alloc(b.max(2))?,
            out_one: self.be.alloc(2)?,
            at: 0,
        });
        Ok(())
    }

    /// (1/M, whether the running micro-batch is the first): how a pass's loss gradient and
    /// outputs enter the step's sums. (1, true) without micro-batches.
    pub(super) fn micro_scale(&self) -> (f32, bool) {
        self.micro.as_ref().map_or((1.0, true), |m| (1.0 / m.count as f32, m.at == 0))
    }

    /// Write a pass's loss gradient `dlogits` into D's output gradient, times 1/M, and add
    /// its outputs (`one`, `[2]`) into `out` times 1/M (starting afresh at the first
    /// micro-batch).
    pub(super) fn add_micro_pass(&mut self, which: usize) {
        let (scale, first) = self.micro_scale();
        let Some(mb) = self.micro.as_mut() else { return };
        let be = &self.be;
        let d_out = self.model.d.d_output_mut();
        be.copy(View::range(&mb.zeros, 0..self.dlogits.len()), ViewMut::whole(d_out));
        be.axpy(scale, View::whole(&self.dlogits), ViewMut::whole(d_out));
        let out = match which {
            0 => &mut self.out_real,
            1 => &mut self.out_fake,
            _ => &mut self.out_g,
        };
        if first {
            be.copy(View::range(&mb.zeros, 0..2), ViewMut::whole(out));
        }
        be.axpy(scale, View::whole(&mb.out_one), ViewMut::whole(out));
    }

    /// With `recompute`: G's running statistics and batch count before its forwards run
    /// again, for `restore_g_statistics`.
    pub(super) fn g_statistics_kept(&self, recompute: bool) -> Option<(Vec<f32>, u64)> {
        let store = &self.model.g.store;
        recompute.then(|| (super::ddp::sync::download(&self.be, &store.state), store.bn_batches_tracked))
    }

    /// Undo what G's second forwards did to its running statistics and batch count.
    pub(super) fn restore_g_statistics(&mut self, kept: Option<(Vec<f32>, u64)>) {
        if let Some((state, tracked)) = kept {
            let store = &mut self.model.g.store;
            self.be.upload(&state, ViewMut::whole(&mut store.state));
            store.bn_batches_tracked = tracked;
        }
    }

    /// G's forward of micro-batch `i` in place for its backward: taken back from where D's
    /// step put it, or, with recompute, computed again (the micro-batch set, same noise).
    pub(super) fn g_forward_again(&mut self, i: usize) {
        match self.micro.as_mut().filter(|mb| !mb.recompute) {
            Some(mb) => self.model.g.swap_saved(&mut mb.saved[i]),
            None => self.g_forward(self.cfg.seed),
        }
    }

    pub(super) fn set_micro(&mut self, i: usize) {
        if let Some(mb) = self.micro.as_mut() {
            mb.at = i;
        }
    }

    /// The DCGAN step in micro-batches (the module doc); the same five parts as
    /// `dcgan_step`, each micro-batch's gradients summed before the exchange sees them.
    pub(super) fn micro_step(&mut self, images: &[f32], lr_d: f32, lr_g: f32, stop: bool) -> Result<StepMetrics> {
        self.timeline.step = self.step;
        let (m, recompute) = self.micro.as_ref().map(|mb| (mb.count, mb.recompute)).expect("micro-batches set");
        let plane = self.model.image_size * self.model.image_size;

        // D's step: every micro-batch's real pass, G forward and fake pass; D's buckets leave
        // during the last fake pass, when its gradient sums are complete.
        for i in 0..m {
            self.set_micro(i);
            let mb = self.micro.as_mut().expect("micro-batches set");
            gather_micro_batch(images, plane, i, m, &mut mb.images);
            self.be.upload(&mb.images, ViewMut::whole(self.model.d.input_mut()));
            self.d_pass_scored(super::step::Score::Bce(1.0), Some(i > 0), false, 0);
            self.check_interrupt()?;
            self.g_forward(self.cfg.seed);
            self.check_interrupt()?;
            let Dcgan { g, d, .. } = &mut self.model;
            self.be.copy(View::whole(g.output()), ViewMut::whole(d.input_mut()));
            if let Some(mb) = self.micro.as_mut().filter(|mb| !mb.recompute) {
                g.swap_saved(&mut mb.saved[i]);
            }
            self.d_pass_scored(super::step::Score::Bce(0.0), Some(true), i + 1 == m, 1);
            self.check_interrupt()?;
        }
        // `--deferred-bn`: the real and fake passes' and G's running statistics move now.
        self.model.d.apply_deferred_bn(&self.be);
        self.model.g.apply_deferred_bn(&self.be);
        self.exchange.flush(&self.be, NetId::D, &self.model.d.store, &mut self.timeline);
        let store = &mut self.model.d.store;
        let u = Update::next(store, lr_d);
        self.exchange.finish(&self.be, NetId::D, store, u, &mut self.timeline);

        // G's step: each micro-batch's fakes through the updated D and back through G.
        let kept = self.g_statistics_kept(recompute);
        let mut raw = [0.0f32; 6];
        for i in 0..m {
            self.set_micro(i);
            self.g_forward_again(i);
            self.check_interrupt()?;
            let Dcgan { g, d, .. } = &mut self.model;
            self.be.copy(View::whole(g.output()), ViewMut::whole(d.input_mut()));
            self.d_pass_scored(super::step::Score::Bce(1.0), None, false, 2);
            self.check_interrupt()?;
            if i + 1 == m {
                // The metrics leave before G's last buckets, as in the step without micro-batches.
                raw = self.read_metrics(stop);
                self.exchange.start_metrics(&raw);
            }
            let Dcgan { g, d, .. } = &mut self.model;
            self.be.copy(View::whole(d.d_input()), ViewMut::whole(g.d_output_mut()));
            self.g_backward_pass(i > 0, i + 1 == m);
            self.check_interrupt()?;
        }
        self.restore_g_statistics(kept);
        self.model.d.apply_deferred_bn(&self.be);
        self.model.g.discard_deferred_bn();
        self.close_g_step(lr_g);
        let like = Losses::Dcgan { loss_d: 0.0, loss_g: 0.0, d_x: 0.0, d_g_z: 0.0, d_g_z2: 0.0 };
        self.end_step(&mut raw, like)
    }
}

#[cfg(test)]
#[path = "micro_step_tests.rs"]
mod tests;
