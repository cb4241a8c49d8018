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
    /// The bests marked before this one whose checkpoints were still there when it was marked,
    /// oldest first: a resume from a checkpoint older than this one goes back to the last of
    /// them at or before it (the best of the evaluations it keeps).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub earlier: Vec<Best>,
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

/// Make `best` (its `earlier` empty) the marker in `root`, the marker it replaces and those
/// before it kept in its `earlier` where their checkpoints are still there.
pub fn supersede(root: &Path, best: &Best) -> Result<()> {
    let mut earlier = Vec::new();
    if let Some(mut old) = read_any(root) {
        earlier = std::mem::take(&mut old.earlier);
        earlier.push(old);
    }
    earlier.retain(|b| b.checkpoint != best.checkpoint && root.join(&b.checkpoint).is_dir());
    write(root, &Best { earlier, ..best.clone() })
}

/// A resume goes on from the checkpoint of order `key` (`find::order_key`), the later ones
/// set aside: a marker naming one of those goes back to the last best at or before `key` that
/// is still there, or, where there is none, is set aside itself (`best.abandoned`), so that
/// `checkpoints/best` never names a checkpoint the run has left behind.
pub fn go_back_to(root: &Path, key: (u64, u64)) -> Result<()> {
    let Some(mut marker) = read_any(root) else { return Ok(()) };
    let at_or_before = |b: &Best| order_key(&b.checkpoint).is_some_and(|k| k <= key);
    if at_or_before(&marker) {
        return Ok(());
    }
    let mut earlier = std::mem::take(&mut marker.earlier);
    earlier.retain(|b| at_or_before(b) && root.join(&b.checkpoint).is_dir());
    match earlier.pop() {
        Some(last) => write(root, &Best { earlier, ..last }),
        None => super::find::set_aside(&root.join(MARKER), "abandoned").map(|_| ()),
    }
}

/// The marker in `root` as written, whether or not the checkpoint it names is there.
fn read_any(root: &Path) -> Option<Best> {
    serde_json::from_str(&std::fs::read_to_string(root.join(MARKER)).ok()?).ok()
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

#[cfg(test)]
mod tests {
    use super::*;

    fn marked(root: &Path, step: u64, fid: f64) -> Best {
        let checkpoint = format!("step-{step:08}");
        std::fs::create_dir(root.join(&checkpoint)).unwrap();
        let (generator, feature_net) = ("G".to_string(), "f".to_string());
        let best =
            Best { checkpoint, epoch: step / 8 - 1, step, fid, generator, eval_n: 256, feature_net, earlier: vec![] };
        supersede(root, &best).unwrap();
        best
    }

    /// Bests at steps 8, 16 and 24; a resume from 16 (24 set aside) marks 16 again, with 8 before it; one from 12, where 8 was pruned, none.
    #[test]
    fn a_resume_from_an_older_checkpoint_goes_back_to_its_best() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        let (b8, b16, b24) = (marked(root, 8, 3.0), marked(root, 16, 2.0), marked(root, 24, 1.0));
        assert_eq!(read(root).unwrap().earlier, [b8.clone(), b16.clone()]);
        let aside = crate::checkpoint::go_on_from(&root.join("step-00000016")).unwrap();
        assert_eq!(aside, [root.join("step-00000024.abandoned")]);
        assert_eq!(read(root), Some(Best { earlier: vec![b8], ..b16 }));
        go_back_to(root, order_key("step-00000016").unwrap()).unwrap();
        assert_eq!(read(root).unwrap().checkpoint, "step-00000016", "a marker at the resume's checkpoint stays");
        std::fs::remove_dir(root.join("step-00000008")).unwrap();
        go_back_to(root, (12, 0)).unwrap();
        assert!(read_any(root).is_none() && root.join("best.abandoned").is_file(), "{b24:?}");
    }
}
