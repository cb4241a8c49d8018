//! The best checkpoint by FID: after every evaluated epoch every rank learns rank 0's figure
//! (of the generator `sample` draws from: the average with `--g-ema`), and where it beats the
//! best so far the epoch's checkpoint is written (were it not anyway) and
//! `checkpoints/best` moves to it (`checkpoint::best`).

use super::Run;
use crate::backend::Backend;
use crate::checkpoint::best::{self, Best};
use crate::record::summary::EpochQuality;
use anyhow::Result;
use std::path::Path;

/// The figure a run keeps its best by: the averaged generator's where there is one.
fn score_of(q: &EpochQuality) -> f64 {
    q.more.fid_ema.unwrap_or(q.fid)
}

impl<B: Backend> Run<'_, B> {
    /// Whether this run keeps its best checkpoint: quality is measured and not declined.
    fn keeps_best(&self) -> bool {
        self.quality.is_some() && !self.args.checkpoints.no_keep_best
    }

    /// Collective where the run keeps its best: the best FID of the run directory so far (its
    /// marker, read by rank 0: a resumed run goes on from its own), on every rank.
    pub(super) fn agree_on_best(&mut self) -> Result<()> {
        if !self.keeps_best() {
            return Ok(());
        }
        let marked = self.outputs.as_ref().and_then(|o| best::read(&o.dir.join("checkpoints")));
        self.best_fid = self.broadcast_fid(marked.map(|b| b.fid))?;
        Ok(())
    }

    /// Collective after epoch `epoch`'s evaluation (rank 0 holds `quality`): the figure, on
    /// every rank, where it beats the best so far.
    pub(super) fn beats_best(&mut self, epoch: u64, quality: Option<&EpochQuality>) -> Result<Option<f64>> {
        if !self.keeps_best() || !self.quality.as_ref().is_some_and(|q| q.due(epoch)) {
            return Ok(None);
        }
        let fid = self.broadcast_fid(quality.map(score_of))?;
        Ok(fid.filter(|&f| best::beats(f, self.best_fid)))
    }

    /// Rank 0's figure on every rank (None: none, or not a number).
    fn broadcast_fid(&self, fid: Option<f64>) -> Result<Option<f64>> {
        let bytes = self.job.comm.broadcast_bytes(0, fid.unwrap_or(f64::NAN).to_le_bytes().to_vec())?;
        let fid = f64::from_le_bytes(bytes[..8].try_into()?);
        Ok(fid.is_finite().then_some(fid))
    }

    /// After the checkpoint `dir` of epoch `epoch` (rank 0's; None elsewhere) scored `fid`,
    /// the best so far: rank 0 points `checkpoints/best` at it.
    pub(super) fn mark_best(&mut self, epoch: u64, fid: f64, dir: Option<&Path>) {
        self.best_fid = Some(fid);
        let generator = if self.trainer.g_ema.is_some() { "G_ema" } else { "G" }.to_string();
        let (Some(out), Some(dir)) = (self.outputs.as_mut(), dir) else { return };
        let name = dir.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
        let marker = Best { checkpoint: name, epoch, step: self.trainer.step, fid, generator };
        self.job.or_fail(out.mark_best(&marker));
    }
}
