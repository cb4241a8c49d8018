//! The memory a run takes: estimated before the model is built, the estimate against the peak
//! the kernel measured (VmHWM) for a few shapes, and a batch that cannot fit refused before
//! anything is written (also by bench-step).

use crate::common;

use std::process::Command;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_dcgan-train");

fn train(args: &[&str]) -> std::process::Output {
    let mut cmd = Command::new(BIN);
    cmd.args(["--device", "cpu", "--no-progress"]).args(args);
    common::run_limited(cmd, 300)
}

/// The estimate is within 25% of the measured peak, at batches where the activations, the
/// parameters or the checkpoint's copies dominate, on one rank and on two.
#[test]
fn the_estimate_is_within_a_quarter_of_the_measured_peak() {
    let tmp = tempfile::tempdir().unwrap();
    let shapes: [(&str, &str, usize); 4] = [("28", "64", 1), ("28", "512", 1), ("64", "32", 1), ("28", "128", 2)];
    for (side, batch, ranks) in shapes {
        let out = tmp.path().join(format!("{side}-{batch}-{ranks}"));
        let args = ["--data", "synthetic:1024", "--image-size", side, "--batch-size", batch, "--max-steps", "2"];
        let mut args = args.to_vec();
        args.extend(["--threads", "1", "--out", out.to_str().unwrap()]);
        let o = if ranks == 1 { train(&args) } else { common::mpirun(ranks, &args, 300) };
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let s = common::read_summary(&out);
        let (estimate, peak) = (s.host_memory_estimate_bytes.unwrap(), s.peak_host_memory_bytes.unwrap());
        let ratio = estimate as f64 / peak as f64;
        assert!(
            (0.75..=1.25).contains(&ratio),
            "{side}x{side}, batch {batch}, {ranks} rank(s): estimate {estimate} against peak {peak}"
        );
        assert_eq!(s.device_memory_estimate_bytes, None, "the CPU has no device memory of its own");
    }
}

/// A batch far past the host's memory is one line with the largest batch that fits, before
/// the data is sharded or a run directory made, on every rank.
#[test]
fn a_batch_that_cannot_fit_is_refused_before_anything_is_written() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let args = ["--data", "synthetic:64", "--image-size", "64", "--batch-size", "1000000"];
    let mut args = args.to_vec();
    args.extend(["--out", out.to_str().unwrap()]);
    for ranks in [1, 2] {
        let started = Instant::now();
        let o = if ranks == 1 { train(&args) } else { common::mpirun(2, &args, 300) };
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{err}");
        let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("error:")).collect();
        assert_eq!(lines.len(), 1, "{err}");
        assert!(lines[0].contains("needs about") && lines[0].contains("GiB of host memory"), "{err}");
        assert!(lines[0].contains("the largest batch per rank that fits is"), "{err}");
        assert!(!out.exists(), "a refused run wrote {}", out.display());
        // Long before a model of that size could have been built: a guard, not a benchmark.
        assert!(started.elapsed() < Duration::from_secs(30), "{ranks} rank(s): {:?}", started.elapsed());
    }
}

/// bench-step refuses such a batch the same way, instead of the allocation's abort.
#[test]
fn bench_step_refuses_a_batch_that_cannot_fit() {
    let mut cmd = Command::new(BIN);
    cmd.args(["bench-step", "--device", "cpu", "--image-size", "64", "--batch-size", "1000000", "--steps", "1"]);
    let o = common::run_limited(cmd, 60);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("error:")).collect();
    assert!(lines.len() == 1 && lines[0].contains("GiB of host memory"), "{err}");
    assert!(lines[0].contains("use --batch-size"), "{err}");
}

/// The process's resident memory grows with what it touches, and its peak keeps the most
/// (here, in a test process whose other tests only start subprocesses).
#[test]
fn the_resident_memory_grows_with_what_is_touched_and_the_peak_stays() {
    use dcgan_train::memory::{available_memory, peak_resident_bytes, resident_bytes};
    let before = resident_bytes().expect("Linux says");
    let block = vec![1u8; 64 << 20];
    let during = resident_bytes().unwrap();
    assert!(during >= before + (60 << 20), "{before} -> {during} with 64 MiB touched");
    drop(std::hint::black_box(block));
    // The kernel counts each thread's pages in batches (64 at a time) before they reach the
    // totals both figures read, so they may disagree by that much.
    let peak = peak_resident_bytes().unwrap();
    assert!(peak + (1 << 20) >= during, "peak {peak} below {during}");
    assert!(available_memory().unwrap() > 0);
}
