//! Measured allreduce times (the rows of `bench-allreduce --json`) against the cost model with
//! the links' alpha, beta and gamma: the check that the model the simulator relies on is right.
//! Rows from hosts of several ranks are compared with `two_level`'s rounds.

use super::cost::{Terms, terms};
use super::two_level::{Links, Placement, schedule};
use crate::comm::Algorithm;
use crate::comm::Wire;
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

/// (seconds, messages on the busiest rank) of `bytes` cut into `fragments` on `place` (None
/// for `Mpi`).
fn model_on(algo: Algorithm, bytes: usize, fragments: usize, place: Placement, links: &Links) -> Option<(f64, f64)> {
    if place.ranks_per_host == 1 {
        return model_terms(algo, bytes, fragments, place.hosts).map(|t| (t.time(&links.between), t.messages));
    }
    let k = fragments.max(1);
    (0..k).try_fold((0.0, 0.0), |(secs, msgs), j| {
        let s = schedule(algo, (part(bytes / 4, k, j).len() * 4) as f64, place)?;
        let busiest = (0..place.ranks()).map(|r| s.rounds_of(r)).max().unwrap_or(0);
        Some((secs + s.seconds(place, links, Wire::F32), msgs + busiest as f64))
    })
}

/// A row's recorded placement ("HxL" or "mixed"; absent in files from before it was recorded)
/// against the placement asked for. One rank per node on a file of nodes of several ranks is
/// allowed, to compare with the one-level model, and said once on stderr.
fn check_placement(path: &Path, placement: Option<&str>, ranks_per_node: usize) -> Result<()> {
    let Some(placement) = placement else { return Ok(()) };
    let per_host = placement.split_once('x').and_then(|(_, l)| l.parse::<usize>().ok());
    match per_host {
        Some(l) if l == ranks_per_node => Ok(()),
        Some(l) if ranks_per_node == 1 => {
            static SAID: std::sync::Once = std::sync::Once::new();
            SAID.call_once(|| {
                eprintln!(
                    "note: {} ran on hosts of {l} ranks ({placement}); modelled as one rank per node \
                     (--ranks-per-node {l} models the hosts)",
                    path.display()
                )
            });
            Ok(())
        }
        Some(l) => anyhow::bail!(
            "{}: the benchmark ran on hosts of {l} ranks ({placement}), not {ranks_per_node}: pass --ranks-per-node {l}",
            path.display()
        ),
        None if ranks_per_node == 1 => Ok(()),
        None => anyhow::bail!(
            "{}: the benchmark's ranks were not in blocks of equal size on each host ({placement}), as the \
             two-level model places them: run it with mpiexec's default placement (by slot), or leave out --ranks-per-node",
            path.display()
        ),
    }
}

/// Compare every row of a `bench-allreduce --json` file, run on nodes of `ranks_per_node`
/// ranks each (in blocks). The measured time is the median of the calls (robust to the odd
/// call slowed by a neighbour on a shared machine).
pub fn compare_file(path: &Path, links: &Links, ranks_per_node: usize) -> Result<Vec<Comparison>> {
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
            check_placement(path, r["placement"].as_str(), ranks_per_node)?;
            if !ranks.is_multiple_of(ranks_per_node) {
                anyhow::bail!(
                    "{}: a row ran on {ranks} ranks, which do not fill nodes of {ranks_per_node}: pass the \
                     --ranks-per-node the benchmark ran with",
                    path.display()
                );
            }
            let place = Placement { hosts: ranks / ranks_per_node, ranks_per_host: ranks_per_node };
            let model = Algorithm::from_name(&selected).and_then(|a| model_on(a, bytes, fragments, place, links));
            let model_us = model.map(|(secs, _)| secs * 1e6);
            Ok(Comparison {
                ranks,
                bytes,
                algorithm: r["algorithm"].as_str().unwrap_or(&selected).to_string(),
                selected,
                fragments,
                measured_us,
                model_us,
                ratio: model_us.filter(|m| *m > 0.0).map(|m| measured_us / m),
                model_messages: model.map(|(_, messages)| messages),
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
    use crate::scaling::cost::Link;

    /// Model time of `bytes` cut into `fragments` nearly equal fragments, one allreduce each.
    fn model_seconds(algo: Algorithm, bytes: usize, fragments: usize, p: usize, link: &Link) -> Option<f64> {
        model_terms(algo, bytes, fragments, p).map(|t| t.time(link))
    }

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
        let rows = compare_file(&path, &Links { between: l, within: l }, 1).unwrap();
        // The tree at 2 ranks: reduce then broadcast, 2 messages of 64 KiB.
        let model = 2.0 * (10.0 + 65536.0 * 1e-2);
        assert!((rows[0].model_us.unwrap() - model).abs() < 1e-9, "{:?}", rows[0]);
        assert!((rows[0].ratio.unwrap() - 700.0 / model).abs() < 1e-12, "{:?}", rows[0]);
        assert_eq!(rows[0].model_messages, Some(2.0));
        assert!(rows[1].model_us.is_none() && rows[1].model_messages.is_none(), "{:?}", rows[1]);
    }

    #[test]
    fn rows_from_nodes_of_several_ranks_take_the_two_level_rounds() {
        let net = Link { alpha: 1e-5, beta: 1e-8, gamma: 0.0 };
        let links = Links { between: net, within: Link { alpha: 1e-6, beta: 1e-10, gamma: 0.0 } };
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("allreduce.json");
        let row = |ranks: usize| {
            serde_json::json!({"bytes": 1 << 20, "ranks": ranks, "algorithm": "auto", "selected": "hier",
                               "fragments": 2, "median_us": 1000.0})
        };
        std::fs::write(&path, serde_json::json!([row(4)]).to_string()).unwrap();
        let rows = compare_file(&path, &links, 2).unwrap();
        // Two fragments of 512 KiB on 2 nodes x 2 ranks, each timed by its rounds (whose
        // times two_level's tests check by hand).
        let place = Placement { hosts: 2, ranks_per_host: 2 };
        let one = schedule(Algorithm::Hier, (1 << 19) as f64, place).unwrap();
        let want = 2.0 * one.seconds(place, &links, Wire::F32) * 1e6;
        assert!((rows[0].model_us.unwrap() - want).abs() < 1e-9, "{:?} vs {want}", rows[0]);
        // Each fragment: 2 rounds inside the node, 2 across.
        assert_eq!(rows[0].model_messages, Some(8.0));
        std::fs::write(&path, serde_json::json!([row(3)]).to_string()).unwrap();
        let err = compare_file(&path, &links, 2).unwrap_err().to_string();
        assert!(err.contains("3 ranks") && err.contains("--ranks-per-node"), "{err}");

        // The placement bench-allreduce records: the wrong --ranks-per-node, or ranks not in
        // blocks, is named; one rank per node stays allowed (the one-level comparison).
        let placed = |placement: &str| {
            let mut r = row(4);
            r["placement"] = placement.into();
            std::fs::write(&path, serde_json::json!([r]).to_string()).unwrap();
        };
        placed("1x4");
        let err = compare_file(&path, &links, 2).unwrap_err().to_string();
        assert!(err.contains("hosts of 4 ranks") && err.contains("--ranks-per-node 4"), "{err}");
        placed("mixed");
        let err = compare_file(&path, &links, 2).unwrap_err().to_string();
        assert!(err.contains("not in blocks"), "{err}");
        assert!(compare_file(&path, &links, 1).is_ok());
        placed("2x2");
        assert!(compare_file(&path, &links, 2).is_ok());
        assert!(compare_file(&path, &links, 1).is_ok());
    }
}
