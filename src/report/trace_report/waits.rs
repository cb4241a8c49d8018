//! Where the waits for gradient buckets go: the slowest rank, or the exchange itself.
//!
//! An allreduce cannot end on any rank before every rank has handed it its bucket, so when a
//! training thread waits for a bucket, the part of the wait before the last rank's hand-off is
//! time spent waiting for the slowest rank (one rank's compute ran late: load imbalance, a
//! noisy core), and only the rest is the exchange (moving and summing the bytes, or the comm
//! thread's queue). The summary's exposed time counts both; this splits them, per bucket. All
//! ranks share one wall clock on one machine; across machines the split needs clocks
//! synchronized well below a millisecond.
//!
//! A bucket's hand-off on a rank is its first `device-to-host` span of the step (the copy to
//! the comm thread's buffer, made when backward completes the bucket); each `wait` span is
//! matched to the latest hand-off of its bucket on its rank before it.

use crate::report::trace_read::SpanRecord;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// One bucket's waits, in milliseconds per step: means over the ranks' waits of a step, then
/// over the steps.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BucketWaits {
    /// Steps whose waits every rank's hand-off accounts for.
    pub steps: usize,
    pub wait: f64,
    /// The part of `wait` before the last rank's hand-off.
    pub slowest_rank: f64,
    /// `wait` less `slowest_rank`.
    pub exchange: f64,
    /// The median over steps of a step's mean wait.
    pub wait_median: f64,
}

/// The waits for one bucket in one step (us), and their parts before the last hand-off.
#[derive(Default)]
struct StepWaits {
    waits: Vec<f64>,
    slowest_rank: Vec<f64>,
}

/// The waits of each bucket (by label) from the spans of every rank; waits matched to a
/// hand-off of a step before `skip` (warm-up) are left out, and so are steps in which some
/// rank's hand-off was not recorded.
pub fn split_waits(spans: &[SpanRecord], skip: u64) -> BTreeMap<String, BucketWaits> {
    // (bucket, step) -> rank -> its first hand-off; (rank, bucket) -> its hand-offs by time.
    let mut first: HashMap<(&str, u64), BTreeMap<usize, f64>> = HashMap::new();
    let mut handoffs: HashMap<(usize, &str), Vec<(f64, u64)>> = HashMap::new();
    for s in spans.iter().filter(|s| s.cat == "device-to-host") {
        let step = s.step.unwrap_or(0);
        let at = first.entry((&s.name, step)).or_default().entry(s.rank).or_insert(s.ts);
        *at = at.min(s.ts);
        handoffs.entry((s.rank, &s.name)).or_default().push((s.ts, step));
    }
    for v in handoffs.values_mut() {
        v.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    }
    let ranks: BTreeSet<usize> = spans.iter().map(|s| s.rank).collect();
    let mut per: BTreeMap<(&str, u64), StepWaits> = BTreeMap::new();
    for w in spans.iter().filter(|s| s.cat == "wait") {
        let Some(list) = handoffs.get(&(w.rank, w.name.as_str())) else { continue };
        let before = list.partition_point(|&(ts, _)| ts <= w.ts);
        let Some(&(_, step)) = before.checked_sub(1).map(|i| &list[i]) else { continue };
        if step < skip {
            continue;
        }
        let arrivals = &first[&(w.name.as_str(), step)];
        if !arrivals.keys().copied().eq(ranks.iter().copied()) {
            continue; // a rank's hand-off fell outside the recorded steps
        }
        let last = arrivals.values().copied().fold(f64::NEG_INFINITY, f64::max);
        let row = per.entry((&w.name, step)).or_default();
        row.waits.push(w.dur);
        row.slowest_rank.push((w.end().min(last) - w.ts).max(0.0));
    }
    let mut by_bucket: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    for ((bucket, _), step) in &per {
        // Means over the ranks' waits of the step, us -> ms.
        let mean = |xs: &[f64]| xs.iter().sum::<f64>() / xs.len() as f64 / 1e3;
        by_bucket.entry(bucket.to_string()).or_default().push((mean(&step.waits), mean(&step.slowest_rank)));
    }
    by_bucket
        .into_iter()
        .map(|(bucket, steps)| {
            let n = steps.len() as f64;
            let wait: f64 = steps.iter().map(|s| s.0).sum();
            let slow: f64 = steps.iter().map(|s| s.1).sum();
            let waits: Vec<f64> = steps.iter().map(|s| s.0).collect();
            let row = BucketWaits {
                steps: steps.len(),
                wait: wait / n,
                slowest_rank: slow / n,
                exchange: (wait - slow) / n,
                wait_median: median(&waits),
            };
            (bucket, row)
        })
        .collect()
}

/// The median, the mean of the two middle values for an even count.
fn median(xs: &[f64]) -> f64 {
    let mut s = xs.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    if n % 2 == 1 { s[n / 2] } else { (s[n / 2 - 1] + s[n / 2]) / 2.0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(rank: usize, cat: &str, name: &str, step: u64, ts: f64, dur: f64) -> SpanRecord {
        SpanRecord { rank, track: None, name: name.into(), cat: cat.into(), ts, dur, step: Some(step) }
    }

    #[test]
    fn the_median_of_an_even_count_is_the_mean_of_the_middle_two() {
        assert_eq!(median(&[4.0, 1.0, 3.0]), 3.0);
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
    }

    /// Each rank waits for its own bucket twice in one step (two fragments): the step's mean is
    /// over both waits, and a wait wholly after the last hand-off is all exchange.
    #[test]
    fn every_wait_of_a_step_counts_in_its_mean() {
        let spans = vec![
            span(0, "device-to-host", "G[1]", 2, 100.0, 1.0),
            span(1, "device-to-host", "G[1]", 2, 300.0, 1.0),
            // Rank 0 waits 150 -> 450 (150 us for rank 1), then 500 -> 600 (all exchange).
            span(0, "wait", "G[1]", 3, 150.0, 300.0),
            span(0, "wait", "G[1]", 3, 500.0, 100.0),
            span(1, "wait", "G[1]", 3, 400.0, 200.0),
        ];
        let rows = split_waits(&spans, 2);
        let g = &rows["G[1]"];
        assert_eq!(g.steps, 1);
        assert!((g.wait - 0.2).abs() < 1e-12 && (g.slowest_rank - 0.05).abs() < 1e-12, "{g:?}");
        // A --skip past the step leaves nothing.
        assert!(split_waits(&spans, 3).is_empty());
    }
}
