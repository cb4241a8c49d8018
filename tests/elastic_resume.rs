//! A run resumed on another number of ranks keeps its global batch: with `--sync-bn` it goes on
//! as it would have on its own ranks (up to the order of float sums), without it the run goes
//! on with a note; state that belongs to one rank is refused with one line, the run untouched.

use crate::common::{NARROW, final_weights, mpirun, step_records};
use dcgan_train::record::Losses;
use std::path::{Path, PathBuf};

/// 512 small synthetic images, one thread a rank, narrow networks (what moves between rank
/// counts is the same at any width).
const BASE: [&str; 6] = ["--data", "synthetic:512", "--threads", "1", "--seed", "5"];

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// `ranks` ranks of BASE and `extra` (8 images a rank unless it says) into `out` for `steps`
/// steps, which must succeed.
fn train(ranks: usize, out: &Path, steps: &str, extra: &[&str]) {
    let mut args = [&BASE[..], &NARROW].concat();
    if !extra.contains(&"--batch-size") {
        args.extend(["--batch-size", "8"]);
    }
    args.extend(["--max-steps", steps, "--no-progress", "--out", path(out)]);
    args.extend(extra);
    let o = mpirun(ranks, &args, 300);
    assert!(o.status.success(), "{ranks} ranks {extra:?}: {}", String::from_utf8_lossy(&o.stderr));
}

/// `--resume run --max-steps steps` on `ranks` ranks: whether it succeeded, and its stderr.
fn resume(ranks: usize, run: &Path, steps: &str) -> (bool, String) {
    let o = mpirun(ranks, &["--resume", path(run), "--max-steps", steps, "--no-progress"], 300);
    (o.status.success(), String::from_utf8_lossy(&o.stderr).to_string())
}

/// A copy of the run directory `run` at `to`.
fn copy_run(run: &Path, to: &Path) -> PathBuf {
    let o = std::process::Command::new("cp").args(["-r", path(run), path(to)]).output().unwrap();
    assert!(o.status.success());
    to.to_path_buf()
}

/// The Euclidean distance between two sets of G's and D's tensors.
fn distance(a: &std::collections::BTreeMap<String, Vec<f32>>, b: &std::collections::BTreeMap<String, Vec<f32>>) -> f64 {
    assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>());
    let sq: f64 = a
        .values()
        .zip(b.values())
        .flat_map(|(x, y)| x.iter().zip(y))
        .map(|(&x, &y)| (x as f64 - y as f64).powi(2))
        .sum();
    sq.sqrt()
}

fn latest_progress(run: &Path) -> dcgan_train::checkpoint::Progress {
    let latest = std::fs::read_to_string(run.join("checkpoints/latest")).unwrap();
    dcgan_train::checkpoint::load_progress(&run.join("checkpoints").join(latest.trim())).unwrap()
}

/// With `--sync-bn`, a 2-rank run resumed at step 3 on 1 rank and on 4 ends step 6 where the
/// uninterrupted 2-rank run does: the same images and noise in every step's global batch, the
/// same learning rate, each rank a share of the batch. Only float sums run in another order
/// (about 1e-7 of the distance the 3 steps move the weights, where the bound is 1e-4).
#[test]
fn a_run_goes_on_with_other_ranks_as_on_its_own() {
    let tmp = tempfile::tempdir().unwrap();
    let (whole, part) = (tmp.path().join("whole"), tmp.path().join("part"));
    train(2, &whole, "6", &["--sync-bn"]);
    train(2, &part, "3", &["--sync-bn"]);
    let (start, end) = (final_weights(&part), final_weights(&whole));
    let moved = distance(&start, &end);
    let losses = |run: &Path| -> Vec<(f32, f32)> {
        step_records(run)
            .iter()
            .map(|r| match r.metrics.losses {
                Losses::Dcgan { loss_d, loss_g, .. } => (loss_d, loss_g),
                _ => unreachable!("a DCGAN run"),
            })
            .collect()
    };
    for ranks in [1, 4] {
        let run = copy_run(&part, &tmp.path().join(format!("on-{ranks}")));
        let (ok, err) = resume(ranks, &run, "6");
        assert!(ok, "{err}");
        let said = format!(
            "resuming a run of 2 ranks on {ranks}: its global batch of 16 images is now {} per rank",
            16 / ranks
        );
        assert!(err.contains(&said) && !err.contains("without --sync-bn"), "{err}");
        let off = distance(&final_weights(&run), &end);
        assert!(off < 1e-4 * moved, "{ranks} ranks: {off} from the uninterrupted run, which moved {moved} in 3 steps");
        let (got, want) = (losses(&run), losses(&whole));
        assert_eq!(got.len(), 6);
        for (s, (g, w)) in got.iter().zip(&want).enumerate().skip(3) {
            let close = |a: f32, b: f32| (a - b).abs() <= 1e-3 * b.abs();
            assert!(close(g.0, w.0) && close(g.1, w.1), "step {}: {g:?} against {w:?}", s + 1);
        }
        let p = latest_progress(&run);
        assert_eq!((p.ranks, p.batch_per_rank, p.step), (ranks, 16 / ranks, 6));
    }
}

/// Without `--sync-bn` batch norm normalises over each rank's share, so the run goes on with
/// a note; its checkpoints then hold the new layout, and it can move again.
#[test]
fn without_sync_bn_the_run_goes_on_with_a_note_and_can_move_again() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    train(2, &run, "3", &[]);
    let (ok, err) = resume(1, &run, "4");
    assert!(ok, "{err}");
    assert!(
        err.contains("note: without --sync-bn, batch norm now normalises over 16 images per rank instead of 8"),
        "{err}"
    );
    assert_eq!((latest_progress(&run).ranks, latest_progress(&run).batch_per_rank), (1, 16));
    let (ok, err) = resume(2, &run, "5");
    assert!(
        ok && err.contains("resuming a run of 1 ranks on 2: its global batch of 16 images is now 8 per rank"),
        "{err}"
    );
    assert_eq!(step_records(&run).len(), 5);
}

/// With micro-batches, batch norm's groups of images follow the rank count even with
/// `--sync-bn` (one micro-batch of every rank), and a resume on other ranks says so; without
/// it, the note counts the images of a micro-batch.
#[test]
fn micro_batches_on_other_ranks_are_said_to_change_batch_norm() {
    let tmp = tempfile::tempdir().unwrap();
    for (name, sync_bn, said) in [
        (
            "synced",
            true,
            "note: with --micro-batches, batch norm's groups (one micro-batch of every rank) now hold other images",
        ),
        ("alone", false, "note: without --sync-bn, batch norm now normalises over 8 images per rank instead of 4"),
    ] {
        let run = tmp.path().join(name);
        let extra = if sync_bn { vec!["--micro-batches", "2", "--sync-bn"] } else { vec!["--micro-batches", "2"] };
        train(2, &run, "2", &extra);
        let (ok, err) = resume(1, &run, "3");
        assert!(ok && err.contains(said), "{name}: {err}");
    }
}

/// A run whose state belongs to its ranks, or whose global batch the ranks cannot share, is
/// refused on another number of ranks with one line naming why and the fix; the run is kept.
#[test]
fn state_that_belongs_to_a_rank_is_refused_on_other_ranks() {
    let tmp = tempfile::tempdir().unwrap();
    let cases: [(&str, usize, &[&str], usize, &str); 6] = [
        ("onebit", 2, &["--wire", "1bit", "--wire-warmup-steps", "1"], 1, "each rank's 1-bit error feedback"),
        ("blocks", 2, &["--sync-every", "2"], 1, "each rank trains a model of its own (--sync-every)"),
        ("pipeline", 2, &["--pipeline"], 1, "a pipeline's stages (--pipeline) cannot be regrouped"),
        ("solo", 2, &["--distributed-after", "5"], 1, "still training as one worker (step 2 of --distributed-after 5)"),
        (
            "odd",
            2,
            &["--batch-size", "3"],
            4,
            "global batch of 6 images (3 per rank x 2 ranks) does not split over 4 ranks",
        ),
        (
            "micro",
            2,
            &["--batch-size", "4", "--micro-batches", "4"],
            4,
            "gives 2 per rank on 4 ranks, which its --micro-batches 4",
        ),
    ];
    for (name, ranks, extra, other, why) in cases {
        let run = tmp.path().join(name);
        train(ranks, &run, "2", extra);
        let metrics = std::fs::read(run.join("metrics.jsonl")).unwrap();
        let (ok, err) = resume(other, &run, "4");
        assert!(!ok, "{name}: {err}");
        let errors: Vec<&str> = err.lines().filter(|l| l.starts_with("error:")).collect();
        assert_eq!(errors.len(), 1, "{name}: {err}");
        assert!(errors[0].contains(why) && errors[0].contains("resume with"), "{name}: {err}");
        assert_eq!(
            std::fs::read(run.join("metrics.jsonl")).unwrap(),
            metrics,
            "{name}: the refused resume wrote into the run"
        );
    }
}

/// `--batch-size` is per rank: where the run keeps a global batch (on another number of ranks,
/// and on the same ranks after that) only the share of a rank is accepted, even where the
/// run's own recorded `--batch-size` would alone read as no change; likewise only the kept
/// global batch as `--global-batch-size`.
#[test]
fn a_per_rank_batch_is_its_share_of_the_global_batch() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    train(2, &run, "2", &[]);
    let resume = |ranks: usize, steps: &str, batch: &str| {
        let args = ["--resume", path(&run), "--max-steps", steps, "--batch-size", batch, "--no-progress"];
        let o = mpirun(ranks, &args, 300);
        (o.status.success(), String::from_utf8_lossy(&o.stderr).to_string())
    };
    // The run of 2 ranks gave no --global-batch-size, yet keeps one on 1: another is refused as
    // a change of it, its own accepted.
    let resume_global = |global: &str| {
        let args = ["--resume", path(&run), "--max-steps", "4", "--global-batch-size", global, "--no-progress"];
        let o = mpirun(1, &args, 300);
        (o.status.success(), String::from_utf8_lossy(&o.stderr).to_string())
    };
    let metrics = std::fs::read(run.join("metrics.jsonl")).unwrap();
    let (ok, err) = resume_global("32");
    let errors: Vec<&str> = err.lines().filter(|l| l.starts_with("error:")).collect();
    assert!(!ok && errors.len() == 1, "{err}");
    assert!(
        errors[0].contains("--global-batch-size 32 would change the run's global batch of 16 images, 16 per rank on 1"),
        "{err}"
    );
    assert_eq!(std::fs::read(run.join("metrics.jsonl")).unwrap(), metrics, "the refused resume wrote into the run");
    let (ok, err) = resume_global("16");
    assert!(ok, "the run's own global batch is accepted: {err}");
    assert_eq!((latest_progress(&run).step, latest_progress(&run).batch_per_rank), (4, 16));
    // Back on 2 ranks (another number than the run's 1 now), then on those 2 again.
    for steps in ["6", "8"] {
        let metrics = std::fs::read(run.join("metrics.jsonl")).unwrap();
        let (ok, err) = resume(2, steps, "16");
        let errors: Vec<&str> = err.lines().filter(|l| l.starts_with("error:")).collect();
        assert!(!ok && errors.len() == 1, "{err}");
        let why = "--batch-size is per rank, and the run keeps its global batch of 16 images, 8 per rank on 2";
        assert!(errors[0].contains(why), "{err}");
        assert_eq!(std::fs::read(run.join("metrics.jsonl")).unwrap(), metrics, "the refused resume wrote into the run");
        let (ok, err) = resume(2, steps, "8");
        assert!(ok, "the share of a rank is accepted: {err}");
        assert_eq!((latest_progress(&run).ranks, latest_progress(&run).batch_per_rank), (2, 8));
    }
}
