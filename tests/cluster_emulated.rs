//! The emulated cluster (scripts/cluster-emulate.sh): 3 hosts in network namespaces, MPI over
//! TCP between them on links shaped to 1 Gbit/s, 5 training steps; the weights must equal, bit
//! for bit, those of the same job run on one host (plain mpiexec, shared memory). Skipped, with
//! the reason printed, where network namespaces cannot be created (not root, no iproute2, a
//! container that forbids them), unless DCGAN_REQUIRE_CLUSTER=1 (set by scripts/test.sh where
//! it could make a namespace), which turns the skip into a failure.

use crate::common::{final_weights, mpirun, run_limited};
use dcgan_train::record::Summary;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/cluster-emulate.sh")
}

/// Why namespaces cannot be used here, or None; found out once per test process, since the
/// tests run in parallel threads and would otherwise race on the probe namespace's name.
fn cannot_emulate() -> Option<String> {
    static ANSWER: OnceLock<Option<String>> = OnceLock::new();
    ANSWER.get_or_init(probe_namespaces).clone()
}

fn probe_namespaces() -> Option<String> {
    let id = Command::new("id").arg("-u").output().ok()?;
    if String::from_utf8_lossy(&id.stdout).trim() != "0" {
        return Some("not root".into());
    }
    for tool in ["ip", "tc", "unshare", "mpiexec"] {
        let found = Command::new("sh").args(["-c", &format!("command -v {tool}")]).output();
        if !found.is_ok_and(|o| o.status.success()) {
            return Some(format!("{tool} not found"));
        }
    }
    let probe = format!("dcgprobe{}", std::process::id());
    let added = Command::new("ip").args(["netns", "add", &probe]).output();
    match added {
        Ok(o) if o.status.success() => {
            let _ = Command::new("ip").args(["netns", "del", &probe]).output();
            None
        }
        Ok(o) => Some(format!("ip netns add failed: {}", String::from_utf8_lossy(&o.stderr).trim())),
        Err(e) => Some(format!("ip netns add failed: {e}")),
    }
}

/// Whether this test must be skipped (the reason printed): where namespaces cannot be made,
/// unless DCGAN_REQUIRE_CLUSTER=1 says they must, which fails the test instead.
fn skipped() -> bool {
    let Some(why) = cannot_emulate() else { return false };
    let required = std::env::var("DCGAN_REQUIRE_CLUSTER").is_ok_and(|v| v == "1");
    assert!(!required, "DCGAN_REQUIRE_CLUSTER=1 but the cluster cannot be emulated: {why}");
    eprintln!("skipped: cannot emulate a cluster here ({why})");
    true
}

/// A cluster of this test process (its own name), taken down when dropped, also on panic.
struct Cluster {
    name: String,
}

impl Cluster {
    /// `hosts` hosts, brought up with `options` (e.g. ["--rate", "1gbit"]); `tag` tells the
    /// clusters of one test process apart.
    fn up(hosts: usize, options: &[&str], tag: char) -> Cluster {
        // The pid keeps concurrent test processes apart; the name must stay short.
        let c = Cluster { name: format!("t{}{tag}", std::process::id()) };
        let o = Command::new(script())
            .args(["up", &hosts.to_string(), "--no-probe", "--name", &c.name])
            .args(options)
            .output()
            .unwrap();
        assert!(o.status.success(), "cluster-emulate up failed:\n{}", String::from_utf8_lossy(&o.stderr));
        c
    }

    fn run(&self, ranks: usize, args: &[&str]) -> std::process::Output {
        let mut cmd = Command::new(script());
        cmd.args(["run", "--name", &self.name, "-n", &ranks.to_string(), "--", env!("CARGO_BIN_EXE_dcgan-train")]);
        cmd.args(args);
        run_limited(cmd, 300)
    }

    /// `cluster-emulate.sh reshape ARGS` (`--burst SIZE`, `--segment SIZE`): new segments or a
    /// new token bucket on every link.
    fn reshape(&self, args: &[&str]) {
        let o = Command::new(script()).args(["reshape", "--name", &self.name]).args(args).output().unwrap();
        assert!(o.status.success(), "cluster-emulate reshape failed:\n{}", String::from_utf8_lossy(&o.stderr));
    }

    /// What `cluster-emulate.sh status` prints.
    fn status(&self) -> String {
        let o = Command::new(script()).args(["status", "--name", &self.name]).output().unwrap();
        assert!(o.status.success(), "cluster-emulate status failed:\n{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).to_string()
    }

    /// Every shaped end of every link (the host's and the switch port's) as `tc` and `ip`
    /// report it: (rate, burst in bytes, largest segment in bytes).
    fn shaping(&self) -> Vec<(String, u64, u64)> {
        let text = self.status();
        let word_after = |line: &str, key: &str| {
            let words: Vec<&str> = line.split_whitespace().collect();
            words.iter().position(|w| *w == key).and_then(|i| words.get(i + 1)).map(|w| w.to_string())
        };
        text.lines()
            .filter(|l| l.contains("qdisc tbf"))
            .map(|l| {
                let rate = word_after(l, "rate").unwrap_or_else(|| panic!("no rate in: {l}"));
                let burst = word_after(l, "burst").unwrap_or_else(|| panic!("no burst in: {l}"));
                let segment = word_after(l, "segments").unwrap_or_else(|| panic!("no segments in: {l}"));
                (rate, tc_bytes(&burst), segment.parse().unwrap_or_else(|_| panic!("segments of '{segment}' in: {l}")))
            })
            .collect()
    }

    fn namespaces(&self) -> Vec<String> {
        let o = Command::new("ip").args(["netns", "list"]).output().unwrap();
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter_map(|l| l.split_whitespace().next())
            .filter(|n| n.starts_with(&format!("{}-", self.name)))
            .map(String::from)
            .collect()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = Command::new(script()).args(["down", "--name", &self.name]).output();
    }
}

/// Whether tc's figure for a bucket of `asked` bytes is that bucket: tc stores it in timer
/// ticks and prints it back rounded down, by up to 0.1% (131072 comes back as 131000).
fn same_bucket(printed: u64, asked: u64) -> bool {
    printed <= asked && printed >= asked - asked / 1000 - 8
}

/// A size as `tc` prints it ("16Kb", "123750b", "1Mb") in bytes.
fn tc_bytes(s: &str) -> u64 {
    let (num, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: u64 = num.parse().unwrap_or_else(|_| panic!("not a tc size: {s}"));
    match unit {
        "b" | "" => n,
        "Kb" => n * 1024,
        "Mb" => n * 1024 * 1024,
        _ => panic!("unknown tc size unit in {s}"),
    }
}

fn summary(dir: &Path) -> Summary {
    Summary::read(&dir.join("summary.json"), "the run's").unwrap()
}

/// 5 training steps of batch 8 per rank with `extra` options, on the emulated hosts and with
/// plain mpiexec on one host (shared memory): their run directories, in that order, in `tmp`.
fn train_both_ways(cluster: &Cluster, ranks: usize, extra: &[&str], tmp: &Path) -> (PathBuf, PathBuf) {
    let (multi, single) = (tmp.join("multi"), tmp.join("single"));
    let common =
        ["--data", "synthetic:256", "--batch-size", "8", "--max-steps", "5", "--threads", "1", "--no-progress"];
    for (dir, on_cluster) in [(&multi, true), (&single, false)] {
        // Every rank must hold the same weights at the end.
        let mut args = [common.as_slice(), extra, &["--check-consistency", "5", "--out"]].concat();
        args.push(dir.to_str().unwrap());
        let o = if on_cluster { cluster.run(ranks, &args) } else { mpirun(ranks, &args, 300) };
        let place = if on_cluster { "on the emulated hosts" } else { "on one host" };
        assert!(o.status.success(), "{ranks} ranks {place}:\n{}", String::from_utf8_lossy(&o.stderr));
    }
    (multi, single)
}

#[test]
fn three_emulated_hosts_train_what_one_host_trains() {
    if skipped() {
        return;
    }
    let cluster = Cluster::up(3, &["--rate", "1gbit"], 'a');
    assert_eq!(cluster.namespaces().len(), 4, "3 hosts and the switch");
    // Both ends of every link are shaped, by default in 64 KiB segments (what TSO and GRO hand
    // a real host's stack) with a token bucket of two of them.
    let shaping = cluster.shaping();
    assert_eq!(shaping.len(), 6, "{shaping:?}");
    for (rate, burst, segment) in &shaping {
        assert_eq!(rate, "1Gbit");
        assert_eq!(*segment, 64 * 1024, "segments of {segment} bytes, not 64 KiB");
        assert!(same_bucket(*burst, 128 * 1024), "burst of {burst} bytes: not two segments");
    }
    // The switch forwards frames without the host's firewall hooks, where br_netfilter is
    // loaded at all and the kernel keeps that setting per namespace (5.3 and later).
    if Path::new("/proc/sys/net/bridge/bridge-nf-call-iptables").exists() {
        let status = cluster.status();
        let old_kernel = status.contains("before Linux 5.3");
        assert!(
            old_kernel || status.contains("switch: bridge-nf-call-iptables 0"),
            "the switch still calls iptables:\n{status}"
        );
    }
    let tmp = tempfile::tempdir().unwrap();
    let (multi, single) = train_both_ways(&cluster, 3, &["--fragment-bytes", "64KiB"], tmp.path());

    // The ranks really ran on three hosts (each its own UTS namespace), the reference on one.
    let (m, s) = (summary(&multi), summary(&single));
    assert_eq!(m.hosts, ["h1", "h2", "h3"]);
    assert_eq!(m.host_count, 3);
    assert_eq!(s.host_count, 1);
    assert!(m.comm.bytes_per_step > 0.0, "gradients were exchanged");

    let (a, b) = (final_weights(&multi), final_weights(&single));
    assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>());
    for (name, x) in &a {
        let y = &b[name];
        let differ = x.iter().zip(y).filter(|(p, q)| p.to_bits() != q.to_bits()).count();
        assert_eq!(differ, 0, "{name}: {differ} of {} values differ between 3 hosts and 1 host", x.len());
    }

    // `down` removes every namespace it made (Drop does it too, also on panic).
    let name = cluster.name.clone();
    drop(cluster);
    let left = Command::new("ip").args(["netns", "list"]).output().unwrap();
    let left = String::from_utf8_lossy(&left.stdout);
    assert!(!left.lines().any(|l| l.starts_with(&format!("{name}-"))), "left behind:\n{left}");
    assert!(!Path::new("/run/dcgan-cluster").join(&name).exists());
}

/// Largest over tensors of max|a - b| / max|a|.
fn worst_relative_difference(
    a: &std::collections::BTreeMap<String, Vec<f32>>,
    b: &std::collections::BTreeMap<String, Vec<f32>>,
) -> f64 {
    assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>());
    a.iter()
        .map(|(k, x)| {
            let scale = x.iter().fold(0.0f64, |m, v| m.max(v.abs() as f64));
            let diff = x.iter().zip(&b[k]).fold(0.0f64, |m, (p, q)| m.max((*p as f64 - *q as f64).abs()));
            if scale > 0.0 { diff / scale } else { diff }
        })
        .fold(0.0, f64::max)
}

/// Two hosts with two ranks each (--slots 2): auto picks the two-level `hier` for gradient
/// buckets (ranks of a host through shared memory, one rank per host across each link), the
/// replicas stay identical, and the weights match the same job on one host (flat vhd) up to
/// the order of the sums. `--adam-eps 1 --lr 2e-5` keep f32 rounding from being amplified
/// (see tests/parallel.rs, two_ranks_with_sync_bn_match_one_rank_over_the_same_examples).
#[test]
fn two_hosts_of_two_ranks_average_in_two_levels() {
    if skipped() {
        return;
    }
    let cluster = Cluster::up(2, &["--rate", "1gbit", "--slots", "2"], 's');
    assert!(cluster.status().contains("2 slot(s) each"), "{}", cluster.status());
    let tmp = tempfile::tempdir().unwrap();
    let (multi, single) = train_both_ways(&cluster, 4, &["--adam-eps", "1", "--lr", "2e-5"], tmp.path());

    let (m, s) = (summary(&multi), summary(&single));
    assert_eq!(m.hosts, ["h1", "h1", "h2", "h2"]);
    let algorithms = |s: &Summary| -> Vec<String> { s.comm.buckets.iter().map(|b| b.algorithm.clone()).collect() };
    // G's and D's large buckets go in two levels across hosts, flat on one host.
    assert!(algorithms(&m).contains(&"hier".to_string()), "{:?}", algorithms(&m));
    assert!(!algorithms(&s).contains(&"hier".to_string()), "{:?}", algorithms(&s));
    let rel = worst_relative_difference(&final_weights(&multi), &final_weights(&single));
    assert!(rel <= 1e-5, "2 hosts x 2 ranks differ from 4 ranks on one host by {rel:e}");
    // Two runs that exchanged nothing would match as well (rank 0 alone, trained the same way
    // twice): gradients did travel.
    assert!(m.comm.bytes_per_step > 0.0);

    // With the bf16 wire, values rounded on the way inside a host and across hosts must still
    // leave every replica with the same bits (--check-consistency fails the run otherwise).
    let bf16 = tmp.path().join("bf16");
    let o = cluster.run(
        4,
        &["--data", "synthetic:256", "--batch-size", "8", "--max-steps", "3", "--threads", "1", "--wire", "bf16"]
            .into_iter()
            .chain(["--check-consistency", "3", "--no-progress", "--out", bf16.to_str().unwrap()])
            .collect::<Vec<_>>(),
    );
    assert!(o.status.success(), "2 emulated hosts x 2 ranks, --wire bf16:\n{}", String::from_utf8_lossy(&o.stderr));
    assert!(algorithms(&summary(&bf16)).contains(&"hier".to_string()));

    // bench-allreduce times hier by default across hosts of two ranks, and not on one host
    // (where it would be ring under another name).
    let bench = |ranks: usize| {
        let o = cluster.run(ranks, &["bench-allreduce", "--sizes", "64KiB", "--iters", "3"]);
        assert!(o.status.success(), "bench-allreduce on {ranks} ranks:\n{}", String::from_utf8_lossy(&o.stderr));
        let rows = String::from_utf8_lossy(&o.stdout).into_owned();
        let timed = |algo: &str| rows.lines().any(|l| l.split_whitespace().nth(1) == Some(algo));
        (timed("hier"), timed("ring"), rows)
    };
    let (hier, ring, rows) = bench(4);
    assert!(hier && ring, "4 ranks on 2 hosts of 2:\n{rows}");
    let (hier, ring, rows) = bench(2);
    assert!(!hier && ring, "2 ranks on one host:\n{rows}");

    // More ranks than the hosts' slots: one line naming the limit.
    let o = cluster.run(5, &["info"]);
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && e.contains("have slots (4)"), "{e}");
}

#[test]
fn burst_sets_the_token_bucket_of_every_link_end() {
    if skipped() {
        return;
    }
    let cluster = Cluster::up(2, &["--rate", "500mbit", "--segment", "16KiB", "--burst", "16KiB"], 'b');
    let shaping = cluster.shaping();
    assert_eq!(shaping.len(), 4, "{shaping:?}");
    for (rate, burst, segment) in &shaping {
        assert_eq!(rate, "500Mbit");
        assert_eq!(*segment, 16 * 1024, "segments of {segment} bytes, asked for 16 KiB");
        assert!(same_bucket(*burst, 16 * 1024), "burst of {burst} bytes, asked for 16 KiB");
    }
    // reshape changes every end in place and leaves the rate. `--burst default` is what `up`
    // gives without --burst (two segments at 500 Mbit/s, where 250 us is less); new segments
    // without --burst take that default for themselves.
    let steps: [(&[&str], u64, u64); 3] = [
        (&["--burst", "48KiB"], 48 * 1024, 16 * 1024),
        (&["--burst", "default"], 32 * 1024, 16 * 1024),
        (&["--segment", "64KiB"], 128 * 1024, 64 * 1024),
    ];
    for (asked, bucket, segments) in steps {
        cluster.reshape(asked);
        let shaping = cluster.shaping();
        assert_eq!(shaping.len(), 4, "{shaping:?}");
        for (rate, burst, segment) in &shaping {
            assert_eq!(rate, "500Mbit");
            assert_eq!(*segment, segments, "segments of {segment} bytes after reshape {asked:?}");
            assert!(same_bucket(*burst, bucket), "burst of {burst} bytes after reshape {asked:?}");
        }
        let status = cluster.status();
        assert!(status.contains(&format!("segments of {segments} bytes, token bucket {bucket} bytes")), "{status}");
    }
    // A bucket that cannot hold a segment would have tbf cut each one in software: refused,
    // and the links keep what they had.
    let o = Command::new(script()).args(["reshape", "--name", &cluster.name, "--burst", "32KiB"]).output().unwrap();
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && e.contains("smaller than a segment (65536 bytes)") && e.contains("--segment"),
        "{e}"
    );
    assert!(cluster.shaping().iter().all(|&(_, b, s)| same_bucket(b, 128 * 1024) && s == 64 * 1024));
}

#[test]
fn reshape_needs_shaped_links() {
    if skipped() {
        return;
    }
    let cluster = Cluster::up(2, &[], 'u');
    let o = Command::new(script()).args(["reshape", "--name", &cluster.name, "--burst", "16KiB"]).output().unwrap();
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && e.contains("unshaped"), "{e}");
    assert!(cluster.shaping().is_empty(), "{}", cluster.status());
}

#[test]
fn the_launcher_names_the_problem_and_the_fix() {
    let run = |args: &[&str]| {
        let o = Command::new(script()).args(args).output().unwrap();
        (o.status.success(), String::from_utf8_lossy(&o.stderr).to_string())
    };
    let (ok, e) = run(&["up"]);
    assert!(!ok && e.contains("give the number of hosts"), "{e}");
    let (ok, e) = run(&["up", "2", "--rate", "fast"]);
    assert!(!ok && e.contains("is not a rate"), "{e}");
    let (ok, e) = run(&["launch"]);
    assert!(!ok && e.contains("unknown command 'launch'"), "{e}");
    let (ok, e) = run(&["run", "--name", "nosuchcluster", "--", "true"]);
    assert!(!ok && (e.contains("no emulated cluster named 'nosuchcluster'") || e.contains("needs root")), "{e}");
    let (ok, e) = run(&["up", "2", "--burst", "16KiB"]);
    assert!(!ok && e.contains("shapes nothing without --rate"), "{e}");
    let (ok, e) = run(&["up", "2", "--rate", "1gbit", "--burst", "1KiB"]);
    assert!(!ok && e.contains("smaller than one packet"), "{e}");
    // One line, not a second complaint about the empty number the first left behind.
    for (option, value) in [("--burst", "lots"), ("--segment", "x")] {
        let (ok, e) = run(&["up", "2", "--rate", "1gbit", option, value]);
        assert!(
            !ok && e.contains(&format!("{option} '{value}' is not a size")) && e.trim().lines().count() == 1,
            "{e}"
        );
    }
    let (ok, e) = run(&["up", "2", "--rate", "1gbit", "--burst", "16KiB"]);
    assert!(!ok && e.contains("smaller than a segment (65536 bytes)") && e.contains("add --segment 16KiB"), "{e}");
    let (ok, e) = run(&["up", "2", "--rate", "1gbit", "--segment", "128KiB"]);
    assert!(!ok && e.contains("give 2KiB to 64KiB"), "{e}");
    let (ok, e) = run(&["up", "2", "--segment", "16KiB"]);
    assert!(!ok && e.contains("shapes nothing without --rate"), "{e}");
    // --check judges the options and makes nothing.
    let (ok, e) =
        run(&["up", "2", "--rate", "1gbit", "--segment", "16KiB", "--burst", "16KiB", "--check", "--name", "chk"]);
    assert!(ok, "{e}");
    assert!(!Path::new("/run/dcgan-cluster/chk").exists());
    let (ok, e) = run(&["up", "2", "--rate", "1gbit", "--burst", "1KiB", "--check"]);
    assert!(!ok && e.contains("smaller than one packet"), "{e}");
    let (ok, e) = run(&["reshape", "--name", "nosuchcluster"]);
    assert!(!ok && e.contains("give new segments or a new bucket"), "{e}");
    let (ok, e) = run(&["reshape", "--name", "nosuchcluster", "--burst", "16KiB"]);
    assert!(!ok && (e.contains("no emulated cluster named 'nosuchcluster'") || e.contains("needs root")), "{e}");
    let (ok, e) = run(&["up", "2", "--slots", "0"]);
    assert!(!ok && e.contains("give the ranks per host"), "{e}");
    let (ok, e) = run(&["up", "2", "--name", "bad-name"]);
    assert!(!ok && e.contains("--name 'bad-name'"), "{e}");
}

/// scripts/bench-two-level.sh end to end on 2 hosts x 2 ranks: both links measured, every
/// algorithm timed, and the two models written where they belong. Only what the models must
/// say is asserted (4 ranks on 2 cores make the measured times too noisy to judge here).
#[test]
fn bench_two_level_compares_both_models() {
    if skipped() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(script().with_file_name("bench-two-level.sh"));
    // A name of this test process's own, as Cluster::up gives its clusters.
    let name = format!("t{}w", std::process::id());
    // The link probes only print (ping-pong measures what the models take).
    cmd.args(["--repeats", "1", "--no-probe", "--name", &name, "--out"]).arg(tmp.path());
    cmd.env("DCGAN_TRAIN", env!("CARGO_BIN_EXE_dcgan-train"));
    let o = run_limited(cmd, 300);
    assert!(o.status.success(), "bench-two-level.sh failed:\n{}", String::from_utf8_lossy(&o.stderr));
    let model_us = |file: &str, algorithm: &str| -> f64 {
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(tmp.path().join(file)).unwrap()).unwrap();
        let rows = v["allreduce"].as_array().unwrap();
        assert_eq!(rows.len(), 20, "5 algorithms x 4 sizes in {file}");
        let row = rows.iter().find(|r| r["algorithm"] == algorithm && r["bytes"] == 4 << 20).unwrap();
        assert!(row["measured_us"].as_f64().unwrap() > 0.0);
        row["model_us"].as_f64().unwrap()
    };
    // Two ranks of a host share its link: the two-level model charges vhd for both ranks'
    // halves leaving at once, and hier for one share per host, so they swap places.
    let (hier2, vhd2) = (model_us("model-two-level.json", "hier"), model_us("model-two-level.json", "vhd"));
    let (hier1, vhd1) = (model_us("model-one-level.json", "hier"), model_us("model-one-level.json", "vhd"));
    assert!(hier2 < 0.8 * vhd2, "two-level: hier {hier2} us, vhd {vhd2} us");
    assert!((hier1 - vhd1).abs() < 0.01 * vhd1, "one-level: hier {hier1} us, vhd {vhd1} us");
    // bench-allreduce records where its ranks ran, which simulate-scaling checks.
    let bench: serde_json::Value =
        serde_json::from_slice(&std::fs::read(tmp.path().join("bench-1.json")).unwrap()).unwrap();
    assert!(bench.as_array().unwrap().iter().all(|r| r["placement"] == "2x2"), "{bench}");
    let md = std::fs::read_to_string(tmp.path().join("model-two-level.md")).unwrap();
    assert!(md.contains("2 ranks per node"), "{md}");
    // The report package's check of that model: its table, then the rows judged against the
    // band (4 ranks on this machine's cores, or the range of the crowded ones).
    let check = std::fs::read_to_string(tmp.path().join("vs-model.md")).unwrap();
    assert!(check.contains(md.trim()) && check.contains("Hand-written algorithms at 64 KiB and above"), "{check}");
}
