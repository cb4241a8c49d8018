//! `--distributed-after STEPS` (CNTK's distributed_after): the run's first steps train as one
//! worker would, every rank computing the same step of a 1-rank run (its data order, its
//! noise, nothing exchanged), so that the ranks stay identical without waiting on each other;
//! then every rank takes rank 0's weights and Adam state and data parallelism starts. Every
//! rank computing, rather than rank 0 alone while the others wait, keeps them in lockstep
//! (the stall detector and the per-step metrics go on as in any step) at no cost in time: the
//! others would only have waited.

use super::Run;
use crate::backend::Backend;
use crate::data::Shard;
use crate::nn::BnSync;
use crate::train::config::block_settings;
use crate::train::ddp::block_momentum::BlockMomentum;
use crate::train::ddp::exchange::Exchange;
use crate::train::ddp::sync;
use anyhow::Result;

/// What the steps of the parallel phase use, set aside while the run trains solo.
pub(super) struct Parked<B: Backend> {
    pub exchange: Box<dyn Exchange<B>>,
    pub bn_sync: Option<Box<dyn BnSync<B>>>,
    /// One worker's data order (the 1-rank shard of the same data, batch and seed).
    pub solo_shard: Shard,
}

impl<B: Backend> Run<'_, B> {
    /// Start data parallelism if the run has reached `--distributed-after`: the trainer takes
    /// the parked exchange, and with `broadcast` every rank takes rank 0's weights, running
    /// statistics and Adam state (the same bits where every rank computed alike; this makes
    /// sure of it where their CPUs round differently). Collective.
    pub(super) fn go_parallel_if_due(&mut self, broadcast: bool) -> Result<()> {
        if self.trainer.step < self.args.parallel.distributed_after {
            return Ok(());
        }
        let Some(parked) = self.parked.take() else { return Ok(()) };
        let t = &mut self.trainer;
        t.finish_pending();
        if broadcast {
            for store in [&mut t.model.g.store, &mut t.model.d.store] {
                sync::broadcast_from_root(self.job, &t.be, store, true)?;
            }
            if let Some(avg) = t.g_ema.as_mut() {
                avg.take_from_root(self.job, &t.be)?;
            }
        }
        // From now on each of G's updates holds the global batch.
        if let Some(avg) = t.g_ema.as_mut() {
            avg.images_per_update = self.settings.global_batch as u64;
        }
        t.exchange = parked.exchange;
        t.bn_sync = parked.bn_sync;
        t.solo = false;
        self.start_blocks_if_parallel();
        Ok(())
    }

    /// `--sync-every`: the first block starts from the weights every rank now shares (a
    /// resume's block state, restored before, is kept).
    pub(super) fn start_blocks_if_parallel(&mut self) {
        if self.block.is_some() || self.trainer.solo {
            return;
        }
        if let Some(settings) = block_settings(self.args, self.job.world.size) {
            let t = &self.trainer;
            self.block = Some(BlockMomentum::start(settings, &t.be, [&t.model.g.store, &t.model.d.store]));
        }
    }

    /// The data order of `epoch` while the run trains solo (None once parallel).
    pub(super) fn solo_order(&self, epoch: u64) -> Option<crate::data::EpochOrder> {
        self.parked.as_ref().map(|p| p.solo_shard.epoch(epoch))
    }
}
