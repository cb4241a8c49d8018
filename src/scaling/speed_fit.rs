//! The wire speed a collective keeps beside compute, fitted so that the replay of a
//! calibration pair gives the comm time the run with the exchange measured. The closed
//! formula of `comm_cpu` counts the comm thread's wait for a late rank as slow wire; the
//! replay models that wait itself, so fitting through the replay counts it once.

use super::comm_cpu::{CommCpu, SharedCores};
use super::run_info::{RunInfo, recorded_steps};
use super::simulate::{Replay, predict};
use super::two_level::Links;
use anyhow::{Result, bail};
use std::path::Path;

/// Halvings of the interval of speeds: 2^-25 of it is far below the machines' noise.
const HALVINGS: usize = 25;
/// The slowest speed fitted: below it the exchange is not beside compute in any useful sense.
pub const SLOWEST: f64 = 0.05;

/// The s in [SLOWEST, 1] at which replaying `without`'s trace on the pair's placement, with
/// the pair's compute cost per byte and the `--allreduce` of the run with the exchange, gives
/// the comm time per step that run measured (`steps` and `identical` as simulate-scaling's
/// `--steps` and `--identical-ranks`, so that the fit replays as the prediction does).
pub fn fit_speed(c: &CommCpu, without: &Path, links: &Links, steps: u64, identical: bool) -> Result<f64> {
    let run = RunInfo::from_summary(without)?;
    let Some(trace) = &run.trace else {
        bail!(
            "--comm-cpu-from {}: that run was trained without --trace, which the fit replays: train it with \
             --trace FILE --trace-steps 30",
            without.display()
        );
    };
    let (programs, steps, t1) = recorded_steps(trace, 0, &run.buckets, steps, identical)?;
    let comm_ms = |speed: f64| -> Result<f64> {
        let shared =
            SharedCores { cpu_ns_per_byte: c.ns_per_byte, comm_speed_beside_compute: speed, core_share: c.core_share };
        let rp = Replay { programs: &programs, steps, t1, identical, shared };
        let rpn = (c.ranks / c.hosts.max(1)) as u64;
        Ok(predict(&run, &rp, links, c.allreduce, c.hosts as u64, rpn)?.comm_ms_per_step)
    };
    // Slower collectives only ever take longer: bisect.
    let target = c.comm_measured_ms;
    if comm_ms(1.0)? >= target {
        return Ok(1.0);
    }
    if comm_ms(SLOWEST)? <= target {
        return Ok(SLOWEST);
    }
    let (mut fast, mut slow) = (1.0, SLOWEST);
    for _ in 0..HALVINGS {
        let mid = 0.5 * (fast + slow);
        if comm_ms(mid)? >= target {
            slow = mid;
        } else {
            fast = mid;
        }
    }
    Ok(0.5 * (fast + slow))
}
