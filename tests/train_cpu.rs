//! The training command end to end on one rank: outputs, determinism, and bad input.

use crate::common;

use dcgan_train::record::Losses;
use std::path::Path;
use std::process::{Command, Output};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_dcgan-train"))
}

fn run(args: &[&str]) -> Output {
    bin().args(args).output().expect("the binary runs")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).to_string()
}

#[test]
fn short_run_writes_finite_metrics_a_decodable_grid_and_repeats_exactly() {
    let tmp = tempfile::tempdir().unwrap();
    let mut runs = Vec::new();
    for name in ["a", "b"] {
        let out = tmp.path().join(name);
        let o = run(&[
            "--data",
            "synthetic:200",
            "--batch-size",
            "16",
            "--epochs",
            "2",
            "--max-steps",
            "15",
            "--seed",
            "7",
            "--no-progress",
            "--out",
            out.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
        runs.push(out);
    }
    let a = common::step_records(&runs[0]);
    assert_eq!(a.len(), 15, "15 steps (the second epoch cut short by --max-steps)");
    for rec in &a {
        let Losses::Dcgan { loss_d, loss_g, d_x, d_g_z, .. } = rec.metrics.losses else { panic!("{rec:?}") };
        for (k, v) in [("loss_d", loss_d), ("loss_g", loss_g), ("d_x", d_x), ("d_g_z", d_g_z)] {
            assert!(v.is_finite(), "{k} = {v}");
        }
        assert!((0.0..=1.0).contains(&d_x));
    }
    assert_eq!(a, common::step_records(&runs[1]), "the same seed gives the same metrics");

    for png in ["epoch-001.png", "final.png"] {
        let (pixels, h, w) = common::read_png_gray(&runs[0].join("samples").join(png));
        // 8x8 grid of 28x28 with 2 px padding around and between.
        assert_eq!((h, w), (8 * 28 + 9 * 2, 8 * 28 + 9 * 2), "{png}");
        let distinct: std::collections::HashSet<u8> = pixels.iter().copied().collect();
        assert!(distinct.len() > 16, "{png} shows images, not a flat field");
    }
    let summary = common::read_summary(&runs[0]);
    assert_eq!(summary.steps, 15);
    assert!(summary.global_images_per_s > 0.0);
    // The mean step is the steps' own (metrics.jsonl), and the wall time per step also
    // holds the checkpoint and grid between the epochs.
    let timed = common::timed_step_records(&runs[0]);
    let mean = timed.iter().map(|r| r.ms).sum::<f64>() / timed.len() as f64;
    assert!((summary.ms_per_step_mean - mean).abs() <= 1e-9 * mean, "{} vs {mean}", summary.ms_per_step_mean);
    assert!(summary.wall_ms_per_step > summary.ms_per_step_mean, "{summary:#?}");

    // Another seed trains differently.
    let out = tmp.path().join("c");
    let o = run(&[
        "--data",
        "synthetic:200",
        "--batch-size",
        "16",
        "--max-steps",
        "3",
        "--seed",
        "8",
        "--no-progress",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_ne!(common::step_records(&out)[..3], a[..3]);
}

/// `sample` from a run draws, without --seed, the run's own grid: the same pixels as the
/// run's samples/final.png (the run and `sample` batch the noise differently, and the
/// generator runs with its running statistics, one image at a time in effect). --seed
/// draws other images. The run is on the CPU, as `sample` is: a GPU's rounding would differ.
#[test]
fn sample_redraws_the_runs_grid_and_other_noise_with_seed() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("r");
    let o = run(&[
        "--data",
        "synthetic:128",
        "--batch-size",
        "16",
        "--max-steps",
        "3",
        "--no-progress",
        "--seed",
        "5",
        "--device",
        "cpu",
    ]
    .iter()
    .copied()
    .chain(["--out", out.to_str().unwrap()])
    .collect::<Vec<_>>());
    assert!(o.status.success(), "{}", stderr(&o));
    let read = common::read_png_gray;
    let grid = read(&out.join("samples").join("final.png"));
    let again = tmp.path().join("again.png");
    let o = run(&["sample", "--checkpoint", out.to_str().unwrap(), "--out", again.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("the run's grid noise (its seed 5)"), "{}", stderr(&o));
    assert!(read(&again) == grid, "sample without --seed redraws the run's final grid");
    let other = tmp.path().join("other.png");
    let o = run(&["sample", "--checkpoint", out.to_str().unwrap(), "--out", other.to_str().unwrap(), "--seed", "5"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let (pixels, h, w) = read(&other);
    assert_eq!((h, w), (grid.1, grid.2));
    assert!(pixels != grid.0, "--seed draws other noise than the run's grid");
}

#[test]
fn the_64x64_model_trains() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("r");
    let o = run(&[
        "--image-size",
        "64",
        "--data",
        "synthetic:64",
        "--batch-size",
        "8",
        "--max-steps",
        "2",
        "--no-progress",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let (_, h, w) = common::read_png_gray(&out.join("samples").join("final.png"));
    assert_eq!((h, w), (8 * 64 + 18, 8 * 64 + 18));
}

/// Every error is one line naming the problem and the fix, with a non-zero exit.
fn assert_one_line_error(args: &[&str], needles: &[&str]) {
    let o = run(args);
    assert!(!o.status.success(), "{args:?} should fail");
    let err = stderr(&o);
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    for n in needles {
        assert!(err.contains(n), "{args:?}: '{n}' missing from: {err}");
    }
    // One "error:" line, the last one (clap adds a usage hint after its own errors).
    let errors: Vec<usize> =
        lines.iter().enumerate().filter(|(_, l)| l.starts_with("error:")).map(|(i, _)| i).collect();
    assert_eq!(errors.len(), 1, "{args:?}: one error line, got: {err}");
    assert!(lines.len() - errors[0] <= 3, "{args:?}: the error ends the output, got: {err}");
}

#[test]
fn bad_input_gives_one_clear_line() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("o");
    let out = out.to_str().unwrap();
    assert_one_line_error(
        &["--data", "/nonexistent/dir", "--out", out],
        &["/nonexistent/dir", "apt-get install dataset-fashion-mnist", "--data"],
    );
    let corrupt = tmp.path().join("corrupt");
    std::fs::create_dir(&corrupt).unwrap();
    std::fs::write(corrupt.join("train-images-idx3-ubyte"), [0x12u8, 0x34, 8, 3, 0, 0, 0, 1]).unwrap();
    assert_one_line_error(&["--data", corrupt.to_str().unwrap(), "--out", out], &["train-images-idx3-ubyte", "magic"]);
    assert_one_line_error(&["--data", "synthetic:10", "--batch-size", "64", "--out", out], &["--batch-size"]);
    assert_one_line_error(&["--epochs", "0"], &["--epochs"]);
    assert_one_line_error(&["--image-size", "32"], &["--image-size", "28 or 64"]);
    assert_one_line_error(&["--batch-size", "0"], &["--batch-size"]);
    // Optimizer settings outside their range are refused, not trained with (a negative rate
    // climbs the loss; beta 1 divides by zero in the bias correction).
    assert_one_line_error(&["--lr=-1"], &["--lr", "above 0"]);
    assert_one_line_error(&["--lr", "nan"], &["--lr", "above 0"]);
    assert_one_line_error(&["--adam-beta2", "1"], &["--adam-beta2", "below 1"]);
    assert_one_line_error(&["--adam-beta1=-0.1"], &["--adam-beta1", "at least 0"]);
    assert_one_line_error(&["--adam-eps", "0"], &["--adam-eps", "above 0"]);
    // Sizes far past the memory: an error line, not an overflow panic or an allocation abort.
    assert_one_line_error(&["--batch-size", "1048577"], &["--batch-size", "at most 1048576"]);
    // Flags the other one would silently override.
    assert_one_line_error(
        &["--global-batch-size", "64", "--batch-size", "8"],
        &["--global-batch-size", "cannot be used"],
    );
    assert_one_line_error(&["--resume", out, "--out", out], &["--resume", "cannot be used with '--out"]);
    assert_one_line_error(&["bench-allreduce", "--sizes", "9999GiB"], &["--sizes", "GiB available"]);
    assert_one_line_error(&["tune-allreduce", "--out", out, "--sizes", "9999GiB"], &["--sizes", "GiB available"]);
    // An output that cannot be written is found before training, not after it.
    let file = tmp.path().join("a-file");
    std::fs::write(&file, "x").unwrap();
    let trace = file.join("trace.json");
    assert_one_line_error(
        &["--data", "synthetic:64", "--trace", trace.to_str().unwrap(), "--out", out],
        &["--trace", "cannot create"],
    );
    assert!(!Path::new(out).exists(), "nothing was made before the check");
    // A timeout too long for a Duration is an error line, not a panic.
    assert_one_line_error(&["--stall-timeout", "99999999999999999999s"], &["--stall-timeout", "use 0"]);
    // Tens of thousands of threads exhaust memory before the first step.
    assert_one_line_error(
        &["--data", "synthetic:64", "--threads", "100000", "--out", out],
        &["--threads 100000", "at most"],
    );
    assert!(!Path::new(out).join("metrics.jsonl").exists());
    // A diverging run stops at the step where the loss stops being finite.
    let nan_out = tmp.path().join("nan");
    assert_one_line_error(
        &[
            "--data",
            "synthetic:64",
            "--batch-size",
            "8",
            "--max-steps",
            "5",
            "--lr",
            "1e30",
            "--out",
            nan_out.to_str().unwrap(),
        ],
        &["loss became", "at step 1", "--lr"],
    );
    // A diverging critic's advice names its penalty too.
    let wgan_out = tmp.path().join("nan-wgan");
    let wgan = ["--loss", "wgan-gp", "--n-critic", "1", "--lr", "1e30", "--out", wgan_out.to_str().unwrap()];
    assert_one_line_error(
        &[&["--data", "synthetic:64", "--batch-size", "8", "--max-steps", "5"][..], &wgan].concat(),
        &["loss became", "--lr", "--gp-lambda"],
    );
}

#[test]
fn an_existing_run_is_never_overwritten() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("r");
    let args = [
        "--data",
        "synthetic:32",
        "--batch-size",
        "8",
        "--max-steps",
        "1",
        "--no-progress",
        "--out",
        out.to_str().unwrap(),
    ];
    assert!(run(&args).status.success());
    let before = std::fs::read(out.join("metrics.jsonl")).unwrap();
    assert_one_line_error(&args, &["already holds a run", "--out"]);
    assert_eq!(std::fs::read(out.join("metrics.jsonl")).unwrap(), before);
    // Its checkpoints alone are a run too (the records lost, or a checkpoint copied in): a
    // new run's first save would have pruned them.
    let checkpoints = common::checkpoint_names(&out);
    std::fs::rename(out.join("metrics.jsonl"), tmp.path().join("metrics-aside")).unwrap();
    assert_one_line_error(&args, &["already holds a run (checkpoints/)", "--resume"]);
    assert_eq!(common::checkpoint_names(&out), checkpoints);
    std::fs::rename(tmp.path().join("metrics-aside"), out.join("metrics.jsonl")).unwrap();

    // Resumed with nothing left to run, the finished run keeps its summary.
    let summary = std::fs::read(out.join("summary.json")).unwrap();
    let resume = ["--data", "synthetic:32", "--batch-size", "8", "--max-steps", "1", "--no-progress", "--resume"];
    let mut resume = resume.to_vec();
    resume.push(out.to_str().unwrap());
    assert_one_line_error(&resume, &["already done 1 steps", "raise --max-steps"]);
    assert_eq!(std::fs::read(out.join("summary.json")).unwrap(), summary, "the summary was rewritten");
    // An output in the way is named (it said "File exists (os error 17)" alone).
    let samples = out.join("samples");
    std::fs::rename(&samples, tmp.path().join("samples-aside")).unwrap();
    std::fs::write(&samples, "not a folder").unwrap();
    let mut go_on = resume.clone();
    go_on[5] = "2";
    assert_one_line_error(&go_on, &["cannot create", samples.to_str().unwrap()]);
    std::fs::remove_file(&samples).unwrap();
    std::fs::rename(tmp.path().join("samples-aside"), &samples).unwrap();

    // A run that ended before its first checkpoint leaves a directory a new run starts over
    // in (there is nothing in it to continue), its records replaced by the new run's.
    let failed = tmp.path().join("failed");
    let diverge = ["--data", "synthetic:32", "--batch-size", "8", "--lr", "1e30", "--no-progress", "--out"];
    let mut diverge = diverge.to_vec();
    diverge.push(failed.to_str().unwrap());
    assert!(!run(&diverge).status.success());
    assert!(!failed.join("checkpoints").exists());
    let again = ["--data", "synthetic:32", "--batch-size", "8", "--max-steps", "2", "--no-progress", "--out"];
    let mut again = again.to_vec();
    again.push(failed.to_str().unwrap());
    // A PNG of the user's in its samples/ stays: only the grids the run wrote go.
    let theirs = failed.join("samples").join("mine.png");
    std::fs::write(&theirs, b"\x89PNG not ours").unwrap();
    // The records a resume of the earlier run replaced go with its metrics.
    let replaced = failed.join("metrics.replaced.jsonl");
    std::fs::write(&replaced, "{\"type\":\"replaced\",\"by_resume_at_step\":1,\"lines\":0}\n").unwrap();
    let o = run(&again);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("ended before its first checkpoint; starting over in it"), "{}", stderr(&o));
    assert_eq!(common::step_records(&failed).len(), 2, "only the new run's steps");
    assert_eq!(std::fs::read(&theirs).unwrap(), b"\x89PNG not ours", "another program's PNG is kept");
    assert!(!replaced.exists(), "the earlier run's replaced records are still there");

    // A folder whose metrics.jsonl is another program's is not a run to start over in.
    let other = tmp.path().join("other");
    std::fs::create_dir(&other).unwrap();
    std::fs::write(other.join("metrics.jsonl"), "epoch,loss\n1,0.5\n").unwrap();
    let mut into_other = again.clone();
    *into_other.last_mut().unwrap() = other.to_str().unwrap();
    assert_one_line_error(&into_other, &["metrics.jsonl this program did not write", "--out"]);
    assert_eq!(std::fs::read_to_string(other.join("metrics.jsonl")).unwrap(), "epoch,loss\n1,0.5\n");
}
