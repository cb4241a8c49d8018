//! Tests of the run summary: eq. (1) and its speedups, the end-of-run lines, reading it back.

use super::*;
use serde_json::json;

/// A summary of `ranks` ranks with the figures the end-of-run lines read.
fn summary(ranks: usize) -> Summary {
    serde_json::from_value(json!({
        "options": {}, "ranks": ranks, "batch_size_per_rank": 64, "ms_per_step": 262.14,
        "compute_ms_per_step": 246.04,
        "comm": {"exposed_comm_ms_per_step": 14.06, "metrics_wait_ms_per_step": 2.96, "buckets": []}
    }))
    .unwrap()
}

#[test]
fn eq1_reproduces_the_mpi_papers_figure() {
    // 256 nodes at b = 256 against one GPU at 256: a step 1.18x longer gives 217x.
    let s = weak_scaling_speedup(1.0, 256.0, 256.0 / 217.0, 256.0, 256.0);
    assert!((s - 217.0).abs() < 1e-9);
    // Half the batch per rank at the same step time counts half.
    assert!((weak_scaling_speedup(100.0, 64.0, 100.0, 32.0, 2.0) - 1.0).abs() < 1e-12);
}

#[test]
fn weak_scaling_against_a_baseline_divides_by_the_ranks() {
    let mut base = summary(1);
    base.ms_per_step = 200.0;
    let mut run = summary(4);
    run.ms_per_step = 250.0;
    let w = run.weak_scaling_against(&base, "base/summary.json");
    assert!((w.speedup_eq1 - 3.2).abs() < 1e-12, "{w:?}");
    assert!((w.efficiency - 0.8).abs() < 1e-12);
    assert_eq!((w.baseline_ranks, w.baseline_batch), (1, 64.0));
}

#[test]
fn exchange_line_names_the_buckets_waited_for_longest() {
    let bucket = |l: &str, ms: f64| json!({"bucket": l, "bytes": 4, "exposed_ms_per_step": ms});
    let mut s = summary(2);
    s.comm = serde_json::from_value(json!({
        "comm_ms_per_step": 140.24,
        "comm_thread_cpu_ms_per_step": 31.04,
        "exposed_comm_ms_per_step": 22.5,
        "hidden_comm_fraction": 0.8396,
        "buckets": [bucket("G[1]", 1.3), bucket("G[2]", 0.01), bucket("G[3]", 0.2), bucket("D[3+2+1]", 21.0)],
    }))
    .unwrap();
    assert_eq!(
        s.exchange_line().unwrap(),
        "exchange (rank 0, per step): 140.2 ms averaging on the comm thread (31.0 ms of CPU), 22.5 ms of it waited for \
         (hidden 0.84); waited for most: D[3+2+1] 21.0 ms, G[1] 1.3 ms, G[3] 0.2 ms"
    );
    // One rank, or --no-exchange: nothing to say.
    s.comm = CommSummary::default();
    assert_eq!(s.exchange_line(), None);
}

#[test]
fn step_line_says_what_the_step_waited_for_on_several_ranks_only() {
    assert_eq!(
        summary(2).step_line().unwrap(),
        "step (rank 0, medians): 262.1 ms, 246.0 ms without its waits on other ranks; mean waits per step: \
         14.1 ms for gradient buckets, 3.0 ms for the other ranks at the step's end"
    );
    assert_eq!(summary(1).step_line(), None);
    // Where the kernel says how long the training thread waited for a core, so does the line.
    let mut t = summary(2);
    t.training_thread_cpu_ms_per_step = Some(229.31);
    t.training_thread_descheduled_ms_per_step = Some(16.74);
    let line = t.step_line().unwrap();
    assert!(
        line.ends_with(
            "3.0 ms for the other ranks at the step's end; the training thread ran 229.3 ms on a core and waited \
             16.7 ms for one"
        ),
        "{line}"
    );
}

#[test]
fn graphs_line_counts_replayed_steps_with_cuda_graphs_only() {
    let mut s = summary(1);
    assert_eq!(s.graphs_line(), None);
    s.cuda_graphs = Some(crate::device::GraphStats {
        recorded_steps: 3,
        replayed_steps: 96,
        diverged_steps: 1,
        graph_launches: 384,
        graphed_kernels: 10_752,
        patched_kernels: 768,
    });
    assert_eq!(
        s.graphs_line().unwrap(),
        "CUDA graphs (rank 0): 96 of 100 steps replayed (3 recorded, 1 left their record part-way); 384 graph \
         launches for 10752 kernels, 768 of them with new arguments"
    );
}

#[test]
fn a_file_that_is_no_summary_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("summary.json");
    std::fs::write(&path, r#"{"ranks": 2}"#).unwrap();
    let err = Summary::read(&path, "--summary").unwrap_err().to_string();
    assert!(err.contains("is not the summary.json of a dcgan-train run") && err.contains("options"), "{err}");
    let err = Summary::read(&dir.path().join("none.json"), "--summary").unwrap_err().to_string();
    assert!(err.starts_with("cannot read --summary"), "{err}");
}

#[test]
fn f32_options_read_as_written() {
    let v = json!({"a": 0.999f32, "b": 1e-8f32, "lr": 2e-4f64, "n": 7, "x": [0.5f32]});
    let t = f32_as_written(v);
    assert_eq!(t["a"], json!(0.999));
    assert_eq!(t["b"], json!(1e-8));
    // An f64 that is no f32 is left alone; integers too.
    assert_eq!(t["lr"], json!(2e-4));
    assert_eq!(t["n"], json!(7));
    assert_eq!(t["x"], json!([0.5]));
    // In a summary: the options as typed, and they read back as the same f32s.
    let mut s = summary(1);
    s.options.model.adam_beta2 = 0.999;
    let written = serde_json::to_value(&s).unwrap();
    assert_eq!(written["options"]["model"]["adam_beta2"], json!(0.999));
    assert_eq!(serde_json::from_value::<Summary>(written).unwrap(), s);
}
