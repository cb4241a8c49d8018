//! The replay: consecutive steps of every rank's compute thread against the comm threads,
//! which average buckets in submission order. A collective cannot start before the last rank
//! has handed its bucket over, and then takes the cost model's time, so a rank whose step ran
//! long makes the others wait, as in a real job. What comes out is what a real run's summary
//! reports, averaged over ranks: step time, comm time per step, the part of it the compute
//! thread waited for (and of that, the part spent waiting for the slowest rank), and so the
//! hidden fraction.

use super::program::{Item, StepProgram};

/// Steps at the start of a replay that are not counted: G's buckets of step s are waited for
/// in step s+1, so the first steps are not yet in the steady state.
pub const WARM_STEPS: usize = 2;

#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Outcome {
    pub step_s: f64,
    /// Comm thread busy per step: from the moment it has the bucket (and is free) until the
    /// collective ends, so it includes waiting inside the collective for a late rank, as the
    /// real comm thread's clock does.
    pub comm_s: f64,
    /// Compute thread blocked per step.
    pub exposed_s: f64,
    /// Of `exposed_s`, the part before the last rank handed the bucket over (what
    /// scripts/wait-report.py calls waiting for the slowest rank).
    pub slowest_rank_s: f64,
}

impl Outcome {
    /// 1 - exposed / comm (0 when there is no communication), as summary.json defines it.
    pub fn hidden_fraction(&self) -> f64 {
        if self.comm_s > 0.0 { 1.0 - self.exposed_s / self.comm_s } else { 0.0 }
    }
}

/// One allreduce (a bucket or the metrics) as every rank takes part in it.
struct Collective {
    cost_s: f64,
    /// Per rank: when it handed the data over, and whether that was in a counted step.
    handed: Vec<Option<(f64, bool)>>,
    /// When the last rank handed it over, and when it ended; known once every rank has.
    last_and_end: Option<(f64, f64)>,
}

/// One rank's place in its program and its totals.
#[derive(Clone, Default)]
struct RankState {
    t: f64,
    step: usize,
    item: usize,
    counted_from: f64,
    /// Per bucket, the collective of its latest hand-off not yet waited for.
    pending: Vec<Option<usize>>,
    pending_metrics: Option<usize>,
    handed: usize,
    comm: f64,
    exposed: f64,
    slowest: f64,
}

/// Replay `steps` steps on `ranks` ranks; rank r runs `programs[order(r, k)]` as its step k.
/// `bucket_s[i]` seconds to average bucket i once every rank has it, `metrics_s` for the
/// metrics. `exchange = false`: nothing is sent and nothing waited for (one rank alone).
/// Every program must hand over the same collectives in the same order (see
/// `program::check_same_handoffs`).
pub fn replay(
    programs: &[StepProgram],
    order: &dyn Fn(usize, usize) -> usize,
    ranks: usize,
    bucket_s: &[f64],
    metrics_s: f64,
    steps: usize,
    exchange: bool,
) -> Outcome {
    assert!(!programs.is_empty() && steps > WARM_STEPS && ranks >= 1);
    let mut state = vec![RankState { pending: vec![None; bucket_s.len()], ..Default::default() }; ranks];
    let mut colls: Vec<Collective> = Vec::new();
    let (mut next_to_end, mut comm_free) = (0usize, 0.0f64);
    loop {
        let mut moved = false;
        for (r, s) in state.iter_mut().enumerate() {
            moved |= advance(r, s, programs, order, steps, exchange, &mut colls, bucket_s, metrics_s, ranks);
        }
        // Collectives run one after another in hand-off order, each from the moment the last
        // rank's comm thread has it; a rank's comm thread is busy from when it has it.
        while let Some(c) = colls.get_mut(next_to_end).filter(|c| c.handed.iter().all(Option::is_some)) {
            let last = c.handed.iter().map(|h| h.unwrap().0).fold(f64::MIN, f64::max);
            let end = last.max(comm_free) + c.cost_s;
            for (s, h) in state.iter_mut().zip(&c.handed) {
                let (at, counted) = h.unwrap();
                if counted {
                    s.comm += end - at.max(comm_free);
                }
            }
            c.last_and_end = Some((last, end));
            comm_free = end;
            next_to_end += 1;
            moved = true;
        }
        if state.iter().all(|s| s.step == steps) {
            break;
        }
        assert!(moved, "the ranks' programs hand collectives over in different orders");
    }
    let n = (steps - WARM_STEPS) as f64;
    let mean = |f: fn(&RankState) -> f64| state.iter().map(f).sum::<f64>() / ranks as f64 / n;
    Outcome {
        step_s: mean(|s| s.t - s.counted_from),
        comm_s: mean(|s| s.comm),
        exposed_s: mean(|s| s.exposed),
        slowest_rank_s: mean(|s| s.slowest),
    }
}

/// Run rank `r` until it must wait for a collective that has not ended, or its last step is
/// done. Whether it moved.
#[allow(clippy::too_many_arguments)]
fn advance(
    r: usize,
    s: &mut RankState,
    programs: &[StepProgram],
    order: &dyn Fn(usize, usize) -> usize,
    steps: usize,
    exchange: bool,
    colls: &mut Vec<Collective>,
    bucket_s: &[f64],
    metrics_s: f64,
    ranks: usize,
) -> bool {
    let mut moved = false;
    while s.step < steps {
        let items = &programs[order(r, s.step)].items;
        if s.item == 0 && s.step == WARM_STEPS {
            s.counted_from = s.t;
        }
        let Some(item) = items.get(s.item) else {
            s.step += 1;
            s.item = 0;
            continue;
        };
        let counted = s.step >= WARM_STEPS;
        let mut hand_over = |cost_s: f64, s: &mut RankState| -> usize {
            let id = s.handed;
            s.handed += 1;
            if colls.len() == id {
                colls.push(Collective { cost_s, handed: vec![None; ranks], last_and_end: None });
            }
            debug_assert_eq!(colls[id].cost_s, cost_s, "collective {id} differs between ranks");
            colls[id].handed[r] = Some((s.t, counted));
            id
        };
        match *item {
            Item::Compute(secs) => s.t += secs,
            Item::Submit(b) if exchange => s.pending[b] = Some(hand_over(bucket_s[b], s)),
            Item::SubmitMetrics if exchange => s.pending_metrics = Some(hand_over(metrics_s, s)),
            Item::Submit(_) | Item::SubmitMetrics => {}
            Item::Wait(_) | Item::WaitMetrics => {
                let slot = match *item {
                    Item::Wait(b) => &mut s.pending[b],
                    _ => &mut s.pending_metrics,
                };
                if let Some(id) = *slot {
                    let Some((last, end)) = colls[id].last_and_end else {
                        return moved;
                    };
                    *slot = None;
                    if end > s.t {
                        if counted {
                            s.exposed += end - s.t;
                            s.slowest += (last.min(end) - s.t).max(0.0);
                        }
                        s.t = end;
                    }
                }
            }
        }
        s.item += 1;
        moved = true;
    }
    moved
}

#[cfg(test)]
mod tests {
    use super::*;
    use Item::*;

    fn prog(items: Vec<Item>) -> Vec<StepProgram> {
        vec![StepProgram { step: 1, items }]
    }

    /// One rank: every step runs the one program.
    fn alone(p: &[StepProgram], bucket_s: &[f64], steps: usize, exchange: bool) -> Outcome {
        replay(p, &|_, _| 0, 1, bucket_s, 0.0, steps, exchange)
    }

    #[test]
    fn one_rank_is_pure_compute() {
        let p = prog(vec![Compute(1.0), Submit(0), Wait(0), Compute(2.0)]);
        let o = alone(&p, &[5.0], 10, false);
        assert_eq!(o, Outcome { step_s: 3.0, comm_s: 0.0, exposed_s: 0.0, slowest_rank_s: 0.0 });
    }

    #[test]
    fn a_bucket_waited_next_step_hides_behind_the_start_of_that_step() {
        // G's bucket leaves at the end of the step and is waited for 1 s into the next one.
        let p = prog(vec![Compute(1.0), Wait(0), Compute(2.0), Submit(0)]);
        // 0.5 s of exchange: hidden entirely behind the next step's first second.
        let o = alone(&p, &[0.5], 10, true);
        assert!((o.step_s - 3.0).abs() < 1e-12 && o.exposed_s == 0.0 && o.hidden_fraction() == 1.0);
        // 1.5 s: 0.5 s of it is exposed every step, none of it waiting for another rank.
        let o = alone(&p, &[1.5], 10, true);
        assert!((o.step_s - 3.5).abs() < 1e-12, "{o:?}");
        assert!((o.exposed_s - 0.5).abs() < 1e-12 && (o.hidden_fraction() - 2.0 / 3.0).abs() < 1e-12);
        assert_eq!(o.slowest_rank_s, 0.0);
    }

    #[test]
    fn the_comm_thread_serves_buckets_in_order() {
        // Two buckets handed off together; the second waits behind the first.
        let p = prog(vec![Compute(1.0), Submit(0), Submit(1), Wait(1), Wait(0)]);
        let o = alone(&p, &[0.25, 0.5], 10, true);
        assert!((o.step_s - 1.75).abs() < 1e-12 && (o.exposed_s - 0.75).abs() < 1e-12, "{o:?}");
    }

    #[test]
    fn a_late_rank_is_waited_for_by_the_others() {
        // Rank 1 computes 1 s longer before handing D's bucket over; the allreduce takes 0.5 s.
        let p = vec![
            StepProgram { step: 1, items: vec![Compute(1.0), Submit(0), Wait(0), Compute(1.0)] },
            StepProgram { step: 2, items: vec![Compute(2.0), Submit(0), Wait(0), Compute(1.0)] },
        ];
        let o = replay(&p, &|r, _| r, 2, &[0.5], 0.0, 10, true);
        // Both end every step at 2 + 0.5 + 1 s. Rank 0 waits 1.5 s (1 s of it for rank 1),
        // rank 1 waits 0.5 s; rank 0's comm thread holds the bucket for 1.5 s, rank 1's 0.5 s.
        assert!((o.step_s - 3.5).abs() < 1e-12, "{o:?}");
        assert!((o.exposed_s - 1.0).abs() < 1e-12 && (o.slowest_rank_s - 0.5).abs() < 1e-12, "{o:?}");
        assert!((o.comm_s - 1.0).abs() < 1e-12 && o.hidden_fraction().abs() < 1e-12, "{o:?}");
        // The same ranks taking turns at being late: each step still waits for the late one.
        let o = replay(&p, &|r, k| (r + k) % 2, 2, &[0.5], 0.0, 10, true);
        assert!((o.step_s - 3.5).abs() < 1e-12 && (o.slowest_rank_s - 0.5).abs() < 1e-12, "{o:?}");
    }

    #[test]
    fn identical_ranks_replay_like_one() {
        let p = vec![
            StepProgram { step: 1, items: vec![Compute(1.0), Wait(0), Compute(0.5), Submit(1), Wait(1), Submit(0)] },
            StepProgram { step: 2, items: vec![Compute(1.5), Wait(0), Compute(0.25), Submit(1), Wait(1), Submit(0)] },
        ];
        let one = replay(&p, &|_, k| k % 2, 1, &[1.2, 0.3], 0.0, 12, true);
        let many = replay(&p, &|_, k| k % 2, 5, &[1.2, 0.3], 0.0, 12, true);
        // Equal up to the rounding of averaging over 5 ranks.
        let near = |a: f64, b: f64| (a - b).abs() < 1e-12;
        assert!(near(one.step_s, many.step_s) && near(one.comm_s, many.comm_s), "{one:?} {many:?}");
        assert!(near(one.exposed_s, many.exposed_s) && many.slowest_rank_s == 0.0, "{one:?} {many:?}");
        assert!(one.exposed_s > 0.0 && one.slowest_rank_s == 0.0, "{one:?}");
    }
}
