//! What a run writes (rank 0 only): the run directory, metrics.jsonl, sample grids,
//! checkpoints. A new run never overwrites an old one; a resumed run continues its own.

use crate::checkpoint::{self, Checkpoint};
use crate::nn::params::ParamLayout;
use crate::record::{EpochRecord, StepRecord, StoppedRecord, Summary};
use crate::report::jsonl::JsonlWriter;
use crate::report::png::write_grid;
use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};

pub struct Outputs {
    pub dir: PathBuf,
    metrics: JsonlWriter,
    /// Which checkpoints each save leaves (`--keep-checkpoints`).
    keep: checkpoint::Keep,
}

/// The default run directory, runs/<local time>.
pub fn default_dir() -> PathBuf {
    PathBuf::from("runs").join(chrono::Local::now().format("%Y%m%d-%H%M%S").to_string())
}

impl Outputs {
    /// A fresh run directory, whose checkpoints are kept as `keep` says; refuses one that
    /// already holds a run.
    pub fn create(dir: &Path, keep: checkpoint::Keep) -> Result<Outputs> {
        if dir.join("metrics.jsonl").exists() {
            // A run that ended before its first checkpoint cannot be continued: say so here,
            // not after the user tries --resume.
            if crate::checkpoint::resolve(dir).is_err() {
                bail!(
                    "{} already holds a run that ended before its first checkpoint (metrics.jsonl, no checkpoints/): choose another --out, or move it away",
                    dir.display()
                );
            }
            bail!(
                "{} already holds a run (metrics.jsonl): choose another --out, continue it with --resume {}, or move it away",
                dir.display(),
                dir.display()
            );
        }
        std::fs::create_dir_all(dir.join("samples"))
            .with_context(|| format!("cannot create --out {}", dir.display()))?;
        let metrics = JsonlWriter::create(&dir.join("metrics.jsonl"))?;
        Ok(Outputs { dir: dir.to_path_buf(), metrics, keep })
    }

    /// Continue the run in `dir` after a checkpoint at `step` completed steps and `epoch`
    /// completed epochs: records the interrupted run wrote after that point are dropped (the
    /// resumed run writes them again, with the same values), also where the checkpoint is an
    /// older one than the run's last (a stop after it is no longer the run's).
    pub fn resume(dir: &Path, step: u64, epoch: u64, keep: checkpoint::Keep) -> Result<Outputs> {
        let path = dir.join("metrics.jsonl");
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let kept: String = text
            .lines()
            .filter(|l| match serde_json::from_str::<serde_json::Value>(l) {
                Ok(v) if v["type"] == "step" => v["step"].as_u64().is_some_and(|s| s <= step),
                Ok(v) if v["type"] == "epoch" => v["epoch"].as_u64().is_some_and(|e| e < epoch),
                Ok(v) if v["type"] == "stopped" => v["step"].as_u64().is_some_and(|s| s <= step),
                Ok(_) => true,
                Err(_) => false,
            })
            .map(|l| format!("{l}\n"))
            .collect();
        crate::report::write_atomically(&path, |f| Ok(std::io::Write::write_all(f, kept.as_bytes())?))
            .with_context(|| format!("cannot rewrite {}", path.display()))?;
        let samples = dir.join("samples");
        std::fs::create_dir_all(&samples).with_context(|| format!("cannot create {}", samples.display()))?;
        Ok(Outputs { dir: dir.to_path_buf(), metrics: JsonlWriter::append(&path)?, keep })
    }

    pub fn step(&mut self, rec: &StepRecord) -> Result<()> {
        self.metrics.write(rec)
    }

    /// Why the run stopped, synced to disk at once.
    pub fn stopped(&mut self, rec: &StoppedRecord) -> Result<()> {
        self.metrics.write(rec)?;
        self.metrics.sync()
    }

    pub fn epoch(&mut self, rec: &EpochRecord) -> Result<()> {
        self.metrics.write(rec)?;
        self.metrics.sync()
    }

    /// samples/<name>.png from images [64, side, side].
    pub fn grid(&self, name: &str, images: &[f32], side: usize) -> Result<PathBuf> {
        let path = self.dir.join("samples").join(format!("{name}.png"));
        write_grid(&path, images, images.len() / (side * side), side, side, 8)?;
        Ok(path)
    }

    pub fn checkpoint(&mut self, layouts: (&ParamLayout, &ParamLayout), ck: &Checkpoint) -> Result<PathBuf> {
        self.metrics.sync()?;
        checkpoint::save(&self.dir, layouts, ck, self.keep)
    }

    pub fn summary(&self, summary: &Summary) -> Result<()> {
        let path = self.dir.join("summary.json");
        let text = serde_json::to_string_pretty(summary)? + "\n";
        crate::report::write_atomically(&path, |f| Ok(std::io::Write::write_all(f, text.as_bytes())?))
            .with_context(|| format!("cannot write {}", path.display()))
    }
}
