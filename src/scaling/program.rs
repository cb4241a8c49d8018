//! One training step as the simulator replays it, read from a run's Chrome trace: the compute
//! thread's work in order (each span plus the untraced gap after it, waits removed), the
//! moments each gradient bucket is handed to the comm thread, and the moments the step waits
//! for each bucket. Works with any run's trace (one rank, `--no-exchange`, or a real exchange):
//! hand-offs and waits are placed by the training step's own rules, not by the trace's copies.
//!
//! - A bucket is handed off right after the last `backward-weight` span, in the step, of its
//!   last stage (labels like `D[3+2]` list the stages in completion order; the span of
//!   stage 1 of D is named `D.1 ...`). D's first pass (real images) also computes weight
//!   gradients, but its last one in the step is the fake pass, which submits.
//! - The step waits for a bucket right before that bucket's `adam` span: D's in the same
//!   step, G's in the next one (so the replay must run consecutive steps).
//! - The per-step metrics (24 bytes) leave before G's backward and are waited for at the end.
//!   A multi-rank trace records that wait as a `wait` span named `metrics`; like every wait,
//!   the replay drops it and computes its own.

use crate::report::trace::Track;
use crate::report::trace_read;
use anyhow::{Context, Result, bail};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;

/// A gradient bucket of the run (from summary.json).
#[derive(Clone, Debug, PartialEq)]
pub struct BucketSpec {
    pub label: String,
    pub bytes: usize,
    /// Prefix of the span names of its last-completed stage, e.g. "D.1 ".
    pub last_stage_prefix: String,
}

impl BucketSpec {
    /// From a label like `G[1]` or `D[3+2]`.
    pub fn new(label: &str, bytes: usize) -> Result<BucketSpec> {
        let bad =
            || anyhow::anyhow!("bucket label '{label}' is not NET[stage+stage...] (a summary.json of this program?)");
        let (net, rest) = label.split_once('[').ok_or_else(bad)?;
        let stages = rest.strip_suffix(']').ok_or_else(bad)?;
        let last = stages.split('+').next_back().filter(|s| s.parse::<usize>().is_ok()).ok_or_else(bad)?;
        Ok(BucketSpec { label: label.to_string(), bytes, last_stage_prefix: format!("{net}.{last} ") })
    }
}

/// What the compute thread does, in order.
#[derive(Clone, Debug, PartialEq)]
pub enum Item {
    /// Busy for this many seconds.
    Compute(f64),
    /// Hand bucket i to the comm thread.
    Submit(usize),
    /// Block until bucket i's latest submission is averaged.
    Wait(usize),
    SubmitMetrics,
    WaitMetrics,
}

/// One recorded step of one rank.
#[derive(Clone, Debug, PartialEq)]
pub struct StepProgram {
    pub step: u64,
    pub items: Vec<Item>,
}

/// A span of the compute track.
#[derive(Clone, Debug)]
pub struct Span {
    pub name: String,
    pub cat: String,
    /// Microseconds.
    pub ts: f64,
    pub dur: f64,
    pub step: u64,
}

/// The compute-track spans of `rank` in a Chrome trace written by this program, by start.
pub fn compute_spans(trace: &Value, rank: usize) -> Result<Vec<Span>> {
    let all = trace_read::spans(trace)?;
    if !trace_read::has_track(trace, rank, Track::Compute) {
        bail!("the trace has no compute track for rank {rank} (pass --trace-rank with a rank it has)");
    }
    let mut spans: Vec<Span> = all
        .into_iter()
        .filter(|s| s.rank == rank && s.track == Some(Track::Compute))
        .filter_map(|s| Some(Span { step: s.step?, name: s.name, cat: s.cat, ts: s.ts, dur: s.dur }))
        .collect();
    spans.sort_by(|a, b| a.ts.total_cmp(&b.ts));
    Ok(spans)
}

/// The programs of every step that has a successor in the trace (its end is the next step's
/// first span), step 0 left out when later steps exist (it waits for no G bucket and warms up).
pub fn programs(spans: &[Span], buckets: &[BucketSpec]) -> Result<Vec<StepProgram>> {
    let mut by_step: BTreeMap<u64, Vec<&Span>> = BTreeMap::new();
    for s in spans {
        by_step.entry(s.step).or_default().push(s);
    }
    let steps: Vec<u64> = by_step.keys().copied().collect();
    if steps.len() < 2 {
        bail!(
            "the trace records {} step(s) of this rank: record at least 3 (train with --trace FILE --trace-steps 6)",
            steps.len()
        );
    }
    let mut out = Vec::new();
    for w in steps.windows(2) {
        let (s, next) = (w[0], w[1]);
        if s == 0 && steps.len() > 2 {
            continue;
        }
        let end = by_step[&next][0].ts;
        out.push(program_of_step(s, &by_step[&s], end, buckets));
    }
    Ok(out)
}

fn program_of_step(step: u64, spans: &[&Span], end_us: f64, buckets: &[BucketSpec]) -> StepProgram {
    let mut items = Vec::new();
    // The last backward-weight span of each bucket's last stage: the hand-off point.
    let mut handoff_at: Vec<Option<usize>> = vec![None; buckets.len()];
    for (i, s) in spans.iter().enumerate() {
        if s.cat == "backward-weight" {
            for (b, spec) in buckets.iter().enumerate() {
                if s.name.starts_with(&spec.last_stage_prefix) {
                    handoff_at[b] = Some(i);
                }
            }
        }
    }
    let mut waited = vec![false; buckets.len()];
    let mut metrics_sent = false;
    for (i, s) in spans.iter().enumerate() {
        let next_ts = spans.get(i + 1).map_or(end_us, |n| n.ts);
        if s.cat == "wait" {
            // The wait itself is what the replay recomputes; the gap after it (the copy back)
            // is the compute thread's work.
            items.push(Item::Compute(((next_ts - (s.ts + s.dur)) * 1e-6).max(0.0)));
            continue;
        }
        if s.cat == "adam"
            && let Some(b) = buckets.iter().position(|spec| spec.label == s.name)
            && !waited[b]
        {
            waited[b] = true;
            items.push(Item::Wait(b));
        }
        if !metrics_sent && s.cat.starts_with("backward") && s.name.starts_with("G.") {
            metrics_sent = true;
            items.push(Item::SubmitMetrics);
        }
        items.push(Item::Compute(((next_ts - s.ts) * 1e-6).max(0.0)));
        for (b, at) in handoff_at.iter().enumerate() {
            if *at == Some(i) {
                items.push(Item::Submit(b));
            }
        }
    }
    if metrics_sent {
        items.push(Item::WaitMetrics);
    }
    StepProgram { step, items }
}

/// The collectives a program hands over, in order (bucket index; None for the metrics).
fn handoffs(p: &StepProgram) -> Vec<Option<usize>> {
    p.items
        .iter()
        .filter_map(|i| match i {
            Item::Submit(b) => Some(Some(*b)),
            Item::SubmitMetrics => Some(None),
            _ => None,
        })
        .collect()
}

/// The replay runs different recorded steps on different ranks at the same time, so every
/// step must hand over the same collectives in the same order.
pub fn check_same_handoffs(programs: &[StepProgram]) -> Result<()> {
    let first = handoffs(&programs[0]);
    for p in &programs[1..] {
        if handoffs(p) != first {
            bail!(
                "the traced steps {} and {} hand gradient buckets over in different orders: \
                 replay a trace of one run with one configuration (or pass --identical-ranks)",
                programs[0].step,
                p.step
            );
        }
    }
    Ok(())
}

/// Read the trace file and build the programs of `rank`.
pub fn load(path: &Path, rank: usize, buckets: &[BucketSpec]) -> Result<Vec<StepProgram>> {
    let v = trace_read::read_trace(path)?;
    programs(&compute_spans(&v, rank).with_context(|| path.display().to_string())?, buckets)
        .with_context(|| path.display().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(name: &str, cat: &str, ts: f64, dur: f64, step: u64) -> Span {
        Span { name: name.into(), cat: cat.into(), ts, dur, step }
    }

    #[test]
    fn labels_give_the_last_completed_stage() {
        assert_eq!(BucketSpec::new("D[3+2+1]", 8).unwrap().last_stage_prefix, "D.1 ");
        assert_eq!(BucketSpec::new("G[12]", 8).unwrap().last_stage_prefix, "G.12 ");
        assert!(BucketSpec::new("metrics", 8).is_err());
        assert!(BucketSpec::new("G[x]", 8).is_err());
    }

    #[test]
    fn a_step_becomes_compute_handoffs_and_waits() {
        let b = vec![BucketSpec::new("G[1]", 400).unwrap(), BucketSpec::new("D[2+1]", 80).unwrap()];
        // Step 1 (times in us): D real pass with weights (no hand-off: not the last), G's
        // wait + adam, the fake pass whose D.1 weights hand D off, D's adam, G's backward.
        let s = vec![
            span("D.1 conv", "backward-weight", 0.0, 10.0, 1),
            span("G[1]", "wait", 10.0, 5.0, 1),
            span("G[1]", "adam", 20.0, 2.0, 1),
            span("D.1 conv", "backward-weight", 22.0, 8.0, 1),
            span("D[2+1]", "adam", 30.0, 1.0, 1),
            span("G.1 convT", "backward-data", 31.0, 4.0, 1),
            span("G.1 convT", "backward-weight", 35.0, 5.0, 1),
            span("D.1 conv", "forward", 41.0, 1.0, 2),
        ];
        let refs: Vec<&Span> = s.iter().collect();
        let p = program_of_step(1, &refs[..7], 41.0, &b);
        let us = |x: f64| Item::Compute(x * 1e-6);
        assert_eq!(
            p.items,
            vec![
                us(10.0),
                us(5.0), // the gap after the wait (copy back), not the wait itself
                Item::Wait(0),
                us(2.0),
                us(8.0),
                Item::Submit(1),
                Item::Wait(1),
                us(1.0),
                Item::SubmitMetrics,
                us(4.0),
                us(6.0), // 35 -> 41: the span and the gap before the next step
                Item::Submit(0),
                Item::WaitMetrics,
            ]
        );
        let compute: f64 = p.items.iter().map(|i| if let Item::Compute(s) = i { *s } else { 0.0 }).sum();
        assert!((compute - 36e-6).abs() < 1e-12);
        // Step 0 is skipped when later steps exist; the last step has no end and is skipped.
        let mut three = s.clone();
        three.insert(0, span("D.1 conv", "forward", -50.0, 1.0, 0));
        let progs = programs(&three, &b).unwrap();
        assert_eq!(progs.iter().map(|p| p.step).collect::<Vec<_>>(), vec![1]);
        assert!(programs(&s[..1], &b).is_err());
    }
}
