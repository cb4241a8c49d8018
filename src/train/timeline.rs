//! The training thread's view of the Chrome trace: spans tagged with the step they belong
//! to, recorded for the first `--trace-steps` steps only (a trace of every step of a long run
//! would be gigabytes).

use crate::report::trace::Trace;
pub use crate::report::trace::Track;
use std::time::Instant;

pub struct Timeline {
    pub trace: Trace,
    /// The step being recorded.
    pub step: u64,
    /// Record steps below this.
    pub steps_limit: u64,
}

impl Timeline {
    pub fn new(trace: Trace, steps_limit: u64) -> Self {
        Timeline { trace, step: 0, steps_limit }
    }

    /// Records nothing.
    pub fn disabled() -> Self {
        Self::new(Trace::disabled(), 0)
    }

    fn on(&self, step: u64) -> bool {
        step < self.steps_limit && self.trace.is_enabled()
    }

    /// `name` (a stage or bucket label) on `track` from `start` to `end`; `cat` says what
    /// it was ("forward", "allreduce", ...).
    pub fn span(&mut self, track: Track, cat: &'static str, name: &'static str, start: Instant, end: Instant) {
        if self.on(self.step) {
            self.trace.span(track, name, cat, start, end, &[("step", self.step.into())]);
        }
    }

    /// A span that moved `bytes` (copies, allreduces), with the algorithm when there is one.
    #[allow(clippy::too_many_arguments)]
    pub fn span_with(
        &mut self,
        track: Track,
        cat: &'static str,
        name: &'static str,
        start: Instant,
        end: Instant,
        bytes: usize,
        algorithm: &'static str,
    ) {
        self.span_of_step(self.step, track, cat, name, start, end, bytes, algorithm);
    }

    /// An arrow from the span enclosing `from_time` on `from` to the span enclosing `to_time`
    /// on `to`, for work of `step`; `id` unique among this rank's flows of that step.
    #[allow(clippy::too_many_arguments)]
    pub fn flow_of_step(
        &mut self,
        step: u64,
        id: u32,
        name: &'static str,
        from: Track,
        from_time: Instant,
        to: Track,
        to_time: Instant,
    ) {
        if self.on(step) {
            let id = (step << 20) | u64::from(id);
            self.trace.flow(id, name, "hand-off", from, from_time, to, to_time);
        }
    }

    /// `span_with` for work that belongs to `step` though it is recorded later (G's buckets
    /// are waited for in the next step).
    #[allow(clippy::too_many_arguments)]
    pub fn span_of_step(
        &mut self,
        step: u64,
        track: Track,
        cat: &'static str,
        name: &'static str,
        start: Instant,
        end: Instant,
        bytes: usize,
        algorithm: &'static str,
    ) {
        if self.on(step) {
            let step = ("step", step.into());
            let b = ("bytes", bytes.into());
            if algorithm.is_empty() {
                self.trace.span(track, name, cat, start, end, &[step, b]);
            } else {
                self.trace.span(track, name, cat, start, end, &[step, b, ("algorithm", algorithm.into())]);
            }
        }
    }
}
