//! Measured allreduce times (the rows of `bench-allreduce --json`) against the cost model with
//! the links' alpha, beta and gamma: the check that the model the simulator relies on is right.

use super::cost::{Link, Terms, terms};
use crate::comm::Algorithm;
use crate::comm::allreduce::part;
use anyhow::{Context, Result};
use serde::Serialize;
use serde_json::Value;
use std::path::Path;

#[derive(Clone, Debug, Serialize)]
pub struct Comparison {
    pub ranks: usize,
    pub bytes: usize,
    /// As benchmarked (auto shows what it picked in `selected`).
    pub algorithm: String,
    pub selected: String,
    pub fragments: usize,
    pub measured_us: f64,
    /// None for `mpi` (the library's algorithm is not modelled).
    pub model_us: Option<f64>,
    /// measured / model.
    pub ratio: Option<f64>,
    /// Messages one after the other on the busiest rank's path (the model's alpha count),
    /// over all fragments: the turns after which a link may have idled (the scaling report
    /// weighs a row faster than the model against the links' token bucket with it).
    pub model_messages: Option<f64>,
}

/// The model's terms of `bytes` cut into `fragments` nearly equal fragments, one allreduce
/// each (None for `Mpi`).
pub fn model_terms(algo: Algorithm, bytes: usize, fragments: usize, p: usize) -> Option<Terms> {
    let n = bytes / 4;
    let k = fragments.max(1);
    (0..k).try_fold(Terms::default(), |sum, j| Some(sum + terms(algo, (part(n, k, j).len() * 4) as f64, p)?))
}

/// Model time of `bytes` cut into `fragments` nearly equal fragments, one allreduce each.
pub fn model_seconds(algo: Algorithm, bytes: usize, fragments: usize, p: usize, link: &Link) -> Option<f64> {
    model_terms(algo, bytes, fragments, p).map(|t| t.time(link))
}

/// Compare every row of a `bench-allreduce --json` file. The measured time is the median of
/// the calls (robust to the odd call slowed by a neighbour on a shared machine).
pub fn compare_file(path: &Path, link: &Link) -> Result<Vec<Comparison>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let rows: Vec<Value> = serde_json::from_str(&text)
        .with_context(|| format!("{} is not the JSON of `bench-allreduce --json FILE`", path.display()))?;
    let bad = || anyhow::anyhow!("{}: a row lacks bytes/ranks/selected/median_us/fragments", path.display());
    rows.iter()
        .map(|r| {
            let bytes = r["bytes"].as_u64().ok_or_else(bad)? as usize;
            let ranks = r["ranks"].as_u64().ok_or_else(bad)? as usize;
            let selected = r["selected"].as_str().ok_or_else(bad)?.to_string();
            let fragments = r["fragments"].as_u64().ok_or_else(bad)? as usize;
            let measured_us = r["median_us"].as_f64().ok_or_else(bad)?;
            let model = Algorithm::from_name(&selected).and_then(|a| model_terms(a, bytes, fragments, ranks));
            let model_us = model.map(|t| t.time(link) * 1e6);
            Ok(Comparison {
                ranks,
                bytes,
                algorithm: r["algorithm"].as_str().unwrap_or(&selected).to_string(),
                selected,
                fragments,
                measured_us,
                model_us,
                ratio: model_us.filter(|m| *m > 0.0).map(|m| measured_us / m),
                model_messages: model.map(|t| t.messages),
            })
        })
        .collect()
}

pub fn markdown(rows: &[Comparison]) -> String {
    let mut s = String::from(
        "| ranks | bytes | algorithm | fragments | measured us (median) | model us | measured / model |\n\
         |---:|---:|---|---:|---:|---:|---:|\n",
    );
    for r in rows {
        let name =
            if r.algorithm == r.selected { r.algorithm.clone() } else { format!("{}({})", r.algorithm, r.selected) };
        let (m, q) = match (r.model_us, r.ratio) {
            (Some(m), Some(q)) => (format!("{m:.1}"), format!("{q:.2}")),
            _ => ("-".into(), "-".into()),
        };
        s.push_str(&format!(
            "| {} | {} | {} | {} | {:.1} | {} | {} |\n",
            r.ranks, r.bytes, name, r.fragments, r.measured_us, m, q
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fragments_are_modelled_one_allreduce_each() {
        let l = Link { alpha: 1e-5, beta: 1e-8, gamma: 0.0 };
        let one = model_seconds(Algorithm::Rd, 1 << 20, 1, 2, &l).unwrap();
        let four = model_seconds(Algorithm::Rd, 1 << 20, 4, 2, &l).unwrap();
        // Same bytes, three more latencies.
        assert!((four - one - 3e-5).abs() < 1e-12, "{one} {four}");
        // The tree's reduce and broadcast at 4 ranks: 2 lg 4 messages per fragment.
        assert_eq!(model_terms(Algorithm::Tree, 1 << 20, 4, 4).unwrap().messages, 16.0);
        assert!(model_seconds(Algorithm::Mpi, 1 << 20, 1, 2, &l).is_none());
    }

    #[test]
    fn a_benchmark_row_carries_the_models_time_and_message_count() {
        let l = Link { alpha: 1e-5, beta: 1e-8, gamma: 0.0 };
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("allreduce.json");
        let row = |algo: &str, median_us: f64| {
            serde_json::json!({"bytes": 65536, "ranks": 2, "algorithm": algo, "selected": algo,
                               "fragments": 1, "median_us": median_us})
        };
        std::fs::write(&path, serde_json::json!([row("tree", 700.0), row("mpi", 600.0)]).to_string()).unwrap();
        let rows = compare_file(&path, &l).unwrap();
        // The tree at 2 ranks: reduce then broadcast, 2 messages of 64 KiB.
        let model = 2.0 * (10.0 + 65536.0 * 1e-2);
        assert!((rows[0].model_us.unwrap() - model).abs() < 1e-9, "{:?}", rows[0]);
        assert!((rows[0].ratio.unwrap() - 700.0 / model).abs() < 1e-12, "{:?}", rows[0]);
        assert_eq!(rows[0].model_messages, Some(2.0));
        assert!(rows[1].model_us.is_none() && rows[1].model_messages.is_none(), "{:?}", rows[1]);
    }
}
