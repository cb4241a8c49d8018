//! `--wire 1bit` under mpiexec: replicas stay identical, the bytes sent are measured 25x
//! fewer than f32's in the same run, the residuals are reported, and the warm-up trains
//! exactly as f32 does.

mod common;

use common::{final_weights, mpirun, read_summary, timed_step_records};
use std::path::Path;

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn run(ranks: usize, out: &Path, steps: &str, extra: &[&str]) {
    let mut args = vec![
        "--data",
        "synthetic:256",
        "--batch-size",
        "4",
        "--max-steps",
        steps,
        "--fragment-bytes",
        "64KiB",
        "--no-progress",
        "--out",
        path(out),
    ];
    args.extend_from_slice(extra);
    let o = mpirun(ranks, &args, 300);
    assert!(o.status.success(), "{ranks} ranks {extra:?}:\n{}", String::from_utf8_lossy(&o.stderr));
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
        let (exact, one_bit) = (comm.sent_bytes_per_exact_step.unwrap(), comm.sent_bytes_per_1bit_step.unwrap());
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
    assert!(read_summary(&out("warm")).comm.sent_bytes_per_1bit_step.is_none());
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
