//! Measured allreduce times (the rows of `bench-allreduce --json`) against the cost model with
//! the links' alpha, beta and gamma: the check that the model the simulator relies on is right.

use super::cost::{Link, allreduce_time};
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
}

/// Model time of `bytes` cut into `fragments` nearly equal fragments, one allreduce each.
pub fn model_seconds(algo: Algorithm, bytes: usize, fragments: usize, p: usize, link: &Link) -> Option<f64> {
    let n = bytes / 4;
    let k = fragments.max(1);
    (0..k).map(|j| allreduce_time(algo, part(n, k, j).len() * 4, p, link)).sum()
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
            let model_us = Algorithm::from_name(&selected)
                .and_then(|a| model_seconds(a, bytes, fragments, ranks, link))
                .map(|s| s * 1e6);
            Ok(Comparison {
                ranks,
                bytes,
                algorithm: r["algorithm"].as_str().unwrap_or(&selected).to_string(),
                selected,
                fragments,
                measured_us,
                model_us,
                ratio: model_us.filter(|m| *m > 0.0).map(|m| measured_us / m),
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
        assert!(model_seconds(Algorithm::Mpi, 1 << 20, 1, 2, &l).is_none());
    }
}
