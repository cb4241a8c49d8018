//! `--sync-every K` (block momentum) under mpiexec: a sync without momentum is the mean of the
//! ranks' own models, the ranks are identical after every sync, 1/K of f32's bytes, and a
//! resume inside a block or at its end continues exactly.

use crate::common::{
    self, final_weights, mpiexec_ranks, mpirun, read_safetensors, read_summary, run_limited, step_records,
    train_small as train,
};
use dcgan_train::model::dcgan::{DISCRIMINATOR_28, GENERATOR_28};
use dcgan_train::model::net::param_layout;
use std::path::Path;

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// The note `sample` of the run's latest checkpoint prints, where it prints one.
fn sample_note(run: &Path) -> Option<String> {
    let png = run.join("note.png");
    let o = common::program(&["sample", "--checkpoint", path(run), "--n", "4", "--out", path(&png)]);
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(o.status.success(), "{err}");
    err.lines().find(|l| l.starts_with("note:")).map(String::from)
}

/// K = 1 with no momentum is model averaging: after one step the weights are the mean of the
/// two ranks' own models after that step, which a run whose block has not ended yet keeps in
/// its checkpoint (rank 0's as G and D, rank 1's beside Adam's state).
#[test]
fn a_sync_without_momentum_is_the_mean_of_the_ranks_models() {
    let tmp = tempfile::tempdir().unwrap();
    let (open, averaged) = (tmp.path().join("open"), tmp.path().join("averaged"));
    train(2, &open, "1", &["--sync-every", "2"]);
    train(2, &averaged, "1", &["--sync-every", "1", "--block-momentum", "0"]);
    let ck = dcgan_train::checkpoint::resolve(&open).unwrap();
    let own = read_safetensors(&ck.join("optimizer.safetensors"));
    let rank0 = final_weights(&open);
    let got = final_weights(&averaged);
    let layouts = [("G", param_layout(&GENERATOR_28).0), ("D", param_layout(&DISCRIMINATOR_28).0)];
    let mut moved = 0.0f64;
    for (net, layout) in &layouts {
        let rank1 = &own[&format!("rank1.{net}.weights")];
        assert_eq!(rank1.len(), layout.param_len());
        for p in &layout.params {
            let key = format!("{net} {}", p.name);
            let (a, b) = (&rank0[&key], &got[&key]);
            for (i, (&x, &y)) in a.iter().zip(b).enumerate() {
                let want = (x as f64 + rank1[p.range.start + i] as f64) / 2.0;
                assert!((y as f64 - want).abs() <= 1e-6 * (1.0 + want.abs()), "{key}[{i}]: {y} vs {want}");
                moved = moved.max((y - x).abs() as f64);
            }
        }
    }
    assert!(moved > 1e-6, "the average equals rank 0's model: rank 1's took no part");
    // `sample` says when it draws from one rank's model, and only then.
    let note = sample_note(&open).unwrap_or_default();
    assert!(note.contains("falls 1 step(s) into a block of --sync-every 2: its generator is rank 0's own"), "{note}");
    assert_eq!(sample_note(&averaged), None, "a run that ends on a block's last step holds the average");
}

/// After every sync all ranks hold the same bits (3 ranks, blocks of 3, with momentum and
/// Nesterov), and the bytes a step sends are 1/K of an f32 run's, measured in each.
#[test]
fn the_ranks_agree_after_every_sync_and_send_a_kth_of_the_bytes() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = |n: &str| tmp.path().join(n);
    train(3, &dir("bmuf"), "9", &["--sync-every", "3", "--block-nesterov", "--check-consistency", "1"]);
    train(3, &dir("f32"), "8", &[]);
    train(3, &dir("bmuf4"), "8", &["--sync-every", "4"]);
    let (f32_bytes, bmuf_bytes) =
        (read_summary(&dir("f32")).comm.sent_bytes_per_step, read_summary(&dir("bmuf4")).comm.sent_bytes_per_step);
    // The models and the running statistics, twice in 8 steps, against the gradients every
    // step: a quarter, and a little more for the statistics.
    let ratio = bmuf_bytes / f32_bytes;
    assert!((0.25..0.26).contains(&ratio), "{bmuf_bytes} / {f32_bytes} = {ratio}");
}

/// A run stopped inside a block (each rank's model its own) and resumed ends where the
/// uninterrupted run does, bit for bit.
#[test]
fn a_resume_inside_a_block_continues_exactly() {
    let tmp = tempfile::tempdir().unwrap();
    let (whole, part) = (tmp.path().join("whole"), tmp.path().join("part"));
    let bmuf = ["--sync-every", "3", "--block-reset-adam"];
    train(2, &whole, "7", &bmuf);
    train(2, &part, "4", &bmuf);
    let o = mpirun(2, &["--resume", path(&part), "--max-steps", "7", "--no-progress"], 300);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(final_weights(&part), final_weights(&whole));
    assert_eq!(step_records(&part), step_records(&whole));
}

/// A checkpoint or a stop at a block's end is saved before the block's sync, which then
/// overlaps the next step as it does in a run without either: a run checkpointed at every
/// block's end, and one stopped at a block's end and resumed, end where the run without them
/// does, bit for bit (a sync completed before the save would start the next step elsewhere).
#[test]
fn a_checkpoint_or_a_stop_at_a_blocks_end_changes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = |n: &str| tmp.path().join(n);
    let bmuf = ["--sync-every", "2"];
    train(2, &dir("whole"), "6", &bmuf);
    train(2, &dir("saved"), "6", &[&bmuf[..], &["--checkpoint-every", "2"]].concat());
    // Compared whole, not printed: the maps are large.
    assert!(final_weights(&dir("saved")) == final_weights(&dir("whole")), "checkpoints at steps 2 and 4 moved the run");
    let stopped = dir("stopped");
    let mut cmd = mpiexec_ranks(2);
    let base = ["--data", "synthetic:512", "--batch-size", "8", "--threads", "1", "--max-steps", "6"];
    cmd.args(base).args(bmuf).args(["--no-progress", "--out", path(&stopped)]);
    cmd.env("DCGAN_TEST_STOP_AT_STEP", "4");
    let o = run_limited(cmd, 300);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("stopped by a signal after step 4"), "{err}");
    let note = sample_note(&stopped).unwrap_or_default();
    assert!(note.contains("falls 2 step(s) into a block of --sync-every 2"), "saved before the sync: {note}");
    let o = mpirun(2, &["--resume", path(&stopped), "--no-progress"], 300);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        final_weights(&stopped) == final_weights(&dir("whole")),
        "stopped after step 4 and resumed, it ends elsewhere"
    );
    assert_eq!(step_records(&stopped), step_records(&dir("whole")));
}

/// Each rank's model as (rank 0's from G and D, rank 1's own from the block state), laid out
/// per network in parameter order, of a run whose block had not ended.
fn ranks_models(run: &Path) -> [Vec<f32>; 2] {
    let ck = dcgan_train::checkpoint::resolve(run).unwrap();
    let own = read_safetensors(&ck.join("optimizer.safetensors"));
    let rank0 = final_weights(run);
    let layouts = [("G", param_layout(&GENERATOR_28).0), ("D", param_layout(&DISCRIMINATOR_28).0)];
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for (net, layout) in &layouts {
        for p in &layout.params {
            a.extend(&rank0[&format!("{net} {}", p.name)]);
        }
        b.extend(&own[&format!("rank1.{net}.weights")]);
    }
    [a, b]
}

/// A block's sync overlaps the next step, which runs from each rank's own weights; what that
/// step moved them by is carried onto the average. Without momentum the ranks' mean after it
/// is then the mean of their own models after that step, as if nothing had been synced (a run
/// whose first block is still open), while each rank holds its own step; synced before the
/// step (--no-overlap), the mean is another.
#[test]
fn an_overlapped_sync_carries_the_next_step_onto_the_average() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = |n: &str| tmp.path().join(n);
    let sync = ["--sync-every", "2", "--block-momentum", "0"];
    train(2, &dir("overlapped"), "3", &sync);
    train(2, &dir("before"), "3", &[&sync[..], &["--no-overlap"]].concat());
    train(2, &dir("alone"), "3", &["--sync-every", "4"]);
    let mean = |run: &str| {
        let [a, b] = ranks_models(&dir(run));
        a.iter().zip(&b).map(|(x, y)| (*x as f64 + *y as f64) / 2.0).collect::<Vec<f64>>()
    };
    let farthest =
        |x: &[f64], y: &[f64]| x.iter().zip(y).map(|(p, q)| (p - q).abs() / (1.0 + q.abs())).fold(0.0, f64::max);
    let alone = mean("alone");
    assert!(farthest(&mean("overlapped"), &alone) < 1e-6, "{}", farthest(&mean("overlapped"), &alone));
    assert!(farthest(&mean("before"), &alone) > 1e-5, "synced before the step: {}", farthest(&mean("before"), &alone));
    let [a, b] = ranks_models(&dir("overlapped"));
    assert!(a.iter().zip(&b).any(|(x, y)| (x - y).abs() > 1e-6), "each rank carries its own step");
}
