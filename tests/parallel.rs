//! Data-parallel training under mpiexec: equivalence with one big batch, identical replicas
//! for every allreduce, overlap not changing the numbers, waits and the trace (bad input is
//! in `parallel_bad_input.rs`).

use crate::common;

use crate::common::{final_weights, mpirun};
use std::collections::BTreeMap;
use std::path::Path;

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).to_string()
}

fn ok(o: std::process::Output) -> std::process::Output {
    assert!(o.status.success(), "the run failed:\n{}", stderr(&o));
    o
}

/// Largest over tensors of max|a - b| / max|a| (0 when a is all zeros and b equals it).
fn worst_relative_difference(a: &BTreeMap<String, Vec<f32>>, b: &BTreeMap<String, Vec<f32>>) -> (f64, String) {
    worst_difference_above(a, b, 0.0)
}

/// Largest over tensors of max|a - b| / max(max|a|, floor).
fn worst_difference_above(a: &BTreeMap<String, Vec<f32>>, b: &BTreeMap<String, Vec<f32>>, floor: f64) -> (f64, String) {
    assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>());
    let mut worst = (0.0, String::new());
    for (k, x) in a {
        let y = &b[k];
        let scale = x.iter().fold(0.0f64, |m, v| m.max(v.abs() as f64));
        let diff = x.iter().zip(y).fold(0.0f64, |m, (p, q)| m.max((*p as f64 - *q as f64).abs()));
        let scale = scale.max(floor);
        let rel = if scale > 0.0 { diff / scale } else { diff };
        if rel > worst.0 {
            worst = (rel, k.clone());
        }
    }
    worst
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// 2 ranks x 32 with --sync-bn train exactly what 1 rank x 64 trains: the same examples, the
/// same noise, batch statistics over the same 64 images, the same averaged gradient.
///
/// Why `--adam-eps 1 --lr 2e-5`: the two runs sum in different orders, so their gradients
/// differ by f32 rounding (~1e-7). With PyTorch's eps = 1e-8, Adam's first step moves every
/// weight by about ±lr whatever the gradient's size, so a gradient element that is ~0 gets
/// opposite signs in the two runs and its weights end 2*lr apart; after that, ReLU and
/// LeakyReLU kinks crossed by the perturbed activations turn 1e-7 into 1e-3 within a few
/// steps (measured: 1e-2 after 5 steps with the default optimizer). A large eps makes the
/// update proportional to the gradient and a small lr keeps the trajectories close enough
/// that no kink is crossed, so what is compared is the data-parallel arithmetic itself.
/// The same comparison without --sync-bn must fail by far: the check is sensitive.
#[test]
fn two_ranks_with_sync_bn_match_one_rank_over_the_same_examples() {
    let tmp = tempfile::tempdir().unwrap();
    let common = ["--data", "synthetic:256", "--max-steps", "5", "--adam-eps", "1", "--lr", "2e-5", "--no-progress"];
    let one = tmp.path().join("one");
    let mut args = common.to_vec();
    args.extend(["--batch-size", "64", "--out", path(&one)]);
    ok(mpirun(1, &args, 300));
    let two = tmp.path().join("two");
    let mut args = common.to_vec();
    args.extend(["--global-batch-size", "64", "--sync-bn", "--out", path(&two)]);
    ok(mpirun(2, &args, 300));
    let (a, b) = (final_weights(&one), final_weights(&two));
    let (rel, name) = worst_relative_difference(&a, &b);
    assert!(rel <= 1e-5, "2 ranks x 32 differ from 1 rank x 64 by {rel:e} in {name}");

    let unsynced = tmp.path().join("unsynced");
    let mut args = common.to_vec();
    args.extend(["--global-batch-size", "64", "--out", path(&unsynced)]);
    ok(mpirun(2, &args, 300));
    let (rel, name) = worst_relative_difference(&a, &final_weights(&unsynced));
    assert!(rel > 1e-3, "per-rank batch norm should train differently (only {rel:e} in {name})");
}

/// WGAN-GP: 3 ranks x 16 train what 1 rank x 48 trains. The critic has no batch norm and
/// its penalty is a mean over samples, so each rank's gradient of its share, averaged, is the
/// whole batch's; every sample's z and interpolation weight come from its global index.
/// G keeps its batch norm, hence --sync-bn; the optimizer settings are the ones above, for the
/// reason given there. G's batch-norm biases hardly move under this loss (their gradients
/// nearly cancel over the batch: ~3e-8 after two updates, where the weights are ~0.1), so each
/// tensor's difference is taken relative to its largest value or to the learning rate,
/// whichever is larger: a tensor below one learning rate has moved by rounding-sized steps,
/// whose own rounding is not the data-parallel arithmetic under test.
#[test]
fn wgan_gp_on_three_ranks_matches_one_rank_over_the_same_examples() {
    wgan_gp_three_ranks_against_one("none", "D main.4.weight", 0);
}

/// The same with layer norm in the critic, which normalizes each sample alone and so keeps
/// the ranks' shares apart as the critic without a norm does. The figures built from D's
/// input gradient (the penalty, the critic's loss, the gradient norm) jump where a LeakyReLU
/// input crosses 0, and the rounding of the averaged updates can move one across. Written:
/// at 3 ranks, step 2's mean gradient norm differed by 2e-5 while steps 1, 3 and 4 agreed to
/// 4e-7, and at 2 and 4 ranks every step agreed to 1e-7: a jump at one step, not a drift.
/// So those figures may miss at one step of the four; an error in the data-parallel penalty
/// would miss at every step, and in the final weights.
#[test]
fn wgan_gp_with_a_layer_norm_critic_on_three_ranks_matches_one_rank() {
    wgan_gp_three_ranks_against_one("layer", "D main.3.bias", 1);
}

/// 3 ranks x 16 against 1 rank x 48 with `--critic-norm <norm>`; `key` is a tensor only that
/// critic has; at most `jumps` steps may miss in the figures built from D's input gradient.
fn wgan_gp_three_ranks_against_one(norm: &str, key: &str, jumps: usize) {
    let tmp = tempfile::tempdir().unwrap();
    let common = [
        "--critic-norm",
        norm,
        "--loss",
        "wgan-gp",
        "--n-critic",
        "2",
        "--data",
        "synthetic:192",
        "--max-steps",
        "4",
        "--adam-eps",
        "1",
        "--lr",
        "2e-5",
        "--no-progress",
    ];
    let one = tmp.path().join("one");
    let mut args = common.to_vec();
    args.extend(["--batch-size", "48", "--out", path(&one)]);
    ok(mpirun(1, &args, 300));
    let three = tmp.path().join("three");
    let mut args = common.to_vec();
    args.extend(["--global-batch-size", "48", "--sync-bn", "--out", path(&three)]);
    ok(mpirun(3, &args, 300));
    let (a, b) = (final_weights(&one), final_weights(&three));
    assert!(a.keys().any(|k| k == key), "the critic has no {key}: {:?}", a.keys());
    let (rel, name) = worst_difference_above(&a, &b, 2e-5);
    assert!(rel <= 1e-5, "3 ranks x 16 differ from 1 rank x 48 by {rel:e} in {name}");
    // The figures of every step, which the small learning rate leaves sensitive to what each
    // rank drew: the penalty and the gradient norm at the interpolates move with each
    // sample's e, the Wasserstein estimate with each sample's z.
    let (x, y) = (common::step_records(&one), common::step_records(&three));
    assert_eq!(x.len(), 4);
    let mut missed = 0;
    for (p, q) in x.iter().zip(&y) {
        let (u, v) = (p.metrics.losses.to_raw(), q.metrics.losses.to_raw());
        let close = |i: usize| (u[i] - v[i]).abs() <= 1e-5 * u[i].abs().max(1e-2);
        // to_raw: loss_c, loss_g, wasserstein, gp, grad_norm.
        assert!(close(1) && close(2), "step {}: {p:?} vs {q:?}", p.step);
        if !(close(0) && close(3) && close(4)) {
            missed += 1;
            assert!(missed <= jumps, "step {} (and {} before): {p:?} vs {q:?}", p.step, missed - 1);
        }
    }
}

/// Four steps of a small run, the replicas compared after the second and the fourth.
const CHECKED_RUN: [&str; 8] =
    ["--data", "synthetic:256", "--batch-size", "4", "--max-steps", "4", "--check-consistency", "2"];

/// After 2 and 4 steps every rank holds the same weights, for every algorithm at 3 ranks and,
/// at 4, for those with a power-of-two path, auto and the two-level one (the check compares
/// hashes of every tensor with rank 0's and fails naming the first that differs). With the
/// exchange switched off the same check must fail.
#[test]
fn replicas_stay_identical_for_every_allreduce() {
    let tmp = tempfile::tempdir().unwrap();
    // --wire bf16 rounds what travels; the replicas must still hold the same bits (3 ranks:
    // the folded rank counts of rd and vhd; 4: the power-of-two paths). MPI_Allreduce has no
    // bf16 form.
    let cases = ["auto", "tree", "rd", "vhd", "ring", "hier", "mpi"]
        .into_iter()
        .flat_map(|algo| ["f32", "bf16"].map(|wire| (algo, wire)))
        .filter(|&(algo, wire)| !(algo == "mpi" && wire == "bf16"));
    // At 4 ranks, the algorithms with a power-of-two path (auto's large-message choice
    // among them), and the two-level one.
    let at_four = cases.clone().filter(|(algo, _)| ["auto", "rd", "vhd", "hier"].contains(algo));
    for (ranks, (algo, wire)) in cases.map(|c| (3, c)).chain(at_four.map(|c| (4, c))) {
        let out = tmp.path().join(format!("{ranks}-{algo}-{wire}"));
        let exchange = ["--allreduce", algo, "--fragment-bytes", "64KiB", "--wire", wire];
        let args = [&CHECKED_RUN[..], &exchange, &["--no-progress", "--out", path(&out)]].concat();
        let o = mpirun(ranks, &args, 300);
        assert!(o.status.success(), "{ranks} ranks, --allreduce {algo} --wire {wire}:\n{}", stderr(&o));
    }
    let out = tmp.path().join("drift");
    let args = [&CHECKED_RUN[..], &["--no-exchange", "--no-progress", "--out", path(&out)]].concat();
    let o = mpirun(3, &args, 300);
    assert!(!o.status.success(), "ranks training on their own data must drift apart");
    let err = stderr(&o);
    assert!(
        err.contains("--check-consistency") && err.contains("holds other parameters than rank 0, first in"),
        "{err}"
    );
    assert!(
        err.contains("as expected with --no-exchange") && !err.contains("nondeterministic hardware"),
        "the drift is named as --no-exchange's, not blamed on the hardware: {err}"
    );
}

/// Two 2-rank runs of `steps` steps on the same data, without and with `flag`; their run
/// directories, in that order.
fn two_ranks_without_and_with(tmp: &Path, flag: &str, steps: &str) -> [std::path::PathBuf; 2] {
    [None, Some(flag)].map(|flag| {
        let out = tmp.join(flag.unwrap_or("plain").trim_start_matches('-'));
        let mut args = vec![
            "--data",
            "synthetic:256",
            "--batch-size",
            "8",
            "--max-steps",
            steps,
            "--no-progress",
            "--out",
            path(&out),
        ];
        args.extend(flag);
        ok(mpirun(2, &args, 300));
        out
    })
}

/// Sending buckets during backward or after it changes when the exchange happens, not what
/// is computed.
#[test]
fn overlap_and_no_overlap_give_bitwise_identical_weights() {
    let tmp = tempfile::tempdir().unwrap();
    let [overlap, no_overlap] = two_ranks_without_and_with(tmp.path(), "--no-overlap", "6");
    assert_eq!(final_weights(&overlap), final_weights(&no_overlap));
}

/// `--no-exchange` skips the gradients only: the logged losses are still the ranks' average,
/// as in a run that exchanges. Step 1's D loss, D(x) and D(G(z)) come before any update, from
/// the same weights, data and noise, so they must match the exchanging run's bit for bit
/// (rank 0's own values would not: the ranks see different images); G's loss comes after D's
/// update, which only the exchanging run averaged, so it must differ.
#[test]
fn no_exchange_still_averages_the_logged_losses() {
    let tmp = tempfile::tempdir().unwrap();
    let runs = two_ranks_without_and_with(tmp.path(), "--no-exchange", "1");
    let first_steps = runs.map(|r| common::step_records(&r).remove(0));
    let (exchange, alone) = (&first_steps[0].metrics.losses, &first_steps[1].metrics.losses);
    // [loss_d, loss_g, d_x, d_g_z, d_g_z2]
    let (x, y) = (exchange.to_raw(), alone.to_raw());
    for (key, i) in [("loss_d", 0), ("d_x", 2), ("d_g_z", 3)] {
        assert_eq!(x[i], y[i], "{key}: {exchange:?} against {alone:?}");
    }
    assert_ne!(x[1], y[1], "the D update must differ: {exchange:?} against {alone:?}");
}

/// A rank that starts every step late is waited for, and rank 0 counts that as waiting, not
/// as computing: with the exchange the wait falls on a gradient bucket (D's, which a step needs
/// at once), with `--no-exchange` on the metrics at the step's end. Both must show in the
/// summary (waits, and compute = step less waits) and in each step's `wait_ms`. Blocked, the
/// training thread uses no CPU, so its CPU clock stays under the step less the wait too.
///
/// The other tests of this file run beside this one on as few as 2 cores, so one rank's
/// compute can run tens of ms longer than the other's in any step: the lateness is large
/// against that, and the wait is judged by the median step, not by a mean a slow first step
/// can drag down (CI once saw a 28 ms mean with a 60 ms lateness).
#[test]
fn a_late_rank_is_waited_for_and_not_counted_as_compute() {
    const LATE_MS: f64 = 150.0;
    let tmp = tempfile::tempdir().unwrap();
    for flag in [None, Some("--no-exchange")] {
        let out = tmp.path().join(flag.unwrap_or("exchange").trim_start_matches('-'));
        let mut cmd = common::mpiexec();
        cmd.args(["-x", "DCGAN_TEST_SLOW_RANK", "-n", "2"])
            .arg(env!("CARGO_BIN_EXE_dcgan-train"))
            .args(["--data", "synthetic:256", "--batch-size", "8", "--max-steps", "8", "--no-progress", "--out"])
            .arg(&out)
            .args(flag)
            .env("DCGAN_TEST_SLOW_RANK", format!("1:{LATE_MS}"));
        let o = ok(common::run_limited(cmd, 300));
        assert!(stderr(&o).contains("without its waits on other ranks; mean waits per step"), "{}", stderr(&o));
        let s = common::read_summary(&out);
        let (bucket_wait, metrics_wait) = (s.comm.exposed_comm_ms_per_step, s.comm.metrics_wait_ms_per_step);
        let steps = common::timed_step_records(&out);
        // The summary's waits are the steps' waits (the exchanging run may add the last G
        // update's wait, which falls after the last step).
        let step_waits: f64 = steps.iter().map(|r| r.wait_ms).sum();
        let summary_waits = (bucket_wait + metrics_wait) * s.steps_this_run as f64;
        assert!(summary_waits >= step_waits - 0.01, "{flag:?}: summary {summary_waits} ms, steps {step_waits} ms");
        if flag.is_some() {
            assert_eq!(bucket_wait, 0.0, "no buckets travel: {s:#?}");
            assert!((summary_waits - step_waits).abs() < 0.01, "summary {summary_waits} ms, steps {step_waits} ms");
        } else {
            assert!(bucket_wait > metrics_wait, "buckets {bucket_wait} ms, metrics {metrics_wait} ms");
        }
        assert!(s.compute_ms_per_step < s.ms_per_step - 0.5 * LATE_MS, "{flag:?}: {s:#?}");
        let cpu_ms = s.training_thread_cpu_ms_per_step.unwrap();
        assert!(cpu_ms < s.ms_per_step - 0.5 * LATE_MS, "{flag:?}: {s:#?}");
        let mut waits: Vec<f64> = steps.iter().map(|r| r.wait_ms).collect();
        for r in &steps {
            let (w, ms) = (r.wait_ms, r.ms);
            assert!((0.0..=ms).contains(&w), "{r:?}");
            // Clocks read microseconds apart: allow a little over the step's wall time.
            assert!(r.cpu_ms > 0.0 && r.cpu_ms <= ms + 0.5, "{r:?}");
            if let Some(queued) = r.descheduled_ms {
                assert!((0.0..=ms + 0.5).contains(&queued), "{r:?}");
            }
        }
        waits.sort_by(f64::total_cmp);
        assert!(waits[waits.len() / 2] > 0.5 * LATE_MS, "{flag:?}: {waits:?}");
    }
}

/// The trace is valid JSON with, for every rank and every step recorded, one allreduce per
/// bucket; the buckets are those the summary lists.
#[test]
fn trace_has_one_allreduce_per_bucket_per_step_per_rank() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let trace = tmp.path().join("trace.json");
    let args = [
        "--data",
        "synthetic:256",
        "--batch-size",
        "8",
        "--max-steps",
        "4",
        "--trace",
        path(&trace),
        "--trace-steps",
        "3",
        "--no-progress",
        "--out",
        path(&out),
    ];
    ok(mpirun(2, &args, 300));
    let t: serde_json::Value = serde_json::from_slice(&std::fs::read(&trace).unwrap()).expect("valid JSON");
    let summary = common::read_summary(&out);
    let comm = &summary.comm;
    let buckets: Vec<String> = comm.buckets.iter().map(|b| b.bucket.clone()).collect();
    assert!(buckets.len() >= 2);
    // Each bucket's share of the comm thread's time and of the waits: every bucket was
    // averaged (so each has time of its own), and the shares add up to the totals.
    let busy: Vec<f64> = comm.buckets.iter().map(|b| b.comm_ms_per_step).collect();
    let exposed: Vec<f64> = comm.buckets.iter().map(|b| b.exposed_ms_per_step).collect();
    for (total, shares, whole) in [
        ("comm_ms_per_step", &busy, comm.comm_ms_per_step),
        ("exposed_comm_ms_per_step", &exposed, comm.exposed_comm_ms_per_step),
    ] {
        assert!((shares.iter().sum::<f64>() - whole).abs() <= 1e-9 * whole.max(1.0), "{total}: {comm:#?}");
    }
    assert!(busy.iter().all(|&s| s > 0.0), "{comm:#?}");
    // The comm thread's CPU: some (it copied and summed), and never more than its wall time.
    let cpu = comm.comm_thread_cpu_ms_per_step;
    assert!(cpu > 0.0 && cpu <= comm.comm_ms_per_step, "{comm:#?}");
    let mut count: BTreeMap<(u64, u64, String), usize> = BTreeMap::new();
    let mut pids = std::collections::BTreeSet::new();
    for e in t["traceEvents"].as_array().unwrap() {
        if e["ph"] == "X" {
            pids.insert(e["pid"].as_u64().unwrap());
        }
        if e["ph"] == "X" && e["cat"] == "allreduce" {
            let key = (
                e["pid"].as_u64().unwrap(),
                e["args"]["step"].as_u64().unwrap(),
                e["name"].as_str().unwrap().to_string(),
            );
            *count.entry(key).or_default() += 1;
            assert!(e["args"]["bytes"].as_u64().unwrap() > 0);
            assert!(e["args"]["algorithm"].is_string());
        }
    }
    assert_eq!(pids.len(), 2, "both ranks are in the trace");
    for pid in &pids {
        for step in 0..3u64 {
            for b in &buckets {
                assert_eq!(count.get(&(*pid, step, b.clone())), Some(&1), "rank pid {pid}, step {step}, bucket {b}");
            }
        }
    }
    assert!(count.keys().all(|(_, step, _)| *step < 3), "only --trace-steps steps are recorded");

    // One hand-off arrow per allreduce: from inside the bucket's staging span to inside its
    // allreduce span, each end on the track of that span.
    let events = t["traceEvents"].as_array().unwrap();
    let encloses = |cat: &str, e: &serde_json::Value| {
        let ts = e["ts"].as_f64().unwrap();
        events.iter().any(|x| {
            x["ph"] == "X"
                && x["cat"] == cat
                && x["pid"] == e["pid"]
                && x["tid"] == e["tid"]
                && x["name"] == e["name"]
                && x["ts"].as_f64().unwrap() <= ts
                && ts <= x["ts"].as_f64().unwrap() + x["dur"].as_f64().unwrap()
        })
    };
    let mut ends: BTreeMap<u64, (usize, usize)> = BTreeMap::new();
    for e in events.iter().filter(|e| e["ph"] == "s" || e["ph"] == "f") {
        let end = ends.entry(e["id"].as_u64().unwrap()).or_default();
        if e["ph"] == "s" {
            end.0 += 1;
            assert!(encloses("device-to-host", e), "an arrow starts outside its bucket's staging: {e}");
        } else {
            end.1 += 1;
            assert!(encloses("allreduce", e), "an arrow ends outside its bucket's allreduce: {e}");
        }
    }
    assert_eq!(ends.len(), count.len(), "one arrow per allreduce");
    assert!(ends.values().all(|&n| n == (1, 1)), "{ends:?}");
}

/// bench-step under mpiexec: each rank benchmarks alone but as training would place it, on
/// its share of the host's cores, and says which local rank it is.
#[test]
fn bench_step_under_mpiexec_takes_its_share_of_the_cores() {
    let o = ok(mpirun(2, &["bench-step", "--steps", "1", "--warmup", "0", "--batch-size", "4", "--json"], 120));
    let cores = std::thread::available_parallelism().unwrap().get();
    let lines: Vec<serde_json::Value> =
        String::from_utf8_lossy(&o.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let mut ranks: Vec<u64> = lines.iter().map(|l| l["local_rank"].as_u64().unwrap()).collect();
    ranks.sort();
    assert_eq!(ranks, [0, 1], "{lines:?}");
    for l in &lines {
        assert_eq!(l["local_ranks"], 2, "{l}");
        assert_eq!(l["threads"].as_u64().unwrap() as usize, (cores / 2).max(1), "{l}");
    }
}
