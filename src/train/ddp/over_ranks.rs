//! The small collectives a step makes through the comm thread beside its gradient buckets:
//! the per-step metrics averaged over ranks, and `--sync-bn`'s batch-norm sums.

use crate::backend::{Backend, ViewMut};
use crate::comm::{BucketRequest, CommHandle, Ticket};
use crate::nn::BnSync;
use std::rc::Rc;

/// The bucket id of the per-step metrics (after every gradient bucket's).
const METRICS_ID: u32 = 1000;

/// The per-step metrics averaged over ranks: one exact (f32) allreduce through the comm
/// thread. `--no-exchange` keeps it, so that its ranks stay in step and report the same
/// losses (and the same stop and divergence decisions) as a run that exchanges gradients.
pub struct MetricsOverRanks {
    comm: Rc<CommHandle>,
    in_flight: Option<Ticket>,
}

impl MetricsOverRanks {
    pub fn new(comm: Rc<CommHandle>) -> Self {
        MetricsOverRanks { comm, in_flight: None }
    }

    pub fn start(&mut self, values: &[f32]) {
        let req = BucketRequest::new(METRICS_ID, "metrics", values.to_vec()).exact();
        self.in_flight = Some(self.comm.submit(req));
    }

    pub fn finish(&mut self, out: &mut [f32]) {
        let ticket = self.in_flight.take().expect("start_metrics first");
        match self.comm.wait(ticket) {
            Ok(mut done) => out.copy_from_slice(done.data.as_mut_slice()),
            Err(e) => self.comm.abort(1, &format!("metrics exchange failed: {e:#}")),
        }
    }
}

/// `--sync-bn`: batch-norm sums over ranks through the comm thread.
pub struct CommBnSync {
    pub comm: Rc<CommHandle>,
    host: Vec<f32>,
}

impl CommBnSync {
    pub fn new(comm: Rc<CommHandle>) -> Self {
        CommBnSync { comm, host: Vec::new() }
    }
}

impl<B: Backend> BnSync<B> for CommBnSync {
    fn all_sum(&mut self, be: &B, mut buf: ViewMut<B>) -> usize {
        self.host.resize(buf.len, 0.0);
        be.download(buf.as_view(), &mut self.host);
        let mut sums = match self.comm.allreduce_mean(std::mem::take(&mut self.host)) {
            Ok(v) => v,
            Err(e) => self.comm.abort(1, &format!("batch-norm statistics exchange failed: {e:#}")),
        };
        let ranks = self.comm.world().size;
        sums.iter_mut().for_each(|v| *v *= ranks as f32);
        be.upload(&sums, buf.rb());
        self.host = sums;
        ranks
    }
}
