//! One GAN step as the two stages of a pipeline run it, GPipe's schedule over M
//! micro-batches (the same computation as `micro_step.rs` on one rank, in the same order on
//! each network):
//!
//! ```text
//! G stage:  G fwd 1 .. G fwd M | (idle: D's update)     | G bwd 1 .. G bwd M, G's update
//!             \ fakes i                                      ^ image gradient i
//! D stage:  D real i, D fake i ..  | D's update | D on fakes i, back to the images ..
//! ```
//!
//! Fakes and gradients travel on the comm thread (posted sends and receives), so G's forward
//! of micro-batch i+1 runs while micro-batch i is on the wire and in D. 1F1B would not help
//! here: G's backward needs D updated by all M micro-batches first, so no backward can start
//! before every forward has ended. D's step metrics ride with the last gradient.

use super::{PipelineStage, StageRole};
use crate::backend::{Backend, View, ViewMut};
use crate::model::dcgan::Dcgan;
use crate::record::{Losses, StepMetrics};
use crate::train::ddp::exchange::{NetId, Update};
use crate::train::ddp::sync::download;
use crate::train::micro_step::gather_micro_batch;
use crate::train::step::{GanTrainer, Score};
use crate::train::timeline::Track;
use anyhow::Result;
use std::time::Instant;

/// The step's metrics as the D stage sends them after the last image gradient.
const METRICS: usize = 6;

impl<B: Backend> GanTrainer<B> {
    /// This rank's part of a pipelined step.
    pub(in crate::train) fn pipeline_step(
        &mut self,
        images: &[f32],
        lr_d: f32,
        lr_g: f32,
        stop: bool,
    ) -> Result<StepMetrics> {
        self.timeline.step = self.step;
        let role = self.pipeline.as_ref().expect("a pipeline stage").role;
        let mut raw = match role {
            StageRole::Generator => self.generator_stage(lr_g, stop)?,
            StageRole::Discriminator => self.discriminator_stage(images, lr_d, stop)?,
        };
        self.exchange.start_metrics(&raw);
        let like = Losses::Dcgan { loss_d: 0.0, loss_g: 0.0, d_x: 0.0, d_g_z: 0.0, d_g_z2: 0.0 };
        self.end_step(&mut raw, like)
    }

    /// Wait for the vector the other stage sent, counting the wait as this stage's idle time.
    fn receive(&mut self, posted: crate::comm::handle::Posted, what: &'static str) -> Result<Vec<f32>> {
        let stage: &mut PipelineStage = self.pipeline.as_mut().expect("a pipeline stage");
        let t0 = Instant::now();
        let v = stage.comm.wait_received(posted)?;
        let t1 = Instant::now();
        stage.idle += t1 - t0;
        self.timeline.span(Track::Compute, "wait", what, t0, t1);
        Ok(v)
    }

    /// G's stage: every micro-batch's forward, its fakes sent; then every micro-batch's
    /// backward from the image gradient D's stage returns. Returns D's metrics.
    fn generator_stage(&mut self, lr_g: f32, stop: bool) -> Result<[f32; METRICS]> {
        let (m, recompute) = self.micro.as_ref().map(|mb| (mb.count, mb.recompute)).expect("micro-batches set");
        let (comm, peer) = self.pipeline.as_ref().map(|p| (p.comm.clone(), p.peer)).expect("a pipeline stage");
        let mut sends = Vec::with_capacity(m);
        for i in 0..m {
            self.set_micro(i);
            self.g_forward(self.cfg.seed);
            self.check_interrupt()?;
            // [b, 1, S, S] fakes
            let t0 = Instant::now();
            sends.push(comm.send_f32(peer, download(&self.be, self.model.g.output())));
            self.timeline.span(Track::Compute, "send", "fakes", t0, Instant::now());
            if let Some(mb) = self.micro.as_mut().filter(|mb| !mb.recompute) {
                self.model.g.swap_saved(&mut mb.saved[i]);
            }
        }
        let mut receives: Vec<_> = (0..m).map(|_| comm.recv_f32(peer)).collect();
        self.model.g.apply_deferred_bn(&self.be);
        let kept = self.g_statistics_kept(recompute);
        let mut raw = [0.0f32; METRICS];
        for i in 0..m {
            self.set_micro(i);
            // [b, 1, S, S] the images' gradient (the last with D's metrics after it)
            let mut grad = self.receive(receives.remove(0), "image gradient")?;
            if i + 1 == m {
                raw.copy_from_slice(&grad[grad.len() - METRICS..]);
                grad.truncate(grad.len() - METRICS);
            }
            self.g_forward_again(i);
            self.be.upload(&grad, ViewMut::whole(self.model.g.d_output_mut()));
            self.g_backward_pass(i > 0, i + 1 == m);
            self.check_interrupt()?;
        }
        self.restore_g_statistics(kept);
        self.model.g.discard_deferred_bn();
        self.close_g_step(lr_g);
        for s in sends {
            comm.wait_sent(s)?;
        }
        // A stop asked on either stage stops both (the metrics are averaged over the pair).
        raw[METRICS - 1] = raw[METRICS - 1].max(self.stop_metric(stop));
        Ok(raw)
    }

    /// D's stage: each micro-batch's real pass, then its fake pass when its fakes arrive;
    /// D's update; then D on each micro-batch's fakes again, the images' gradient sent back.
    fn discriminator_stage(&mut self, images: &[f32], lr_d: f32, stop: bool) -> Result<[f32; METRICS]> {
        let m = self.micro.as_ref().map(|mb| mb.count).expect("micro-batches set");
        let (comm, peer) = self.pipeline.as_ref().map(|p| (p.comm.clone(), p.peer)).expect("a pipeline stage");
        let plane = self.model.image_size * self.model.image_size;
        let mut receives: Vec<_> = (0..m).map(|_| comm.recv_f32(peer)).collect();
        // [M][b, 1, S, S] the fakes, kept for G's step.
        let mut fakes = Vec::with_capacity(m);
        for i in 0..m {
            self.set_micro(i);
            let mb = self.micro.as_mut().expect("micro-batches set");
            gather_micro_batch(images, plane, i, m, &mut mb.images);
            self.be.upload(&mb.images, ViewMut::whole(self.model.d.input_mut()));
            self.d_pass_scored(Score::Bce(1.0), Some(i > 0), false, 0);
            self.check_interrupt()?;
            fakes.push(self.receive(receives.remove(0), "fakes")?);
            self.be.upload(&fakes[i], ViewMut::whole(self.model.d.input_mut()));
            self.d_pass_scored(Score::Bce(0.0), Some(true), i + 1 == m, 1);
            self.check_interrupt()?;
        }
        self.model.d.apply_deferred_bn(&self.be);
        self.exchange.flush(&self.be, NetId::D, &self.model.d.store, &mut self.timeline);
        let store = &mut self.model.d.store;
        let u = Update::next(store, lr_d);
        self.exchange.finish(&self.be, NetId::D, store, u, &mut self.timeline);

        let mut sends = Vec::with_capacity(m);
        let mut raw = [0.0f32; METRICS];
        for (i, fake) in fakes.iter().enumerate() {
            self.set_micro(i);
            self.be.upload(fake, ViewMut::whole(self.model.d.input_mut()));
            self.d_pass_scored(Score::Bce(1.0), None, false, 2);
            self.check_interrupt()?;
            let Dcgan { d, .. } = &self.model;
            let mut grad = vec![0.0f32; fake.len()];
            self.be.download(View::whole(d.d_input()), &mut grad);
            if i + 1 == m {
                raw = self.read_metrics(stop);
                grad.extend_from_slice(&raw);
            }
            sends.push(comm.send_f32(peer, grad));
        }
        self.model.d.apply_deferred_bn(&self.be);
        for s in sends {
            comm.wait_sent(s)?;
        }
        Ok(raw)
    }
}
