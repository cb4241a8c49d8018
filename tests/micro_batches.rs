//! `--micro-batches M` under mpiexec: one rank computing its batch in M micro-batches trains
//! what M data-parallel ranks of a micro-batch each train (the same images, noise and batch
//! statistics; only the order of the gradient sums differs), and a count that does not
//! divide the batch is refused.

use crate::common::{mpirun, read_safetensors, step_records, train_ranks};
use std::collections::BTreeMap;
use std::path::Path;

/// `ranks` ranks of `per_rank` images each, one step on small synthetic data.
fn train(ranks: usize, out: &Path, per_rank: usize, extra: &[&str]) {
    let per_rank = per_rank.to_string();
    let base = ["--data", "synthetic:512", "--batch-size", &per_rank, "--threads", "1", "--max-steps", "1"];
    train_ranks(ranks, out, &base, extra);
}

/// Adam's first moments after one step, (1 - beta1) times the step's gradient, by tensor.
fn first_moments(run: &Path) -> BTreeMap<String, Vec<f32>> {
    let ck = dcgan_train::checkpoint::resolve(run).unwrap();
    let all = read_safetensors(&ck.join("optimizer.safetensors"));
    all.into_iter().filter(|(k, _)| k.ends_with("exp_avg")).collect()
}

/// The largest difference between two runs' gradients, relative to each tensor's largest
/// element.
fn gradient_difference(a: &BTreeMap<String, Vec<f32>>, b: &BTreeMap<String, Vec<f32>>) -> f32 {
    let mut worst = 0.0f32;
    for (k, x) in a {
        let scale = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let diff = x.iter().zip(&b[k]).fold(0.0f32, |m, (p, q)| m.max((p - q).abs()));
        worst = worst.max(diff / scale);
    }
    worst
}

/// M = 2 and 4 at 16 images a step: the gradient of one rank with micro-batches is the
/// average of M ranks' of 16/M images, to f32 rounding of the sums (a relative 1e-4 of each
/// tensor: sums of a few thousand terms); one batch of 16 (batch norm over all 16) is a
/// different gradient, well beyond it. And the step's losses are the same means.
#[test]
fn m_micro_batches_on_one_rank_train_what_m_ranks_train() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = |n: &str| tmp.path().join(n);
    train(1, &dir("whole"), 16, &[]);
    let whole = first_moments(&dir("whole"));
    for m in [2usize, 4] {
        let (micro, ranks) = (dir(&format!("micro{m}")), dir(&format!("ranks{m}")));
        train(1, &micro, 16, &["--micro-batches", &m.to_string()]);
        train(m, &ranks, 16 / m, &[]);
        let got = first_moments(&micro);
        let (rounding, other) = (gradient_difference(&got, &first_moments(&ranks)), gradient_difference(&got, &whole));
        assert!(rounding < 1e-4, "M = {m}: {rounding} from {m} ranks");
        assert!(other > 1e-2, "M = {m}: micro-batches computed one batch's gradient ({other})");
        let (a, b) = (&step_records(&micro)[0], &step_records(&ranks)[0]);
        let (x, y) = (a.metrics.losses.pair(), b.metrics.losses.pair());
        assert!((x.0 - y.0).abs() < 1e-5 && (x.1 - y.1).abs() < 1e-5, "M = {m}: {x:?} vs {y:?}");
    }
}

/// A count that does not divide a rank's batch: one line naming a divisor, before anything
/// is written.
#[test]
fn micro_batches_that_do_not_divide_the_batch_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let args = ["--data", "synthetic:64", "--batch-size", "8", "--micro-batches", "3", "--no-progress", "--out"];
    let o = mpirun(1, &[&args[..], &[out.to_str().unwrap()]].concat(), 60);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(err.contains("--micro-batches 3 does not divide the 8 images") && err.contains("(e.g. 2)"), "{err}");
    assert!(!out.exists(), "a refused run left {out:?}");
}
