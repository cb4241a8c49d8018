//! A run's share of a core, and how it carries the exchange's CPU figures from the placement
//! they were measured on to another. The training thread's own clock (`training_thread_cpu_ms`)
//! and the time it waited for a core (`training_thread_descheduled_ms`, from schedstat) give the
//! share it got: cpu / (cpu + waited). Four ranks on two cores get about one half.
//!
//! Why it matters: C and s are measured on one placement (bench-scaling uses 2 ranks on 2 cores,
//! a core each). On 4 ranks sharing 2 cores every CPU-second the exchange takes costs each rank
//! two seconds of wall time (4 ranks' compute and exchange share 2 cores: a step of W + X CPU
//! each lasts 2 (W + X)), and a collective that needs the CPU gets half as much of it. So the
//! figures are kept per rank with a core of its own and scaled by the share of the run replayed:
//! compute lost per byte C / share, wire speed beside compute s x share. The wire-only replay
//! has no figures and leaves the share out.
//!
//! The share is read only where the exchange did not take part of it: a run of one rank or with
//! `--no-exchange`. A run with the exchange waited for its own comm thread too, which the
//! calibration already counts; such a run is taken to have its cores to itself.

use crate::record::Summary;

/// Where a run's share of a core came from, for the prediction's report.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ShareSource {
    /// Read from the run's summary: its training thread's CPU and wait for a core.
    Measured,
    /// The run had the exchange, whose comm thread took part of the share: taken as 1.
    RunHadExchange,
    /// The summary does not record the wait for a core (an older run, or no schedstat): 1.
    NotRecorded,
    /// The wire-only replay: no figures to scale, so 1.
    NotUsed,
}

/// The share of a core the training thread of the run `summary` describes had, and where the
/// figure came from; 1 where it cannot be read cleanly.
pub fn core_share(summary: &Summary) -> (f64, ShareSource) {
    if summary.ranks > 1 && !summary.options.parallel.no_exchange {
        return (1.0, ShareSource::RunHadExchange);
    }
    match (summary.training_thread_cpu_ms_per_step, summary.training_thread_descheduled_ms_per_step) {
        (Some(c), Some(w)) if c > 0.0 && w >= 0.0 => ((c / (c + w)).min(1.0), ShareSource::Measured),
        _ => (1.0, ShareSource::NotRecorded),
    }
}

/// Compute lost per byte moved beside compute, in wall time, on a run with `share` of a core,
/// from the figure for a rank with a core of its own.
pub fn cpu_ns_per_byte_at(own_core_ns_per_byte: f64, share: f64) -> f64 {
    own_core_ns_per_byte / share
}

/// The fraction of wire speed a collective keeps beside compute on a run with `share` of a
/// core, from the figure for a rank with a core of its own (both at most 1).
pub fn speed_at(own_core_speed: f64, share: f64) -> f64 {
    own_core_speed * share
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn run(ranks: u64, no_exchange: bool, cpu: f64, waited: Value) -> Summary {
        serde_json::from_value(json!({
            "ranks": ranks, "options": {"parallel": {"no_exchange": no_exchange}},
            "batch_size_per_rank": 64, "ms_per_step": 200.0, "comm": {},
            "training_thread_cpu_ms_per_step": cpu, "training_thread_descheduled_ms_per_step": waited
        }))
        .unwrap()
    }

    #[test]
    fn the_share_is_cpu_over_cpu_and_wait_where_nothing_of_the_exchange_is_in_it() {
        // 4 ranks on 2 cores with --no-exchange: about as long waiting for a core as on one.
        let (share, from) = core_share(&run(4, true, 172.4, json!(173.0)));
        assert_eq!(from, ShareSource::Measured);
        assert!((share - 172.4 / 345.4).abs() < 1e-12, "{share}");
        // One rank alone has no exchange either.
        assert_eq!(core_share(&run(1, false, 160.0, json!(0.0))), (1.0, ShareSource::Measured));
        // With the exchange, the wait is partly for its own comm thread: not read.
        assert_eq!(core_share(&run(2, false, 176.5, json!(10.1))), (1.0, ShareSource::RunHadExchange));
        // Runs without schedstat record null.
        assert_eq!(core_share(&run(2, true, 160.0, Value::Null)), (1.0, ShareSource::NotRecorded));
    }

    #[test]
    fn half_a_core_doubles_the_cost_and_halves_the_speed() {
        assert_eq!(cpu_ns_per_byte_at(4.0, 0.5), 8.0);
        assert_eq!(speed_at(0.4, 0.5), 0.2);
        assert_eq!(cpu_ns_per_byte_at(4.0, 1.0), 4.0);
        assert_eq!(speed_at(0.4, 1.0), 0.4);
    }
}
