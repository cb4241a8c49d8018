//! This process's place in the job, and the rule that keeps ranks from hanging on errors:
//! a failure that every rank meets together (bad options, a diverging loss) ends every rank
//! cleanly after an agreement round; a failure of one rank alone ends the whole job at once.

use crate::comm::PeerFailed;
use crate::comm::{CommHandle, WorldInfo};
use anyhow::Result;
use std::rc::Rc;

pub struct Job {
    pub comm: Rc<CommHandle>,
    pub world: WorldInfo,
}

impl Job {
    pub fn new(comm: Rc<CommHandle>) -> Self {
        let world = comm.world().clone();
        Job { comm, world }
    }

    pub fn is_root(&self) -> bool {
        self.world.rank == 0
    }

    /// Every rank learns whether any rank's `r` failed. If one did, every rank returns an
    /// error: its own, or `PeerFailed`. When rank 0 failed too, the others keep quiet (their
    /// error is almost always the same, and rank 0 prints it).
    pub fn agree<T>(&self, r: Result<T>) -> Result<T> {
        if self.world.size == 1 {
            return r;
        }
        let failed = if r.is_err() { 1.0 } else { 0.0 };
        let root_failed = if self.is_root() { failed } else { 0.0 };
        let v = self.comm.allreduce_mean_f64(vec![failed, root_failed])?;
        match r {
            Err(_) if !self.is_root() && v[1] > 0.0 => Err(PeerFailed.into()),
            Err(e) => Err(e),
            Ok(_) if v[0] > 0.0 => Err(PeerFailed.into()),
            Ok(v) => Ok(v),
        }
    }

    /// A failure of this rank alone during training (the others are already waiting for it in
    /// the next collective): print it and end the whole job.
    pub fn fail(&self, e: anyhow::Error) -> ! {
        if self.world.size == 1 {
            eprintln!("error: {e:#}");
            std::process::exit(1);
        }
        self.comm.abort(1, &format!("error: {e:#}"))
    }

    /// `r`'s value, or the end of the job (see `fail`).
    pub fn or_fail<T>(&self, r: Result<T>) -> T {
        r.unwrap_or_else(|e| self.fail(e))
    }
}
