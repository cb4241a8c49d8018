//! `--g-ema`: an exponential moving average of G's weights, the generator that samples and is
//! scored (Yazıcı et al. 2019, "The Unusual Effectiveness of Averaging in GAN Training";
//! StyleGAN's `G_ema`). Training never reads it: a run trains bitwise the same with or without.
//!
//! The horizon is a half-life in generated images, not in steps, so that it means the same at
//! any rank count (weak scaling multiplies the images of a step): G's updates count the images
//! they were computed from, the global batch (one rank's batch while `--distributed-after`
//! trains as one worker). Early on it is shorter, at most `RAMP` of the images seen so far
//! (StyleGAN2-ADA's ramp-up), so that the initial weights never weigh in the average: after an
//! update of `b` images that brings the images seen to `n`,
//!
//! ```text
//! h = min(half_life, RAMP * n)
//! beta = 0.5 ^ (b / h)
//! ema = ema + (1 - beta) * (w - ema)
//! ```
//!
//! Batch norm's running statistics follow G's weights, not the average's: the averaged
//! generator gets statistics of its own, recomputed before it draws after G has moved, as the
//! mean of the batch statistics of `standing_passes` training-mode forwards on noise keyed
//! apart (BigGAN's "standing statistics", PyTorch's `swa_utils.update_bn`). Every rank computes
//! the same ones: the same weights on the same noise.

use super::step::GanTrainer;
use crate::backend::{Backend, View, ViewMut};
use crate::checkpoint::{AveragedGenerator, NetTensors};
use crate::model::dcgan::seed_for;
use crate::model::net::Net;
use crate::model::noise::{fixed_noise, to_channel_major};
use crate::nn::params::ParamStore;
use crate::train::ddp::sync::{broadcast_buf_from_root, download};
use crate::train::job::Job;
use crate::train::timeline::Track;
use anyhow::Result;
use std::time::Instant;

/// The share of the images seen so far that the half-life may reach.
pub const RAMP: f64 = 0.05;

/// The key of the noise the standing statistics are taken on (`seed_for(seed, ...)`).
const STANDING_NOISE: u64 = 0x656d_6173;

/// Forwards of `batch` images the standing statistics take: about 1024 images, at least 8
/// batches and at most 16 (each channel's statistics cover the batch and the image plane: a
/// small batch still gives thousands of values a channel).
pub fn standing_passes(batch: usize) -> usize {
    1024usize.div_ceil(batch.max(1)).clamp(8, 16)
}

/// The average of G's weights, in G's flat layout.
pub struct GeneratorAverage<B: Backend> {
    /// `[param_len]`: the averaged weights.
    pub value: B::Buf,
    /// `[state_len]`: the averaged weights' own running statistics (standing statistics).
    pub state: B::Buf,
    /// `[param_len]` scratch: `w - ema`.
    diff: B::Buf,
    /// The half-life in images.
    half_life: f64,
    /// Images of one G update (the global batch, or one rank's while training solo).
    pub images_per_update: u64,
    /// Images of the updates folded in so far (checkpointed: the ramp goes on from it).
    pub images_seen: u64,
    /// G's update count when `state` was computed (None: not since the average last moved).
    stats_of: Option<u64>,
}

impl<B: Backend> GeneratorAverage<B> {
    /// An average that starts at G's weights in `store`.
    pub fn new(be: &B, store: &ParamStore<B>, half_life: u64, images_per_update: usize) -> Result<Self> {
        let (n, s) = (store.layout.param_len(), store.layout.state_len());
        let mut avg = GeneratorAverage {
            value: be.alloc(n)?,
            state: be.alloc(s)?,
            diff: be.alloc(n)?,
            half_life: half_life as f64,
            images_per_update: images_per_update as u64,
            images_seen: 0,
            stats_of: None,
        };
        avg.set_values(be, View::whole(&store.value));
        be.copy(View::whole(&store.state), ViewMut::whole(&mut avg.state));
        Ok(avg)
    }

    /// The average set to `values` (G's weights at the start).
    pub fn set_values(&mut self, be: &B, values: View<B>) {
        be.copy(values, ViewMut::whole(&mut self.value));
        self.stats_of = None;
    }

    /// The average set to a checkpoint's `values` `[param_len]` after `images_seen` images
    /// (its statistics are computed again when it draws).
    pub fn restore(&mut self, be: &B, values: &[f32], images_seen: u64) {
        be.upload(values, ViewMut::whole(&mut self.value));
        self.images_seen = images_seen;
        self.stats_of = None;
    }

    /// Collective: every rank takes rank 0's average and the images it has seen (its
    /// statistics are computed again when it next draws).
    pub fn take_from_root(&mut self, job: &Job, be: &B) -> Result<()> {
        broadcast_buf_from_root(job, be, &mut self.value)?;
        let seen = job.comm.broadcast_bytes(0, self.images_seen.to_le_bytes().to_vec())?;
        self.images_seen = u64::from_le_bytes(seen[..8].try_into()?);
        self.stats_of = None;
        Ok(())
    }

    /// The weight of the average's past in an update of `images` that brings the images seen
    /// to `seen`: `beta` of the module doc.
    pub fn decay(&self, images: u64, seen: u64) -> f64 {
        let h = self.half_life.min(RAMP * seen as f64);
        0.5f64.powf(images as f64 / h)
    }

    /// Fold in G's weights after an update.
    pub fn update(&mut self, be: &B, store: &ParamStore<B>) {
        self.images_seen += self.images_per_update;
        let step = (1.0 - self.decay(self.images_per_update, self.images_seen)) as f32;
        be.copy(View::whole(&store.value), ViewMut::whole(&mut self.diff));
        be.axpy(-1.0, View::whole(&self.value), ViewMut::whole(&mut self.diff));
        be.axpy(step, View::whole(&self.diff), ViewMut::whole(&mut self.value));
        self.stats_of = None;
    }

    /// Swap the average's weights and statistics with G's (twice restores both): G then draws
    /// as the averaged generator.
    pub fn swap_with(&mut self, store: &mut ParamStore<B>) {
        std::mem::swap(&mut self.value, &mut store.value);
        std::mem::swap(&mut self.state, &mut store.state);
    }
}

impl<B: Backend> GanTrainer<B> {
    /// `--g-ema`: average G's weights from now on, with a half-life of `half_life` images and
    /// `global_batch` images to each of G's updates.
    pub fn use_g_ema(&mut self, half_life: u64, global_batch: usize) -> Result<()> {
        self.g_ema = Some(GeneratorAverage::new(&self.be, &self.model.g.store, half_life, global_batch)?);
        Ok(())
    }

    /// G's update is whole in its weights: the average takes it in.
    pub(super) fn g_update_landed(&mut self) {
        if let Some(avg) = self.g_ema.as_mut() {
            let t0 = Instant::now();
            avg.update(&self.be, &self.model.g.store);
            self.timeline.span(Track::Compute, "ema", "G", t0, Instant::now());
        }
    }

    /// The generator's images on `noise` [n, nz] (sample-major): with `--g-ema` the averaged
    /// G's, else G's (`draw`).
    pub fn sample(&mut self, noise: &[f32]) -> Vec<f32> {
        self.draw(noise, self.g_ema.is_some())
    }

    /// G in evaluation mode on `noise` [n, nz] (sample-major), in chunks of the training
    /// batch (no new buffers), with its update landed; `averaged`: the average's weights and
    /// standing statistics in place of G's (put back after). Returns images [n, H, W] in
    /// [-1, 1].
    pub fn draw(&mut self, noise: &[f32], averaged: bool) -> Vec<f32> {
        self.finish_pending();
        if averaged {
            self.refresh_standing_statistics();
        }
        let mut avg = if averaged { self.g_ema.take() } else { None };
        if let Some(a) = avg.as_mut() {
            a.swap_with(&mut self.model.g.store);
        }
        let (nz, side) = (self.model.nz, self.model.image_size);
        let images = crate::model::dcgan::draw(&self.be, &mut self.model.g, noise, nz, side);
        if let Some(mut a) = avg {
            a.swap_with(&mut self.model.g.store);
            self.g_ema = Some(a);
        }
        images
    }

    /// `--g-ema`: the averaged generator for a checkpoint, its standing statistics current
    /// (G's update landed first).
    pub fn averaged_generator(&mut self) -> Option<AveragedGenerator> {
        self.finish_pending();
        self.refresh_standing_statistics();
        let a = self.g_ema.as_ref()?;
        let (values, state) = (download(&self.be, &a.value), download(&self.be, &a.state));
        let net = NetTensors { values, state, batches_tracked: self.model.g.store.bn_batches_tracked };
        Some(AveragedGenerator { net, images_seen: a.images_seen })
    }

    /// Collective: the average's standing statistics computed now, and rank 0's taken by every
    /// rank (ranks that round differently would otherwise score images of slightly different
    /// generators). At an epoch's end, before anything draws.
    pub fn share_average_statistics(&mut self, job: &Job) -> Result<()> {
        if self.g_ema.is_none() {
            return Ok(());
        }
        self.finish_pending();
        self.refresh_standing_statistics();
        let avg = self.g_ema.as_mut().expect("checked above");
        broadcast_buf_from_root(job, &self.be, &mut avg.state)
    }

    /// The average's standing statistics, unless they are current: its weights and
    /// statistics in G's place for `standing_passes` training-mode forwards, then put back.
    fn refresh_standing_statistics(&mut self) {
        let updates = self.model.g.store.adam_steps;
        let Some(mut avg) = self.g_ema.take_if(|a| a.stats_of != Some(updates)) else { return };
        let g = &mut self.model.g;
        avg.swap_with(&mut g.store);
        standing_statistics(&self.be, g, self.model.nz, self.cfg.seed);
        avg.swap_with(&mut g.store);
        avg.stats_of = Some(updates);
        self.g_ema = Some(avg);
    }
}

/// The standing statistics of the generator `g` (its running statistics recomputed for its
/// weights) on the noise of a run seeded `seed`: `standing_passes` batches of `g.batch`,
/// drawn alike on every rank.
pub fn standing_statistics<B: Backend>(be: &B, g: &mut Net<B>, nz: usize, seed: u64) {
    let (b, passes) = (g.batch, standing_passes(g.batch));
    // [passes * b, nz] sample-major; each pass's [nz, b] goes through `z`.
    let noise = fixed_noise(seed_for(seed, STANDING_NOISE), passes * b, nz);
    let mut z = vec![0.0f32; nz * b];
    g.standing_statistics(be, passes, |k, input| {
        to_channel_major(&noise[k * b * nz..(k + 1) * b * nz], nz, &mut z);
        be.upload(&z, ViewMut::whole(input));
    });
}
