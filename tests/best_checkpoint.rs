//! The best checkpoint by FID: the marker keeps it from the pruning of old checkpoints, names
//! it to `sample`, `evaluate` and `--resume`, and a run whose samples get worse (a learning
//! rate too high for the GAN: it collapses) keeps the checkpoint of its best epoch, also
//! across a resume.

use crate::common;

use dcgan_train::checkpoint::best::{self, Best};
use dcgan_train::checkpoint::{self, Checkpoint, Keep, Moments, NetTensors, Progress};
use dcgan_train::eval::evaluate::Evaluation;
use dcgan_train::model::dcgan::{DISCRIMINATOR_28, GENERATOR_28};
use dcgan_train::model::net::param_layout;
use dcgan_train::nn::params::ParamLayout;
use std::path::Path;
use std::process::Output;

const BIN: &str = env!("CARGO_BIN_EXE_dcgan-train");
const DATA: &str = common::SYNTHETIC_EVAL_DATA;
const SMALL: &str = common::SMALL_EVAL_DATA;

use crate::common::program as bin;

fn ok(o: Output) -> String {
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(o.status.success(), "{err}");
    err
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn marker(checkpoint: &str, fid: f64) -> Best {
    let (generator, feature_net) = ("G".into(), "0123456789abcdef".into());
    Best { checkpoint: checkpoint.into(), epoch: 0, step: 0, fid, generator, eval_n: 500, feature_net, earlier: vec![] }
}

/// A checkpoint of zeros for the 28x28 networks.
fn zeros(g: &ParamLayout, d: &ParamLayout) -> Checkpoint {
    let net = |l: &ParamLayout| NetTensors {
        values: vec![0.0; l.param_len()],
        state: vec![0.0; l.state_len()],
        batches_tracked: 0,
    };
    let moments =
        |l: &ParamLayout| Moments { exp_avg: vec![0.0; l.param_len()], exp_avg_sq: vec![0.0; l.param_len()], steps: 0 };
    let progress = Progress {
        step: 0,
        epoch: 0,
        batch_in_epoch: 0,
        seed: 1,
        ranks: 1,
        batch_per_rank: 64,
        image_size: 28,
        ngf: 64,
        rng: "counter".into(),
        config: serde_json::json!({}),
        block_sync_due: false,
    };
    Checkpoint {
        g: net(g),
        d: net(d),
        g_ema: None,
        g_adam: moments(g),
        d_adam: moments(d),
        progress,
        rank_states: Vec::new(),
        residuals: Vec::new(),
        block: None,
    }
}

#[test]
fn the_marked_checkpoint_outlives_the_newest_n_until_the_mark_moves() {
    let (g, d) = (param_layout(&GENERATOR_28).0, param_layout(&DISCRIMINATOR_28).0);
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("checkpoints");
    let mut ck = zeros(&g, &d);
    for step in [10, 20, 30] {
        ck.progress.step = step;
        checkpoint::save(dir.path(), (&g, &d), &ck, Keep::Latest(1)).unwrap();
        if step == 10 {
            best::write(&root, &marker("step-00000010", 5.0)).unwrap();
        }
    }
    assert_eq!(common::checkpoint_names(dir.path()), ["step-00000010", "step-00000030"]);
    // The marker and `latest` name their checkpoints as paths.
    let located = |p: &Path| checkpoint::resolve(p).unwrap();
    assert_eq!(located(&root.join("best")), root.join("step-00000010"));
    assert_eq!(located(&root.join("latest")), root.join("step-00000030"));
    assert_eq!(best::read(&root).unwrap().fid, 5.0);
    // The mark moves to the newest: the old best goes with the next pruning.
    best::write(&root, &marker("step-00000030", 4.0)).unwrap();
    checkpoint::prune(&root, Keep::Latest(1), "step-00000030");
    assert_eq!(common::checkpoint_names(dir.path()), ["step-00000030"]);
    // A mark naming a checkpoint that is gone protects nothing and resolves to one line.
    best::write(&root, &marker("step-00000010", 3.0)).unwrap();
    assert_eq!(best::read(&root), None);
    let e = format!("{:#}", checkpoint::resolve(&root.join("best")).unwrap_err());
    assert!(e.contains("step-00000010, which is not there any more"), "{e}");
    // A marker names a checkpoint, nothing else.
    std::fs::write(root.join("best"), serde_json::to_string(&marker("..", 1.0)).unwrap()).unwrap();
    let e = format!("{:#}", checkpoint::resolve(&root.join("best")).unwrap_err());
    assert!(e.contains("which is no checkpoint's name"), "{e}");
    // A figure carries over to a run measuring alike, resumed at or after its step.
    let m = Best { step: 96, ..marker("step-00000096", 3.0) };
    assert!(m.carries_over(500, "0123456789abcdef", 96) && m.carries_over(500, "0123456789abcdef", 160));
    assert!(!m.carries_over(400, "0123456789abcdef", 96) && !m.carries_over(500, "fedcba9876543210", 96));
    assert!(!m.carries_over(500, "0123456789abcdef", 64), "measured after the step resumed from");
    // Which figure beats which: lower, and a number.
    assert!(best::beats(3.0, None) && best::beats(3.0, Some(3.5)));
    assert!(!best::beats(3.5, Some(3.5)) && !best::beats(4.0, Some(3.5)) && !best::beats(f64::NAN, None));
}

/// The TensorBoard event files in a run directory.
fn event_files(run: &Path) -> Vec<String> {
    let names = std::fs::read_dir(run).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().to_string());
    let mut v: Vec<String> = names.filter(|n| n.starts_with("events.out.tfevents.")).collect();
    v.sort();
    v
}

/// The FID of every evaluated epoch in a run's metrics.jsonl, by epoch.
fn recorded_fids(run: &Path) -> Vec<f64> {
    let text = std::fs::read_to_string(run.join("metrics.jsonl")).unwrap();
    let epochs: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .filter(|v: &serde_json::Value| v["type"] == "epoch")
        .collect();
    assert!(epochs.iter().enumerate().all(|(i, e)| e["epoch"] == i as u64), "{epochs:?}");
    epochs.iter().map(|e| e["fid"].as_f64().unwrap()).collect()
}

/// A learning rate a thousand times the default collapses the narrow GAN within four epochs
/// (at which epoch depends on the CPU's arithmetic: where its SIMD kernels fuse multiply and
/// add, the trajectory differs). Four epochs, then a resume with a `--patience` one past the
/// evaluations since the best, which ends it after the fifth: `checkpoints/best` names the
/// epoch of the lowest FID the run recorded (the resumed run compares against the marker, not
/// afresh), that checkpoint is kept beside the newest two, and `evaluate` of it gives that
/// epoch's figure. A resume that would end at once is refused, changing nothing.
#[test]
fn a_run_that_collapses_keeps_the_checkpoint_of_its_best_epoch() {
    let tmp = tempfile::tempdir().unwrap();
    let (net, run) = (common::synthetic_feature_net(BIN), tmp.path().join("run"));
    let quality = ["--eval-n", "500", "--eval-every", "1", "--classifier", path(net), "--no-progress"];
    let first = ["--data", DATA, "--batch-size", "64", "--lr", "0.2", "--epochs", "4", "--keep-checkpoints", "2"];
    let first = [&first[..], &common::NARROW, &["--out", path(&run)]].concat();
    ok(bin(&[&first[..], &quality].concat()));
    let fids = recorded_fids(&run);
    let lowest = (0..4).min_by(|&a, &b| fids[a].total_cmp(&fids[b])).unwrap();
    assert!(lowest < 3, "the fixture no longer collapses within four epochs (FIDs {fids:?}): raise its --lr");
    // The evaluations since the best, plus one: the resume runs one epoch (of the 8 asked).
    let since = 3 - lowest;
    let patience = (since + 1).to_string();
    let resume = ["--resume", path(&run), "--epochs", "8", "--patience", &patience];
    let done = ok(bin(&[&resume[..], &quality].concat()));
    let fids = recorded_fids(&run);
    let beaten = fids.len() > 4 && fids[4] < fids[lowest];
    assert!(!beaten, "the fixture's fifth epoch beat its best (FIDs {fids:?}): raise its --lr");
    assert_eq!(fids.len(), 5, "FIDs {fids:?}: {done}");
    let root = run.join("checkpoints");
    let b = best::read(&root).expect("a best checkpoint");
    assert_eq!((b.epoch, b.fid, b.generator.as_str()), (lowest as u64, fids[lowest], "G"), "{fids:?}");
    // 32 steps an epoch: the best is its epoch's end, the newest two the fourth's and the fifth's.
    let best_name = format!("step-{:08}", 32 * (lowest + 1));
    assert_eq!(b.checkpoint, best_name, "{fids:?}");
    assert_eq!(common::checkpoint_names(&run), [best_name.as_str(), "step-00000128", "step-00000160"]);
    assert!(done.contains(&format!("checkpoints/best ({}: FID", b.checkpoint)), "{done}");
    let stop = common::read_summary(&run).early_stop.expect("an early stop");
    assert_eq!(
        (stop.epoch, stop.best_epoch, stop.best_fid, stop.patience),
        (4, lowest as u64, fids[lowest], since as u64 + 1)
    );
    // From the fourth epoch's end the evaluations since the best reach a --patience of their
    // count: nothing is left to run, and the refusal leaves the run's records and events as
    // they were.
    let (metrics, events) = (std::fs::read(run.join("metrics.jsonl")).unwrap(), event_files(&run));
    let fourth = root.join("step-00000128");
    let since = since.to_string();
    let again = bin(&[&["--resume", path(&fourth), "--epochs", "8", "--patience", &since][..], &quality].concat());
    let err = String::from_utf8_lossy(&again.stderr);
    assert!(!again.status.success() && err.contains("nothing left to run before its early stop"), "{err}");
    assert!(std::fs::read(run.join("metrics.jsonl")).unwrap() == metrics && event_files(&run) == events);
    // The marked checkpoint holds that epoch's weights: evaluate scores them as the run did.
    let json = tmp.path().join("e.json");
    let best_path = root.join("best");
    let args = ["evaluate", "--checkpoint", path(&best_path), "--data", DATA, "--classifier", path(net)];
    ok(bin(&[&args[..], &["--n", "500", "--json", path(&json)]].concat()));
    let e: Evaluation = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert!((e.fid - b.fid).abs() <= 1e-3 * b.fid, "evaluate {} against the run's {}", e.fid, b.fid);
    ok(bin(&["sample", "--checkpoint", path(&best_path), "--out", path(&tmp.path().join("best.png"))]));
    // Measured at another n, a FID is not comparable: a resume so measuring starts afresh, and
    // its first evaluation (of a collapsed GAN) is the new best.
    let other_n = ["--resume", path(&run), "--epochs", "6", "--classifier", path(net), "--eval-n", "400"];
    let note = ok(bin(&[&other_n[..], &["--no-progress"]].concat()));
    assert!(note.contains("the run's best starts afresh"), "{note}");
    let b = best::read(&root).expect("a best checkpoint");
    assert_eq!((b.epoch, b.eval_n), (5, 400));
}

/// On two ranks an epoch that beats the best writes a checkpoint of its own, which every rank
/// takes part in (rank 1 learns rank 0's figure), even where a periodic one fell on its last
/// step: that one predates the epoch's averaged running statistics. `evaluate` of the best
/// gives the figure the run measured.
#[test]
fn a_better_epoch_writes_its_checkpoint_on_every_rank() {
    let tmp = tempfile::tempdir().unwrap();
    let (net, run) = (common::small_feature_net(BIN), tmp.path().join("run"));
    let args = ["--data", SMALL, "--epochs", "2", "--batch-size", "32", "--checkpoint-every", "4"];
    let more = ["--keep-checkpoints", "0", "--eval-n", "500", "--eval-every", "1", "--no-progress"];
    let out = ["--classifier", path(net), "--out", path(&run)];
    ok(common::mpirun(2, &[&args[..], &more, &common::NARROW, &out].concat(), 600));
    // 8 steps an epoch: the first epoch, the best so far, is saved again at its end, and so
    // is the second (the best, or the run's end).
    let names =
        ["step-00000004", "step-00000008", "step-00000008.2", "step-00000012", "step-00000016", "step-00000016.2"];
    assert_eq!(common::checkpoint_names(&run), names);
    let fids = recorded_fids(&run);
    let b = best::read(&run.join("checkpoints")).expect("a best checkpoint");
    let want = if fids[1] < fids[0] { (1, "step-00000016.2") } else { (0, "step-00000008.2") };
    assert_eq!((b.epoch, b.checkpoint.as_str()), want, "{fids:?}");
    let json = tmp.path().join("e.json");
    let best_path = run.join("checkpoints").join("best");
    let args = ["evaluate", "--checkpoint", path(&best_path), "--data", SMALL, "--classifier", path(net)];
    ok(bin(&[&args[..], &["--n", "500", "--json", path(&json)]].concat()));
    let e: Evaluation = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert!((e.fid - b.fid).abs() <= 1e-3 * b.fid, "evaluate {} against the run's {}", e.fid, b.fid);
}

/// A periodic checkpoint at a best epoch's end is marked, not written again; `--no-keep-best`
/// writes no marker and no checkpoint beyond those asked for.
#[test]
fn the_best_adds_no_second_save_and_no_keep_best_none_at_all() {
    let tmp = tempfile::tempdir().unwrap();
    let net = common::small_feature_net(BIN);
    let args = ["--data", SMALL, "--epochs", "2", "--keep-checkpoints", "0", "--eval-n", "500", "--eval-every", "1"];
    let run = |name: &str, extra: &[&str]| {
        let out = tmp.path().join(name);
        let rest = ["--classifier", path(net), "--no-progress", "--out", path(&out)];
        ok(bin(&[&args[..], &common::NARROW, extra, &rest].concat()));
        out
    };
    // 8 steps an epoch: both epoch ends fall on a periodic checkpoint, and the first is
    // the best so far (none before it). The run's end saves its last step again with the
    // position past the epoch (`step-N.2`), as it does without the best.
    let every = run("every", &["--checkpoint-every", "4"]);
    let names = ["step-00000004", "step-00000008", "step-00000012", "step-00000016", "step-00000016.2"];
    assert_eq!(common::checkpoint_names(&every), names);
    let b = best::read(&every.join("checkpoints")).expect("a best checkpoint");
    assert_eq!(b.checkpoint, if b.epoch == 0 { "step-00000008" } else { "step-00000016" });
    let none = run("none", &["--checkpoint-every", "1000", "--no-keep-best"]);
    assert_eq!(common::checkpoint_names(&none), ["step-00000016"]);
    assert!(!none.join("checkpoints").join("best").exists());
}

/// `--patience` with nothing to count is refused in one line before the run directory is made.
#[test]
fn patience_without_a_best_to_count_from_is_one_line() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let net = path(common::synthetic_feature_net(BIN));
    let base = ["--data", DATA, "--epochs", "2", "--patience", "2", "--no-progress", "--out", path(&out)];
    for (extra, expected) in [
        (&["--eval-every", "0"][..], "--patience ends a run by its FID, which this run does not measure"),
        (&["--classifier", net, "--no-keep-best"][..], "--patience counts from the best checkpoint"),
    ] {
        let o = bin(&[&base[..], extra].concat());
        let err = String::from_utf8_lossy(&o.stderr);
        let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("error:")).collect();
        assert!(!o.status.success() && lines.len() == 1 && lines[0].contains(expected), "{extra:?}: {err}");
        assert!(!out.exists(), "{extra:?} made the run directory");
    }
}
