//! The best checkpoint by FID, and `--patience`: after every evaluated epoch every rank learns
//! rank 0's figure (of the generator `sample` draws from: the average with `--g-ema`); where it
//! beats the best so far the epoch's checkpoint is written (were it not anyway) and
//! `checkpoints/best` moves to it (`checkpoint::best`); where `--patience` evaluations in a
//! row have not, the run ends after the epoch.

use super::Run;
use crate::backend::Backend;
use crate::checkpoint::best::{self, Best};
use crate::record::summary::{EarlyStop, EpochQuality};
use anyhow::{Result, bail};
use std::path::Path;

/// The figure a run keeps its best by: the averaged generator's where there is one.
fn score_of(q: &EpochQuality) -> f64 {
    q.more.fid_ema.unwrap_or(q.fid)
}

/// The best so far, as every rank holds it.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct BestSoFar {
    /// The lowest FID of the run's checkpoints, and the epoch (0-based) it was measured after.
    pub fid_epoch: Option<(f64, u64)>,
    /// Evaluations since, none of them better.
    pub evaluations_since: u64,
}

/// The evaluated epochs after `best_epoch` among the first `completed` (`due`: whether an
/// epoch is evaluated): those `--patience` counts on a resume.
pub(super) fn evaluations_after(best_epoch: u64, completed: u64, due: impl Fn(u64) -> bool) -> u64 {
    (best_epoch + 1..completed).filter(|&e| due(e)).count() as u64
}

impl<B: Backend> Run<'_, B> {
    /// Whether this run keeps its best checkpoint: quality is measured and not declined.
    fn keeps_best(&self) -> bool {
        self.quality.is_some() && !self.args.checkpoints.no_keep_best
    }

    /// Collective: the best FID of the run directory so far (its marker, read by rank 0: a
    /// resumed run goes on from its own), on every rank; `--patience` refused where no FID is
    /// measured (no feature network was found).
    pub(super) fn agree_on_best(&mut self) -> Result<()> {
        if self.args.eval.patience().is_some() && self.quality.is_none() {
            bail!("{}", crate::train::config::NO_FID_FOR_PATIENCE);
        }
        if !self.keeps_best() {
            return Ok(());
        }
        let q = self.quality.as_ref().expect("kept where quality is measured");
        let marked = self.outputs.as_ref().and_then(|o| best::read(&o.dir.join("checkpoints")));
        let (n, step) = (q.n() as u64, self.progress.step);
        let carried = match marked {
            Some(b) if !b.carries_over(n, &q.digest, step) => {
                eprintln!(
                    "checkpoints/best ({}, FID {:.3}) was measured with another feature network or --eval-n, or after the checkpoint this run resumes from: the run's best starts afresh",
                    b.checkpoint, b.fid
                );
                None
            }
            b => b,
        };
        let mine = carried.map_or([f64::NAN, 0.0], |b| [b.fid, b.epoch as f64]);
        let [fid, epoch] = self.broadcast_f64s(mine)?;
        if fid.is_finite() {
            let since = evaluations_after(epoch as u64, self.progress.epoch, |e| q.due(e));
            self.best = BestSoFar { fid_epoch: Some((fid, epoch as u64)), evaluations_since: since };
        }
        Ok(())
    }

    /// Collective after epoch `epoch`'s evaluation (rank 0 holds `quality`): the figure, on
    /// every rank, where it beats the best so far. Counts toward `--patience` where it does
    /// not, and asks the run to end when the count reaches it.
    pub(super) fn judge_epoch(&mut self, epoch: u64, quality: Option<&EpochQuality>) -> Result<Option<f64>> {
        if !self.keeps_best() || !self.quality.as_ref().is_some_and(|q| q.due(epoch)) {
            return Ok(None);
        }
        let [fid, _] = self.broadcast_f64s([quality.map_or(f64::NAN, score_of), 0.0])?;
        if best::beats(fid, self.best.fid_epoch.map(|(f, _)| f)) {
            return Ok(Some(fid));
        }
        // A resume from a checkpoint saved before its epoch closed measures that epoch again:
        // the best one measured again is no evaluation since.
        if self.best.fid_epoch.is_some_and(|(_, e)| e == epoch) {
            return Ok(None);
        }
        self.best.evaluations_since += 1;
        self.early_stop_after(epoch);
        Ok(None)
    }

    /// Where the evaluations since the best reach `--patience`: the run ends after `epoch`.
    fn early_stop_after(&mut self, epoch: u64) {
        if let (Some(p), Some((best_fid, best_epoch))) = (self.args.eval.patience(), self.best.fid_epoch)
            && self.best.evaluations_since >= p
        {
            self.facts.early_stop = Some(EarlyStop { epoch, best_epoch, best_fid, patience: p });
        }
    }

    /// A resume of a run that `--patience` already ended (its evaluations since the best
    /// reach it) is refused before a step, with the way on. Every rank decides alike.
    pub(super) fn refuse_if_stopped_early(&self) -> Result<()> {
        let (Some(p), Some((fid, epoch))) = (self.args.eval.patience(), self.best.fid_epoch) else { return Ok(()) };
        let since = self.best.evaluations_since;
        if since >= p {
            bail!(
                "the run has nothing left to run before its early stop: the {since} evaluations since epoch {}'s FID {fid:.3} did not beat it, which reaches --patience {p}: resume with a larger --patience, or --patience 0, to go on",
                epoch + 1
            );
        }
        Ok(())
    }

    /// Rank 0's values on every rank.
    fn broadcast_f64s(&self, mine: [f64; 2]) -> Result<[f64; 2]> {
        let bytes: Vec<u8> = mine.iter().flat_map(|x| x.to_le_bytes()).collect();
        let got = self.job.comm.broadcast_bytes(0, bytes)?;
        let at = |i: usize| got[8 * i..8 * (i + 1)].try_into().map(f64::from_le_bytes);
        Ok([at(0)?, at(1)?])
    }

    /// After the checkpoint `dir` of epoch `epoch` (rank 0's; None elsewhere) scored `fid`,
    /// the best so far: rank 0 points `checkpoints/best` at it.
    pub(super) fn mark_best(&mut self, epoch: u64, fid: f64, dir: Option<&Path>) {
        self.best = BestSoFar { fid_epoch: Some((fid, epoch)), evaluations_since: 0 };
        let generator = if self.trainer.g_ema.is_some() { "G_ema" } else { "G" }.to_string();
        let (Some(out), Some(dir), Some(q)) = (self.outputs.as_mut(), dir, self.quality.as_ref()) else { return };
        let name = dir.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
        let (eval_n, feature_net, step) = (q.n() as u64, q.digest.clone(), self.trainer.step);
        let marker = Best { checkpoint: name, epoch, step, fid, generator, eval_n, feature_net, earlier: Vec::new() };
        self.job.or_fail(out.mark_best(&marker));
    }
}

#[cfg(test)]
mod tests {
    use super::evaluations_after;

    #[test]
    fn a_resume_counts_the_evaluations_after_the_best() {
        // Evaluated every epoch: the best after epoch 2 (0-based), 5 complete: epochs 3 and 4.
        assert_eq!(evaluations_after(2, 5, |_| true), 2);
        // Every second epoch (1, 3, 5, ...): of epochs 2..6 only 3 and 5.
        assert_eq!(evaluations_after(1, 7, |e| (e + 1) % 2 == 0), 2);
        // The best is the last complete epoch: none since.
        assert_eq!(evaluations_after(4, 5, |_| true), 0);
    }
}
