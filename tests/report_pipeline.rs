//! `python3 scripts/reports pipeline`: a bench-pipeline.sh folder's step times against one rank
//! with one thread, and the step GPipe's formula predicts from a pipeline's traced phases.

use serde_json::{Value, json};
use std::path::Path;
use std::process::Command;

/// A run folder: steps of `ms` (the first skipped), a summary, and for a pipeline a trace of
/// one step with spans of the given [G forward, G backward, D before update, D update,
/// D after update] milliseconds.
fn write_run(dir: &Path, ms: &[f64], pipeline: Option<(usize, [f64; 5])>) {
    std::fs::create_dir_all(dir).unwrap();
    let lines: Vec<String> =
        ms.iter().enumerate().map(|(i, m)| json!({"type": "step", "step": i + 1, "ms": m}).to_string()).collect();
    std::fs::write(dir.join("metrics.jsonl"), lines.join("\n") + "\n").unwrap();
    let summary = match pipeline {
        Some((m, _)) => json!({"pipeline": {"stages": 2, "pipelines": 1, "micro_batches": m,
            "bubble_formula": 1.0 / (m as f64 + 1.0), "idle_fraction": [0.1, 0.2], "busy_ms_per_step": [90.0, 60.0]}}),
        None => json!({}),
    };
    std::fs::write(dir.join("summary.json"), summary.to_string()).unwrap();
    if let Some((_, [g1, g2, d1, du, d2])) = pipeline {
        // Microseconds, in the order each stage runs them (step 1, past the skipped step 0).
        let span = |pid: u32, cat: &str, ts: f64, ms: f64| json!({"ph": "X", "pid": pid, "cat": cat, "name": "x", "ts": ts, "dur": ms * 1e3, "args": {"step": 1}});
        let events = vec![
            span(1, "forward", 0.0, g1),
            span(1, "wait", 1.0, 500.0),
            span(1, "backward-data", 2.0, g2),
            span(2, "forward", 0.0, d1),
            span(2, "adam", 1.0, du),
            span(2, "backward-data", 2.0, d2),
        ];
        std::fs::write(dir.join("trace.json"), json!({"traceEvents": events}).to_string()).unwrap();
    }
}

#[test]
fn the_pipeline_is_set_against_one_rank_and_the_formula_over_its_phases() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path();
    std::fs::write(out.join("settings.txt"), "batches=64 micro=4 steps=3 skip=1 repeats=1\n").unwrap();
    write_run(&out.join("r1-b64-one-1t"), &[999.0, 200.0, 200.0], None);
    write_run(&out.join("r1-b64-pipe-m4"), &[999.0, 150.0, 160.0], Some((4, [40.0, 80.0, 60.0, 2.0, 20.0])));
    let o = Command::new("python3").args(["scripts/reports", "pipeline"]).arg(out).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let r: Value = serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    let rows = r["rows"].as_array().unwrap();
    let pipe = rows.iter().find(|r| r["variant"] == "pipe-m4").unwrap();
    // Mean of the steps after the first, 155 ms, against one rank's 200.
    assert!((pipe["step_ms"].as_f64().unwrap() - 155.0).abs() < 1e-9);
    assert!((pipe["speedup_over_one_thread"].as_f64().unwrap() - 200.0 / 155.0).abs() < 1e-9);
    // Phase 1: G 40/4 = 10, D 60/4 = 15 a micro-batch: 3 x 15 + 10 + 15 = 70; D's update 2;
    // phase 2: D 20/4 = 5, G 80/4 = 20: 3 x 20 + 5 + 20 = 85. The wait span is not work.
    assert!((pipe["predicted_step_ms"].as_f64().unwrap() - 157.0).abs() < 1e-9, "{pipe}");
    assert_eq!(r["best_pipeline"]["64"], "pipe-m4");
}
