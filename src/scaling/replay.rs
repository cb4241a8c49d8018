//! The replay: consecutive steps of every rank's compute thread against the comm threads,
//! which average buckets in submission order. A collective cannot start before the last rank
//! has handed its bucket over, and then takes the cost model's time, so a rank whose step ran
//! long makes the others wait, as in a real job. What comes out is what a real run's summary
//! reports, averaged over ranks: step time, comm time per step, the part of it the compute
//! thread waited for (and of that, the part spent waiting for the slowest rank), and so the
//! hidden fraction.
//!
//! A collective may also cost the compute thread CPU (`CollectiveCost::cpu_s`): on ranks whose
//! cores all compute, the comm thread and the kernel's network stack take their time from
//! the compute. While such a collective runs, compute advances at 1 - cpu_s / duration of its
//! speed, so the CPU is lost only where compute runs beside it (none while the rank sits
//! waiting), and what the rank does after that compute (handing the next bucket over) comes
//! late by as much. A rank therefore computes past a hand-off only once the collectives it has
//! handed over are placed in time.

use super::program::{Item, StepProgram};

/// Steps at the start of a replay that are not counted: G's buckets of step s are waited for
/// in step s+1, so the first steps are not yet in the steady state.
pub const WARM_STEPS: usize = 2;

/// What one collective costs once every rank has handed it over.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CollectiveCost {
    /// Seconds on the wire: the cost model's time, or longer where `simulate::predict` has
    /// lengthened it for running beside compute.
    pub wire_s: f64,
    /// Compute seconds each rank loses to it if it computes the whole time the collective runs.
    pub cpu_s: f64,
}

impl CollectiveCost {
    /// A collective that takes no CPU from compute (its comm thread has a core of its own).
    pub fn wire_only(wire_s: f64) -> CollectiveCost {
        CollectiveCost { wire_s, cpu_s: 0.0 }
    }

    /// Seconds from start to end: the wire's, or its CPU's where that is longer (a collective
    /// cannot end before the work of moving its bytes is done).
    pub fn duration(&self) -> f64 {
        self.wire_s.max(self.cpu_s)
    }

    /// The fraction of compute speed it takes while it runs.
    fn cpu_share(&self) -> f64 {
        let d = self.duration();
        if d > 0.0 { self.cpu_s / d } else { 0.0 }
    }
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Outcome {
    pub step_s: f64,
    /// Comm thread busy per step: from the moment it has the bucket (and is free) until the
    /// collective ends, so it includes waiting inside the collective for a late rank, as the
    /// real comm thread's clock does.
    pub comm_s: f64,
    /// Compute thread blocked per step.
    pub exposed_s: f64,
    /// Of `exposed_s`, the part before the last rank handed the bucket over (what
    /// `dcgan-train trace-report` calls waiting for the slowest rank).
    pub slowest_rank_s: f64,
    /// Compute time per step lost to the collectives' CPU (included in `step_s`).
    pub cpu_s: f64,
    /// Per bucket, the share of its collectives' time that the ranks computed beside them
    /// (the rest they sat waiting), over the counted steps; 1 for a bucket never averaged.
    pub beside_compute: Vec<f64>,
}

impl Outcome {
    /// 1 - exposed / comm (0 when there is no communication), as summary.json defines it.
    pub fn hidden_fraction(&self) -> f64 {
        if self.comm_s > 0.0 { 1.0 - self.exposed_s / self.comm_s } else { 0.0 }
    }
}

/// One allreduce (a bucket or the metrics) as every rank takes part in it.
struct Collective {
    cost: CollectiveCost,
    /// Per rank: when it handed the data over, and whether that was in a counted step.
    handed: Vec<Option<(f64, bool)>>,
    /// When the last rank handed it over, when it started and when it ended; known once
    /// every rank has.
    placed: Option<Placed>,
    /// The bucket it averages (None: the metrics).
    bucket: Option<usize>,
    /// Seconds the ranks together sat waiting while it ran.
    blocked: f64,
}

#[derive(Clone, Copy)]
struct Placed {
    last: f64,
    start: f64,
    end: f64,
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
    /// The collectives with a CPU cost this rank handed over that may still be running.
    taking_cpu: Vec<usize>,
    comm: f64,
    exposed: f64,
    slowest: f64,
    cpu: f64,
}

/// Replay `steps` steps on `ranks` ranks; rank r runs `programs[order(r, k)]` as its step k.
/// `buckets[i]` is what averaging bucket i costs once every rank has it, `metrics` the same
/// for the metrics. `exchange = false`: nothing is sent and nothing waited for (one rank alone).
/// Every program must hand over the same collectives in the same order (see
/// `program::check_same_handoffs`).
pub fn replay(
    programs: &[StepProgram],
    order: &dyn Fn(usize, usize) -> usize,
    ranks: usize,
    buckets: &[CollectiveCost],
    metrics: CollectiveCost,
    steps: usize,
    exchange: bool,
) -> Outcome {
    assert!(!programs.is_empty() && steps > WARM_STEPS && ranks >= 1);
    let mut state = vec![RankState { pending: vec![None; buckets.len()], ..Default::default() }; ranks];
    let mut colls: Vec<Collective> = Vec::new();
    let (mut next_to_end, mut comm_free) = (0usize, 0.0f64);
    loop {
        let mut moved = false;
        for (r, s) in state.iter_mut().enumerate() {
            moved |= advance(r, s, programs, order, steps, exchange, &mut colls, buckets, metrics, ranks);
        }
        // Collectives run one after another in hand-off order, each from the moment the last
        // rank's comm thread has it; a rank's comm thread is busy from when it has it.
        while let Some(c) = colls.get_mut(next_to_end).filter(|c| c.handed.iter().all(Option::is_some)) {
            let last = c.handed.iter().map(|h| h.unwrap().0).fold(f64::MIN, f64::max);
            let start = last.max(comm_free);
            let end = start + c.cost.duration();
            for (s, h) in state.iter_mut().zip(&c.handed) {
                let (at, counted) = h.unwrap();
                if counted {
                    s.comm += end - at.max(comm_free);
                }
            }
            c.placed = Some(Placed { last, start, end });
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
    // Counted collectives that ended while every rank still ran (the last ones run on after).
    let (mut ran, mut blocked) = (vec![0.0; buckets.len()], vec![0.0; buckets.len()]);
    let all_done = state.iter().map(|s| s.t).fold(f64::MAX, f64::min);
    for c in colls.iter().filter(|c| c.handed.iter().all(|h| h.is_some_and(|(_, counted)| counted))) {
        if let (Some(b), Some(p)) = (c.bucket, c.placed.filter(|p| p.end <= all_done)) {
            ran[b] += (p.end - p.start) * ranks as f64;
            blocked[b] += c.blocked;
        }
    }
    let beside_compute =
        ran.iter().zip(&blocked).map(|(&r, &w)| if r > 0.0 { (1.0 - w / r).clamp(0.0, 1.0) } else { 1.0 }).collect();
    Outcome {
        step_s: mean(|s| s.t - s.counted_from),
        comm_s: mean(|s| s.comm),
        exposed_s: mean(|s| s.exposed),
        slowest_rank_s: mean(|s| s.slowest),
        cpu_s: mean(|s| s.cpu),
        beside_compute,
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
    buckets: &[CollectiveCost],
    metrics: CollectiveCost,
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
        let mut hand_over = |cost: CollectiveCost, bucket: Option<usize>, s: &mut RankState| -> usize {
            let id = s.handed;
            s.handed += 1;
            if colls.len() == id {
                colls.push(Collective { cost, handed: vec![None; ranks], placed: None, bucket, blocked: 0.0 });
            }
            debug_assert_eq!(colls[id].cost, cost, "collective {id} differs between ranks");
            colls[id].handed[r] = Some((s.t, counted));
            if cost.cpu_s > 0.0 {
                s.taking_cpu.push(id);
            }
            id
        };
        match *item {
            Item::Compute(secs) => {
                // The collectives that can run beside this compute are the ones this rank has
                // handed over: each must be placed before the compute can be.
                s.taking_cpu.retain(|&id| colls[id].placed.is_none_or(|p| p.end > s.t));
                if s.taking_cpu.iter().any(|&id| colls[id].placed.is_none()) {
                    return moved;
                }
                if s.taking_cpu.is_empty() {
                    s.t += secs;
                } else {
                    let windows =
                        s.taking_cpu.iter().map(|&id| (colls[id].placed.unwrap(), colls[id].cost.cpu_share()));
                    let end = computed_until(s.t, secs, windows);
                    if counted {
                        s.cpu += end - s.t - secs;
                    }
                    s.t = end;
                }
            }
            Item::Submit(b) if exchange => s.pending[b] = Some(hand_over(buckets[b], Some(b), s)),
            Item::SubmitMetrics if exchange => s.pending_metrics = Some(hand_over(metrics, None, s)),
            Item::Submit(_) | Item::SubmitMetrics => {}
            Item::Wait(_) | Item::WaitMetrics => {
                let slot = match *item {
                    Item::Wait(b) => &mut s.pending[b],
                    _ => &mut s.pending_metrics,
                };
                if let Some(id) = *slot {
                    let Some(Placed { last, end, .. }) = colls[id].placed else {
                        return moved;
                    };
                    *slot = None;
                    if end > s.t {
                        // Waiting from now until `end`: no compute beside the collectives
                        // running meanwhile (this one and those before it, placed in order).
                        for c in colls[..=id].iter_mut().rev() {
                            let p = c.placed.expect("placed in order");
                            if p.end <= s.t {
                                break;
                            }
                            c.blocked += (p.end.min(end) - p.start.max(s.t)).max(0.0);
                        }
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

/// When `work` seconds of compute started at `t` end, given the collectives running beside it
/// (placed one after another, in order) and the share of compute speed each takes.
fn computed_until(mut t: f64, mut work: f64, windows: impl Iterator<Item = (Placed, f64)>) -> f64 {
    for (p, share) in windows {
        if t + work <= p.start {
            break;
        }
        work -= (p.start - t).max(0.0);
        t = t.max(p.start);
        let speed = 1.0 - share;
        if speed > 0.0 && t + work / speed <= p.end {
            return t + work / speed;
        }
        work -= speed * (p.end - t);
        t = p.end;
    }
    t + work
}

#[cfg(test)]
mod tests {
    use super::*;
    use Item::*;

    fn prog(items: Vec<Item>) -> Vec<StepProgram> {
        vec![StepProgram { step: 1, items }]
    }

    /// Collectives that take wire time only.
    fn wire(seconds: &[f64]) -> Vec<CollectiveCost> {
        seconds.iter().map(|&s| CollectiveCost::wire_only(s)).collect()
    }

    /// One rank: every step runs the one program.
    fn alone(p: &[StepProgram], bucket_s: &[f64], steps: usize, exchange: bool) -> Outcome {
        replay(p, &|_, _| 0, 1, &wire(bucket_s), CollectiveCost::default(), steps, exchange)
    }

    #[test]
    fn one_rank_is_pure_compute() {
        let p = prog(vec![Compute(1.0), Submit(0), Wait(0), Compute(2.0)]);
        let o = alone(&p, &[5.0], 10, false);
        assert_eq!(o, Outcome { step_s: 3.0, beside_compute: vec![1.0], ..Default::default() });
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
        // The rank computed beside the first 1 s of each 1.5 s collective.
        assert!((o.beside_compute[0] - 2.0 / 3.0).abs() < 1e-12, "{o:?}");
        assert_eq!(o.slowest_rank_s, 0.0);
    }

    #[test]
    fn the_collectives_cpu_slows_only_the_compute_beside_it() {
        let run =
            |p: &[StepProgram], c: &[CollectiveCost]| replay(p, &|_, _| 0, 1, c, CollectiveCost::default(), 10, true);
        let cost = |wire_s, cpu_s| CollectiveCost { wire_s, cpu_s };
        let near = |a: f64, b: f64| (a - b).abs() < 1e-12;
        // Hidden behind the next step's first second, taking 0.4 of compute's speed for 0.5 s:
        // all 0.2 s of its CPU is lost to compute.
        let p = prog(vec![Compute(1.0), Wait(0), Compute(2.0), Submit(0)]);
        let o = run(&p, &[cost(0.5, 0.2)]);
        assert!(near(o.step_s, 3.2) && o.exposed_s == 0.0 && near(o.cpu_s, 0.2), "{o:?}");
        // Runs 1 s to 2 s at 0.4 of compute's speed: the 0.5 s of compute after the hand-off
        // ends at 1 + 0.5 / 0.6 s, then the rank waits; the step is as long as without CPU.
        let p = prog(vec![Compute(1.0), Submit(0), Compute(0.5), Wait(0), Compute(1.0)]);
        let o = run(&p, &[cost(1.0, 0.4)]);
        assert!(near(o.step_s, 3.0) && near(o.cpu_s, 0.5 / 0.6 - 0.5) && near(o.exposed_s, 1.0 - 0.5 / 0.6), "{o:?}");
        assert!(near(o.beside_compute[0], 0.5 / 0.6), "{o:?}");
        // Computing the whole time, with more CPU than the wait hid: the step grows by the rest.
        let p = prog(vec![Compute(1.0), Submit(0), Compute(1.0), Wait(0), Compute(1.0)]);
        let o = run(&p, &[cost(1.0, 0.8)]);
        assert!(near(o.step_s, 3.8) && o.exposed_s == 0.0 && near(o.cpu_s, 0.8), "{o:?}");
        // The next hand-off comes late by the CPU lost before it: X runs 1 s to 2 s at half
        // speed, so Y leaves at 2.5 s instead of 2 s and is waited for until 3.5 s.
        let p = prog(vec![Compute(1.0), Submit(0), Compute(1.0), Submit(1), Wait(0), Wait(1)]);
        let o = run(&p, &[cost(1.0, 0.5), cost(1.0, 0.0)]);
        assert!(near(o.step_s, 3.5) && near(o.exposed_s, 1.0) && near(o.cpu_s, 0.5), "{o:?}");
        // Blocked on another collective while X runs: only the 0.1 s computed beside X is slowed.
        let p = prog(vec![Compute(1.0), Submit(0), Submit(1), Compute(0.1), Wait(1), Wait(0)]);
        let o = run(&p, &[cost(1.0, 0.5), cost(0.5, 0.0)]);
        assert!(near(o.step_s, 2.5) && near(o.cpu_s, 0.1), "{o:?}");
        // X ran 1 s to 2 s, computed beside for 0.2 s; Y 2 s to 2.5 s, waited for throughout.
        assert!(near(o.beside_compute[0], 0.2) && o.beside_compute[1] == 0.0, "{o:?}");
        // More CPU than wire time: the collective lasts as long as its CPU, and stops compute.
        let p = prog(vec![Compute(1.0), Submit(0), Compute(1.0), Wait(0)]);
        let o = run(&p, &[cost(0.0, 0.3)]);
        assert!(near(o.step_s, 2.3) && near(o.cpu_s, 0.3) && o.exposed_s == 0.0, "{o:?}");
        // No exchange, no CPU.
        assert_eq!(alone(&p, &[1.0], 10, false).cpu_s, 0.0);
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
        let o = replay(&p, &|r, _| r, 2, &wire(&[0.5]), CollectiveCost::default(), 10, true);
        // Both end every step at 2 + 0.5 + 1 s. Rank 0 waits 1.5 s (1 s of it for rank 1),
        // rank 1 waits 0.5 s; rank 0's comm thread holds the bucket for 1.5 s, rank 1's 0.5 s.
        assert!((o.step_s - 3.5).abs() < 1e-12, "{o:?}");
        assert!((o.exposed_s - 1.0).abs() < 1e-12 && (o.slowest_rank_s - 0.5).abs() < 1e-12, "{o:?}");
        assert!((o.comm_s - 1.0).abs() < 1e-12 && o.hidden_fraction().abs() < 1e-12, "{o:?}");
        // The same ranks taking turns at being late: each step still waits for the late one.
        let o = replay(&p, &|r, k| (r + k) % 2, 2, &wire(&[0.5]), CollectiveCost::default(), 10, true);
        assert!((o.step_s - 3.5).abs() < 1e-12 && (o.slowest_rank_s - 0.5).abs() < 1e-12, "{o:?}");
    }

    #[test]
    fn identical_ranks_replay_like_one() {
        let p = vec![
            StepProgram { step: 1, items: vec![Compute(1.0), Wait(0), Compute(0.5), Submit(1), Wait(1), Submit(0)] },
            StepProgram { step: 2, items: vec![Compute(1.5), Wait(0), Compute(0.25), Submit(1), Wait(1), Submit(0)] },
        ];
        let one = replay(&p, &|_, k| k % 2, 1, &wire(&[1.2, 0.3]), CollectiveCost::default(), 12, true);
        let many = replay(&p, &|_, k| k % 2, 5, &wire(&[1.2, 0.3]), CollectiveCost::default(), 12, true);
        // Equal up to the rounding of averaging over 5 ranks.
        let near = |a: f64, b: f64| (a - b).abs() < 1e-12;
        assert!(near(one.step_s, many.step_s) && near(one.comm_s, many.comm_s), "{one:?} {many:?}");
        assert!(near(one.exposed_s, many.exposed_s) && many.slowest_rank_s == 0.0, "{one:?} {many:?}");
        assert!(one.exposed_s > 0.0 && one.slowest_rank_s == 0.0, "{one:?}");
    }
}
