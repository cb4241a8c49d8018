//! The replay: consecutive steps of the compute thread against one comm thread that averages
//! buckets in submission order, each taking the cost model's time. What comes out is what a
//! real run's summary reports: step time, comm time per step, the part of it the compute
//! thread waited for, and so the hidden fraction.

use super::program::{Item, StepProgram};

/// Steps at the start of a replay that are not counted: G's buckets of step s are waited for
/// in step s+1, so the first steps are not yet in the steady state.
pub const WARM_STEPS: usize = 2;

#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Outcome {
    pub step_s: f64,
    /// Comm thread busy per step.
    pub comm_s: f64,
    /// Compute thread blocked per step.
    pub exposed_s: f64,
}

impl Outcome {
    /// 1 - exposed / comm (0 when there is no communication), as summary.json defines it.
    pub fn hidden_fraction(&self) -> f64 {
        if self.comm_s > 0.0 { 1.0 - self.exposed_s / self.comm_s } else { 0.0 }
    }
}

/// Replay `steps` steps, cycling through `programs`, with `bucket_s[i]` seconds to average
/// bucket i and `metrics_s` for the metrics. `exchange = false`: one rank, nothing is sent.
pub fn replay(programs: &[StepProgram], bucket_s: &[f64], metrics_s: f64, steps: usize, exchange: bool) -> Outcome {
    assert!(!programs.is_empty() && steps > WARM_STEPS);
    let mut t = 0.0f64; // the compute thread's clock
    let mut comm_free = 0.0f64; // when the comm thread finishes what it has
    let mut done: Vec<Option<f64>> = vec![None; bucket_s.len()];
    let mut metrics_done: Option<f64> = None;
    let (mut comm, mut exposed, mut counted_from) = (0.0, 0.0, 0.0);
    for k in 0..steps {
        if k == WARM_STEPS {
            counted_from = t;
        }
        let counted = k >= WARM_STEPS;
        let submit = |secs: f64, t: f64, comm_free: &mut f64| -> f64 {
            let finish = t.max(*comm_free) + secs;
            *comm_free = finish;
            finish
        };
        let wait = |until: Option<f64>, t: &mut f64, exposed: &mut f64| {
            if let Some(d) = until
                && d > *t
            {
                if counted {
                    *exposed += d - *t;
                }
                *t = d;
            }
        };
        for item in &programs[k % programs.len()].items {
            match *item {
                Item::Compute(s) => t += s,
                Item::Submit(b) if exchange => {
                    done[b] = Some(submit(bucket_s[b], t, &mut comm_free));
                    if counted {
                        comm += bucket_s[b];
                    }
                }
                Item::SubmitMetrics if exchange => {
                    metrics_done = Some(submit(metrics_s, t, &mut comm_free));
                    if counted {
                        comm += metrics_s;
                    }
                }
                Item::Wait(b) => wait(done[b].take(), &mut t, &mut exposed),
                Item::WaitMetrics => wait(metrics_done.take(), &mut t, &mut exposed),
                Item::Submit(_) | Item::SubmitMetrics => {}
            }
        }
    }
    let n = (steps - WARM_STEPS) as f64;
    Outcome { step_s: (t - counted_from) / n, comm_s: comm / n, exposed_s: exposed / n }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Item::*;

    fn prog(items: Vec<Item>) -> Vec<StepProgram> {
        vec![StepProgram { step: 1, items }]
    }

    #[test]
    fn one_rank_is_pure_compute() {
        let p = prog(vec![Compute(1.0), Submit(0), Wait(0), Compute(2.0)]);
        let o = replay(&p, &[5.0], 0.0, 10, false);
        assert_eq!(o, Outcome { step_s: 3.0, comm_s: 0.0, exposed_s: 0.0 });
    }

    #[test]
    fn a_bucket_waited_next_step_hides_behind_the_start_of_that_step() {
        // G's bucket leaves at the end of the step and is waited for 1 s into the next one.
        let p = prog(vec![Compute(1.0), Wait(0), Compute(2.0), Submit(0)]);
        // 0.5 s of exchange: hidden entirely behind the next step's first second.
        let o = replay(&p, &[0.5], 0.0, 10, true);
        assert!((o.step_s - 3.0).abs() < 1e-12 && o.exposed_s == 0.0 && o.hidden_fraction() == 1.0);
        // 1.5 s: 0.5 s of it is exposed every step.
        let o = replay(&p, &[1.5], 0.0, 10, true);
        assert!((o.step_s - 3.5).abs() < 1e-12, "{o:?}");
        assert!((o.exposed_s - 0.5).abs() < 1e-12 && (o.hidden_fraction() - 2.0 / 3.0).abs() < 1e-12);
    }

    #[test]
    fn the_comm_thread_serves_buckets_in_order() {
        // Two buckets handed off together; the second waits behind the first.
        let p = prog(vec![Compute(1.0), Submit(0), Submit(1), Wait(1), Wait(0)]);
        let o = replay(&p, &[0.25, 0.5], 0.0, 10, true);
        assert!((o.step_s - 1.75).abs() < 1e-12 && (o.exposed_s - 0.75).abs() < 1e-12, "{o:?}");
    }
}
