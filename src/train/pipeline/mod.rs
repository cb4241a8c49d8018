//! `--pipeline`: G on one rank and D on the next, a step's batch going through them in
//! micro-batches (GPipe's schedule; `step.rs`). Each stage trains its own network with its
//! own Adam; the other network on its rank is a copy brought up to date only where the whole
//! model is needed (checkpoints, samples, evaluation: `share_models`).

pub mod step;

use crate::backend::{Backend, ViewMut};
use crate::comm::CommHandle;
use crate::model::dcgan::Dcgan;
use crate::nn::params::ParamStore;
use crate::train::ddp::sync::download;
use anyhow::Result;
use std::rc::Rc;
use std::time::Duration;

/// Which network a stage trains.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StageRole {
    /// The first stage: G's forward and backward; its fakes go to the D stage.
    Generator,
    /// The second stage: D's passes; the gradient of each fake image goes back.
    Discriminator,
}

/// A rank's place in a pipeline.
pub struct PipelineStage {
    pub role: StageRole,
    /// The rank of the other stage.
    pub peer: usize,
    pub comm: Rc<CommHandle>,
    /// Time this stage has waited for the other's activations or gradients (its share of the
    /// bubble), over the run.
    pub idle: Duration,
}

impl PipelineStage {
    /// Rank `rank`'s stage: even ranks hold G, odd ranks D, in pairs (0, 1), (2, 3), ...
    pub fn of_rank(rank: usize, comm: Rc<CommHandle>) -> Self {
        let role = if rank.is_multiple_of(2) { StageRole::Generator } else { StageRole::Discriminator };
        let peer = if rank.is_multiple_of(2) { rank + 1 } else { rank - 1 };
        PipelineStage { role, peer, comm, idle: Duration::ZERO }
    }
}

/// The bubble of GPipe's schedule with `stages` stages and `micro` micro-batches of equal
/// cost: the fraction of a stage's time spent idle, (p - 1) / (m + p - 1).
pub fn bubble_formula(stages: usize, micro: usize) -> f64 {
    (stages - 1) as f64 / (micro + stages - 1) as f64
}

/// A network's state as floats: weights, running statistics, Adam's moments, then the two
/// counters' bits.
fn flatten<B: Backend>(be: &B, s: &ParamStore<B>) -> Vec<f32> {
    let mut v = Vec::new();
    for buf in [&s.value, &s.state, &s.m, &s.v] {
        v.extend(download(be, buf));
    }
    for c in [s.adam_steps, s.bn_batches_tracked] {
        v.extend([f32::from_bits(c as u32), f32::from_bits((c >> 32) as u32)]);
    }
    v
}

fn install<B: Backend>(be: &B, s: &mut ParamStore<B>, v: &[f32]) {
    let mut at = 0;
    for buf in [&mut s.value, &mut s.state, &mut s.m, &mut s.v] {
        let n = crate::backend::DeviceBuf::len(buf);
        be.upload(&v[at..at + n], ViewMut::whole(buf));
        at += n;
    }
    let word = |i: usize| v[at + 2 * i].to_bits() as u64 | (v[at + 2 * i + 1].to_bits() as u64) << 32;
    (s.adam_steps, s.bn_batches_tracked) = (word(0), word(1));
}

impl<B: Backend> crate::train::step::GanTrainer<B> {
    /// A pipeline's stages each take the other's network (`share_models`); nothing without
    /// a pipeline.
    pub fn share_pipeline_models(&mut self) -> Result<()> {
        match &self.pipeline {
            Some(stage) => share_models(stage, &self.be, &mut self.model),
            None => Ok(()),
        }
    }
}

/// Both stages of a pipeline take the other's network (weights, statistics, Adam state), so
/// that each holds the whole model as it stands: before a checkpoint (written by rank 0 in
/// the usual layout), the sample grids and evaluation. Collective on the pair.
pub fn share_models<B: Backend>(stage: &PipelineStage, be: &B, model: &mut Dcgan<B>) -> Result<()> {
    let (mine, theirs) = match stage.role {
        StageRole::Generator => (&model.g.store, &mut model.d.store),
        StageRole::Discriminator => (&model.d.store, &mut model.g.store),
    };
    let out = flatten(be, mine);
    // G's stage sends first, D's receives first: two blocking sends could wait on each other.
    let got = match stage.role {
        StageRole::Generator => {
            stage.comm.wait_sent(stage.comm.send_f32(stage.peer, out))?;
            stage.comm.wait_received(stage.comm.recv_f32(stage.peer))?
        }
        StageRole::Discriminator => {
            let got = stage.comm.wait_received(stage.comm.recv_f32(stage.peer))?;
            stage.comm.wait_sent(stage.comm.send_f32(stage.peer, out))?;
            got
        }
    };
    install(be, theirs, &got);
    Ok(())
}
