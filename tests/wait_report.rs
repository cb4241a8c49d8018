//! scripts/wait-report.py, which splits the waits for buckets into waiting for the slowest
//! rank and the exchange itself: on a trace built by hand with known answers, and on a real
//! 2-rank trace.

mod common;

use serde_json::{Value, json};
use std::path::Path;
use std::process::Command;

fn report(trace: &Value, dir: &Path) -> Value {
    let (t, out) = (dir.join("trace.json"), dir.join("rows.json"));
    std::fs::write(&t, trace.to_string()).unwrap();
    let o = Command::new("python3").arg("scripts/wait-report.py").arg(&t).arg("--json").arg(&out).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&std::fs::read(out).unwrap()).unwrap()
}

fn span(pid: u64, cat: &str, name: &str, step: u64, ts: f64, dur: f64) -> Value {
    json!({"ph": "X", "pid": pid, "tid": 1, "cat": cat, "name": name, "ts": ts, "dur": dur, "args": {"step": step}})
}

fn close(a: &Value, b: f64) -> bool {
    (a.as_f64().unwrap() - b).abs() < 1e-9
}

#[test]
fn waits_before_the_last_hand_off_are_the_slowest_ranks() {
    let tmp = tempfile::tempdir().unwrap();
    // Step 1 is warm-up (--skip 2): a long wait on both ranks that must not count.
    let warm_up =
        [1, 2].map(|pid| [span(pid, "device-to-host", "D", 1, 0.0, 10.0), span(pid, "wait", "D", 1, 100.0, 50_000.0)]);
    let mut events: Vec<Value> = warm_up.into_iter().flatten().collect();
    events.extend([
        // Step 2: rank 2 hands D off 4 ms after rank 1. Rank 1 waits 1.5 -> 6 ms: 3.5 ms of
        // it for rank 2, 1 ms for the exchange; rank 2 waits 5.5 -> 6 ms, all exchange.
        span(1, "device-to-host", "D", 2, 1000.0, 10.0),
        span(2, "device-to-host", "D", 2, 5000.0, 10.0),
        span(1, "wait", "D", 2, 1500.0, 4500.0),
        span(2, "wait", "D", 2, 5500.0, 500.0),
        // G is handed off in step 2 (two fragments on rank 1) and waited for in step 3, after
        // both hand-offs: exchange only.
        span(1, "device-to-host", "G", 2, 7000.0, 10.0),
        span(1, "device-to-host", "G", 2, 7100.0, 10.0),
        span(2, "device-to-host", "G", 2, 7200.0, 10.0),
        span(1, "wait", "G", 3, 9000.0, 100.0),
        span(2, "wait", "G", 3, 9000.0, 300.0),
    ]);
    let rows = report(&json!({ "traceEvents": events }), tmp.path());
    let d = &rows["D"];
    assert_eq!(d["steps"], 1, "{rows:#}");
    assert!(close(&d["wait"], 2.5) && close(&d["slowest_rank"], 1.75) && close(&d["exchange"], 0.75), "{rows:#}");
    let g = &rows["G"];
    assert!(close(&g["wait"], 0.2) && close(&g["slowest_rank"], 0.0) && close(&g["exchange"], 0.2), "{rows:#}");
}

/// On a real trace: every bucket the summary lists is reported, and each wait splits into
/// parts that are non-negative and add up.
#[test]
fn a_real_two_rank_trace_splits_every_bucket() {
    let tmp = tempfile::tempdir().unwrap();
    let (out, trace) = (tmp.path().join("run"), tmp.path().join("run-trace.json"));
    let args = ["--data", "synthetic:256", "--batch-size", "8", "--max-steps", "6", "--no-progress"];
    let mut args = args.to_vec();
    args.extend(["--trace", trace.to_str().unwrap(), "--trace-steps", "6", "--out", out.to_str().unwrap()]);
    let o = common::mpirun(2, &args, 300);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let t: Value = serde_json::from_slice(&std::fs::read(&trace).unwrap()).unwrap();
    let rows = report(&t, tmp.path());
    let summary: Value = serde_json::from_slice(&std::fs::read(out.join("summary.json")).unwrap()).unwrap();
    for b in summary["comm"]["buckets"].as_array().unwrap() {
        let r = &rows[b["bucket"].as_str().unwrap()];
        let (w, s, e) =
            (r["wait"].as_f64().unwrap(), r["slowest_rank"].as_f64().unwrap(), r["exchange"].as_f64().unwrap());
        assert!(r["steps"].as_u64().unwrap() >= 2 && s >= 0.0 && e >= -1e-9 && (w - s - e).abs() < 1e-9, "{rows:#}");
    }
}
