//! `dcgan-train trace-report`: from a multi-rank run's trace, where the waits for gradient
//! buckets went (the slowest rank or the exchange) and how much of the allreduce time compute
//! hid, measured on the timeline.

mod hidden;
mod waits;

pub use hidden::RankHidden;
pub use waits::BucketWaits;

use super::trace_read::{self, SpanRecord};
use anyhow::{Context, Result, bail};
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

/// What `trace-report` prints, and writes with --json.
#[derive(Clone, Debug, Serialize)]
pub struct TraceReport {
    /// Steps before this one were left out as warm-up.
    pub skip: u64,
    pub ranks: usize,
    /// Per bucket label, ms per step.
    pub buckets: BTreeMap<String, BucketWaits>,
    pub hidden: Vec<RankHidden>,
}

/// The report of the trace file at `trace`, steps `skip` and later.
pub fn report(trace: &Path, skip: u64) -> Result<TraceReport> {
    let spans = trace_read::spans(&trace_read::read_trace(trace)?).with_context(|| trace.display().to_string())?;
    from_spans(&spans, skip).map_err(|e| e.context(trace.display().to_string()))
}

/// The report of spans read from a trace.
pub fn from_spans(spans: &[SpanRecord], skip: u64) -> Result<TraceReport> {
    if !spans.iter().any(|s| s.cat == "device-to-host" || s.cat == "allreduce") {
        bail!(
            "the trace has no gradient exchange (no hand-offs or allreduces): trace a run of 2 or more ranks \
             without --no-exchange"
        );
    }
    let buckets = waits::split_waits(spans, skip);
    if buckets.is_empty() {
        bail!(
            "no bucket waits with every rank's hand-off from step {skip} on: trace more steps (--trace-steps) \
             or pass a smaller --skip"
        );
    }
    let ranks = spans.iter().map(|s| s.rank + 1).max().unwrap_or(0);
    Ok(TraceReport { skip, ranks, buckets, hidden: hidden::hidden_share(spans, skip) })
}

/// Prints the report of `trace` and, with `json`, writes it there.
/// Markdown: the waits per bucket, then the hidden share per rank.
impl fmt::Display for TraceReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "Waits for gradient buckets, steps {} on (ms per step, means over ranks): the part of a wait before \
             the last rank handed the bucket over is waiting for the slowest rank, the rest is the exchange.\n",
            self.skip
        )?;
        writeln!(f, "| bucket | steps | waited | for the slowest rank | for the exchange | median step |")?;
        writeln!(f, "|---|---:|---:|---:|---:|---:|")?;
        let (mut wait, mut slow, mut exchange) = (0.0, 0.0, 0.0);
        for (b, r) in &self.buckets {
            writeln!(
                f,
                "| {b} | {} | {:.2} | {:.2} | {:.2} | {:.2} |",
                r.steps, r.wait, r.slowest_rank, r.exchange, r.wait_median
            )?;
            (wait, slow, exchange) = (wait + r.wait, slow + r.slowest_rank, exchange + r.exchange);
        }
        writeln!(f, "| all | | {wait:.2} | {slow:.2} | {exchange:.2} | |")?;
        writeln!(
            f,
            "\nAllreduce time hidden behind compute, steps {} on: the share of the comm thread's allreduce \
             spans that falls inside the compute track's spans (waits excluded).\n",
            self.skip
        )?;
        writeln!(f, "| rank | steps | allreduce ms/step | hidden |")?;
        writeln!(f, "|---:|---:|---:|---:|")?;
        for r in &self.hidden {
            writeln!(f, "| {} | {} | {:.2} | {:.2} |", r.rank, r.steps, r.allreduce_ms_per_step, r.hidden)?;
        }
        Ok(())
    }
}
