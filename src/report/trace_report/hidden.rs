//! How much of the comm thread's allreduce time compute hid, measured on the timeline: per
//! rank, the share of its `allreduce` spans that falls inside the compute track's busy spans
//! (any compute span but a `wait`). A `wait-device` span counts as busy: the host waits
//! there while the device still computes the bucket's gradients, which is compute hiding
//! the exchange, not the exchange holding the step up.

use crate::report::trace::Track;
use crate::report::trace_read::SpanRecord;
use serde::Serialize;
use std::collections::BTreeSet;

/// One rank's allreduce time and the share of it that compute covered.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RankHidden {
    pub rank: usize,
    /// Steps with spans on this rank, from --skip on.
    pub steps: usize,
    pub allreduce_ms_per_step: f64,
    /// 0 to 1 (0 where the rank ran no allreduce).
    pub hidden: f64,
}

/// Per rank (in rank order), over the spans of steps `skip` and later.
pub fn hidden_share(spans: &[SpanRecord], skip: u64) -> Vec<RankHidden> {
    let ranks: BTreeSet<usize> = spans.iter().map(|s| s.rank).collect();
    ranks
        .into_iter()
        .map(|rank| {
            let evs: Vec<&SpanRecord> =
                spans.iter().filter(|s| s.rank == rank && s.step.unwrap_or(0) >= skip).collect();
            let busy = merge(
                evs.iter()
                    .filter(|s| s.track == Some(Track::Compute) && s.cat != "wait")
                    .map(|s| (s.ts, s.end()))
                    .collect(),
            );
            let comm: Vec<(f64, f64)> = evs.iter().filter(|s| s.cat == "allreduce").map(|s| (s.ts, s.end())).collect();
            let total: f64 = comm.iter().map(|(s, e)| e - s).sum();
            let hidden: f64 = comm.iter().map(|&c| covered(c, &busy)).sum();
            let steps = evs.iter().map(|s| s.step.unwrap_or(0)).collect::<BTreeSet<_>>().len();
            RankHidden {
                rank,
                steps,
                allreduce_ms_per_step: total / 1e3 / steps.max(1) as f64,
                hidden: if total > 0.0 { hidden / total } else { 0.0 },
            }
        })
        .collect()
}

/// The union of `intervals` as disjoint intervals, by start.
fn merge(mut intervals: Vec<(f64, f64)>) -> Vec<(f64, f64)> {
    intervals.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.total_cmp(&b.1)));
    let mut out: Vec<(f64, f64)> = Vec::with_capacity(intervals.len());
    for (s, e) in intervals {
        match out.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => out.push((s, e)),
        }
    }
    out
}

/// The length of `a` that the disjoint, sorted intervals `busy` cover.
fn covered(a: (f64, f64), busy: &[(f64, f64)]) -> f64 {
    let first = busy.partition_point(|b| b.1 <= a.0);
    busy[first..].iter().take_while(|b| b.0 < a.1).map(|b| (a.1.min(b.1) - a.0.max(b.0)).max(0.0)).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(rank: usize, track: Track, cat: &str, step: u64, ts: f64, dur: f64) -> SpanRecord {
        SpanRecord { rank, track: Some(track), name: "x".into(), cat: cat.into(), ts, dur, step: Some(step) }
    }

    #[test]
    fn overlapping_intervals_merge_and_cover_what_they_overlap() {
        let busy = merge(vec![(5.0, 8.0), (0.0, 2.0), (1.0, 3.0), (8.0, 9.0)]);
        assert_eq!(busy, vec![(0.0, 3.0), (5.0, 9.0)]);
        assert_eq!(covered((2.0, 6.0), &busy), 2.0);
        assert_eq!(covered((3.0, 5.0), &busy), 0.0);
        assert_eq!(covered((-1.0, 10.0), &busy), 7.0);
    }

    #[test]
    fn compute_covers_allreduce_time_but_waits_do_not() {
        let spans = vec![
            // Step 0 is left out (skip 1).
            span(0, Track::CommThread, "allreduce", 0, 0.0, 1000.0),
            // Step 1: 400 us of allreduce (150..550); compute covers 150..200 and 250..300,
            // the wait 200..250 covers nothing.
            span(0, Track::Compute, "forward", 1, 100.0, 100.0),
            span(0, Track::Compute, "wait", 1, 200.0, 50.0),
            span(0, Track::Compute, "backward-data", 1, 250.0, 50.0),
            // The device still computing covers 500..520.
            span(0, Track::Compute, "wait-device", 1, 500.0, 20.0),
            span(0, Track::CommThread, "allreduce", 1, 150.0, 400.0),
            // A copy on another track hides nothing either.
            span(0, Track::CopyStream, "device-to-host", 1, 400.0, 100.0),
            // Rank 1 ran no allreduce.
            span(1, Track::Compute, "forward", 1, 0.0, 10.0),
        ];
        let rows = hidden_share(&spans, 1);
        assert_eq!(rows.len(), 2);
        let r0 = &rows[0];
        assert!(r0.rank == 0 && r0.steps == 1 && (r0.allreduce_ms_per_step - 0.4).abs() < 1e-12, "{r0:?}");
        assert!((r0.hidden - 120.0 / 400.0).abs() < 1e-12, "{r0:?}");
        assert_eq!((rows[1].rank, rows[1].hidden, rows[1].allreduce_ms_per_step), (1, 0.0, 0.0));
    }
}
