//! `--sync-every K`: block momentum (BMUF, Chen & Huo 2016, as CNTK runs it). Each rank
//! trains K steps alone on its shard with its own Adam; then one allreduce averages the
//! ranks' weights and the block's step G = w_global - mean(w_local) is filtered by momentum:
//!
//! ```text
//! v = bm v + blr G;   w_global -= v;   every rank continues from w_global (Nesterov: w_global - bm v)
//! ```
//!
//! With bm = 0 and blr = 1 that is plain model averaging. Batch-norm running statistics are
//! averaged at each sync. One exchange of the weights every K steps instead of the gradients
//! every step: 1/K of the bytes.
//!
//! The exchange can overlap the next block's first step (`start_sync`, then `finish_sync`
//! after that step): the step runs from the rank's own weights, and what it moved them by is
//! carried onto the block's result, w = w_global' + (w_now - w_sent). The next block then
//! starts one step in, from that; the ranks differ by their one step until the next sync.

use super::sync::download;
use crate::backend::{Backend, ViewMut};
use crate::checkpoint::block::BlockCheckpoint;
use crate::nn::params::ParamStore;
use crate::train::job::Job;
use anyhow::Result;

/// The choices of `--sync-every`, `--block-momentum`, `--block-lr`, `--block-nesterov` and
/// `--block-reset-adam`, resolved for the rank count.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockSettings {
    pub every: u64,
    pub momentum: f32,
    pub lr: f32,
    pub nesterov: bool,
    /// Zero each rank's Adam moments (and its step count) at every sync.
    pub reset_adam: bool,
}

impl BlockSettings {
    /// The block momentum BMUF recommends for `ranks`: 1 - 1/N.
    pub fn default_momentum(ranks: usize) -> f32 {
        1.0 - 1.0 / ranks as f32
    }
}

/// The global model and the momentum of both networks, `[param_len]` each, on the host.
pub struct BlockMomentum {
    pub settings: BlockSettings,
    /// [G, D]: the global model the current block started from (before any lookahead).
    pub global: [Vec<f32>; 2],
    /// [G, D]: the filtered block step.
    pub velocity: [Vec<f32>; 2],
    /// A sync posted and not yet applied.
    pending: Option<PendingSync>,
}

/// The averages of a block's end on their way, and what this rank sent.
struct PendingSync {
    /// [G, D] x [weights, running statistics] as they were sent.
    sent: [[Vec<f32>; 2]; 2],
    /// Their averages, in that order (statistics only where a network has some).
    posted: Vec<crate::comm::handle::Posted>,
    /// Carry the steps taken since onto the result (an overlapped sync).
    carry: bool,
    sent_before: u64,
}

/// One network's block update in place: from the global model `global`, the ranks' mean
/// `mean` and the momentum `velocity`, the weights every rank continues from.
pub fn block_update(s: &BlockSettings, global: &mut [f32], velocity: &mut [f32], mean: &[f32]) -> Vec<f32> {
    let mut next = vec![0.0; global.len()];
    for (((w, v), &m), out) in global.iter_mut().zip(velocity.iter_mut()).zip(mean).zip(&mut next) {
        let g = *w - m;
        *v = s.momentum * *v + s.lr * g;
        *w -= *v;
        *out = if s.nesterov { *w - s.momentum * *v } else { *w };
    }
    next
}

impl BlockMomentum {
    /// A first block starting from the weights in `stores` (the same on every rank).
    pub fn start<B: Backend>(settings: BlockSettings, be: &B, stores: [&ParamStore<B>; 2]) -> Self {
        let global = stores.map(|s| download(be, &s.value));
        let velocity = [vec![0.0; global[0].len()], vec![0.0; global[1].len()]];
        BlockMomentum { settings, global, velocity, pending: None }
    }

    /// Whether a sync was started and not yet finished.
    pub fn pending(&self) -> bool {
        self.pending.is_some()
    }

    /// Whether the step just completed (`step`, counted from 1 since the ranks went parallel
    /// at `parallel_from`) ends a block.
    pub fn due(&self, step: u64, parallel_from: u64) -> bool {
        step > parallel_from && (step - parallel_from).is_multiple_of(self.settings.every)
    }

    /// End the block: average the weights and running statistics over the ranks, apply the
    /// block momentum, and reset Adam where asked. Collective. Returns the bytes this rank
    /// sent.
    pub fn sync<B: Backend>(&mut self, job: &Job, be: &B, stores: [&mut ParamStore<B>; 2]) -> Result<u64> {
        self.start_sync(job, be, [&*stores[0], &*stores[1]], false);
        self.finish_sync(job, be, stores)
    }

    /// Post the block's averages and return at once (`carry`: the steps taken before
    /// `finish_sync` are carried onto its result). Collective, in the same order everywhere.
    pub fn start_sync<B: Backend>(&mut self, job: &Job, be: &B, stores: [&ParamStore<B>; 2], carry: bool) {
        let sent_before = job.comm.helper_bytes_sent();
        let sent = stores.map(|s| [download(be, &s.value), download(be, &s.state)]);
        let mut posted = Vec::new();
        for [weights, stats] in &sent {
            posted.push(job.comm.post_mean_f32(weights.clone()));
            if !stats.is_empty() {
                posted.push(job.comm.post_mean_f32(stats.clone()));
            }
        }
        self.pending = Some(PendingSync { sent, posted, carry, sent_before });
    }

    /// Take the averages `start_sync` posted and apply the block momentum (the weights and
    /// statistics moved since carried on, where it said so). Returns the bytes this rank sent.
    pub fn finish_sync<B: Backend>(&mut self, job: &Job, be: &B, stores: [&mut ParamStore<B>; 2]) -> Result<u64> {
        let Some(PendingSync { sent, posted, carry, sent_before }) = self.pending.take() else { return Ok(0) };
        let mut posted = posted.into_iter();
        // what + (now - then), the steps since the sync carried on (overlapped); else what.
        let carried = |what: Vec<f32>, then: &[f32], now: &B::Buf| match carry {
            true => what.iter().zip(then).zip(download(be, now)).map(|((w, t), n)| w + (n - t)).collect(),
            false => what,
        };
        for (k, (store, [weights, stats])) in stores.into_iter().zip(&sent).enumerate() {
            let mean = job.comm.wait_received(posted.next().expect("posted per network"))?;
            let next = block_update(&self.settings, &mut self.global[k], &mut self.velocity[k], &mean);
            be.upload(&carried(next, weights, &store.value), ViewMut::whole(&mut store.value));
            if !stats.is_empty() {
                let mean = job.comm.wait_received(posted.next().expect("posted statistics"))?;
                be.upload(&carried(mean, stats, &store.state), ViewMut::whole(&mut store.state));
            }
            if self.settings.reset_adam {
                let zeros = vec![0.0; store.layout.param_len()];
                be.upload(&zeros, ViewMut::whole(&mut store.m));
                be.upload(&zeros, ViewMut::whole(&mut store.v));
                store.adam_steps = 0;
            }
        }
        Ok(job.comm.helper_bytes_sent() - sent_before)
    }
}

/// A rank's own weights and moments, [G, D] x [weights, exp_avg, exp_avg_sq].
fn own_state<B: Backend>(be: &B, stores: [&ParamStore<B>; 2]) -> [[Vec<f32>; 3]; 2] {
    stores.map(|s| [download(be, &s.value), download(be, &s.m), download(be, &s.v)])
}

impl BlockMomentum {
    /// What a checkpoint keeps: the block state, and every other rank's own weights and
    /// moments (a checkpoint may fall inside a block). Rank 0 gets it; the others None.
    /// Collective.
    pub fn gather<B: Backend>(
        &self,
        job: &Job,
        be: &B,
        stores: [&ParamStore<B>; 2],
    ) -> Result<Option<BlockCheckpoint>> {
        let mine: Vec<f32> = match job.is_root() {
            true => Vec::new(),
            false => own_state(be, stores).iter().flatten().flatten().copied().collect(),
        };
        let Some(parts) = super::sync::gather_f32(job, &mine)? else { return Ok(None) };
        let lens = self.global.each_ref().map(Vec::len);
        let ranks = parts[1..]
            .iter()
            .map(|v| {
                let (g, d) = v.split_at(3 * lens[0]);
                let three = |x: &[f32], n: usize| [x[..n].to_vec(), x[n..2 * n].to_vec(), x[2 * n..3 * n].to_vec()];
                [three(g, lens[0]), three(d, lens[1])]
            })
            .collect();
        Ok(Some(BlockCheckpoint { global: self.global.clone(), velocity: self.velocity.clone(), ranks }))
    }

    /// A resume inside block momentum: every rank takes the block state from the checkpoint
    /// rank 0 read (`ck`, ignored elsewhere) and ranks 1.. their own weights and moments.
    /// None where the checkpoint has none. Collective.
    pub fn restore<B: Backend>(
        settings: BlockSettings,
        job: &Job,
        be: &B,
        stores: [&mut ParamStore<B>; 2],
        ck: Option<&BlockCheckpoint>,
    ) -> Result<Option<Self>> {
        let flat: Vec<f32> = ck.map_or_else(Vec::new, |b| {
            let global = b.global.iter().chain(&b.velocity).flatten();
            global.chain(b.ranks.iter().flatten().flatten().flatten()).copied().collect()
        });
        let all = job.comm.broadcast_f32(0, flat)?;
        if all.is_empty() {
            return Ok(None);
        }
        let lens = stores.each_ref().map(|s| s.layout.param_len());
        let (head, rest) = all.split_at(2 * (lens[0] + lens[1]));
        let (g_global, rest_head) = head.split_at(lens[0]);
        let (d_global, velocity) = rest_head.split_at(lens[1]);
        let (g_velocity, d_velocity) = velocity.split_at(lens[0]);
        if job.world.rank > 0 {
            let per_rank = 3 * (lens[0] + lens[1]);
            let mine = &rest[(job.world.rank - 1) * per_rank..job.world.rank * per_rank];
            let (g, d) = mine.split_at(3 * lens[0]);
            for (store, (part, n)) in stores.into_iter().zip([(g, lens[0]), (d, lens[1])]) {
                be.upload(&part[..n], ViewMut::whole(&mut store.value));
                be.upload(&part[n..2 * n], ViewMut::whole(&mut store.m));
                be.upload(&part[2 * n..], ViewMut::whole(&mut store.v));
            }
        }
        let global = [g_global.to_vec(), d_global.to_vec()];
        let velocity = [g_velocity.to_vec(), d_velocity.to_vec()];
        Ok(Some(BlockMomentum { settings, global, velocity, pending: None }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(momentum: f32, lr: f32, nesterov: bool) -> BlockSettings {
        BlockSettings { every: 4, momentum, lr, nesterov, reset_adam: false }
    }

    /// bm = 0, blr = 1: the weights every rank continues from are the ranks' mean.
    #[test]
    fn without_momentum_a_sync_is_model_averaging() {
        let mut global = vec![1.0, -2.0, 0.5];
        let mut v = vec![0.3, 0.1, -0.2];
        let mean = [0.75, -1.5, 0.25];
        let next = block_update(&settings(0.0, 1.0, false), &mut global, &mut v, &mean);
        assert_eq!(next, mean);
        assert_eq!(global, mean);
    }

    /// Two blocks against the recurrence written out in f64.
    #[test]
    fn the_momentum_carries_the_last_block_step_into_the_next() {
        for nesterov in [false, true] {
            let s = settings(0.75, 0.9, nesterov);
            let (mut global, mut v) = (vec![2.0f32], vec![0.0f32]);
            let (mut gw, mut gv) = (2.0f64, 0.0f64);
            let mut start = 2.0f64;
            for mean in [1.5f32, 1.25] {
                let next = block_update(&s, &mut global, &mut v, &[mean]);
                gv = 0.75 * gv + 0.9 * (gw - mean as f64);
                gw -= gv;
                start = if nesterov { gw - 0.75 * gv } else { gw };
                assert!((next[0] as f64 - start).abs() < 1e-6, "nesterov {nesterov}: {} vs {start}", next[0]);
                assert!((global[0] as f64 - gw).abs() < 1e-6);
            }
            // The second block moved further than its own step: the first one's momentum.
            assert!(start < 1.25 - 0.1, "nesterov {nesterov}: {start}");
        }
    }
}
