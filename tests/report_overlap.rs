//! `python3 scripts/reports overlap`: the runs of bench-overlap.sh side by side with the figures
//! their summaries hold, and the hidden share from step times, which no single run holds.

use serde_json::json;
use std::path::Path;
use std::process::{Command, Output};

/// A summary.json with the figures the report reads.
fn write_summary(path: &Path, ms: f64, comm: f64, exposed: f64, hidden: f64) {
    let s = json!({"ms_per_step": ms, "comm": {"comm_ms_per_step": comm, "exposed_comm_ms_per_step": exposed,
        "hidden_comm_fraction": hidden}});
    std::fs::write(path, s.to_string()).unwrap();
}

fn overlap(args: &[String]) -> Output {
    Command::new("python3").args(["scripts/reports", "overlap"]).args(args).output().unwrap()
}

#[test]
fn each_run_shows_its_own_figures_and_step_times_give_the_hidden_share() {
    let tmp = tempfile::tempdir().unwrap();
    let runs = [
        ("overlap", 110.0, 40.0, 3.0, 0.9),
        ("no-overlap", 135.0, 30.0, 29.0, 0.05),
        ("no-exchange", 100.0, 0.0, 0.0, 0.0),
    ];
    let mut args = vec![];
    for (name, ms, comm, exposed, hidden) in runs {
        let path = tmp.path().join(format!("{name}.json"));
        write_summary(&path, ms, comm, exposed, hidden);
        args.push(format!("{name}={}", path.display()));
    }
    let o = overlap(&args);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // The summaries' own hidden fractions, not recomputed from their comm and exposed times
    // (which would give 0.93 and 0.03).
    assert!(text.contains("| overlap | 110.0 | 40.00 | 3.00 | 0.90 |"), "{text}");
    assert!(text.contains("| no-overlap | 135.0 | 30.00 | 29.00 | 0.05 |"), "{text}");
    // From step times: 110 - 100 = 10 ms exposed of the overlapped run's 40 ms: 0.75 hidden.
    assert!(text.contains("exposed = 110.0 - 100.0 = 10.0 ms of 40.0 ms comm: hidden 0.75"), "{text}");
}

#[test]
fn a_run_of_unknown_name_fails_with_one_line() {
    let o = overlap(&["fast=summary.json".to_string()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("'fast=summary.json'") && err.trim_end().lines().count() == 1, "{err}");
}
