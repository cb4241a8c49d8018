//! A stop that cannot wait for a long step, and the run directories such runs leave: a step of
//! a large batch is dropped between layers soon after SIGTERM, the run ends at its last
//! checkpoint, and a directory is never taken from a run that still holds it.

use crate::common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_dcgan-train");

fn wait_for(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < limit, "waited {limit:?} for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// SIGTERM in the middle of a step of several seconds: the run ends long before the step
/// would have (its first step's length is the yardstick), the step is not checkpointed, and
/// the message names the checkpoint of the step before.
#[test]
fn sigterm_in_a_long_step_drops_it_between_layers() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let args = ["--device", "cpu", "--data", "synthetic:4096", "--batch-size", "2048", "--threads", "1"];
    let mut job = Command::new(BIN)
        .args(args)
        .args(["--checkpoint-every", "1", "--max-steps", "3", "--no-progress", "--out"])
        .arg(&run)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let first = run.join("checkpoints").join("step-00000001");
    wait_for("the first step's checkpoint", Duration::from_secs(240), || first.join("optimizer.safetensors").exists());
    std::thread::sleep(Duration::from_millis(1000));
    let signalled = Instant::now();
    unsafe { libc::kill(job.id() as i32, libc::SIGTERM) };
    wait_for("the run to end", Duration::from_secs(240), || job.try_wait().unwrap().is_some());
    let after = signalled.elapsed();
    let o = job.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{err}");
    let step_ms = common::timed_step_records(&run)[0].ms;
    assert!(
        after.as_secs_f64() * 1e3 < 0.5 * step_ms,
        "ended {after:?} after the signal; a step takes {step_ms:.0} ms: {err}"
    );
    assert!(err.contains("during step 2, which was dropped"), "{err}");
    assert!(err.contains(&format!("the last checkpoint is {}", first.display())), "{err}");
    assert!(!run.join("checkpoints").join("step-00000002").exists(), "the dropped step was checkpointed");
    assert_eq!(common::step_records(&run).len(), 1);
}

/// A run directory whose run is still going (it holds the directory's lock) is refused, even
/// though it has no checkpoint yet; once released, a new run starts over in it.
#[test]
fn a_directory_in_use_is_never_taken() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    std::fs::create_dir_all(&run).unwrap();
    std::fs::write(run.join("metrics.jsonl"), "").unwrap();
    let holder = std::fs::File::create(run.join(".lock")).unwrap();
    holder.try_lock().unwrap();
    let train = |run: &Path| {
        let mut cmd = Command::new(BIN);
        cmd.args([
            "--device",
            "cpu",
            "--data",
            "synthetic:64",
            "--batch-size",
            "8",
            "--max-steps",
            "1",
            "--no-progress",
        ]);
        cmd.arg("--out").arg(run);
        common::run_limited(cmd, 120)
    };
    let o = train(&run);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("is in use by a run that is still going"), "{err}");
    assert_eq!(std::fs::read(run.join("metrics.jsonl")).unwrap(), b"", "the running run's records were touched");
    drop(holder);
    let o = train(&run);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(common::step_records(&run).len(), 1);
}
