//! Never losing work: an interrupted run resumed gives bitwise the run that was never
//! interrupted; SIGTERM stops with a checkpoint; a rank killed outright ends the whole job
//! quickly and leaves a checkpoint that resumes.

use crate::common;

use crate::common::{checkpoint_names, final_weights, mpirun, run_limited, step_records};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn ok(o: std::process::Output) {
    assert!(o.status.success(), "the run failed:\n{}", String::from_utf8_lossy(&o.stderr));
}

/// How the interrupted half of a run goes on.
#[derive(Debug, Clone, Copy)]
enum GoOn {
    /// Ended by --max-steps 7, resumed repeating every option with a longer --max-steps.
    Repeating,
    /// Stopped after step 7 as by a signal (the test hook), resumed by the command its stop
    /// message prints, pasted as it is: no option repeated.
    Pasted,
}

/// Interrupt after 7 of 16 steps (mid-epoch, between periodic checkpoints), resume, and
/// compare with an uninterrupted run: every tensor bitwise, every step's metrics. The networks
/// are narrow, which the pasted resume (no widths on its command line) must keep.
fn resume_matches_uninterrupted(ranks: usize, extra: &[&str], go_on: GoOn) {
    let tmp = tempfile::tempdir().unwrap();
    let base =
        ["--data", "synthetic:256", "--batch-size", "8", "--epochs", "2", "--checkpoint-every", "5", "--no-progress"];
    let base = [&base[..], &common::NARROW].concat();
    let per_epoch = 256 / (8 * ranks);
    let whole = tmp.path().join("whole");
    let mut args = base.to_vec();
    args.extend(extra);
    args.extend(["--max-steps", "20", "--out", path(&whole)]);
    ok(mpirun(ranks, &args, 600));

    let parts = tmp.path().join("parts");
    let mut first = base.to_vec();
    first.extend(extra);
    match go_on {
        GoOn::Repeating => {
            first.extend(["--max-steps", "7", "--out", path(&parts)]);
            ok(mpirun(ranks, &first, 600));
            let mut second = base.to_vec();
            second.extend(extra);
            second.extend(["--max-steps", "20", "--resume", path(&parts)]);
            ok(mpirun(ranks, &second, 600));
        }
        GoOn::Pasted => {
            first.extend(["--max-steps", "20", "--out", path(&parts)]);
            let command = stop_at(ranks, &first, 7, &parts);
            let mut pasted = Command::new("sh");
            pasted.args(["-c", &command]);
            // What the tests' mpiexec lines say with flags, for the pasted one.
            pasted.env("OMPI_MCA_rmaps_base_oversubscribe", "1").env("OMPI_MCA_hwloc_base_binding_policy", "none");
            ok(run_limited(pasted, 600));
        }
    }

    let case = format!("{ranks} rank(s) {extra:?} {go_on:?}");
    assert_eq!(final_weights(&whole), final_weights(&parts), "{case}: weights differ after resuming");
    let (a, b) = (step_records(&whole), step_records(&parts));
    assert_eq!(a.len(), 20.min(2 * per_epoch));
    assert_eq!(a, b, "{case}: metrics differ after resuming");
}

/// Run `args` under `mpiexec -n ranks`, stopped after step `step` as by a signal; the command
/// its stop message says to continue with, which metrics.jsonl in `run` records too.
fn stop_at(ranks: usize, args: &[&str], step: u64, run: &Path) -> String {
    let mut cmd = common::mpiexec_ranks(ranks);
    cmd.args(args).env("DCGAN_TEST_STOP_AT_STEP", step.to_string());
    let o = run_limited(cmd, 600);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "a stopped run exits non-zero: {err}");
    let line =
        err.lines().find(|l| l.contains("stopped by a signal")).unwrap_or_else(|| panic!("no stop message: {err}"));
    let command = line.split_once("continue with ").unwrap_or_else(|| panic!("no command in: {line}")).1.to_string();
    let launcher = if ranks > 1 { format!("mpiexec -n {ranks} ") } else { String::new() };
    let want = format!("{launcher}{} --resume {}", env!("CARGO_BIN_EXE_dcgan-train"), run.display());
    assert_eq!(command, want, "{line}");
    let metrics = std::fs::read_to_string(run.join("metrics.jsonl")).unwrap();
    let stopped = metrics.lines().find(|l| l.contains(r#""type":"stopped""#)).expect("a stopped record");
    let rec: dcgan_train::record::StoppedRecord = serde_json::from_str(stopped).unwrap();
    assert_eq!(rec.resume, command, "metrics.jsonl records the command printed");
    command
}

#[test]
fn resumed_runs_equal_uninterrupted_runs_bitwise() {
    resume_matches_uninterrupted(1, &[], GoOn::Repeating);
    // Two ranks keep their own batch-norm running statistics between epoch ends; the
    // checkpoint holds every rank's, so this resume is exact too. Started with options beyond
    // the defaults, and continued by its stop message alone: the run keeps them, those of
    // the comm thread (started before the checkpoint is read) among them.
    resume_matches_uninterrupted(2, &["--seed", "3", "--lr", "0.0005", "--wire", "bf16"], GoOn::Pasted);
    resume_matches_uninterrupted(2, &["--sync-bn"], GoOn::Repeating);
}

/// A run that ends where an epoch ends writes that step's checkpoint once (the epoch's),
/// not a second time as the run's last; every rank skips the second save alike (it is
/// collective: a rank that went on to it alone would wait there for the others).
#[test]
fn a_run_ending_at_an_epoch_end_writes_its_checkpoint_once() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let args = ["--data", "synthetic:128", "--batch-size", "8", "--epochs", "1", "--threads", "1", "--no-progress"];
    let mut args = args.to_vec();
    args.extend(["--stall-timeout", "20s", "--out", path(&run)]);
    ok(mpirun(2, &args, 300));
    assert_eq!(checkpoint_names(&run), ["step-00000008"], "one checkpoint of the last step, written once");
}

/// A stop asked for in the run's last step (a signal that lands there; the test hook aims it)
/// ends the run as if no signal had come: the epoch's end is booked (its record, the ranks'
/// running statistics averaged) and the run is complete, not stopped. A stop one step
/// earlier is still a stop.
#[test]
fn a_stop_in_the_last_step_completes_the_run() {
    let tmp = tempfile::tempdir().unwrap();
    // 128 images, batch 8, 2 ranks: 8 steps per epoch.
    let base = ["--data", "synthetic:128", "--batch-size", "8", "--threads", "1", "--no-progress"];
    let epoch_records = |run: &Path| epoch_lines(run).len();
    for (bound, stop_at, completes) in
        [(["--epochs", "1"], "8", true), (["--max-steps", "8"], "8", true), (["--epochs", "1"], "7", false)]
    {
        let run = tmp.path().join(format!("{}-{stop_at}", bound[0].trim_start_matches('-')));
        let mut args = base.to_vec();
        args.extend(bound);
        args.extend(["--out", path(&run)]);
        let mut cmd = common::mpiexec_ranks(2);
        cmd.args(&args).env("DCGAN_TEST_STOP_AT_STEP", stop_at);
        let o = run_limited(cmd, 300);
        let err = String::from_utf8_lossy(&o.stderr);
        let case = format!("{bound:?}, a stop in step {stop_at}");
        assert_eq!(o.status.success(), completes, "{case}: {err}");
        assert_eq!(err.contains("stopped by a signal"), !completes, "{case}: {err}");
        assert_eq!(run.join("summary.json").exists(), completes, "{case}");
        assert_eq!(epoch_records(&run), completes as usize, "{case}: the epoch's end is booked");
    }
}

/// A signal that reaches a step after it began (most do: the check at a step's start is a
/// moment) stops the run at that step's end, with its checkpoint: the step carries the stop
/// in its metrics, so the run does not train one more step that a slower step would not
/// finish within the grace a stop gives it.
#[test]
fn a_signal_during_a_step_stops_the_run_after_that_step() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let args = ["--data", "synthetic:256", "--batch-size", "8", "--threads", "1", "--max-steps", "8"];
    let mut cmd = common::mpiexec_ranks(2);
    cmd.args(args).args(["--checkpoint-every", "100", "--no-progress", "--out", path(&run)]);
    cmd.env("DCGAN_TEST_SIGNAL_IN_STEP", "3");
    let o = run_limited(cmd, 300);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("stopped by a signal"), "{err}");
    assert!(!err.contains("dropped"), "{err}");
    assert_eq!(checkpoint_names(&run), ["step-00000003"], "{err}");
    assert_eq!(step_records(&run).len(), 3, "{err}");
}

/// The epoch lines of a run's metrics.jsonl, in order.
fn epoch_lines(run: &Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(run.join("metrics.jsonl")).unwrap();
    let lines = text.lines().filter(|l| l.contains(r#""type":"epoch""#));
    lines.map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// An epoch a resume enters part-way (at step 8 of 16), or at its last step (a checkpoint two
/// ranks saved before the epoch closed), gets a line that counts the whole epoch: its steps,
/// and its seconds at least the time its steps' lines took.
#[test]
fn a_resumed_epochs_line_counts_the_whole_epoch() {
    let tmp = tempfile::tempdir().unwrap();
    let base = ["--data", "synthetic:512", "--batch-size", "16", "--threads", "1", "--no-progress"];
    for from in ["step-00000008", "step-00000016"] {
        let run = tmp.path().join(from);
        let args = [&base[..], &["--max-steps", "24", "--checkpoint-every", "8", "--keep-checkpoints", "0"]].concat();
        ok(mpirun(2, &[&args[..], &["--out", path(&run)]].concat(), 300));
        let checkpoint = run.join("checkpoints").join(from);
        ok(mpirun(2, &["--resume", path(&checkpoint), "--threads", "1", "--no-progress"], 300));
        let line = epoch_lines(&run).remove(0);
        assert_eq!(line["steps"], 16, "resumed from {from}: {line}");
        let steps_s: f64 = step_records(&run).iter().filter(|r| r.epoch == 0).map(|r| r.ms).sum::<f64>() / 1e3;
        let seconds = line["seconds"].as_f64().unwrap();
        assert!(seconds >= 0.999 * steps_s, "resumed from {from}: {seconds} s, its steps {steps_s} s: {line}");
        let per_s = line["images_per_s"].as_f64().unwrap();
        assert!((per_s - 16.0 * 32.0 / seconds).abs() <= 1e-6 * per_s, "resumed from {from}: {line}");
    }
}

/// A resume that does not repeat --keep-checkpoints keeps what the run kept: falling back
/// to the default's one would delete the checkpoints kept to pick from at its first save.
#[test]
fn a_resume_keeps_the_runs_checkpoints() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("r");
    let base = ["--data", "synthetic:64", "--batch-size", "8", "--checkpoint-every", "2", "--no-progress"];
    let names = || checkpoint_names(&run);
    let mut args = base.to_vec();
    args.extend(["--max-steps", "6", "--keep-checkpoints", "3", "--out", path(&run)]);
    ok(mpirun(1, &args, 120));
    assert_eq!(names(), ["step-00000002", "step-00000004", "step-00000006"]);
    let mut args = base.to_vec();
    // Step 7, short of the epoch's end (8 steps), whose save would be a second one of step 8.
    args.extend(["--max-steps", "7", "--resume", path(&run)]);
    ok(mpirun(1, &args, 120));
    assert_eq!(names(), ["step-00000004", "step-00000006", "step-00000007"]);
}

#[test]
fn resuming_on_ranks_that_cannot_share_the_batch_or_with_other_options_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("r");
    let base = ["--data", "synthetic:64", "--batch-size", "8", "--no-progress"];
    let mut args = base.to_vec();
    args.extend(["--max-steps", "2", "--out", path(&run)]);
    ok(mpirun(1, &args, 120));
    let mut args = base.to_vec();
    args.extend(["--max-steps", "4", "--resume", path(&run)]);
    let o = mpirun(3, &args, 120);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("global batch of 8 images (8 per rank x 1 ranks) does not split over 3 ranks"), "{err}");
    // Another option than the run was started with.
    let mut args = base.to_vec();
    args.extend(["--max-steps", "4", "--lr", "0.001", "--resume", path(&run)]);
    let o = mpirun(1, &args, 120);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("--lr 0.001 (the run has 0.0002) cannot change on resume"), "{err}");
    // The options repeated with the run's values are not named.
    assert!(!err.contains("--batch-size") && !err.contains("--data"), "{err}");
}

/// An mpiexec job in the background.
fn spawn_job(ranks: usize, args: &[&str]) -> Child {
    let mut cmd = common::mpiexec_ranks(ranks);
    cmd.args(args);
    cmd.env("OMPI_ALLOW_RUN_AS_ROOT", "1").env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
    cmd.stdout(Stdio::null()).stderr(Stdio::piped());
    cmd.spawn().expect("mpiexec starts")
}

/// The rank processes: children of mpiexec running this binary.
fn ranks_of(job: &Child) -> Vec<u32> {
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
        // "pid (comm) state ppid ...": the command may contain spaces, so split after ')'.
        let after = &stat[stat.rfind(')').unwrap() + 2..];
        let ppid: u32 = after.split(' ').nth(1).unwrap().parse().unwrap();
        if ppid == job.id() && stat.contains("(dcgan-train)") {
            pids.push(pid);
        }
    }
    pids.sort();
    pids
}

fn wait_for(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !cond() {
        assert!(t0.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn steps_written(run: &Path) -> usize {
    std::fs::read_to_string(run.join("metrics.jsonl"))
        .map(|s| s.lines().filter(|l| l.contains(r#""type":"step""#)).count())
        .unwrap_or(0)
}

fn latest_checkpoint(run: &Path) -> Option<PathBuf> {
    dcgan_train::checkpoint::resolve(run).ok()
}

/// Wait for the job's end, at most `limit`; its exit status and stderr.
fn finish(mut job: Child, limit: Duration) -> (std::process::ExitStatus, String) {
    let t0 = Instant::now();
    loop {
        if let Some(status) = job.try_wait().unwrap() {
            let mut err = String::new();
            std::io::Read::read_to_string(&mut job.stderr.take().unwrap(), &mut err).ok();
            return (status, err);
        }
        if t0.elapsed() > limit {
            job.kill().ok();
            panic!("the job was still running {limit:?} after the fault");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

const LONG_RUN: [&str; 6] = ["--data", "synthetic:20000", "--batch-size", "8", "--epochs", "5"];

#[test]
fn sigterm_finishes_the_step_writes_a_checkpoint_and_says_how_to_resume() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let mut args = LONG_RUN.to_vec();
    args.extend(["--no-progress", "--out", path(&run)]);
    let job = spawn_job(2, &args);
    wait_for("three steps", Duration::from_secs(120), || steps_written(&run) >= 3);
    // What Slurm's scancel does: every task gets the signal.
    for pid in ranks_of(&job) {
        unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    }
    let (status, err) = finish(job, Duration::from_secs(60));
    assert!(!status.success(), "a stopped run exits non-zero");
    assert!(err.contains("stopped by a signal") && err.contains("--resume"), "{err}");
    let ck = latest_checkpoint(&run).expect("a checkpoint was written on the way out");
    let stopped_at = steps_written(&run);
    assert!(ck.ends_with(format!("step-{stopped_at:08}")), "{ck:?} is the last step ({stopped_at})");
    // And the run continues from there.
    let max = (stopped_at + 2).to_string();
    let mut args = LONG_RUN.to_vec();
    args.extend(["--max-steps", &max, "--no-progress", "--resume", path(&run)]);
    ok(mpirun(2, &args, 120));
    assert_eq!(steps_written(&run), stopped_at + 2);
}

#[test]
fn a_killed_rank_ends_the_job_within_a_minute_and_the_checkpoint_resumes() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let mut args = LONG_RUN.to_vec();
    args.extend(["--checkpoint-every", "2", "--no-progress", "--out", path(&run)]);
    let job = spawn_job(3, &args);
    wait_for("a checkpoint and more steps", Duration::from_secs(180), || {
        latest_checkpoint(&run).is_some() && steps_written(&run) >= 5
    });
    let ranks = ranks_of(&job);
    assert_eq!(ranks.len(), 3, "three rank processes under mpiexec");
    let killed_at = Instant::now();
    unsafe { libc::kill(ranks[1] as i32, libc::SIGKILL) };
    let (status, _) = finish(job, Duration::from_secs(60));
    assert!(!status.success());
    assert!(killed_at.elapsed() < Duration::from_secs(60));

    // The last checkpoint is whole and training continues from it.
    let ck = latest_checkpoint(&run).expect("the checkpoint survived");
    // step-N, or step-N.K for a second save of the same step.
    let name = ck.file_name().unwrap().to_string_lossy().to_string();
    let step: usize = name.trim_start_matches("step-").split('.').next().unwrap().parse().unwrap();
    let max = (step + 2).to_string();
    let mut args = LONG_RUN.to_vec();
    args.extend(["--checkpoint-every", "2", "--max-steps", &max, "--no-progress", "--resume", path(&run)]);
    let o = run_limited(
        {
            let mut c = common::mpiexec_ranks(3);
            c.args(&args);
            c
        },
        180,
    );
    ok(o);
    assert_eq!(step_records(&run).last().unwrap().step, step as u64 + 2);
}

/// A pipeline whose D stage dies: G's stage, waiting for the image gradients that will not
/// come, does not hang; the job ends within a minute.
#[test]
fn a_dead_pipeline_stage_ends_the_job_within_a_minute() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let mut args = LONG_RUN.to_vec();
    args.extend(["--pipeline", "--micro-batches", "2", "--no-progress", "--out", path(&run)]);
    let job = spawn_job(2, &args);
    wait_for("three steps", Duration::from_secs(120), || steps_written(&run) >= 3);
    let ranks = ranks_of(&job);
    assert_eq!(ranks.len(), 2, "two rank processes under mpiexec");
    let killed_at = Instant::now();
    unsafe { libc::kill(ranks[1] as i32, libc::SIGKILL) };
    let (status, _) = finish(job, Duration::from_secs(60));
    assert!(!status.success());
    assert!(killed_at.elapsed() < Duration::from_secs(60));
}
