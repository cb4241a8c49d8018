//! What compute and the exchange cost each other on shared cores, for the replay, from two
//! runs. First, how much compute a rank loses per byte it moves: train the same ranks on the
//! same hosts twice, with the exchange overlapped and with `--no-exchange`, and divide the
//! compute time the exchange added by the bytes each rank moved beside compute (the bytes moved times the run's hidden-comm fraction: while the
//! rank waited, the exchange took nothing from compute, and the replay charges it the same way).
//!
//! The same pair gives the other side of sharing cores: the collectives ran slower than the
//! cost model while compute ran beside them (the comm thread and the kernel's receive path
//! wait for a core). If a share h (the hidden fraction) of the measured comm time D ran beside
//! compute at a fraction s of wire speed and the rest at full speed, the model's wire time W
//! is s h D + (1 - h) D, which gives a first s. It counts the comm thread's wait for a late
//! rank as slow wire, which the replay then adds again, so `speed_fit` refines it: the s at
//! which the replay of the `--no-exchange` run's trace gives the measured D.
//!
//! Both figures are kept for a rank with a core of its own (`core_share`): C times, and s
//! divided by, the share of a core the `--no-exchange` run's ranks had, taken to be the share
//! the run with the exchange had before its exchange took any. On 2 ranks with a core each
//! that share is about 1.
//!
//! Simplifications, all of them the replay's too: every rank is charged the busiest rank's
//! bytes (the tree's root, the fold's partner); bytes between ranks of one node cost what
//! bytes over the network cost; and a collective slows by the share of it the ranks computed
//! beside on average, where in ring or tree any one busy rank holds up all of them (kind to
//! many ranks whose steps vary).
//!
//! Why it is needed: the cost model prices wire time, which is all an exchange costs when the
//! comm thread has a core of its own (a GPU rank). A CPU rank computes on every core, so the
//! comm thread and the kernel's network stack (copies, TCP, the shaper's timers) take their
//! time from the compute, and a step with the exchange hidden still runs longer. The summary's
//! `compute_ms_per_step` shows it: the step's wall time less its waits for other ranks, which
//! keeps the time the training thread waited for a core.

use super::core_share::{core_share, cpu_ns_per_byte_at, speed_at};
use super::cost::{Choice, bucket_bytes_moved, bucket_time};
use super::two_level::{Links, Placement};
use crate::comm::{Algorithm, AllreduceChoice};
use crate::record::Summary;
use anyhow::{Result, bail};
use serde::Serialize;
use std::path::Path;

/// The calibration and where it came from.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CommCpu {
    /// Compute lost per byte a rank moves each way, in nanoseconds, for a rank with a core of
    /// its own (the pair's figure times `core_share`).
    pub ns_per_byte: f64,
    pub with_exchange: String,
    pub without_exchange: String,
    pub compute_with_ms: f64,
    pub compute_without_ms: f64,
    /// Bytes the busiest rank moved each way per step in the run with the exchange.
    pub bytes_moved_per_step: f64,
    /// That run's hidden-comm fraction: the share of its exchange that ran beside compute.
    pub hidden_comm_fraction: f64,
    /// Its comm time per step as measured, and as the cost model prices its buckets.
    pub comm_measured_ms: f64,
    pub comm_model_ms: f64,
    /// The fraction of wire speed a collective kept while compute ran beside it, by the
    /// formula above, for a rank with a core of its own (divided by `core_share`, at most 1).
    pub comm_speed_formula: f64,
    /// The same, fitted by the replay (`speed_fit`); the formula's until then. At most 1, so a
    /// pair on part of a core cannot show a collective beside compute faster than that share
    /// of wire speed.
    pub comm_speed_beside_compute: f64,
    /// The placement of the two runs.
    pub ranks: usize,
    pub hosts: usize,
    /// The run's `--allreduce` (auto or one algorithm; the library's, mpi, as vhd), which the
    /// fit replays.
    pub allreduce: AllreduceChoice,
    /// The share of a core the run without the exchange had (`core_share`): the figures above
    /// are divided back to a rank with a core of its own, C multiplied and s divided by it.
    pub core_share: f64,
}

/// What the replay takes from a calibration (or from flags).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SharedCores {
    /// Compute lost per byte a rank moves each way (0: none), for a rank with a core of its own.
    pub cpu_ns_per_byte: f64,
    /// The fraction of wire speed a collective keeps beside compute (1: all of it), for a rank
    /// with a core of its own.
    pub comm_speed_beside_compute: f64,
    /// The share of a core each rank of the replayed run had (1: a core of its own).
    pub core_share: f64,
}

impl SharedCores {
    /// Nothing shared: the wire-only replay.
    pub const NONE: SharedCores = SharedCores { cpu_ns_per_byte: 0.0, comm_speed_beside_compute: 1.0, core_share: 1.0 };

    /// Compute lost per byte, in the replayed run's wall time.
    pub fn cpu_ns_per_byte_here(&self) -> f64 {
        cpu_ns_per_byte_at(self.cpu_ns_per_byte, self.core_share)
    }

    /// The share of wire speed a collective keeps beside compute in the replayed run.
    pub fn speed_here(&self) -> f64 {
        speed_at(self.comm_speed_beside_compute, self.core_share)
    }
}

/// Per step, the bytes the busiest rank moved each way and the seconds the cost model gives
/// the exchange: every gradient bucket with the algorithm the run recorded for it, cut into
/// the run's fragments. (The 24-byte metrics are left out, here and in the replay.)
fn exchange_per_step(s: &Summary, path: &Path, place: Placement, links: &Links) -> Result<(f64, f64)> {
    let (fragment_bytes, wire) = (s.options.comm.fragment_bytes, s.options.comm.wire);
    let (mut moved, mut seconds) = (0.0, 0.0);
    for b in &s.comm.buckets {
        // (The library's own allreduce, "mpi", is priced as vhd, as everywhere in the model.)
        let Some(algo) = Algorithm::from_name(&b.algorithm) else {
            bail!(
                "--comm-cpu-from {}: bucket {} records the algorithm '{}', which the model does not know: \
                 pass the summary.json of a run with the exchange",
                path.display(),
                b.bucket,
                b.algorithm
            );
        };
        moved += bucket_bytes_moved(&Choice::Fixed(algo), b.bytes, fragment_bytes, place, wire);
        seconds += bucket_time(&Choice::Fixed(algo), b.bytes, fragment_bytes, place, links, wire).1;
    }
    Ok((moved, seconds))
}

/// The first of the figures that must match between the two runs in which they differ, as
/// (name, with, without).
fn placement_difference(w: &Summary, wo: &Summary) -> Option<(&'static str, String, String)> {
    let figures = |s: &Summary| {
        [
            ("ranks", s.ranks.to_string()),
            ("host_count", s.host_count.to_string()),
            ("batch_size_per_rank", s.batch_size_per_rank.to_string()),
            ("threads_per_rank", s.threads_per_rank.to_string()),
            ("device", format!("{:?}", s.device)),
            ("image_size", s.image_size.to_string()),
        ]
    };
    figures(w).into_iter().zip(figures(wo)).find(|(a, b)| a.1 != b.1).map(|(a, b)| (a.0, a.1, b.1))
}

/// The calibration from `with` (a run with the exchange overlapped) and `without` (the same
/// ranks, hosts and batch with `--no-exchange`), the model on `links`. Noise can make the
/// compute difference negative, read as no cost, or the comm faster than the model, read as
/// full speed.
pub fn calibrate(with: &Path, without: &Path, links: &Links) -> Result<CommCpu> {
    let (w, wo) = (Summary::read(with, "--comm-cpu-from")?, Summary::read(without, "--comm-cpu-from")?);
    if w.ranks < 2 || w.options.parallel.no_exchange {
        bail!(
            "--comm-cpu-from {}: the first summary must come from a run of 2 or more ranks with the exchange",
            with.display()
        );
    }
    if w.options.parallel.no_overlap {
        bail!(
            "--comm-cpu-from {}: that run used --no-overlap, so its exchange never ran beside compute: \
             give a run with overlap",
            with.display()
        );
    }
    if !wo.options.parallel.no_exchange {
        bail!("--comm-cpu-from {}: the second summary must come from a run with --no-exchange", without.display());
    }
    if let Some((name, a, b)) = placement_difference(&w, &wo) {
        bail!(
            "--comm-cpu-from: the two runs differ in {name} ({a} against {b}): train both with the same ranks, hosts, \
             batch, threads and device"
        );
    }
    let (ranks, hosts) = (w.ranks, w.host_count);
    if hosts == 0 || !ranks.is_multiple_of(hosts) {
        bail!("--comm-cpu-from {}: {ranks} ranks on {hosts} hosts are not in equal blocks", with.display());
    }
    let place = Placement { hosts, ranks_per_host: ranks / hosts };
    let allreduce = match w.options.comm.allreduce {
        AllreduceChoice::Fixed(Algorithm::Mpi) => AllreduceChoice::Fixed(Algorithm::Vhd),
        other => other,
    };
    let (compute_with_ms, compute_without_ms) = (w.compute_ms_per_step, wo.compute_ms_per_step);
    let (bytes, model_s) = exchange_per_step(&w, with, place, links)?;
    let (hidden, measured_ms) = (w.comm.hidden_comm_fraction, w.comm.comm_ms_per_step);
    let (d, model_ms) = (measured_ms, model_s * 1e3);
    let speed =
        if hidden > 0.0 && d > 0.0 { ((model_ms - (1.0 - hidden) * d) / (hidden * d)).clamp(0.05, 1.0) } else { 1.0 };
    let beside_compute = bytes * hidden;
    let ns_here = if beside_compute > 0.0 {
        ((compute_with_ms - compute_without_ms) * 1e6 / beside_compute).max(0.0)
    } else {
        0.0
    };
    // Back to a rank with a core of its own: the inverse of what the replay applies.
    let (share, _) = core_share(&wo);
    let ns_per_byte = ns_here * share;
    let speed = (speed / share).min(1.0);
    Ok(CommCpu {
        ns_per_byte,
        with_exchange: with.display().to_string(),
        without_exchange: without.display().to_string(),
        compute_with_ms,
        compute_without_ms,
        bytes_moved_per_step: bytes,
        hidden_comm_fraction: hidden,
        comm_measured_ms: measured_ms,
        comm_model_ms: model_ms,
        comm_speed_formula: speed,
        comm_speed_beside_compute: speed,
        ranks,
        hosts,
        allreduce,
        core_share: share,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn summary(no_exchange: bool, compute_ms: f64, algorithm: &str) -> Value {
        json!({
            "ranks": 2, "host_count": 2, "batch_size_per_rank": 64, "threads_per_rank": 1, "ms_per_step": 200.0,
            "device": "cpu (1 threads)", "image_size": 28,
            "compute_ms_per_step": compute_ms,
            "options": {"comm": {"fragment_bytes": 1 << 20, "wire": "bf16"},
                        "parallel": {"no_exchange": no_exchange, "no_overlap": false}},
            "comm": {"hidden_comm_fraction": if no_exchange { 0.0 } else { 0.8 },
                     "comm_ms_per_step": if no_exchange { 0.0 } else { 3.0 }, "buckets": [
                {"bucket": "G[1]", "bytes": 4 << 20, "algorithm": algorithm},
                {"bucket": "D[1]", "bytes": 4096, "algorithm": if no_exchange { "none" } else { "rd" }},
            ]},
        })
    }

    fn write(dir: &Path, name: &str, v: &Value) -> std::path::PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, v.to_string()).unwrap();
        p
    }

    /// 1 ns per byte, nothing else: the model's time is the bytes each rank sends.
    const LINKS: Links = Links {
        between: crate::scaling::cost::Link { alpha: 0.0, beta: 1e-9, gamma: 0.0 },
        within: crate::scaling::cost::Link { alpha: 0.0, beta: 1e-9, gamma: 0.0 },
    };

    #[test]
    fn compute_added_per_byte_moved() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let with = write(dir, "with.json", &summary(false, 170.0, "vhd"));
        let without = write(dir, "without.json", &summary(true, 150.0, "none"));
        let c = calibrate(&with, &without, &LINKS).unwrap();
        // 2 ranks, bf16: vhd moves 4 MiB / 2 each way, rd 4096 / 2 (one whole-vector swap);
        // 80% of it beside compute.
        let bytes = (2 << 20) as f64 + 2048.0;
        assert_eq!(c.bytes_moved_per_step, bytes);
        assert!((c.ns_per_byte - 20e6 / (0.8 * bytes)).abs() < 1e-9, "{c:?}");
        // On 2 ranks each sends what it moves each way, so the model's time is `bytes` ns
        // (2.1 ms). 3 ms measured, 20% of it waited for at full speed: 0.8 x 3 x s + 0.6 = 2.1.
        let model_ms = bytes * 1e-6;
        assert!((c.comm_model_ms - model_ms).abs() < 1e-9, "{c:?}");
        assert!((c.comm_speed_formula - (model_ms - 0.6) / 2.4).abs() < 1e-9, "{c:?}");
        assert_eq!(c.core_share, 1.0, "the fixture records no wait for a core");
        // Measured on ranks with 80% of a core each (the run without the exchange waited a
        // quarter as long for a core as it ran): per rank with a core of its own, 0.8 x the
        // compute per byte and the speed / 0.8.
        let mut shared = summary(true, 150.0, "none");
        shared["training_thread_cpu_ms_per_step"] = json!(150.0);
        shared["training_thread_descheduled_ms_per_step"] = json!(37.5);
        let shared = write(dir, "shared.json", &shared);
        let h = calibrate(&with, &shared, &LINKS).unwrap();
        assert_eq!(h.core_share, 0.8);
        assert!((h.ns_per_byte - 0.8 * c.ns_per_byte).abs() < 1e-9, "{h:?}");
        assert!((h.comm_speed_formula - c.comm_speed_formula / 0.8).abs() < 1e-9, "{h:?}");
        // Faster than the model: full speed, not more.
        let mut quick = summary(false, 170.0, "vhd");
        quick["comm"]["comm_ms_per_step"] = json!(1.0);
        let quick = write(dir, "quick.json", &quick);
        assert_eq!(calibrate(&quick, &without, &LINKS).unwrap().comm_speed_formula, 1.0);
        // The library's allreduce is priced as vhd.
        let mpi = write(dir, "mpi.json", &summary(false, 170.0, "mpi"));
        assert_eq!(calibrate(&mpi, &without, &LINKS).unwrap().bytes_moved_per_step, bytes);
        // Slower without the exchange (noise): no cost, not a negative one.
        let faster = write(dir, "faster.json", &summary(false, 140.0, "vhd"));
        assert_eq!(calibrate(&faster, &without, &LINKS).unwrap().ns_per_byte, 0.0);
        // The wrong way round, or mismatched runs, are refused.
        assert!(calibrate(&without, &with, &LINKS).is_err());
        let mut other = summary(true, 150.0, "none");
        other["batch_size_per_rank"] = json!(16);
        let other = write(dir, "other.json", &other);
        let e = calibrate(&with, &other, &LINKS).unwrap_err().to_string();
        assert!(e.contains("batch_size_per_rank"), "{e}");
        // An exchange that never ran beside compute cannot measure what it takes from it.
        let mut serial = summary(false, 170.0, "vhd");
        serial["options"]["parallel"]["no_overlap"] = json!(true);
        let serial = write(dir, "serial.json", &serial);
        assert!(calibrate(&serial, &without, &LINKS).unwrap_err().to_string().contains("--no-overlap"));
        let mut bare = summary(false, 170.0, "vhd");
        bare.as_object_mut().unwrap().remove("comm");
        let bare = write(dir, "bare.json", &bare);
        let e = calibrate(&bare, &without, &LINKS).unwrap_err().to_string();
        assert!(e.contains("bare.json is not the summary.json of a dcgan-train run"), "{e}");
    }
}
