//! The seam between backward and the gradient exchange: networks report each completed
//! gradient group; an `Exchange` turns groups into buckets, averages them over ranks, and
//! applies Adam per bucket as each one arrives.

use super::buckets::{Bucket, plan_net};
use super::over_ranks::MetricsOverRanks;
use crate::backend::Backend;
use crate::model::dcgan::Dcgan;
use crate::nn::params::ParamStore;
use crate::train::timeline::{Timeline, Track};
use std::time::{Duration, Instant};

/// Per-run totals for the summary.
#[derive(Clone, Debug, Default)]
pub struct ExchangeStats {
    /// Time the comm thread spent averaging buckets.
    pub comm_busy: Duration,
    /// The comm thread's CPU time within `comm_busy`: taken from the cores the compute
    /// threads would otherwise have (see `BucketDone::cpu`).
    pub comm_cpu: Duration,
    /// Time the training thread spent blocked waiting for buckets once their gradients were
    /// on the host: communication that backward did not hide.
    pub exposed: Duration,
    /// Time the training thread spent waiting for the device to finish a bucket's gradients
    /// and their copy to the host (CUDA; zero on the CPU): compute, not communication.
    pub device_wait: Duration,
    /// Gradient bytes averaged.
    pub bytes: u64,
    /// Bytes staged out of the gradients to the host (as many come back): the packed form
    /// where the device packs the wire.
    pub staged: u64,
    /// Bytes this rank sent for gradients, counted at the transport, and the steps that sent
    /// them: [1-bit's f32 warm-up, in `--wire`'s form].
    pub sent: [u64; 2],
    pub sent_steps: [u64; 2],
    /// Every bucket, G's then D's, in submission order.
    pub buckets: Vec<BucketStats>,
}

/// One bucket's share of the exchange, summed over the run.
#[derive(Clone, Debug)]
pub struct BucketStats {
    pub label: &'static str,
    pub algorithm: &'static str,
    /// Time the comm thread spent averaging it.
    pub comm_busy: Duration,
    /// Time the training thread waited for it (see `ExchangeStats::exposed`).
    pub exposed: Duration,
}

/// Which network a call is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NetId {
    G = 0,
    D = 1,
}

/// One Adam update of a network: its learning rate and its 1-based step number.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Update {
    pub lr: f32,
    pub t: u64,
}

impl Update {
    /// The next update of the network whose parameters are `store` (counts it there).
    pub fn next<B: Backend>(store: &mut ParamStore<B>, lr: f32) -> Self {
        store.adam_steps += 1;
        Update { lr, t: store.adam_steps }
    }
}

pub trait Exchange<B: Backend> {
    /// Every gradient of stage `stage` of `net` is complete in `store.grad`.
    fn group_ready(&mut self, be: &B, net: NetId, store: &ParamStore<B>, stage: usize, tl: &mut Timeline);
    /// Submit whatever is complete but was held back (`--no-overlap` holds everything until
    /// backward is over).
    fn flush(&mut self, be: &B, net: NetId, store: &ParamStore<B>, tl: &mut Timeline);
    /// Wait for every bucket of `net` and apply Adam (`update`) to each one as soon as it is
    /// averaged.
    fn finish(&mut self, be: &B, net: NetId, store: &mut ParamStore<B>, update: Update, tl: &mut Timeline);
    /// The same for the bucket holding stage `stage` of `net` alone, if its Adam has not
    /// run yet in this update: the next forward lands the update stage by stage, right before
    /// each stage runs, while later buckets still travel (the MPI paper's "overtaking").
    /// Only between the `flush` of an update and its `finish`, which completes the rest.
    fn finish_stage(
        &mut self,
        be: &B,
        net: NetId,
        store: &mut ParamStore<B>,
        stage: usize,
        u: Update,
        tl: &mut Timeline,
    );
    /// The buckets of `net`, in submission order.
    fn buckets(&self, net: NetId) -> &[Bucket];
    /// Start averaging this step's metrics over ranks (before G's buckets, so that they do
    /// not wait behind them); `finish_metrics` returns the averages.
    fn start_metrics(&mut self, values: &[f32]);
    fn finish_metrics(&mut self, out: &mut [f32]);
    /// `--wire 1bit`: gradients of steps from `step` on travel compressed (before: exact).
    fn compress_from(&mut self, _step: u64) {}
    /// `--wire 1bit`: the L2 norm of this rank's residuals of (G, D) after their last exchange;
    /// None for a network before its first 1-bit exchange, or that this rank does not average
    /// (a pipeline stage holds one of them).
    fn residual_norms(&self, _be: &B) -> [Option<f32>; 2] {
        [None, None]
    }
    /// `--wire 1bit`: this rank's residuals (`ddp::residuals`); None before any travelled.
    fn residuals(&self, _be: &B) -> anyhow::Result<Option<crate::checkpoint::RankResiduals>> {
        Ok(None)
    }
    /// `--wire 1bit`: continue from a checkpoint's residuals.
    fn set_residuals(&mut self, _be: &B, _r: &crate::checkpoint::RankResiduals) -> anyhow::Result<()> {
        Ok(())
    }
    /// Totals so far (none for one rank).
    fn stats(&self) -> ExchangeStats {
        ExchangeStats::default()
    }
    /// `stats().exposed` without copying the per-bucket list: read every step.
    fn exposed(&self) -> Duration {
        Duration::ZERO
    }
}

/// The buckets of both networks (ids: G's first, then D's).
pub fn plan_buckets<B: Backend>(model: &Dcgan<B>, bucket_bytes: usize) -> [Vec<Bucket>; 2] {
    let g = plan_net(&model.g, bucket_bytes, 0);
    let d = plan_net(&model.d, bucket_bytes, g.len() as u32);
    [g, d]
}

/// One rank, or `--no-exchange`: no gradient is averaged, so Adam runs per bucket when the
/// step asks. The metrics are still averaged when `over_ranks` is given.
pub struct SoloExchange {
    buckets: [Vec<Bucket>; 2],
    /// Per network and bucket: Adam already ran in the update being finished.
    applied: [Vec<bool>; 2],
    metrics: Vec<f32>,
    over_ranks: Option<MetricsOverRanks>,
}

impl SoloExchange {
    pub fn new(buckets: [Vec<Bucket>; 2]) -> Self {
        let applied = [vec![false; buckets[0].len()], vec![false; buckets[1].len()]];
        SoloExchange { buckets, applied, metrics: Vec::new(), over_ranks: None }
    }

    /// `--no-exchange` on several ranks: the gradients stay local, the metrics do not.
    pub fn with_metrics_over_ranks(mut self, m: MetricsOverRanks) -> Self {
        self.over_ranks = Some(m);
        self
    }

    /// Adam on bucket `k` of `net` unless it already ran in this update.
    fn apply<B: Backend>(
        &mut self,
        be: &B,
        net: NetId,
        k: usize,
        store: &mut ParamStore<B>,
        u: Update,
        tl: &mut Timeline,
    ) {
        let n = net as usize;
        if std::mem::replace(&mut self.applied[n][k], true) {
            return;
        }
        let b = &self.buckets[n][k];
        let t0 = Instant::now();
        store.adam(be, b.range.clone(), u.lr, u.t);
        tl.span(Track::Compute, "adam", b.label, t0, Instant::now());
    }
}

impl<B: Backend> Exchange<B> for SoloExchange {
    fn group_ready(&mut self, _: &B, _: NetId, _: &ParamStore<B>, _: usize, _: &mut Timeline) {}
    fn flush(&mut self, _: &B, _: NetId, _: &ParamStore<B>, _: &mut Timeline) {}
    fn finish(&mut self, be: &B, net: NetId, store: &mut ParamStore<B>, u: Update, tl: &mut Timeline) {
        for k in 0..self.buckets[net as usize].len() {
            self.apply(be, net, k, store, u, tl);
        }
        self.applied[net as usize].fill(false);
    }
    fn finish_stage(
        &mut self,
        be: &B,
        net: NetId,
        store: &mut ParamStore<B>,
        stage: usize,
        u: Update,
        tl: &mut Timeline,
    ) {
        if let Some(k) = self.buckets[net as usize].iter().position(|b| b.stages.contains(&stage)) {
            self.apply(be, net, k, store, u, tl);
        }
    }
    fn buckets(&self, net: NetId) -> &[Bucket] {
        &self.buckets[net as usize]
    }
    fn start_metrics(&mut self, values: &[f32]) {
        match &mut self.over_ranks {
            Some(m) => m.start(values),
            None => {
                self.metrics.clear();
                self.metrics.extend_from_slice(values);
            }
        }
    }
    fn finish_metrics(&mut self, out: &mut [f32]) {
        match &mut self.over_ranks {
            Some(m) => m.finish(out),
            None => out.copy_from_slice(&self.metrics),
        }
    }
}
