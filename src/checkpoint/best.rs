//! The best checkpoint by sample quality: `<run>/checkpoints/best`, a small JSON file naming
//! the checkpoint whose evaluation had the lowest FID so far, with the figure. A GAN's last
//! checkpoint is not always its best (training can wander or collapse), so the one a run
//! measured best is kept whatever `--keep-checkpoints` says, and `sample`, `evaluate` and
//! `--resume` take `RUN/checkpoints/best` as a path.

use super::find::order_key;
use super::{sync_dir, write_synced};
use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The marker's file name in `checkpoints/`.
pub const MARKER: &str = "best";

/// The best checkpoint so far and how good it was.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Best {
    /// Its directory's name in `checkpoints/` (`step-NNNNNNNN`).
    pub checkpoint: String,
    /// The epoch (0-based) whose end it was written at, and the steps completed then.
    pub epoch: u64,
    pub step: u64,
    /// FID to the test split of the generator named below.
    pub fid: f64,
    /// `G`, or `G_ema` where the run keeps an average (the generator `sample` draws from).
    pub generator: String,
    /// What the figure was measured with (a FID is comparable only at the same n, in the
    /// same features): the images generated, and the xxh3-64 of the feature network's file.
    pub eval_n: u64,
    pub feature_net: String,
}

impl Best {
    /// Whether a run measuring `eval_n` images with the feature network of digest
    /// `feature_net`, resumed at step `step`, can go on from this figure: it was measured
    /// alike, and not after that step (by a continuation the resume leaves behind).
    pub fn carries_over(&self, eval_n: u64, feature_net: &str, step: u64) -> bool {
        self.eval_n == eval_n && self.feature_net == feature_net && self.step <= step
    }
}

/// Whether an evaluation scoring `fid` beats the best FID so far (none so far: any finite
/// figure does).
pub fn beats(fid: f64, so_far: Option<f64>) -> bool {
    fid.is_finite() && so_far.is_none_or(|b| fid < b)
}

/// The marker of the run whose checkpoints live in `root`, if it has one that names a
/// checkpoint still there (one it names that is gone marks nothing).
pub fn read(root: &Path) -> Option<Best> {
    let text = std::fs::read_to_string(root.join(MARKER)).ok()?;
    let best: Best = serde_json::from_str(&text).ok()?;
    (order_key(&best.checkpoint).is_some() && root.join(&best.checkpoint).is_dir()).then_some(best)
}

/// Make `best` the marker in `root` (written to a temporary file, synced and renamed, so a
/// crash leaves the old marker or the new one).
pub fn write(root: &Path, best: &Best) -> Result<()> {
    let tmp = root.join(".best.tmp");
    write_synced(&tmp, serde_json::to_string_pretty(best)?.as_bytes())?;
    std::fs::rename(&tmp, root.join(MARKER))
        .with_context(|| format!("cannot update {}", root.join(MARKER).display()))?;
    sync_dir(root)
}

/// The checkpoint directory a marker file (`checkpoints/best` or `checkpoints/latest`) names.
pub fn target_of(marker: &Path) -> Result<PathBuf> {
    let root = marker.parent().unwrap_or(Path::new("."));
    let text = std::fs::read_to_string(marker).with_context(|| format!("cannot read {}", marker.display()))?;
    let name = if marker.file_name().is_some_and(|n| n == MARKER) {
        let best: Best = serde_json::from_str(&text).with_context(|| {
            format!(
                "{} is not a best-checkpoint marker this program wrote: pass a checkpoint directory",
                marker.display()
            )
        })?;
        best.checkpoint
    } else {
        text.trim().to_string()
    };
    if order_key(&name).is_none() {
        bail!(
            "{} names {name:?}, which is no checkpoint's name (step-N): pass a checkpoint directory",
            marker.display()
        );
    }
    let dir = root.join(&name);
    if !dir.is_dir() {
        bail!(
            "{} names {name}, which is not there any more: pass another checkpoint of {}",
            marker.display(),
            root.display()
        );
    }
    Ok(dir)
}
