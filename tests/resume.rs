//! Resuming from the run alone: `--resume RUN` takes every training option from the run's
//! checkpoint, applies the options a resume may change, refuses the others naming them, takes
//! a run directory or one of its checkpoints, and passes a broken `latest` for the newest
//! intact checkpoint. One rank; the multi-rank and bitwise cases are in `faults.rs`.

use crate::common;

use crate::common::{final_weights, step_records};
use dcgan_train::record::Losses;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The binary alone, with `env` set: its exit status and standard error.
fn dcgan_with(args: &[&str], env: &[(&str, &str)]) -> (bool, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_dcgan-train"));
    cmd.args(args).envs(env.iter().copied());
    let o = cmd.output().unwrap();
    (o.status.success(), String::from_utf8_lossy(&o.stderr).to_string())
}

fn dcgan(args: &[&str]) -> (bool, String) {
    dcgan_with(args, &[])
}

/// A run's options beyond the defaults: what `--resume RUN` alone must carry on with.
const RUN: [&str; 8] = ["--data", "synthetic:64", "--batch-size", "8", "--seed", "3", "--lr", "0.0005"];

/// A run of `RUN` with `extra` into `out`, which must succeed.
fn train(out: &Path, extra: &[&str]) {
    let mut args = RUN.to_vec();
    args.extend(extra);
    args.extend(["--no-progress", "--out", out.to_str().unwrap()]);
    let (ok, err) = dcgan(&args);
    assert!(ok, "{args:?}: {err}");
}

/// `RUN` with `extra` to `--max-steps whole` in one go (`whole`), and to `part` (`run`), a run
/// to resume.
fn whole_and_part(extra: &[&str], whole: u64, part: u64) -> (tempfile::TempDir, PathBuf, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let (run, all) = (tmp.path().join("run"), tmp.path().join("whole"));
    train(&all, &[extra, &["--max-steps", &whole.to_string()]].concat());
    train(&run, &[extra, &["--max-steps", &part.to_string()]].concat());
    (tmp, run, all)
}

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// The lines of `err` that start with `prefix` ("error:", "warning:").
fn lines<'a>(err: &'a str, prefix: &str) -> Vec<&'a str> {
    err.lines().filter(|l| l.starts_with(prefix)).collect()
}

/// `--resume RUN --max-steps N`: the run goes on with its own batch size, data, seed and
/// learning rate (it once refused, as the defaults differed from them), and the new length
/// is the run's from then on.
#[test]
fn a_resume_takes_the_runs_options_and_applies_max_steps() {
    let tmp = tempfile::tempdir().unwrap();
    let (run, whole) = (tmp.path().join("run"), tmp.path().join("whole"));
    train(&whole, &["--max-steps", "5"]);
    train(&run, &["--max-steps", "2"]);
    let (ok, err) = dcgan(&["--resume", p(&run), "--max-steps", "5", "--no-progress"]);
    assert!(ok, "{err}");
    assert_eq!(final_weights(&run), final_weights(&whole), "the resume trained with other options than the run's");
    assert_eq!(step_records(&run), step_records(&whole));
    // The run now ends at step 5: a resume without --max-steps has nothing left to run.
    let (ok, err) = dcgan(&["--resume", p(&run)]);
    assert!(!ok);
    assert!(lines(&err, "error:")[0].contains("already done 5 steps") && err.contains("--max-steps 5"), "{err}");
}

/// A WGAN-GP run resumed between its generator steps ends where the uninterrupted run does,
/// bit for bit, and a resume that names the other loss is refused.
#[test]
fn a_wgan_gp_run_resumes_bitwise_and_keeps_its_loss() {
    let tmp = tempfile::tempdir().unwrap();
    let (run, whole) = (tmp.path().join("run"), tmp.path().join("whole"));
    let wgan = ["--loss", "wgan-gp", "--n-critic", "2"];
    train(&whole, &[&wgan[..], &["--max-steps", "5"]].concat());
    train(&run, &[&wgan[..], &["--max-steps", "3"]].concat());
    let (ok, err) = dcgan(&["--resume", p(&run), "--loss", "dcgan", "--max-steps", "5"]);
    assert!(!ok && err.contains("--loss dcgan (the run has wgan-gp)"), "{err}");
    // Naming the critic's norm the run has by default is naming the run's own.
    let (ok, err) = dcgan(&["--resume", p(&run), "--critic-norm", "none", "--max-steps", "5", "--no-progress"]);
    assert!(ok, "{err}");
    assert_eq!(final_weights(&run), final_weights(&whole));
    let records = step_records(&run);
    assert_eq!(records, step_records(&whole));
    // G's loss only on the generator steps, 2 and 4.
    let with_g: Vec<u64> = records
        .iter()
        .filter(|r| matches!(r.metrics.losses, Losses::WganGp { loss_g: Some(_), .. }))
        .map(|r| r.step)
        .collect();
    assert_eq!(with_g, [2, 4], "{records:?}");
}

/// With layer norm in the critic: a resume keeps it (the run ends bit for bit where the
/// uninterrupted one does) and refuses one that names the critic without a norm.
#[test]
fn a_layer_norm_critic_resumes_bitwise_and_keeps_its_norm() {
    let wgan = ["--loss", "wgan-gp", "--n-critic", "2", "--critic-norm", "layer"];
    let (_tmp, run, whole) = whole_and_part(&wgan, 5, 3);
    let (ok, err) = dcgan(&["--resume", p(&run), "--critic-norm", "none", "--max-steps", "5"]);
    assert!(!ok && err.contains("--critic-norm none (the run has layer)"), "{err}");
    let (ok, err) = dcgan(&["--resume", p(&run), "--max-steps", "5", "--no-progress"]);
    assert!(ok, "{err}");
    assert_eq!(final_weights(&run), final_weights(&whole));
    assert!(final_weights(&run).keys().any(|k| k == "D main.3.weight"), "the critic has its layer norm");
    assert_eq!(step_records(&run), step_records(&whole));
}

/// Training options given with another value than the run's are refused in one line naming
/// each of them (with the run's value), before anything is written; given with the run's own
/// value they change nothing.
#[test]
fn training_options_that_differ_are_refused_naming_each() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    train(&run, &["--max-steps", "2"]);
    let metrics = std::fs::read(run.join("metrics.jsonl")).unwrap();
    let line = [
        "--resume",
        p(&run),
        "--max-steps",
        "4",
        "--batch-size",
        "16",
        "--seed",
        "3",
        "--lr",
        "0.001",
        "--ngf",
        "32",
        "--sync-bn",
    ];
    let (ok, err) = dcgan(&line);
    assert!(!ok);
    let errors = lines(&err, "error:");
    assert_eq!(errors.len(), 1, "{err}");
    assert_eq!(
        errors[0],
        format!(
            "error: --resume {}: --batch-size 16 (the run has 8), --lr 0.001 (the run has 0.0005), --ngf 32 (the run has 64), --sync-bn (the run has it off) \
             cannot change on resume (they change what training computes): leave them out to go on with the run's own, or start a \
             new run with --out",
            run.display()
        )
    );
    assert_eq!(std::fs::read(run.join("metrics.jsonl")).unwrap(), metrics, "the refused resume wrote into the run");
    // The same values as the run's: a resume like any other.
    let mut same = RUN.to_vec();
    same.extend(["--resume", p(&run), "--max-steps", "3", "--no-progress"]);
    let (ok, err) = dcgan(&same);
    assert!(ok, "{err}");
    assert_eq!(step_records(&run).len(), 3);
}

/// `latest` naming a checkpoint with a corrupt tensor: the resume goes on from the newest
/// intact checkpoint (a warning line says which and why), sets the broken one aside, and ends
/// where the uninterrupted run does, bit for bit.
#[test]
fn a_broken_latest_falls_back_to_the_older_intact_checkpoint() {
    let tmp = tempfile::tempdir().unwrap();
    let (run, whole) = (tmp.path().join("run"), tmp.path().join("whole"));
    train(&whole, &["--max-steps", "6"]);
    train(&run, &["--max-steps", "4", "--checkpoint-every", "2", "--keep-checkpoints", "2"]);
    let root = run.join("checkpoints");
    common::flip_tensor_byte(&root.join("step-00000004").join("G.safetensors"), "main.0.weight");
    // A resume refused leaves the run as it was, the broken checkpoint where it is.
    let before = common::checkpoint_names(&run);
    let (ok, err) = dcgan(&["--resume", p(&run), "--lr", "0.001", "--max-steps", "6", "--no-progress"]);
    assert!(!ok && err.contains("--lr 0.001 (the run has 0.0005)"), "{err}");
    assert_eq!(common::checkpoint_names(&run), before);
    // The run's options repeated (allowed: they change nothing), so that only the fallback
    // is new here.
    let mut args = RUN.to_vec();
    args.extend(["--resume", p(&run), "--max-steps", "6", "--no-progress"]);
    let (ok, err) = dcgan(&args);
    assert!(ok, "{err}");
    let warnings = lines(&err, "warning:");
    assert_eq!(
        warnings,
        [format!(
            "warning: {}/latest names step-00000004, whose G.safetensors is corrupt (tensor main.0.weight does not match its \
             digest): using {}/step-00000002, the newest intact checkpoint",
            root.display(),
            root.display(),
        )],
        "{err}"
    );
    assert_eq!(
        lines(&err, "note:"),
        [format!(
            "note: the broken checkpoint {}/step-00000004 is set aside as {}/step-00000004.broken, out of the checkpoints \
             kept",
            root.display(),
            root.display()
        )],
        "{err}"
    );
    // The two kept are intact ones; the broken one is kept aside, not counted among them.
    assert_eq!(common::checkpoint_names(&run), ["step-00000004", "step-00000004.broken", "step-00000006"]);
    assert_eq!(final_weights(&run), final_weights(&whole), "the resume did not go on from step 2");
    assert_eq!(step_records(&run), step_records(&whole), "steps 3 and 4 are the resumed run's, once each");
}

/// A checkpoint directory resumes from that checkpoint, with the outputs in its run: the
/// records after it (steps, and the stop that came later) give way to the resumed run's, and
/// the run ends as the uninterrupted one does. The run's `checkpoints/` folder resumes too.
#[test]
fn a_checkpoint_directory_resumes_with_the_outputs_in_its_run() {
    let tmp = tempfile::tempdir().unwrap();
    let (run, whole) = (tmp.path().join("run"), tmp.path().join("whole"));
    train(&whole, &["--max-steps", "8"]);
    let mut args = RUN.to_vec();
    args.extend([
        "--max-steps",
        "8",
        "--checkpoint-every",
        "2",
        "--keep-checkpoints",
        "0",
        "--no-progress",
        "--out",
        p(&run),
    ]);
    let (ok, err) = dcgan_with(&args, &[("DCGAN_TEST_STOP_AT_STEP", "5")]);
    assert!(!ok && err.contains("stopped by a signal after step 5"), "{err}");
    let step2 = run.join("checkpoints").join("step-00000002");
    let (ok, err) = dcgan(&["--resume", p(&step2), "--no-progress"]);
    assert!(ok, "{err}");
    assert!(err.contains("resuming at step 2"), "{err}");
    assert_eq!(final_weights(&run), final_weights(&whole));
    assert_eq!(step_records(&run), step_records(&whole));
    let text = std::fs::read_to_string(run.join("metrics.jsonl")).unwrap();
    assert!(!text.contains(r#""type":"stopped""#), "the stop after step 5 is no longer the run's: {text}");
    assert!(run.join("summary.json").exists());

    let (ok, err) = dcgan(&["--resume", p(&run.join("checkpoints")), "--max-steps", "9", "--no-progress"]);
    assert!(ok, "{err}");
    assert!(err.contains("resuming at step 8"), "{err}");
    assert_eq!(step_records(&run).len(), 9);
}

/// A resume from an older checkpoint than the run's last leaves the continuation after it
/// behind as soon as it goes on: `latest` names the checkpoint it went on from and the later
/// ones are set aside (kept, but no longer checkpoints of the run). So a crash before the
/// resumed run's first save resumes from there again, and the checkpoints a save keeps are the
/// resumed run's own; it still ends as the uninterrupted run does.
#[test]
fn a_resume_from_an_older_checkpoint_leaves_the_later_ones_behind() {
    let tmp = tempfile::tempdir().unwrap();
    let (run, whole) = (tmp.path().join("run"), tmp.path().join("whole"));
    train(&whole, &["--max-steps", "6"]);
    train(&run, &["--max-steps", "6", "--checkpoint-every", "2", "--keep-checkpoints", "2"]);
    let root = run.join("checkpoints");
    assert_eq!(common::checkpoint_names(&run), ["step-00000004", "step-00000006"]);
    let read_lines = |f: &str| -> Vec<String> {
        std::fs::read_to_string(run.join(f)).unwrap_or_default().lines().map(String::from).collect()
    };
    let before = read_lines("metrics.jsonl");
    // Every step starts 300 ms late: time to kill the run inside step 5, before any save.
    let mut child = Command::new(env!("CARGO_BIN_EXE_dcgan-train"))
        .args(["--resume", p(&root.join("step-00000004")), "--max-steps", "10", "--no-progress"])
        .env("DCGAN_TEST_SLOW_RANK", "0:300")
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let latest = || std::fs::read_to_string(root.join("latest")).unwrap_or_default();
    let started = std::time::Instant::now();
    while !(latest().trim() == "step-00000004" && root.join("step-00000006.abandoned").is_dir()) {
        let ended = child.try_wait().unwrap();
        assert!(ended.is_none(), "the resumed run ended ({ended:?}) and latest still names {}", latest().trim());
        assert!(started.elapsed().as_secs() < 120, "latest still names {} after 120 s", latest().trim());
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(common::checkpoint_names(&run), ["step-00000004", "step-00000006.abandoned"]);
    // Nothing of the continuation's record is lost: what metrics.jsonl kept and what went to
    // metrics.replaced.jsonl, after the line naming the resume, are the run's lines as they were.
    let (after, replaced) = (read_lines("metrics.jsonl"), read_lines("metrics.replaced.jsonl"));
    let header: serde_json::Value = serde_json::from_str(&replaced[0]).unwrap();
    assert_eq!((header["type"].as_str(), header["by_resume_at_step"].as_u64()), (Some("replaced"), Some(4)));
    let kept = before.len() - (replaced.len() - 1);
    assert_eq!([&after[..kept], &replaced[1..]].concat(), before);
    let steps: Vec<u64> = replaced[1..]
        .iter()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok()?["step"].as_u64())
        .collect();
    assert!(steps.contains(&5) && steps.contains(&6), "{replaced:?}");
    // The run's own --max-steps, 6, from the checkpoint.
    let (ok, err) = dcgan(&["--resume", p(&run), "--no-progress"]);
    assert!(ok && err.contains("resuming at step 4"), "{err}");
    assert_eq!(common::checkpoint_names(&run), ["step-00000004", "step-00000006", "step-00000006.abandoned"]);
    assert_eq!(final_weights(&run), final_weights(&whole));
    assert_eq!(step_records(&run), step_records(&whole));
}

/// What `--resume` accepts is what its errors offer.
#[test]
fn resume_errors_offer_what_it_accepts() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("nowhere");
    let (ok, err) = dcgan(&["--resume", p(&missing)]);
    assert!(!ok);
    assert_eq!(
        lines(&err, "error:"),
        [format!(
            "error: --resume {} does not exist: pass a run directory (the --out of an earlier run) or one of its checkpoints \
             (RUN/checkpoints/step-N)",
            missing.display()
        )]
    );
    // A checkpoint copied out of its run has no run to go on writing in.
    let run = tmp.path().join("run");
    train(&run, &["--max-steps", "1"]);
    let alone = tmp.path().join("alone");
    std::fs::create_dir(&alone).unwrap();
    for f in ["G.safetensors", "D.safetensors", "optimizer.safetensors"] {
        std::fs::copy(run.join("checkpoints").join("step-00000001").join(f), alone.join(f)).unwrap();
    }
    let (ok, err) = dcgan(&["--resume", p(&alone), "--max-steps", "2"]);
    assert!(!ok);
    let errors = lines(&err, "error:");
    assert!(errors.len() == 1 && errors[0].contains("is not inside a run directory"), "{err}");
}

/// 16 images of 28x28 in `dir` as train-images-idx3-ubyte, their pixels set by `variant`.
fn idx_images(dir: &Path, variant: u8) {
    std::fs::create_dir_all(dir).unwrap();
    let mut idx = vec![0, 0, 8, 3, 0, 0, 0, 16, 0, 0, 0, 28, 0, 0, 0, 28];
    idx.extend((0..16 * 28 * 28).map(|k| (k % 251) as u8 ^ variant));
    std::fs::write(dir.join("train-images-idx3-ubyte"), idx).unwrap();
}

/// `--data` on resume may name another place holding the run's images (the run's data moved,
/// or the resume runs from another directory): the run goes on as if uninterrupted. Other
/// images there are refused, by the fingerprint the checkpoint keeps, before anything of the
/// run changes.
#[test]
fn a_resume_finds_the_runs_images_elsewhere_but_refuses_others() {
    let tmp = tempfile::tempdir().unwrap();
    let (moved, other) = (tmp.path().join("moved"), tmp.path().join("other"));
    idx_images(&tmp.path().join("data"), 0);
    idx_images(&moved, 0);
    idx_images(&other, 1);
    let start = |out: &Path, steps: &str| {
        let args = ["--data", "data", "--batch-size", "8", "--max-steps", steps, "--no-progress", "--out", p(out)];
        let o = Command::new(env!("CARGO_BIN_EXE_dcgan-train")).current_dir(tmp.path()).args(args).output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    };
    let (run, whole) = (tmp.path().join("run"), tmp.path().join("whole"));
    start(&whole, "4");
    start(&run, "2");
    let metrics = std::fs::read(run.join("metrics.jsonl")).unwrap();
    let (ok, err) = dcgan(&["--resume", p(&run), "--data", p(&other), "--max-steps", "4", "--no-progress"]);
    assert!(!ok);
    let errors = lines(&err, "error:");
    assert_eq!(errors.len(), 1, "{err}");
    let why = format!("--data {} holds (fingerprint ", other.display());
    assert!(errors[0].contains(&why) && errors[0].contains("are not those the run trained on (fingerprint "), "{err}");
    assert_eq!(std::fs::read(run.join("metrics.jsonl")).unwrap(), metrics, "the refused resume wrote into the run");
    // From this test's working directory, where the run's relative `data` is not.
    let (ok, err) = dcgan(&["--resume", p(&run), "--data", p(&moved), "--max-steps", "4", "--no-progress"]);
    assert!(ok, "{err}");
    assert_eq!(final_weights(&run), final_weights(&whole), "the resume trained on other images than the run's");
}

/// A run started with its own `--threads` (1, where the default on more than one core is
/// more) and resumed without it goes on with the run's thread count: the GEMMs split their
/// sums by thread, so the machine's default would make the resume differ from the
/// uninterrupted run.
#[test]
fn a_resume_keeps_the_runs_threads() {
    let (_tmp, run, whole) = whole_and_part(&["--threads", "1", "--ngf", "8", "--ndf", "8"], 4, 2);
    let (ok, err) = dcgan(&["--resume", p(&run), "--max-steps", "4", "--no-progress"]);
    assert!(ok, "{err}");
    assert_eq!(final_weights(&run), final_weights(&whole), "the resume computed with other threads than the run's");
}
