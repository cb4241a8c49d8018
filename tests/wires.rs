//! The wires under mpiexec, `--wire 1bit` above all: replicas stay identical, the bytes sent
//! are measured 25x fewer than f32's in the same run (bf16's half), the residuals are
//! reported and kept in checkpoints, the warm-up trains exactly as f32 does, and the frozen
//! variance stays frozen.

use crate::common;

use crate::common::{final_weights, mpirun, read_summary, timed_step_records};
use std::path::Path;

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// A short run of `steps` steps on small synthetic data.
fn run(ranks: usize, out: &Path, steps: &str, extra: &[&str]) {
    let base = ["--data", "synthetic:256", "--batch-size", "4", "--fragment-bytes", "64KiB", "--max-steps", steps];
    common::train_ranks(ranks, out, &base, extra);
}

/// Every rank holds the same bits after every step (3 ranks: stripes of unequal length; 4),
/// and the same run's f32 warm-up steps and 1-bit steps, counted at the transport, differ
/// by the encoding's factor.
#[test]
fn one_bit_replicas_stay_identical_and_send_25x_fewer_bytes() {
    let tmp = tempfile::tempdir().unwrap();
    for ranks in [3, 4] {
        let out = tmp.path().join(format!("{ranks}"));
        run(ranks, &out, "8", &["--wire", "1bit", "--wire-warmup-steps", "3", "--check-consistency", "1"]);
        let comm = read_summary(&out).comm;
        let (exact, one_bit) = (comm.sent_bytes_per_warmup_step.unwrap(), comm.sent_bytes_per_wire_step.unwrap());
        assert!(exact >= 25.0 * one_bit, "{ranks} ranks: {exact} bytes a step in f32, {one_bit} in 1 bit");
        assert!(comm.buckets.iter().all(|b| b.algorithm == "1bit-stripes"), "{:?}", comm.buckets);
        let steps = timed_step_records(&out);
        // The residuals exist once a network's gradients have gone 1-bit: none in the warm-up.
        for s in &steps[..3] {
            assert_eq!((s.metrics.residual_g, s.metrics.residual_d), (None, None), "step {}", s.step);
        }
        let last = steps.last().unwrap().metrics;
        assert!(last.residual_g.unwrap() > 0.0 && last.residual_d.unwrap() > 0.0, "{last:?}");
    }
}

/// The warm-up is f32: a 1-bit run whose warm-up covers all its steps trains exactly what an
/// f32 run trains, and one without a warm-up does not.
#[test]
fn the_warm_up_trains_exactly_as_f32() {
    let tmp = tempfile::tempdir().unwrap();
    let out = |name: &str| tmp.path().join(name);
    run(2, &out("f32"), "3", &[]);
    run(2, &out("warm"), "3", &["--wire", "1bit", "--wire-warmup-steps", "3"]);
    run(2, &out("cold"), "3", &["--wire", "1bit", "--wire-warmup-steps", "0"]);
    assert_eq!(final_weights(&out("f32")), final_weights(&out("warm")));
    assert_ne!(final_weights(&out("f32")), final_weights(&out("cold")));
    assert!(read_summary(&out("warm")).comm.sent_bytes_per_wire_step.is_none());
}

/// A 1-bit run stopped after its warm-up and resumed ends where the uninterrupted run does,
/// bit for bit: every rank's residuals travel in the checkpoint.
#[test]
fn a_one_bit_run_resumes_bitwise_with_every_ranks_residuals() {
    let tmp = tempfile::tempdir().unwrap();
    let (whole, part) = (tmp.path().join("whole"), tmp.path().join("part"));
    let one_bit = ["--wire", "1bit", "--wire-warmup-steps", "1"];
    run(2, &whole, "6", &one_bit);
    run(2, &part, "3", &one_bit);
    let ck = dcgan_train::checkpoint::resolve(&part).unwrap();
    let names = common::safetensors_names(&ck.join("optimizer.safetensors"));
    for name in ["rank0.G.residual", "rank1.G.stripe_residual", "rank1.D.residual"] {
        assert!(names.iter().any(|n| n == name), "no {name} in {names:?}");
    }
    let args = ["--resume", path(&part), "--max-steps", "6", "--no-progress"];
    let o = mpirun(2, &args, 300);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(final_weights(&part), final_weights(&whole));
    assert_eq!(common::step_records(&part), common::step_records(&whole));
}

/// A resume that plans more steps keeps the warm-up the run began with: one of 1 step, whose
/// default warm-up (a tenth of its steps) is none, resumed to 20 (whose tenth would be 2)
/// compresses from its first step on, and ends where a run of 20 without warm-up does.
#[test]
fn a_longer_resume_keeps_the_runs_one_bit_warm_up() {
    let tmp = tempfile::tempdir().unwrap();
    let (whole, part) = (tmp.path().join("whole"), tmp.path().join("part"));
    run(2, &whole, "20", &[&["--wire", "1bit", "--wire-warmup-steps", "0"], &common::NARROW[..]].concat());
    run(2, &part, "1", &[&["--wire", "1bit"], &common::NARROW[..]].concat());
    let o = mpirun(2, &["--resume", path(&part), "--max-steps", "20", "--no-progress"], 300);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(read_summary(&part).comm.sent_bytes_per_warmup_step, None, "the resume went back to f32");
    assert_eq!(final_weights(&part), final_weights(&whole));
    assert_eq!(common::step_records(&part), common::step_records(&whole));
}

/// `--wire-freeze-variance`: Adam's second moment stays as the warm-up left it (every
/// checkpoint after it holds the same exp_avg_sq) while the first moment moves on; without
/// the flag the second moment moves too.
#[test]
fn the_frozen_variance_stays_as_the_warm_up_left_it() {
    let tmp = tempfile::tempdir().unwrap();
    let every = ["--wire", "1bit", "--wire-warmup-steps", "2", "--checkpoint-every", "1", "--keep-checkpoints", "0"];
    for freeze in [true, false] {
        let out = tmp.path().join(format!("{freeze}"));
        let mut args = every.to_vec();
        if freeze {
            args.push("--wire-freeze-variance");
        }
        run(2, &out, "4", &args);
        let moments = |step: u64| {
            let dir = out.join("checkpoints").join(format!("step-{step:08}"));
            common::read_safetensors(&dir.join("optimizer.safetensors"))
        };
        let (at2, at4) = (moments(2), moments(4));
        let sq = |m: &std::collections::BTreeMap<String, Vec<f32>>| -> Vec<(String, Vec<f32>)> {
            m.iter()
                .filter(|(k, _)| k.ends_with("exp_avg_sq") && !k.starts_with("rank"))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        };
        let first = |m: &std::collections::BTreeMap<String, Vec<f32>>| m["D.main.0.weight.exp_avg"].clone();
        assert!(!sq(&at2).is_empty());
        assert_eq!(sq(&at2) == sq(&at4), freeze, "freeze {freeze}: the second moment");
        assert_ne!(first(&at2), first(&at4), "freeze {freeze}: the first moment must move on");
    }
}

/// The bytes counted at the transport: bf16 sends exactly half of f32's, from the first step.
#[test]
fn bf16_sends_half_the_bytes_of_f32() {
    let tmp = tempfile::tempdir().unwrap();
    let sent = |wire: &str| {
        let out = tmp.path().join(wire);
        run(2, &out, "2", &["--wire", wire]);
        let comm = read_summary(&out).comm;
        assert!(comm.sent_bytes_per_warmup_step.is_none(), "{wire}: no warm-up");
        comm.sent_bytes_per_wire_step.unwrap()
    };
    assert_eq!(sent("bf16") * 2.0, sent("f32"));
}

/// Pipelines side by side with `--wire 1bit`: rank 0 holds G's stage and averages G's buckets
/// with its replica, so the step lines report G's residual norm once it has gone 1-bit, and no
/// D norm (D's residuals live on D's stage).
#[test]
fn a_pipeline_stage_reports_its_own_networks_residual() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("pipelines");
    run(4, &out, "3", &["--pipeline", "--wire", "1bit", "--wire-warmup-steps", "0", "--ngf", "16", "--ndf", "16"]);
    let steps = timed_step_records(&out);
    assert!(steps.iter().all(|s| s.metrics.residual_d.is_none()), "{steps:?}");
    let last = steps.last().unwrap().metrics;
    assert!(last.residual_g.is_some_and(|r| r > 0.0), "{last:?}");
}
