//! What the replay reads from a recorded run: its summary.json (buckets, batch, wire, the
//! share of a core its ranks had) and the steps its trace recorded.

use super::core_share::{ShareSource, core_share};
use super::program::{self, BucketSpec, StepProgram};
use super::replay::{CollectiveCost, WARM_STEPS, replay};
use crate::cli::comm::Wire;
use anyhow::{Context, Result};
use serde_json::Value;
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
    /// How the run's gradients travelled (`options.comm.wire`; f32 in runs from before it),
    /// or `--wire` to ask about the other.
    pub wire: Wire,
    /// The share of a core each rank had, and where that figure came from (`core_share`).
    pub core_share: (f64, ShareSource),
}

impl RunInfo {
    pub fn from_summary(path: &Path) -> Result<RunInfo> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("cannot read --summary {}", path.display()))?;
        let s: Value =
            serde_json::from_str(&text).with_context(|| format!("--summary {} is not JSON", path.display()))?;
        let missing = |what: &str| {
            anyhow::anyhow!("--summary {} has no {what}: pass the summary.json of a dcgan-train run", path.display())
        };
        let buckets = s["comm"]["buckets"]
            .as_array()
            .ok_or_else(|| missing("comm.buckets"))?
            .iter()
            .map(|b| {
                let label = b["bucket"].as_str().ok_or_else(|| missing("bucket label"))?;
                let bytes = b["bytes"].as_u64().ok_or_else(|| missing("bucket bytes"))? as usize;
                BucketSpec::new(label, bytes)
            })
            .collect::<Result<Vec<_>>>()?;
        let opt = &s["options"];
        let trace = opt["parallel"]["trace"].as_str().map(|t| {
            let p = PathBuf::from(t);
            // A relative path was relative to where the run started; try next to the summary too.
            if p.is_relative() && !p.exists() {
                path.parent().map(|d| d.join(p.file_name().unwrap_or_default())).unwrap_or(p)
            } else {
                p
            }
        });
        Ok(RunInfo {
            buckets,
            batch: s["batch_size_per_rank"].as_f64().ok_or_else(|| missing("batch_size_per_rank"))?,
            fragment_bytes: opt["comm"]["fragment_bytes"]
                .as_u64()
                .ok_or_else(|| missing("options.comm.fragment_bytes"))? as usize,
            threshold: opt["comm"]["allreduce_threshold"].as_u64().unwrap_or(8192) as usize,
            ranks: s["ranks"].as_u64().unwrap_or(1),
            ms_per_step: s["ms_per_step"].as_f64().unwrap_or(0.0),
            trace,
            wire: recorded_wire(&s).map_err(|e| anyhow::anyhow!("--summary {}: {e}", path.display()))?,
            core_share: core_share(&s),
        })
    }
}

/// How a run's gradients travelled, from its summary.json (`options.comm.wire`; f32 in runs
/// from before it).
pub fn recorded_wire(summary: &Value) -> std::result::Result<Wire, String> {
    match summary.pointer("/options/comm/wire").and_then(Value::as_str) {
        None => Ok(Wire::F32),
        Some(w) => {
            <Wire as clap::ValueEnum>::from_str(w, false).map_err(|_| format!("unknown options.comm.wire '{w}'"))
        }
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
