//! What the replay reads from a recorded run: its summary.json (buckets, batch, wire, the
//! share of a core its ranks had) and the steps its trace recorded.

use super::core_share::{ShareSource, core_share};
use super::program::{self, BucketSpec, StepProgram};
use super::replay::{CollectiveCost, WARM_STEPS, replay};
use crate::comm::Wire;
use crate::record::Summary;
use anyhow::{Context, Result};
use std::path::{Path, PathBuf};

/// What the replay needs from summary.json.
pub struct RunInfo {
    pub buckets: Vec<BucketSpec>,
    pub batch: f64,
    pub fragment_bytes: usize,
    /// auto's rd/large-message threshold.
    pub threshold: usize,
    pub ranks: u64,
    pub ms_per_step: f64,
    pub trace: Option<PathBuf>,
    /// How the run's gradients travelled (`options.comm.wire`), or `--wire` to ask about the
    /// other.
    pub wire: Wire,
    /// The share of a core each rank had, and where that figure came from (`core_share`).
    pub core_share: (f64, ShareSource),
}

impl RunInfo {
    pub fn from_summary(path: &Path) -> Result<RunInfo> {
        let s = Summary::read(path, "--summary")?;
        let buckets = s.comm.buckets.iter().map(|b| BucketSpec::new(&b.bucket, b.bytes)).collect::<Result<Vec<_>>>()?;
        let trace = s.options.parallel.trace.as_ref().map(|p| {
            // A relative path was relative to where the run started; try next to the summary too.
            if p.is_relative() && !p.exists() {
                path.parent().map(|d| d.join(p.file_name().unwrap_or_default())).unwrap_or(p.clone())
            } else {
                p.clone()
            }
        });
        Ok(RunInfo {
            buckets,
            batch: s.batch_size_per_rank as f64,
            fragment_bytes: s.options.comm.fragment_bytes,
            threshold: s.options.comm.allreduce_threshold,
            ranks: s.ranks as u64,
            ms_per_step: s.ms_per_step,
            trace,
            wire: s.options.comm.wire,
            core_share: core_share(&s),
        })
    }
}

/// The recorded steps of `rank` in `trace`, the steps a replay runs (`steps` rounded up to
/// whole passes over them, so that each weighs the same) and t_1, their mean with one rank.
/// Unless `identical`, every recorded step must hand over the same collectives in order.
pub fn recorded_steps(
    trace: &Path,
    rank: usize,
    buckets: &[BucketSpec],
    steps: u64,
    identical: bool,
) -> Result<(Vec<StepProgram>, usize, f64)> {
    let programs = program::load(trace, rank, buckets)?;
    if !identical {
        program::check_same_handoffs(&programs).with_context(|| trace.display().to_string())?;
    }
    let passes = (steps as usize - WARM_STEPS).div_ceil(programs.len());
    let steps = WARM_STEPS + passes * programs.len();
    let nothing = vec![CollectiveCost::default(); buckets.len()];
    let t1 = replay(&programs, &|_, k| k % programs.len(), 1, &nothing, CollectiveCost::default(), steps, false).step_s;
    Ok((programs, steps, t1))
}
