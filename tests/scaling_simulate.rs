//! `simulate-scaling` on a real run's trace: the 1-node replay reproduces the trace's own step
//! lengths, free links give the ideal speedup, and slow links give the cost model's bucket
//! times and a comm-bound step. Plus the error lines for bad input.

use crate::common;

use serde_json::Value;
use std::path::Path;
use std::process::{Command, Output};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_dcgan-train"))
}

fn ok(o: Output) -> Output {
    assert!(o.status.success(), "failed:\n{}", String::from_utf8_lossy(&o.stderr));
    o
}

/// One rank (no mpiexec), 8 steps, every step traced. Its summary records no wait for a
/// core, as if the rank had one to itself: the replay scales the exchange's CPU figures by the
/// share a run had (the test below), which the tests that count the CPU exactly leave at 1.
fn traced_run(dir: &Path) {
    ok(bin()
        .args(["--data", "synthetic:512", "--batch-size", "8", "--max-steps", "8", "--threads", "1", "--no-progress"])
        .arg("--out")
        .arg(dir)
        .arg("--trace")
        .arg(dir.join("trace.json"))
        .args(["--trace-steps", "8"])
        .output()
        .unwrap());
    let path = dir.join("summary.json");
    let mut s: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    s["training_thread_descheduled_ms_per_step"] = 0.0.into();
    std::fs::write(&path, s.to_string()).unwrap();
}

fn simulate(dir: &Path, extra: &[&str]) -> Value {
    simulate_summary(dir, "summary.json", extra)
}

/// simulate-scaling on the summary `name` in `dir`.
fn simulate_summary(dir: &Path, name: &str, extra: &[&str]) -> Value {
    let json = dir.join(format!("sim-{name}-{}.json", extra.join("_").replace(['-', ',', '.', '/'], "")));
    ok(bin()
        .arg("simulate-scaling")
        .arg("--summary")
        .arg(dir.join(name))
        .arg("--json")
        .arg(&json)
        .args(extra)
        .output()
        .unwrap());
    serde_json::from_str::<Value>(&std::fs::read_to_string(json).unwrap()).unwrap()["prediction"].clone()
}

/// Mean length of the traced steps 1..6 of rank 0, computed here from the raw events: first
/// span of step s+1 minus first span of step s (step 0 warms up, step 7 has no end).
fn traced_mean_step_ms(trace: &Path) -> f64 {
    let v: Value = serde_json::from_str(&std::fs::read_to_string(trace).unwrap()).unwrap();
    let mut first = std::collections::BTreeMap::new();
    for e in v["traceEvents"].as_array().unwrap() {
        if e["ph"] == "X" && e["pid"] == 1 && e["tid"] == 10 {
            let s = e["args"]["step"].as_u64().unwrap();
            let ts = e["ts"].as_f64().unwrap();
            let f = first.entry(s).or_insert(ts);
            *f = f64::min(*f, ts);
        }
    }
    assert_eq!(first.len(), 8, "8 traced steps");
    (first[&7] - first[&1]) / 6.0 / 1e3
}

/// Links that cost nothing, on 1, 2, 3 and 64 nodes.
const FREE: [&str; 10] = ["--alpha", "0", "--beta", "0", "--gamma", "0", "--nodes", "1,2,3,64", "--algorithms", "auto"];

/// One traced run replayed under many models, each of which fixes what the replay must give
/// (the run is the expensive part, so the models share it).
#[test]
fn replay_of_a_real_trace() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("run");
    traced_run(&dir);
    let mean = traced_mean_step_ms(&dir.join("trace.json"));
    free_links_run_at_the_traced_compute(&dir, mean);
    the_exchange_cpu_and_its_speed_beside_compute_lengthen_the_step(&dir, mean);
    ranks_in_their_own_order_wait_for_the_slowest(&dir, mean);
    slow_links_cost_their_bytes_on_the_wire(&dir, mean);
    nodes_of_several_ranks_pay_only_for_bytes_that_leave_a_node(&dir);
}

/// Free links, every rank running the same step at once: every node count runs at the traced
/// compute, speedup = N exactly.
fn free_links_run_at_the_traced_compute(dir: &Path, mean: f64) {
    let p = simulate(dir, &[&FREE[..], &["--identical-ranks"]].concat());
    assert_eq!(p["replayed_steps"], serde_json::json!([1, 2, 3, 4, 5, 6]));
    assert!((p["compute_ms_per_step"].as_f64().unwrap() - mean).abs() < 1e-6 * mean, "{p:#}");
    for r in p["rows"].as_array().unwrap() {
        let n = r["nodes"].as_f64().unwrap();
        assert!((r["step_ms"].as_f64().unwrap() - mean).abs() < 1e-6 * mean, "{r}");
        assert!((r["speedup_eq1"].as_f64().unwrap() - n).abs() < 1e-6 * n, "{r}");
        assert_eq!(r["exposed_comm_ms_per_step"], 0.0);
    }
}

/// The exchange's CPU at 1 us per byte moved each way. On free links each collective lasts
/// as long as its CPU and stops compute while it runs, so every step grows by exactly the CPU,
/// lost to compute or waited out. vhd on 2^k nodes moves 2 (p-1)/p of each bucket each way.
/// (The 24-byte metrics are not charged.)
fn the_exchange_cpu_and_its_speed_beside_compute_lengthen_the_step(dir: &Path, mean: f64) {
    let cpu = simulate(
        dir,
        &[
            &FREE[..6],
            &["--nodes", "1,2,4", "--algorithms", "vhd", "--identical-ranks", "--comm-cpu-ns-per-byte", "1000"],
        ]
        .concat(),
    );
    let bucket_bytes: f64 =
        cpu["rows"][0]["buckets"].as_array().unwrap().iter().map(|b| b["bytes"].as_f64().unwrap()).sum();
    assert_eq!(cpu["comm_cpu_ns_per_byte"], 1000.0);
    for r in cpu["rows"].as_array().unwrap() {
        let nodes = r["nodes"].as_f64().unwrap();
        let (lost, exposed) =
            (r["comm_cpu_ms_per_step"].as_f64().unwrap(), r["exposed_comm_ms_per_step"].as_f64().unwrap());
        let want = if nodes == 1.0 { 0.0 } else { 2.0 * (nodes - 1.0) / nodes * bucket_bytes * 1e-3 };
        assert!((lost + exposed - want).abs() < 1e-6 * mean, "{r}");
        assert!(nodes == 1.0 || lost > 0.5 * want, "most of it beside compute: {r}");
        assert!((r["step_ms"].as_f64().unwrap() - mean - want).abs() < 1e-6 * mean, "{r}");
    }

    // Collectives that keep half their wire speed beside compute: on 8 Gbit/s links the
    // exchange mostly hides, so each lasts up to twice as long, and the step is no shorter.
    let fast =
        ["--alpha", "0", "--beta", "1", "--gamma", "0", "--nodes", "2", "--algorithms", "vhd", "--identical-ranks"];
    let full = &simulate(dir, &fast)["rows"][0];
    let half = simulate(dir, &[&fast[..], &["--comm-speed-beside-compute", "0.5"]].concat());
    assert_eq!(half["comm_speed_beside_compute"], 0.5);
    let ratio = half["rows"][0]["comm_ms_per_step"].as_f64().unwrap() / full["comm_ms_per_step"].as_f64().unwrap();
    assert!(ratio > 1.2 && ratio <= 2.0 + 1e-9, "{ratio}: {full} against {}", half["rows"][0]);
    assert!(half["rows"][0]["step_ms"].as_f64().unwrap() >= full["step_ms"].as_f64().unwrap() - 1e-9);
}

/// Free links, each rank taking the traced steps in its own order: now a rank waits whenever
/// another's step ran longer up to a hand-off. Links cost nothing, so every wait is for the
/// slowest rank, each rank's compute averages the traced mean, and the step is that mean plus
/// the waits. Ranks 0..N-1 are the same ranks at every N, so the step can only grow with N;
/// with 64 ranks some rank is always in a longer step.
fn ranks_in_their_own_order_wait_for_the_slowest(dir: &Path, mean: f64) {
    let p = simulate(dir, &FREE);
    let rows = p["rows"].as_array().unwrap();
    let ms = |r: &Value, k: &str| r[k].as_f64().unwrap();
    for w in rows.windows(2) {
        assert!(ms(&w[1], "step_ms") >= ms(&w[0], "step_ms") - 1e-9 * mean, "{:#}", p["rows"]);
    }
    for r in rows {
        let exposed = ms(r, "exposed_comm_ms_per_step");
        assert!((ms(r, "slowest_rank_ms_per_step") - exposed).abs() <= 1e-9 * mean, "{r}");
        assert!((ms(r, "step_ms") - mean - exposed).abs() < 1e-6 * mean, "{r}");
    }
    assert_eq!(ms(&rows[0], "exposed_comm_ms_per_step"), 0.0, "one node waits for nobody");
    assert!(ms(&rows[3], "exposed_comm_ms_per_step") > 0.0, "{:#}", p["rows"]);
}

/// Slow links (1 us per byte), vhd on 4 nodes, no latency or reduction: each bucket takes
/// 2 (p-1)/p = 1.5 times its bytes in microseconds, however it is fragmented; the comm thread
/// is busy longer than the compute, so every step lasts at least the comm time.
fn slow_links_cost_their_bytes_on_the_wire(dir: &Path, mean: f64) {
    let slow =
        ["--alpha", "0", "--beta", "1000", "--gamma", "0", "--nodes", "4", "--algorithms", "vhd", "--identical-ranks"];
    let p = simulate(dir, &slow);
    let r = &p["rows"][0];
    let mut total = 0.0;
    for b in r["buckets"].as_array().unwrap() {
        let want = 1.5 * b["bytes"].as_f64().unwrap() * 1e-3;
        assert!((b["ms"].as_f64().unwrap() - want).abs() < 1e-6 * want, "{b}");
        assert_eq!(b["algorithm"], "vhd");
        total += want;
    }
    let comm = r["comm_ms_per_step"].as_f64().unwrap();
    // The metrics allreduce (24 bytes) comes on top of the buckets.
    assert!((comm - total - 1.5 * 24.0 * 1e-3).abs() < 1e-6 * comm, "{r}");
    assert!(total > 2.0 * mean, "the links should be slow enough to dominate: {total} vs {mean}");
    assert!(r["step_ms"].as_f64().unwrap() >= comm * (1.0 - 1e-9), "{r}");
    assert!(r["hidden_comm_fraction"].as_f64().unwrap() < 0.5, "{r}");
    assert!(r["speedup_eq1"].as_f64().unwrap() < 2.0, "{r}");

    // The same f32 run asked about --wire bf16: every bucket sends half the bytes, so with
    // nothing but bandwidth in the model each takes half as long; the metrics stay exact f32.
    assert_eq!(p["wire"], "f32");
    let half = simulate(dir, &[&slow[..], &["--wire", "bf16"]].concat());
    assert_eq!(half["wire"], "bf16");
    let rh = &half["rows"][0];
    for (b, h) in r["buckets"].as_array().unwrap().iter().zip(rh["buckets"].as_array().unwrap()) {
        let want = b["ms"].as_f64().unwrap() / 2.0;
        assert!((h["ms"].as_f64().unwrap() - want).abs() < 1e-6 * want, "{h} against {b}");
    }
    let comm_half = rh["comm_ms_per_step"].as_f64().unwrap();
    assert!((comm_half - total / 2.0 - 1.5 * 24.0 * 1e-3).abs() < 1e-6 * comm_half, "{rh}");

    // auto on 3 nodes (not a power of two): the large-message algorithm is ring.
    let p = simulate(dir, &["--alpha", "10", "--beta", "8", "--gamma", "0.1", "--nodes", "3", "--algorithms", "auto"]);
    let algos: Vec<&str> =
        p["rows"][0]["buckets"].as_array().unwrap().iter().map(|b| b["algorithm"].as_str().unwrap()).collect();
    assert!(algos.contains(&"ring"), "{algos:?}");
}

/// Nodes of 4 ranks (ranks 0-3 on node 0, 4-7 on node 1). Free links and identical ranks:
/// eq. (1) counts ranks, so 2 nodes give a speedup of 8.
fn nodes_of_several_ranks_pay_only_for_bytes_that_leave_a_node(dir: &Path) {
    let four = ["--ranks-per-node", "4", "--intra-alpha", "0", "--intra-beta", "0", "--nodes", "2"];
    let p = simulate(dir, &[&FREE[..6], &four[..], &["--algorithms", "auto", "--identical-ranks"]].concat());
    assert_eq!(p["ranks_per_node"], 4);
    assert_eq!(p["rows"][0]["ranks"], 8);
    assert!((p["rows"][0]["speedup_eq1"].as_f64().unwrap() - 8.0).abs() < 1e-6, "{:#}", p["rows"]);
    // A slow network (1 us per byte) and free shared memory: only the bytes that leave a node
    // cost. hier (auto's choice above 8 KiB) sends each node's n once each way over a node's
    // link; ring lets one rank per node cross at each of its 14 rounds, n/8 each (1.75 n);
    // vhd sends all four ranks' halves across at once, in its first and its last round (4 n).
    let slow4 = [&four[..], &["--alpha", "0", "--beta", "1000", "--gamma", "0", "--identical-ranks"]].concat();
    let p = simulate(dir, &[&slow4[..], &["--algorithms", "auto,ring,vhd"]].concat());
    let large = |row: &Value, algo: &str, times: f64| {
        let mut seen = 0;
        for b in row["buckets"].as_array().unwrap().iter().filter(|b| b["bytes"].as_u64().unwrap() >= 8192) {
            let want = times * b["bytes"].as_f64().unwrap() * 1e-3;
            assert_eq!(b["algorithm"], algo, "{b}");
            assert!((b["ms"].as_f64().unwrap() - want).abs() < 1e-6 * want, "{algo}: {b}, want {want} ms");
            seen += 1;
        }
        assert!(seen >= 2, "{row}");
    };
    large(&p["rows"][0], "hier", 1.0);
    large(&p["rows"][1], "ring", 1.75);
    large(&p["rows"][2], "vhd", 4.0);
}

#[test]
fn the_speed_beside_compute_is_fitted_back_from_the_comm_time_it_gives() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("run");
    traced_run(&dir);
    // Fast links, so that the exchange runs beside compute and its speed there matters.
    let links = ["--alpha", "5", "--beta", "0.5", "--gamma", "0", "--nodes", "2", "--algorithms", "auto"];
    let at = |speed: &str| simulate(&dir, &[&links[..], &["--comm-speed-beside-compute", speed]].concat());
    let (full, half) = (at("1"), at("0.5"));
    let comm = |p: &Value| p["rows"][0]["comm_ms_per_step"].as_f64().unwrap();
    assert!(comm(&half) > 1.05 * comm(&full), "{} against {}", comm(&half), comm(&full));
    // A pair of 2-rank runs of this trace: without the exchange, and with it, measuring the
    // comm time the replay gives at half speed (and no compute lost, so C is 0).
    let base = common::read_summary(&dir);
    let pair = |no_exchange: bool| {
        let mut s = base.clone();
        (s.ranks, s.host_count) = (2, 2);
        s.options.parallel.no_exchange = no_exchange;
        s.options.parallel.no_overlap = false;
        if !no_exchange {
            s.comm.comm_ms_per_step = comm(&half);
            s.comm.hidden_comm_fraction = 0.9;
            for (b, row) in s.comm.buckets.iter_mut().zip(half["rows"][0]["buckets"].as_array().unwrap()) {
                b.algorithm = row["algorithm"].as_str().unwrap().to_string();
            }
        }
        let path = dir.join(if no_exchange { "without.json" } else { "with.json" });
        std::fs::write(&path, serde_json::to_string(&s).unwrap()).unwrap();
        path.display().to_string()
    };
    let (with, without) = (pair(false), pair(true));
    let fitted = simulate(&dir, &[&links[..], &["--comm-cpu-from", &format!("{with},{without}")]].concat());
    let speed = fitted["comm_speed_beside_compute"].as_f64().unwrap();
    assert!((speed - 0.5).abs() < 1e-3, "fitted {speed}, want 0.5: {:#}", fitted["comm_cpu_from"]);
    assert_eq!(fitted["comm_cpu_ns_per_byte"], 0.0);
    assert!((comm(&fitted) - comm(&half)).abs() < 1e-3 * comm(&half), "{} against {}", comm(&fitted), comm(&half));

    // The same pair on ranks with 80% of a core (the run without the exchange waited a quarter
    // as long for a core as it ran): half of wire speed there is 0.625 of it on a core of
    // one's own, and replaying that run with the fitted figure gives back the measured comm.
    let mut s: Value = serde_json::from_str(&std::fs::read_to_string(&without).unwrap()).unwrap();
    s["training_thread_cpu_ms_per_step"] = 100.0.into();
    s["training_thread_descheduled_ms_per_step"] = 25.0.into();
    std::fs::write(dir.join("without-shared.json"), s.to_string()).unwrap();
    let shared = dir.join("without-shared.json").display().to_string();
    let fitted = simulate_summary(
        &dir,
        "without-shared.json",
        &[&links[..], &["--comm-cpu-from", &format!("{with},{shared}")]].concat(),
    );
    assert_eq!(fitted["core_share"], 0.8);
    assert_eq!(fitted["comm_cpu_from"]["core_share"], 0.8);
    let speed = fitted["comm_speed_beside_compute"].as_f64().unwrap();
    assert!((speed - 0.625).abs() < 1e-3, "fitted {speed}, want 0.5 / 0.8: {:#}", fitted["comm_cpu_from"]);
    assert!((comm(&fitted) - comm(&half)).abs() < 1e-3 * comm(&half), "{} against {}", comm(&fitted), comm(&half));

    // A pair trained with --allreduce tree is fitted through the tree (on 2 ranks it takes
    // twice vhd's time, so fitting through auto would find another speed).
    let tree_links = [&links[..8], &["--algorithms", "tree"]].concat();
    let tree_half = simulate(&dir, &[&tree_links[..], &["--comm-speed-beside-compute", "0.5"]].concat());
    assert!(comm(&tree_half) > 1.1 * comm(&half), "{} against {}", comm(&tree_half), comm(&half));
    let mut s: Value = serde_json::from_str(&std::fs::read_to_string(&with).unwrap()).unwrap();
    s["options"]["comm"]["allreduce"] = "tree".into();
    s["comm"]["comm_ms_per_step"] = comm(&tree_half).into();
    for b in s["comm"]["buckets"].as_array_mut().unwrap() {
        b["algorithm"] = "tree".into();
    }
    std::fs::write(dir.join("with-tree.json"), s.to_string()).unwrap();
    let with_tree = dir.join("with-tree.json").display().to_string();
    let fitted = simulate(&dir, &[&tree_links[..], &["--comm-cpu-from", &format!("{with_tree},{without}")]].concat());
    let speed = fitted["comm_speed_beside_compute"].as_f64().unwrap();
    assert!((speed - 0.5).abs() < 1e-3, "fitted {speed} through the tree, want 0.5: {:#}", fitted["comm_cpu_from"]);

    // With --identical-ranks the fit replays as the prediction does: every rank in step.
    let same = [&tree_links[..], &["--identical-ranks"]].concat();
    let tree_same = simulate(&dir, &[&same[..], &["--comm-speed-beside-compute", "0.5"]].concat());
    s["comm"]["comm_ms_per_step"] = comm(&tree_same).into();
    std::fs::write(dir.join("with-tree-same.json"), s.to_string()).unwrap();
    let with_same = dir.join("with-tree-same.json").display().to_string();
    let fitted = simulate(&dir, &[&same[..], &["--comm-cpu-from", &format!("{with_same},{without}")]].concat());
    let speed = fitted["comm_speed_beside_compute"].as_f64().unwrap();
    assert!((speed - 0.5).abs() < 1e-3, "fitted {speed} in step, want 0.5: {:#}", fitted["comm_cpu_from"]);
}

#[test]
fn ranks_on_half_a_core_pay_the_exchanges_cpu_twice_and_keep_half_its_speed() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("run");
    traced_run(&dir);
    let base = common::read_summary(&dir);
    // The traced run as 2 ranks with --no-exchange whose training thread ran `cpu` ms per
    // step and waited `waited` ms for a core; or as a run with the exchange.
    let variant = |name: &str, no_exchange: bool, cpu: f64, waited: f64| {
        let mut s = base.clone();
        s.ranks = 2;
        s.options.parallel.no_exchange = no_exchange;
        (s.training_thread_cpu_ms_per_step, s.training_thread_descheduled_ms_per_step) = (Some(cpu), Some(waited));
        std::fs::write(dir.join(name), serde_json::to_string(&s).unwrap()).unwrap();
    };
    variant("half.json", true, 150.0, 150.0);
    variant("whole.json", true, 150.0, 0.0);
    variant("exchange.json", false, 150.0, 150.0);
    let links = ["--alpha", "5", "--beta", "0.5", "--gamma", "0", "--nodes", "2,4", "--algorithms", "vhd"];
    let with = |name: &str, ns: &str, speed: &str| {
        let p = simulate_summary(
            &dir,
            name,
            &[&links[..], &["--comm-cpu-ns-per-byte", ns, "--comm-speed-beside-compute", speed]].concat(),
        );
        // Given for a rank with a core of its own, and reported so.
        assert_eq!(p["comm_cpu_ns_per_byte"].as_f64().unwrap(), ns.parse::<f64>().unwrap());
        p
    };
    // Half a core: the same as a whole one at twice the compute per byte and half the speed,
    // row for row. Each side alone, as at these sizes a collective lasts as long as the
    // longer of its wire and its CPU, so one can hide the other.
    let same_rows = |h: &Value, w: &Value| {
        for (h, w) in h["rows"].as_array().unwrap().iter().zip(w["rows"].as_array().unwrap()) {
            for key in ["step_ms", "comm_ms_per_step", "comm_cpu_ms_per_step", "exposed_comm_ms_per_step"] {
                let (a, b) = (h[key].as_f64().unwrap(), w[key].as_f64().unwrap());
                assert!((a - b).abs() <= 1e-9 * b.max(1.0), "{key}: {a} against {b}");
            }
        }
    };
    let half = with("half.json", "300", "1");
    assert_eq!(half["core_share"], 0.5);
    assert_eq!(half["core_share_from"], "measured");
    same_rows(&half, &with("whole.json", "600", "0.5"));
    let cpu = |p: &Value| p["rows"][1]["comm_cpu_ms_per_step"].as_f64().unwrap();
    // Not the same as a whole core at the same figures (how much more depends on how the
    // traced run's timing lays the collectives beside compute: only that it is more).
    assert!(cpu(&half) > 1.01 * cpu(&with("whole.json", "300", "1")), "{half}");
    let half = with("half.json", "0", "0.8");
    same_rows(&half, &with("whole.json", "0", "0.4"));
    let comm = |p: &Value| p["rows"][1]["comm_ms_per_step"].as_f64().unwrap();
    assert!(comm(&half) > 1.01 * comm(&with("whole.json", "0", "0.8")), "{half}");
    // The wire-only replay has nothing to scale: half a core or a whole one, the same rows.
    let wire_only = |name: &str| simulate_summary(&dir, name, &links);
    let (half, whole) = (wire_only("half.json"), wire_only("whole.json"));
    same_rows(&half, &whole);
    assert_eq!((&half["core_share"], &half["core_share_from"]), (&1.0.into(), &"not_used".into()));
    // A run with the exchange waited for its own comm thread too: its share is not read.
    let exchange = with("exchange.json", "300", "0.8");
    assert_eq!(exchange["core_share"], 1.0);
    assert_eq!(exchange["core_share_from"], "run_had_exchange");
}

/// Runs simulate-scaling with `args` and asserts it fails with one line containing `expected`.
fn fails_with(args: &[&str], expected: &str) {
    let o = bin().arg("simulate-scaling").args(args).output().unwrap();
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && e.contains(expected), "{e}");
    assert_eq!(e.trim().lines().count(), 1, "{e}");
}

#[test]
fn bad_input_gets_one_line_with_the_fix() {
    let tmp = tempfile::tempdir().unwrap();
    let nope = tmp.path().join("nope.json");
    fails_with(&["--summary", nope.to_str().unwrap()], "cannot read --summary");

    // A summary of a run without --trace: the replay needs one.
    let s = serde_json::json!({
        "batch_size_per_rank": 8, "ranks": 1, "ms_per_step": 10.0,
        "comm": {"buckets": [{"bucket": "G[1]", "bytes": 400, "algorithm": "none"}]},
        "options": {"comm": {"fragment_bytes": 1048576, "allreduce_threshold": 8192}, "parallel": {"trace": null}}
    });
    let path = tmp.path().join("summary.json");
    std::fs::write(&path, s.to_string()).unwrap();
    let summary = path.to_str().unwrap();
    fails_with(&["--alpha", "1", "--beta", "1", "--gamma", "0", "--summary", summary], "--trace FILE");
    fails_with(&["--beta=-3", "--summary", summary, "--trace", "x"], "--beta -3 is not a time");
    let per_node = ["--trace", "x", "--ranks-per-node", "4"];
    fails_with(&[&["--intra-beta=-3", "--summary", summary][..], &per_node].concat(), "--intra-beta -3 is not a time");
    fails_with(
        &[&["--intra-links", "nope.json", "--summary", summary][..], &per_node].concat(),
        "cannot read --intra-links nope.json",
    );
    fails_with(&["--summary", summary, "--algorithms", "fast"], "unknown or unmodelled algorithm 'fast'");
    fails_with(&["--summary", summary, "--trace", "x", "--intra-alpha", "1"], "add --ranks-per-node L");
    fails_with(&["--summary", summary, "--trace", "x", "--comm-cpu-from", summary], "takes two summary.json files");
    fails_with(
        &["--summary", summary, "--trace", "x", "--comm-cpu-from", &format!("{summary},{summary}")],
        "the first summary must come from a run of 2 or more ranks with the exchange",
    );
    fails_with(&["--summary", summary, "--trace", "x", "--comm-cpu-ns-per-byte=-1"], "is not a time");
    fails_with(
        &["--summary", summary, "--trace", "x", "--comm-speed-beside-compute", "1.5"],
        "not a fraction of wire speed",
    );
    fails_with(
        &["--summary", summary, "--trace", "x", "--nodes", "2,2048", "--ranks-per-node", "1024"],
        "--nodes 2048 x --ranks-per-node 1024 is 2097152 ranks",
    );
}
