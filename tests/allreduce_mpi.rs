//! The real binary under `mpiexec --oversubscribe -n N` for N in {2, 3, 4, 5, 8}:
//! `bench-allreduce --check` must find every algorithm exact at awkward sizes; bad input (one
//! rank among it) must end with one clear line and a non-zero exit; a stalled rank must end the
//! job with a report.
//!
//! Open MPI refuses to run as root and to start more ranks than cores unless told:
//! OMPI_ALLOW_RUN_AS_ROOT=1, OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 and --oversubscribe. `--bind-to
//! none` because binding more ranks than cores fails; `--mca btl self,vader` keeps Open MPI off
//! network transports it would probe (and warn about) in containers. Skipped, with a printed
//! reason, where mpiexec is missing or the binary is built without the `mpi` feature.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_dcgan-train");

fn mpiexec() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join("mpiexec")).find(|p| p.is_file())
}

/// `mpiexec -n n dcgan-train args...` with `env` exported to every rank.
fn run_mpi(mpiexec: &Path, n: usize, env: &[(&str, &str)], args: &[&str]) -> Output {
    let mut cmd = Command::new(mpiexec);
    common::own_session(&mut cmd);
    cmd.env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .args(["--oversubscribe", "--bind-to", "none", "--mca", "btl", "self,vader"])
        .args(["-n", &n.to_string()]);
    for (k, v) in env {
        cmd.env(k, v).args(["-x", k]);
    }
    cmd.arg(BIN).args(args);
    cmd.output().expect("mpiexec runs")
}

macro_rules! need_mpiexec {
    () => {{
        if !cfg!(feature = "mpi") {
            eprintln!("SKIPPED: built without the `mpi` feature (every process is one rank)");
            return;
        }
        match mpiexec() {
            Some(m) => m,
            None => {
                eprintln!("SKIPPED: mpiexec is not on PATH (install openmpi-bin to run this test)");
                return;
            }
        }
    }};
}

fn text(o: &Output) -> String {
    format!(
        "status {:?}\n--- stdout\n{}\n--- stderr\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn tmp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("dcgan-{}-{name}", std::process::id()))
}

/// Run a checked benchmark and verify the JSON rows: every size x algorithm, all exact.
fn check_all_correct(m: &Path, n: usize, env: &[(&str, &str)], sizes: &[usize], extra: &[&str]) {
    let json = tmp(&format!("bench-{n}-{}.json", extra.len()));
    let sizes_arg = sizes.iter().map(|s| format!("{s}B")).collect::<Vec<_>>().join(",");
    let mut args = vec![
        "bench-allreduce",
        "--check",
        "--sizes",
        &sizes_arg,
        "--iters",
        "2",
        "--warmup",
        "1",
        "--json",
        json.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let o = run_mpi(m, n, env, &args);
    assert!(o.status.success(), "N={n}: {}", text(&o));
    let rows: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), sizes.len() * 6, "N={n}: one row per size and algorithm");
    for row in rows {
        assert_eq!(row["ranks"], n, "{row}");
        assert_eq!(row["correct"], true, "N={n}: {row}");
        for field in ["bytes", "algorithm", "avg_us", "min_us", "max_us", "algbw", "busbw"] {
            assert!(!row[field].is_null(), "missing {field} in {row}");
        }
    }
    for algo in ["tree", "rd", "vhd", "ring", "mpi", "auto"] {
        for &s in sizes {
            assert!(
                rows.iter().any(|r| r["algorithm"] == algo && r["bytes"] == s),
                "N={n}: no row for {algo} at {s} bytes"
            );
        }
    }
    std::fs::remove_file(json).ok();
}

#[test]
fn every_algorithm_is_exact_under_mpiexec() {
    let m = need_mpiexec!();
    for n in [2usize, 3, 4, 5, 8] {
        // Empty; fewer elements than ranks; N-1, N, N+1 elements; odd counts; around the
        // eager piece (4032 B), the rd/vhd threshold (8 KiB) and the largest message cut into
        // pieces (16 KiB); beyond them (whole messages).
        let mut sizes = vec![0, 4, 8, 12, 28, 4 * (n.max(2) - 1), 4 * n, 4 * (n + 1), 1020];
        sizes.extend([4032, 4036, 8188, 8192, 12_100, 16_384, 16_388, 200_004]);
        sizes.sort();
        sizes.dedup();
        check_all_correct(&m, n, &[], &sizes, &[]);
    }
}

#[test]
fn pipelined_chunks_are_exact_under_mpiexec() {
    let m = need_mpiexec!();
    // Small chunks and a deep pipeline, whole messages (no fragments): many chunks per
    // exchange, uneven last chunks, and recursive doubling sending what it reduces into.
    let env = [("DCGAN_ALLREDUCE_CHUNK", "64KiB"), ("DCGAN_ALLREDUCE_DEPTH", "3")];
    for n in [2usize, 3, 4] {
        check_all_correct(&m, n, &env, &[262_148, 1_048_576 + 12], &["--fragment-bytes", "0"]);
    }
}

#[test]
fn buckets_through_the_comm_thread_are_exact_under_mpiexec() {
    let m = need_mpiexec!();
    let json = tmp("engine.json");
    let o = run_mpi(
        &m,
        3,
        &[],
        &[
            "bench-allreduce",
            "--via-engine",
            "--check",
            "--sizes",
            "4B,2097164B",
            "--fragment-bytes",
            "256KiB",
            "--iters",
            "3",
            "--json",
            json.to_str().unwrap(),
        ],
    );
    assert!(o.status.success(), "{}", text(&o));
    let rows: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), 2);
    assert!(rows.iter().all(|r| r["correct"] == true && r["algorithm"] == "engine"), "{rows:?}");
    // 2 MiB + 12 bytes in fragments of at most 256 KiB: 9 equal ones, each above the
    // threshold: ring at 3 ranks.
    assert_eq!(rows[1]["fragments"], 9);
    assert_eq!(rows[1]["selected"], "ring");
    std::fs::remove_file(json).ok();
}

#[test]
fn tuning_file_round_trip_under_mpiexec() {
    let m = need_mpiexec!();
    let rules = tmp("rules.csv");
    let r = rules.to_str().unwrap();
    let o = run_mpi(&m, 2, &[], &["tune-allreduce", "--out", r, "--sizes", "4B,4KiB,64KiB", "--repeats", "1"]);
    assert!(o.status.success(), "{}", text(&o));
    let body = std::fs::read_to_string(&rules).unwrap();
    assert!(body.contains("ranks,min_bytes,max_bytes,algorithm"), "{body}");
    assert!(body.lines().any(|l| l.starts_with("2,0,")), "{body}");
    let o = run_mpi(
        &m,
        2,
        &[],
        &[
            "bench-allreduce",
            "--check",
            "--allreduce-tuning",
            r,
            "--sizes",
            "4B,8KiB",
            "--algos",
            "auto",
            "--iters",
            "2",
        ],
    );
    assert!(o.status.success(), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("rules from"), "{}", text(&o));
    // No rule for 3 ranks: the file, and what is wrong, on one line; no hang.
    let o = run_mpi(&m, 3, &[], &["bench-allreduce", "--allreduce-tuning", r, "--sizes", "4B"]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains(&format!("{r}: no rule for 3 ranks")), "{}", text(&o));
    std::fs::remove_file(rules).ok();
}

/// An output the benchmarks cannot write ends them on every rank before anything is timed,
/// and tune-allreduce replaces only a rules file (an earlier tuning) unless `--force`.
#[test]
fn outputs_are_checked_before_anything_is_timed() {
    let m = need_mpiexec!();
    let (dir, notes) = (tmp("json-dir"), tmp("notes.txt"));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(&notes, "my notes\n").unwrap();
    let (d, n) = (dir.to_str().unwrap(), notes.to_str().unwrap());
    let refusals: [(Vec<&str>, String); 4] = [
        (vec!["bench-allreduce", "--sizes", "4B", "--iters", "2", "--json", d], format!("--json {d} is a directory")),
        (
            vec!["bench-allreduce", "--via-engine", "--sizes", "4B", "--iters", "2", "--json", d],
            format!("--json {d} is a directory"),
        ),
        (vec!["ping-pong", "--sizes", "4B", "--iters", "2", "--json", d], format!("--json {d} is a directory")),
        (
            vec!["tune-allreduce", "--out", n, "--sizes", "4B", "--repeats", "1"],
            format!("--out {n} exists and is not a rules file: choose another --out, or pass --force"),
        ),
    ];
    for (args, want) in &refusals {
        let o = run_mpi(&m, 2, &[], args);
        assert!(!o.status.success(), "{args:?}: {}", text(&o));
        let err = String::from_utf8_lossy(&o.stderr);
        let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("error:")).collect();
        assert!(lines.len() == 1 && lines[0].contains(want.as_str()), "{args:?}: {}", text(&o));
        assert!(
            !String::from_utf8_lossy(&o.stdout).lines().any(|l| !l.starts_with('#')),
            "{args:?}: timed: {}",
            text(&o)
        );
    }
    assert_eq!(std::fs::read_to_string(&notes).unwrap(), "my notes\n", "the refused file is kept");
    // With --force the notes become rules; tuning again replaces rules without it.
    for extra in [&["--force"][..], &[]] {
        let args = [&["tune-allreduce", "--out", n, "--sizes", "4B", "--repeats", "1"][..], extra].concat();
        let o = run_mpi(&m, 2, &[], &args);
        assert!(o.status.success(), "{args:?}: {}", text(&o));
        assert!(std::fs::read_to_string(&notes).unwrap().contains("ranks,min_bytes,max_bytes,algorithm"));
    }
    std::fs::remove_file(notes).ok();
    std::fs::remove_dir(dir).ok();
}

#[test]
fn broken_tuning_file_names_file_and_line() {
    let m = need_mpiexec!();
    let rules = tmp("broken.csv");
    std::fs::write(&rules, "ranks,min_bytes,max_bytes,algorithm\n2,0,4095,rd\n2,4096,inf,fastest\n").unwrap();
    let r = rules.to_str().unwrap();
    let o = run_mpi(&m, 2, &[], &["bench-allreduce", "--allreduce-tuning", r, "--sizes", "4B"]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains(&format!("{r}:3: unknown algorithm 'fastest'")), "{}", text(&o));
    std::fs::remove_file(rules).ok();
}

#[test]
fn stalled_rank_ends_the_job_with_a_report() {
    let m = need_mpiexec!();
    let start = Instant::now();
    // Rank 1 sleeps 20 s on its comm thread before its first collective; the others give up
    // after 1 s, ask every rank where it is, print the report and abort the job.
    let o = run_mpi(
        &m,
        3,
        &[("DCGAN_TEST_DELAY_RANK", "1")],
        &["bench-allreduce", "--stall-timeout", "1s", "--sizes", "4B", "--iters", "2"],
    );
    assert!(start.elapsed() < Duration::from_secs(18), "the job must end before rank 1 wakes");
    assert!(!o.status.success(), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains(": stall: bench-allreduce"), "{}", text(&o));
    assert!(err.contains("ranks that have not arrived at collective #1: 1"), "{}", text(&o));
    assert!(err.contains("rank 1: no answer"), "{}", text(&o));
}

/// The binary alone, without the launcher's variables: one process, one rank.
fn run_alone(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .env_remove("OMPI_COMM_WORLD_SIZE")
        .env_remove("PMI_SIZE")
        .env_remove("PMI_RANK")
        .env_remove("PMIX_RANK")
        .env_remove("MPI_LOCALNRANKS")
        .output()
        .unwrap()
}

/// One rank has no one to exchange with (every algorithm is a copy): bench-allreduce and
/// tune-allreduce refuse it as ping-pong does, with one line, a non-zero exit and nothing
/// written, both without mpiexec and under `mpiexec -n 1`.
#[test]
fn one_rank_is_refused_and_nothing_is_written() {
    let (json, rules) = (tmp("one-rank.json"), tmp("one-rank.csv"));
    let (j, r) = (json.to_str().unwrap(), rules.to_str().unwrap());
    let cases: [(&str, Vec<&str>); 3] = [
        ("bench-allreduce", vec!["bench-allreduce", "--sizes", "4B,1KiB", "--iters", "3", "--json", j]),
        ("bench-allreduce", vec!["bench-allreduce", "--via-engine", "--sizes", "4B", "--iters", "3", "--json", j]),
        ("tune-allreduce", vec!["tune-allreduce", "--out", r, "--sizes", "4B,1KiB", "--repeats", "1"]),
    ];
    let mpi = if cfg!(feature = "mpi") { mpiexec() } else { None };
    for (command, args) in &cases {
        let mut runs = vec![("alone", run_alone(args))];
        if let Some(m) = &mpi {
            runs.push(("mpiexec -n 1", run_mpi(m, 1, &[], args)));
        }
        for (how, o) in runs {
            assert!(!o.status.success(), "{how} {args:?}: {}", text(&o));
            let err = String::from_utf8_lossy(&o.stderr);
            let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("error:")).collect();
            let want = format!(
                "error: {command} needs two or more ranks (one rank measures nothing): run it as mpiexec -n 2 \
                 dcgan-train {command}"
            );
            assert_eq!(lines, [want.as_str()], "{how} {args:?}: {}", text(&o));
            assert!(o.stdout.is_empty(), "{how} {args:?}: no table: {}", text(&o));
            assert!(!json.exists() && !rules.exists(), "{how} {args:?}: nothing written");
        }
    }
}

#[test]
fn bad_flags_are_clap_errors_naming_the_flag() {
    for (args, flag) in [
        (vec!["bench-allreduce", "--algos", "rd,fastest"], "--algos"),
        (vec!["bench-allreduce", "--sizes", "4B,1XB"], "--sizes"),
        (vec!["bench-allreduce", "--sizes", "6B"], "--sizes"),
        (vec!["bench-allreduce", "--allreduce-threshold", "lots"], "--allreduce-threshold"),
        (vec!["bench-allreduce", "--stall-timeout", "soon"], "--stall-timeout"),
        (vec!["tune-allreduce"], "--out"),
    ] {
        let o = Command::new(BIN).args(&args).output().unwrap();
        assert!(!o.status.success(), "{args:?}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(flag), "{args:?}: {err}");
    }
}
