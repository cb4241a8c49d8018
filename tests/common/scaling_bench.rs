//! A bench-scaling.sh output folder built by hand (summaries of runs by hosts, mode and
//! repeat, links.json), and `python3 scripts/reports scaling` run on it.

use serde_json::{Value, json};
use std::path::Path;
use std::process::Command;

/// A summary.json with the fields the report reads; `ms` is the step time.
pub fn summary(hosts: u32, mode: &str, ms: f64) -> Value {
    let exchanging = hosts > 1 && mode != "no-exchange";
    let algorithm = if exchanging { "vhd" } else { "none" };
    json!({
        "ms_per_step": ms,
        "compute_ms_per_step": ms - if exchanging { 2.0 } else { 0.0 },
        "global_images_per_s": 64.0 * f64::from(hosts) * 1000.0 / ms,
        "batch_size_per_rank": 64,
        "comm": {
            "comm_ms_per_step": if exchanging { 40.0 } else { 0.0 },
            "comm_thread_cpu_ms_per_step": if exchanging { 10.0 } else { 0.0 },
            "exposed_comm_ms_per_step": if exchanging { 2.0 } else { 0.0 },
            "metrics_wait_ms_per_step": 0.0,
            "hidden_comm_fraction": if exchanging { 0.95 } else { 0.0 },
            "buckets": [{"bucket": "D[3+2+1]", "algorithm": algorithm}],
        },
    })
}

pub fn write_run(out: &Path, hosts: u32, mode: &str, repeat: u32, ms: f64) {
    let s = summary(hosts, mode, ms);
    write_summary(out, hosts, mode, repeat, &s);
}

/// A run whose steps took `ms` (median) and `compute_ms` without their waits, of which the
/// training thread spent `queued_ms` waiting for a core (None: a summary that does not say).
pub fn write_run_computing(
    out: &Path,
    hosts: u32,
    mode: &str,
    repeat: u32,
    ms: f64,
    compute_ms: f64,
    queued_ms: Option<f64>,
) {
    let mut s = summary(hosts, mode, ms);
    s["compute_ms_per_step"] = json!(compute_ms);
    if let Some(q) = queued_ms {
        s["training_thread_descheduled_ms_per_step"] = json!(q);
    }
    write_summary(out, hosts, mode, repeat, &s);
}

pub fn write_summary(out: &Path, hosts: u32, mode: &str, repeat: u32, s: &Value) {
    let dir = out.join("runs").join(format!("{hosts}-{mode}-{repeat}"));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("summary.json"), s.to_string()).unwrap();
}

/// Per (repeat, ms of a, ms of b): one run of `a` and one of `b`, each (hosts, mode).
pub fn write_repeats(out: &Path, a: (u32, &str), b: (u32, &str), rows: &[(u32, f64, f64)]) {
    for &(repeat, ms_a, ms_b) in rows {
        write_run(out, a.0, a.1, repeat, ms_a);
        write_run(out, b.0, b.1, repeat, ms_b);
    }
}

/// An empty bench-scaling.sh output folder with its links.json.
pub fn bench_folder() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    let links =
        json!({"alpha_us": 10.0, "beta_ns_per_byte": 8.4, "bandwidth_gbit_per_s": 0.952, "gamma_ns_per_byte": 0.02});
    std::fs::write(tmp.path().join("links.json"), links.to_string()).unwrap();
    tmp
}

/// What dcgan-train adds to an N-host run's summary when bench-scaling.sh passes its repeat's
/// 1-host run as --baseline-summary: eq. (1) of the MPI paper against that run, computed here
/// from the two summaries' step times and batches.
pub fn add_baselines(out: &Path) {
    let read = |p: &Path| -> Value { serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap() };
    for entry in std::fs::read_dir(out.join("runs")).unwrap() {
        let dir = entry.unwrap().path();
        let name = dir.file_name().unwrap().to_str().unwrap().to_string();
        let (hosts, rest) = name.split_once('-').unwrap();
        let repeat = rest.rsplit_once('-').unwrap().1;
        let base = out.join("runs").join(format!("1-overlap-{repeat}")).join("summary.json");
        if hosts == "1" || !base.exists() {
            continue;
        }
        let (b, mut s) = (read(&base), read(&dir.join("summary.json")));
        let f = |v: &Value, k: &str| v[k].as_f64().unwrap();
        let n: f64 = hosts.parse().unwrap();
        let speedup = f(&b, "ms_per_step") / f(&s, "ms_per_step") * f(&s, "batch_size_per_rank")
            / f(&b, "batch_size_per_rank")
            * n;
        s["weak_scaling"] = json!({"file": base.display().to_string(), "baseline_ms_per_step": f(&b, "ms_per_step"),
            "baseline_batch": f(&b, "batch_size_per_rank"), "baseline_ranks": 1, "speedup_eq1": speedup,
            "efficiency": speedup / n});
        std::fs::write(dir.join("summary.json"), s.to_string()).unwrap();
    }
}

pub fn report(out: &Path) -> (String, Value) {
    add_baselines(out);
    let o = Command::new("python3").args(["scripts/reports", "scaling"]).arg(out).arg("--no-plot").output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let md = std::fs::read_to_string(out.join("results.md")).unwrap();
    let json = serde_json::from_slice(&std::fs::read(out.join("results.json")).unwrap()).unwrap();
    (md, json)
}

pub fn target<'a>(results: &'a Value, name: &str) -> &'a Value {
    results["targets"].as_array().unwrap().iter().find(|t| t["target"].as_str().unwrap().starts_with(name)).unwrap()
}

pub fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

/// The report's per-repeat ratios for `hosts` under `key` are exactly `expected`.
pub fn assert_ratios(results: &Value, hosts: &str, key: &str, expected: &[(u64, f64)]) {
    let pairs = results["paired"][hosts][key].as_array().unwrap();
    let got: Vec<(u64, f64)> =
        pairs.iter().map(|p| (p["repeat"].as_u64().unwrap(), p["ratio"].as_f64().unwrap())).collect();
    assert_eq!(got.len(), expected.len(), "{hosts} hosts, {key}: {got:?}");
    for ((r, v), (er, ev)) in got.iter().zip(expected) {
        assert!(r == er && close(*v, *ev), "{hosts} hosts, {key}: {got:?}");
    }
}
