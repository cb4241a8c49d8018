//! `dcgan-train trace-report`: the waits for buckets split into waiting for the slowest rank
//! and the exchange itself, and the hidden share of the allreduce time, on traces built by
//! hand with known answers and on a real 2-rank trace; bad input fails with one line.

use crate::common;

use serde_json::{Value, json};
use std::path::Path;
use std::process::{Command, Output};

fn trace_report(trace: &Path, extra: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_dcgan-train")).arg("trace-report").arg(trace).args(extra).output().unwrap()
}

/// The JSON report of `trace` (written to a file in `dir`), with the default --skip.
fn report(trace: &Value, dir: &Path) -> Value {
    let (t, out) = (dir.join("trace.json"), dir.join("report.json"));
    std::fs::write(&t, trace.to_string()).unwrap();
    let o = trace_report(&t, &["--json", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&std::fs::read(out).unwrap()).unwrap()
}

fn span(pid: u64, tid: u64, cat: &str, name: &str, step: u64, ts: f64, dur: f64) -> Value {
    json!({"ph": "X", "pid": pid, "tid": tid, "cat": cat, "name": name, "ts": ts, "dur": dur, "args": {"step": step}})
}

/// A span on the track the waits split does not look at (the copy stream of rank pid - 1).
fn on_copy(pid: u64, cat: &str, name: &str, step: u64, ts: f64, dur: f64) -> Value {
    span(pid, 10 * pid + 2, cat, name, step, ts, dur)
}

fn thread_name(pid: u64, tid: u64, name: &str) -> Value {
    json!({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}})
}

fn close(a: &Value, b: f64) -> bool {
    (a.as_f64().unwrap() - b).abs() < 1e-9
}

#[test]
fn waits_before_the_last_hand_off_are_the_slowest_ranks() {
    let tmp = tempfile::tempdir().unwrap();
    // Step 1 is warm-up (--skip 2): a long wait on both ranks that must not count.
    let warm_up = [1, 2].map(|pid| {
        [on_copy(pid, "device-to-host", "D", 1, 0.0, 10.0), span(pid, 10 * pid, "wait", "D", 1, 100.0, 50_000.0)]
    });
    let mut events: Vec<Value> = warm_up.into_iter().flatten().collect();
    let wait = |pid: u64, name: &str, step: u64, ts: f64, dur: f64| span(pid, 10 * pid, "wait", name, step, ts, dur);
    events.extend([
        // Step 2: rank 2 hands D off 4 ms after rank 1. Rank 1 waits 1.5 -> 6 ms: 3.5 ms of
        // it for rank 2, 1 ms for the exchange; rank 2 waits 5.5 -> 6 ms, all exchange.
        on_copy(1, "device-to-host", "D", 2, 1000.0, 10.0),
        on_copy(2, "device-to-host", "D", 2, 5000.0, 10.0),
        wait(1, "D", 2, 1500.0, 4500.0),
        wait(2, "D", 2, 5500.0, 500.0),
        // G is handed off in step 2 (two fragments on rank 1) and waited for in step 3, after
        // both hand-offs: exchange only.
        on_copy(1, "device-to-host", "G", 2, 7000.0, 10.0),
        on_copy(1, "device-to-host", "G", 2, 7100.0, 10.0),
        on_copy(2, "device-to-host", "G", 2, 7200.0, 10.0),
        wait(1, "G", 3, 9000.0, 100.0),
        wait(2, "G", 3, 9000.0, 300.0),
    ]);
    let r = report(&json!({ "traceEvents": events }), tmp.path());
    assert_eq!(r["skip"], 2, "{r:#}");
    let d = &r["buckets"]["D"];
    assert_eq!(d["steps"], 1, "{r:#}");
    assert!(close(&d["wait"], 2.5) && close(&d["slowest_rank"], 1.75) && close(&d["exchange"], 0.75), "{r:#}");
    let g = &r["buckets"]["G"];
    assert!(close(&g["wait"], 0.2) && close(&g["slowest_rank"], 0.0) && close(&g["exchange"], 0.2), "{r:#}");
}

/// The hidden share of each rank's allreduce time, from the trace's tracks: compute spans
/// cover it, waits and copies do not.
#[test]
fn compute_spans_hide_allreduce_time_and_waits_do_not() {
    let tmp = tempfile::tempdir().unwrap();
    let mut events = vec![];
    for pid in [1, 2] {
        events.extend([
            thread_name(pid, 10 * pid, "compute"),
            thread_name(pid, 10 * pid + 1, "comm thread"),
            thread_name(pid, 10 * pid + 2, "copy stream"),
        ]);
    }
    let (compute, comm) = (|pid: u64| 10 * pid, |pid: u64| 10 * pid + 1);
    events.extend([
        // Both ranks hand off and wait for bucket B in step 2 (for the waits part).
        on_copy(1, "device-to-host", "B", 2, 0.0, 10.0),
        on_copy(2, "device-to-host", "B", 2, 0.0, 10.0),
        span(1, compute(1), "wait", "B", 2, 300.0, 300.0),
        span(2, compute(2), "wait", "B", 2, 600.0, 100.0),
        // Rank 0: 500 us of allreduce (100 -> 600); compute covers 50 -> 300 (200 us of it),
        // its wait (300 -> 600) nothing, nor the copy on its own track.
        span(1, compute(1), "forward", "D.1 conv", 2, 50.0, 250.0),
        span(1, comm(1), "allreduce", "B", 2, 100.0, 500.0),
        on_copy(1, "host-to-device", "B", 2, 300.0, 300.0),
        // Rank 1: 400 us of allreduce in two spans (100 -> 300, 400 -> 600), of which compute
        // (two overlapping spans, 0 -> 450) covers 200 + 50 us.
        span(2, compute(2), "forward", "D.1 conv", 2, 0.0, 300.0),
        span(2, compute(2), "backward-data", "G.1 convT", 2, 200.0, 250.0),
        span(2, comm(2), "allreduce", "B", 2, 100.0, 200.0),
        span(2, comm(2), "allreduce", "B", 2, 400.0, 200.0),
        // Warm-up (step 1, before --skip 2): an allreduce no compute covers, left out.
        span(1, comm(1), "allreduce", "B", 1, -5000.0, 1000.0),
    ]);
    let r = report(&json!({ "traceEvents": events }), tmp.path());
    let hidden = r["hidden"].as_array().unwrap();
    assert_eq!(hidden.len(), 2, "{r:#}");
    let row = |i: usize| {
        let h = &hidden[i];
        (h["rank"].as_u64().unwrap(), h["steps"].as_u64().unwrap(), &h["allreduce_ms_per_step"], &h["hidden"])
    };
    let (rank, steps, ms, share) = row(0);
    assert!(rank == 0 && steps == 1 && close(ms, 0.5) && close(share, 200.0 / 500.0), "{r:#}");
    let (rank, steps, ms, share) = row(1);
    assert!(rank == 1 && steps == 1 && close(ms, 0.4) && close(share, 250.0 / 400.0), "{r:#}");
}

/// On a real trace: every bucket the summary lists is reported, each wait splits into parts
/// that are non-negative and add up, and each rank's hidden share is a fraction.
#[test]
fn a_real_two_rank_trace_splits_every_bucket() {
    let tmp = tempfile::tempdir().unwrap();
    let (out, trace) = (tmp.path().join("run"), tmp.path().join("run-trace.json"));
    let args = ["--data", "synthetic:256", "--batch-size", "8", "--max-steps", "6", "--no-progress"];
    let mut args = args.to_vec();
    args.extend(["--trace", trace.to_str().unwrap(), "--trace-steps", "6", "--out", out.to_str().unwrap()]);
    let o = common::mpirun(2, &args, 300);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    // The run's last line says where the trace went and what reads it.
    let named = format!("trace of every rank in {0} (`dcgan-train trace-report {0}`", trace.display());
    assert!(err.lines().last().is_some_and(|l| l.starts_with("done: ") && l.contains(&named)), "{err}");
    let t: Value = serde_json::from_slice(&std::fs::read(&trace).unwrap()).unwrap();
    let r = report(&t, tmp.path());
    for b in &common::read_summary(&out).comm.buckets {
        let row = &r["buckets"][&b.bucket];
        let f = |k: &str| row[k].as_f64().unwrap();
        let (w, s, e) = (f("wait"), f("slowest_rank"), f("exchange"));
        assert!(row["steps"].as_u64().unwrap() >= 2 && s >= 0.0 && e >= -1e-9 && (w - s - e).abs() < 1e-9, "{r:#}");
    }
    let hidden = r["hidden"].as_array().unwrap();
    assert_eq!(hidden.iter().map(|h| h["rank"].as_u64().unwrap()).collect::<Vec<_>>(), vec![0, 1], "{r:#}");
    for h in hidden {
        let share = h["hidden"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&share) && h["allreduce_ms_per_step"].as_f64().unwrap() > 0.0, "{r:#}");
    }
    // The text output names every bucket and the totals.
    let o = trace_report(&trace, &[]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success() && text.contains("| all |") && text.contains("| rank |"), "{text}");
}

/// One line on stderr naming the problem, and a non-zero exit.
fn fails_with(trace: &Path, extra: &[&str], expected: &str) {
    let o = trace_report(trace, extra);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains(expected) && err.trim_end().lines().count() == 1, "{err}");
}

#[test]
fn bad_input_fails_with_one_line() {
    let tmp = tempfile::tempdir().unwrap();
    fails_with(&tmp.path().join("missing.json"), &[], "cannot read the trace");
    let not_json = tmp.path().join("not.json");
    std::fs::write(&not_json, "{").unwrap();
    fails_with(&not_json, &[], "is not a JSON trace");
    // A 1-rank run's trace: compute only, no exchange.
    let one_rank = tmp.path().join("one.json");
    let compute = json!({"traceEvents": [span(1, 10, "forward", "D.1 conv", 3, 0.0, 10.0)]});
    std::fs::write(&one_rank, compute.to_string()).unwrap();
    fails_with(&one_rank, &[], "no gradient exchange");
    // Waits only in the warm-up steps.
    let early = tmp.path().join("early.json");
    let events = [1, 2].map(|pid| {
        [on_copy(pid, "device-to-host", "D", 1, 0.0, 10.0), span(pid, 10 * pid, "wait", "D", 1, 100.0, 5.0)]
    });
    std::fs::write(&early, json!({"traceEvents": events.concat()}).to_string()).unwrap();
    fails_with(&early, &[], "from step 2 on");
    let o = trace_report(&early, &["--skip", "1"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}
