//! Reading back a trace this program wrote (`train --trace FILE`): its spans, each with its
//! rank, track and step, for the reports and the simulator that work from a run's timeline.

use super::trace::Track;
use anyhow::{Context, Result};
use serde_json::Value;
use std::collections::HashMap;
use std::path::Path;

/// A complete ("X") event of the trace.
#[derive(Clone, Debug, PartialEq)]
pub struct SpanRecord {
    pub rank: usize,
    /// The track, from the trace's thread names (None: a thread this program does not name).
    pub track: Option<Track>,
    pub name: String,
    pub cat: String,
    /// Microseconds since the trace's epoch.
    pub ts: f64,
    pub dur: f64,
    /// The training step the span belongs to (its `step` arg), where it has one.
    pub step: Option<u64>,
}

impl SpanRecord {
    pub fn end(&self) -> f64 {
        self.ts + self.dur
    }
}

/// The trace file at `path`, parsed.
pub fn read_trace(path: &Path) -> Result<Value> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the trace {} (a run writes one with --trace FILE)", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("{} is not a JSON trace", path.display()))
}

/// Every span of `trace`, in file order. Events that are not spans (metadata, flow arrows)
/// and spans without a name, category, start or duration are left out.
pub fn spans(trace: &Value) -> Result<Vec<SpanRecord>> {
    let events = trace["traceEvents"]
        .as_array()
        .context("not a Chrome trace of this program (no traceEvents): pass the FILE a run wrote with --trace FILE")?;
    // (pid, tid) -> track, from the thread names the writer gives every track it uses.
    let tracks: HashMap<(u64, u64), Track> = events
        .iter()
        .filter(|e| e["ph"] == "M" && e["name"] == "thread_name")
        .filter_map(|e| {
            Some(((e["pid"].as_u64()?, e["tid"].as_u64()?), Track::from_label(e["args"]["name"].as_str()?)?))
        })
        .collect();
    Ok(events
        .iter()
        .filter(|e| e["ph"] == "X")
        .filter_map(|e| {
            let (pid, tid) = (e["pid"].as_u64()?, e["tid"].as_u64()?);
            Some(SpanRecord {
                // pid = rank + 1 (the writer keeps pid 0 for the kernel's idle task).
                rank: usize::try_from(pid.checked_sub(1)?).ok()?,
                track: tracks.get(&(pid, tid)).copied(),
                name: e["name"].as_str()?.to_string(),
                cat: e["cat"].as_str()?.to_string(),
                ts: e["ts"].as_f64()?,
                dur: e["dur"].as_f64()?,
                step: e["args"]["step"].as_u64(),
            })
        })
        .collect())
}

/// Whether `trace` names a track `track` for `rank` (a rank can have spans on a track only if
/// it does).
pub fn has_track(trace: &Value, rank: usize, track: Track) -> bool {
    let pid = rank as u64 + 1;
    trace["traceEvents"].as_array().is_some_and(|events| {
        events.iter().any(|e| {
            e["ph"] == "M"
                && e["name"] == "thread_name"
                && e["pid"].as_u64() == Some(pid)
                && e["args"]["name"].as_str().and_then(Track::from_label) == Some(track)
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::trace::Trace;
    use std::time::{Duration, Instant};

    /// What the writer wrote, the reader reads: ranks, tracks, steps and times.
    #[test]
    fn spans_written_by_the_trace_read_back_with_their_rank_track_and_step() {
        let t0 = Instant::now();
        let at = |us: u64| t0 + Duration::from_micros(us);
        let mut r0 = Trace::enabled(0, 8);
        let mut r1 = Trace::enabled(1, 8);
        r0.span(Track::Compute, "D.1 conv", "forward", at(0), at(10), &[("step", 3u64.into())]);
        r1.span(
            Track::CommThread,
            "G[1]",
            "allreduce",
            at(5),
            at(25),
            &[("step", 4u64.into()), ("bytes", 8usize.into())],
        );
        r1.span(Track::CopyStream, "G[1]", "device-to-host", at(2), at(4), &[]);
        r1.flow(1, "hand-off", "hand-off", Track::CopyStream, at(3), Track::CommThread, at(6));
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("t.json");
        Trace::write_merged(&path, &[r0.to_json_events(), r1.to_json_events()]).unwrap();
        let trace = read_trace(&path).unwrap();
        let got = spans(&trace).unwrap();

        let brief: Vec<_> = got.iter().map(|s| (s.rank, s.track, s.name.as_str(), s.cat.as_str(), s.step)).collect();
        assert_eq!(
            brief,
            vec![
                (0, Some(Track::Compute), "D.1 conv", "forward", Some(3)),
                (1, Some(Track::CommThread), "G[1]", "allreduce", Some(4)),
                (1, Some(Track::CopyStream), "G[1]", "device-to-host", None),
            ]
        );
        // Times relative to the first span, to the writer's nanosecond (f64 of ~1e13 us).
        let rel: Vec<(f64, f64)> = got.iter().map(|s| (s.ts - got[0].ts, s.dur)).collect();
        for ((ts, dur), (want_ts, want_dur)) in rel.iter().zip([(0.0, 10.0), (5.0, 20.0), (2.0, 2.0)]) {
            assert!((ts - want_ts).abs() < 1e-3 && (dur - want_dur).abs() < 1e-9, "{rel:?}");
        }
        assert!(has_track(&trace, 1, Track::CopyStream) && !has_track(&trace, 0, Track::CopyStream));
    }

    #[test]
    fn a_file_that_is_not_a_trace_is_named_in_the_error() {
        let tmp = tempfile::tempdir().unwrap();
        let missing = tmp.path().join("none.json");
        let e = format!("{:#}", read_trace(&missing).unwrap_err());
        assert!(e.contains("cannot read the trace") && e.contains("none.json"), "{e}");
        let text = tmp.path().join("text.json");
        std::fs::write(&text, "not json").unwrap();
        assert!(format!("{:#}", read_trace(&text).unwrap_err()).contains("is not a JSON trace"));
        let e = spans(&serde_json::json!({"events": []})).unwrap_err();
        assert!(e.to_string().contains("no traceEvents"), "{e}");
    }
}
