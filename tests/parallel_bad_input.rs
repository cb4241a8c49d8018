//! Data-parallel runs that must fail under mpiexec: bad input and ranks that disagree fail on
//! every rank with one line and no hang, and a diverging loss ends cleanly while buckets are
//! in flight.

use crate::common;

use crate::common::{mpiexec, mpiexec_ranks, mpirun};
use std::path::Path;

const BIN: &str = env!("CARGO_BIN_EXE_dcgan-train");

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).to_string()
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// A short run's arguments: two steps of small batches on one thread.
const SMALL: [&str; 8] = ["--data", "synthetic:64", "--batch-size", "8", "--threads", "1", "--max-steps", "2"];

#[test]
fn a_global_batch_or_baseline_the_ranks_cannot_use_ends_every_rank() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("o");
    let o = mpirun(3, &["--data", "synthetic:256", "--global-batch-size", "64", "--out", path(&out)], 120);
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(err.contains("--global-batch-size 64") && err.contains("3 ranks"), "{err}");

    // A baseline only rank 0 reads is read before training: read after it, its error ended
    // rank 0 alone while the others had finished, and the job hung until the stall timeout.
    let base = tmp.path().join("base");
    let mut args = SMALL.to_vec();
    args.extend(["--baseline-summary", "/nonexistent/summary.json", "--out", path(&base)]);
    let o = mpirun(2, &args, 45);
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(err.contains("cannot read --baseline-summary /nonexistent/summary.json"), "{err}");
    assert!(!base.join("metrics.jsonl").exists(), "the run stopped before training");
}

#[test]
fn ranks_started_with_other_options_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("o");
    // Two ranks started with different flags (MPMD syntax: one command line per rank).
    let mut cmd = mpiexec();
    cmd.args(["-n", "1", BIN, "--data", "synthetic:64", "--seed", "1", "--out", path(&out)]);
    cmd.args([":", "-n", "1", BIN, "--data", "synthetic:64", "--seed", "2", "--out", path(&out)]);
    let o = common::run_limited(cmd, 120);
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(err.contains("--seed 2 vs 1") && err.contains("same command line"), "{err}");
    assert!(!out.join("metrics.jsonl").exists(), "nothing is written when the ranks disagree");

    // An option that may differ between ranks (--threads) failing on one rank alone: the
    // others learn it in the next collective, none waits in one the failing rank never joins.
    let short = ["--data", "synthetic:64", "--batch-size", "8", "--max-steps", "2", "--out", path(&out)];
    let mut cmd = mpiexec();
    cmd.args(["-n", "1", BIN]).args(short).args(["--threads", "1"]);
    cmd.args([":", "-n", "1", BIN]).args(short).args(["--threads", "0"]);
    let o = common::run_limited(cmd, 60);
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(err.contains("--threads must be at least 1") && !err.contains("panicked"), "{err}");

    // --trace on one rank only: every rank's trace is gathered at the end, so the ranks
    // without it would never join that gather.
    let trace = tmp.path().join("t.json");
    let mut cmd = mpiexec();
    cmd.args(["-n", "1", BIN]).args(short).args(["--trace", path(&trace)]);
    cmd.args([":", "-n", "1", BIN]).args(short);
    let o = common::run_limited(cmd, 60);
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(err.contains("without --trace") && err.contains("same command line"), "{err}");
}

#[test]
fn allreduce_rules_that_differ_between_hosts_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("o");
    // The same --allreduce-tuning path holding other rules on each host (a working directory
    // per rank stands in for a host): refused before any bucket moves. Unchecked, the ranks
    // ran different algorithms on one bucket: heap corruption or a hang.
    let mut cmd = mpiexec();
    for (i, algo) in ["rd", "ring"].into_iter().enumerate() {
        let host = tmp.path().join(format!("host{i}"));
        std::fs::create_dir(&host).unwrap();
        std::fs::write(host.join("rules.csv"), format!("2,0,inf,{algo}\n")).unwrap();
        if i > 0 {
            cmd.arg(":");
        }
        cmd.args(["-n", "1", "-wdir", path(&host), BIN]).args(SMALL);
        cmd.args(["--allreduce-tuning", "rules.csv", "--out", path(&out)]);
    }
    let o = common::run_limited(cmd, 60);
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(err.contains("other allreduce algorithms") && err.contains("same --allreduce-tuning file"), "{err}");
    assert!(!err.contains("panicked") && !out.join("metrics.jsonl").exists(), "{err}");

    // One host's file has no rule for this rank count: that rank fails while starting its
    // comm thread, the other is already past it. Unchecked, the failing rank waited in
    // MPI_Finalize and the other in its first collective: a silent hang.
    for command in [None, Some("bench-allreduce")] {
        let mut cmd = mpiexec();
        for (i, ranks) in [2, 4].into_iter().enumerate() {
            let host = tmp.path().join(format!("count{i}"));
            std::fs::create_dir_all(&host).unwrap();
            std::fs::write(host.join("rules.csv"), format!("{ranks},0,inf,ring\n")).unwrap();
            if i > 0 {
                cmd.arg(":");
            }
            cmd.args(["-n", "1", "-wdir", path(&host), BIN]);
            match command {
                Some(c) => cmd.args([c, "--sizes", "4KiB"]),
                None => cmd.args(SMALL).args(["--out", path(&out)]),
            };
            cmd.args(["--allreduce-tuning", "rules.csv"]);
        }
        let o = common::run_limited(cmd, 60);
        assert!(!o.status.success(), "{command:?}");
        let err = stderr(&o);
        assert!(err.contains("no rule for 2 ranks") && !err.contains("panicked"), "{command:?}: {err}");
        assert!(!out.join("metrics.jsonl").exists(), "{err}");
    }
}

/// Building the model failing on one rank alone (on a GPU: its memory), on either rank: the
/// others learn it in the agreement that follows, and only the failing rank speaks.
#[test]
fn a_model_that_fails_to_build_on_one_rank_ends_every_rank() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("o");
    for failing in ["0", "1"] {
        let mut cmd = mpiexec_ranks(2);
        cmd.args(SMALL).args(["--out", path(&out)]);
        cmd.env("DCGAN_TEST_FAIL_BUILD_ON_RANK", failing);
        let o = common::run_limited(cmd, 60);
        assert!(!o.status.success());
        let err = stderr(&o);
        let line = format!("building the model failed on rank {failing}");
        assert_eq!(err.matches(&line).count(), 1, "rank {failing}: {err}");
        assert!(!err.contains("panicked") && !out.join("metrics.jsonl").exists(), "{err}");
    }
}

/// The same --data path holding other images on each host (a working directory per rank
/// stands in for a host): refused before training, naming the host.
#[test]
fn other_training_data_on_each_host_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("o");
    let mut cmd = mpiexec();
    for i in 0..2u8 {
        let host = tmp.path().join(format!("data-host{i}"));
        std::fs::create_dir_all(host.join("data")).unwrap();
        let mut idx = vec![0, 0, 8, 3, 0, 0, 0, 16, 0, 0, 0, 28, 0, 0, 0, 28];
        idx.extend((0..16 * 28 * 28).map(|k| (k % 251) as u8 ^ i));
        std::fs::write(host.join("data").join("train-images-idx3-ubyte"), idx).unwrap();
        if i > 0 {
            cmd.arg(":");
        }
        cmd.args(["-n", "1", "-wdir", path(&host), BIN, "--data", "data", "--batch-size", "8", "--max-steps", "1"]);
        cmd.args(["--threads", "1", "--out", path(&out)]);
    }
    let o = common::run_limited(cmd, 60);
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(err.contains("loaded other training data than rank 0") && err.contains("same --data"), "{err}");
    assert!(!out.join("metrics.jsonl").exists(), "{err}");
}

/// The benchmarks check their options too: other --sizes on one rank ran other messages into
/// each other (MPI_ERR_TRUNCATE, or a wait until the stall timeout).
#[test]
fn benchmarks_started_with_other_sizes_on_one_rank_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    for command in ["bench-allreduce", "tune-allreduce", "ping-pong"] {
        let table = tmp.path().join("rules.csv");
        let out: &[&str] = if command == "tune-allreduce" { &["--out", path(&table)] } else { &[] };
        let mut cmd = mpiexec();
        cmd.args(["-n", "1", BIN, command, "--sizes", "4KiB"]).args(out);
        cmd.args([":", "-n", "1", BIN, command, "--sizes", "8KiB"]).args(out);
        let o = common::run_limited(cmd, 60);
        assert!(!o.status.success(), "{command}");
        let err = stderr(&o);
        assert!(err.contains(&format!("rank 1 was started with other {command} options")), "{command}: {err}");
        assert!(!err.contains("panicked"), "{command}: {err}");
    }
}

/// A loss that diverges ends the run with its one line and a non-zero exit, also while G's
/// buckets are still being averaged when the step gives up (the comm thread slowed here,
/// so that they are): the trainer waits for them before it frees their memory. Without that
/// wait, the comm thread's check finds the memory gone and panics (and before the check, it
/// wrote averaged gradients into the freed buffers).
#[test]
fn a_diverging_loss_ends_cleanly_while_buckets_are_in_flight() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("o");
    let mut cmd = mpiexec_ranks(2);
    cmd.args(["--data", "synthetic:256", "--batch-size", "8", "--threads", "1", "--lr", "1e30"]);
    cmd.args(["--max-steps", "6", "--no-progress", "--out", path(&out)]);
    cmd.env("DCGAN_TEST_SLOW_COMM", "300");
    let o = common::run_limited(cmd, 120);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("the loss became"), "{err}");
    for crash in ["signal", "Segmentation", "panicked", "corrupted", "free()"] {
        assert!(!err.contains(crash), "a rank crashed ({crash}):\n{err}");
    }
}
