//! A stop asked for during a step that will not end soon. SIGINT and SIGTERM normally let the
//! step in progress finish (then a checkpoint is written), but a step of a large batch can take
//! minutes: a step still running half a second after the stop was first noticed is dropped at
//! the next boundary between layers, and the run ends at its last checkpoint.

use super::signals::StopFlag;
use std::time::{Duration, Instant};

/// How long a step may go on after a stop was noticed before it is dropped.
/// Longer than a step at the default batch takes on a CPU, so that a stop there still finishes
/// its step and writes a checkpoint.
pub const GRACE: Duration = Duration::from_millis(500);

pub struct Interrupt {
    flag: StopFlag,
    /// When a layer boundary first saw the stop.
    noticed: Option<Instant>,
    /// The step in progress is being dropped.
    tripped: bool,
}

impl Interrupt {
    pub fn new(flag: StopFlag) -> Interrupt {
        Interrupt { flag, noticed: None, tripped: false }
    }

    /// A step begins. A stop noticed in the previous step, after its metrics had left, can end
    /// the run only after this one: its grace runs from this step's first layer boundary.
    pub fn step_begins(&mut self) {
        if !self.tripped {
            self.noticed = None;
        }
    }

    /// Asked between layers: whether the step in progress must be dropped now.
    pub fn due(&mut self) -> bool {
        self.due_at(Instant::now())
    }

    fn due_at(&mut self, now: Instant) -> bool {
        if !self.tripped && self.flag.requested() {
            let noticed = *self.noticed.get_or_insert(now);
            self.tripped = now.duration_since(noticed) >= GRACE;
        }
        self.tripped
    }

    /// Whether the step was dropped (read after each part of the step).
    pub fn tripped(&self) -> bool {
        self.tripped
    }
}

/// The error of a step dropped by an `Interrupt`: the step (1-based) that did not complete.
#[derive(Debug)]
pub struct StepInterrupted {
    pub step: u64,
}

impl std::fmt::Display for StepInterrupted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "step {} was dropped by a stop signal", self.step)
    }
}

impl std::error::Error for StepInterrupted {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stop_trips_only_after_the_grace_and_stays_tripped() {
        let flag = StopFlag::unset();
        let mut i = Interrupt::new(flag.clone());
        assert!(!i.due(), "no stop asked");
        flag.request();
        assert!(!i.due(), "the step may still finish");
        std::thread::sleep(GRACE + Duration::from_millis(50));
        assert!(i.due() && i.tripped());
        assert!(i.due(), "once tripped, the rest of the step is dropped too");
        i.step_begins();
        assert!(i.due(), "a dropped step ends the run: nothing after it may start afresh");
    }

    #[test]
    fn the_step_after_a_stop_gets_a_grace_of_its_own() {
        let (flag, t0) = (StopFlag::unset(), Instant::now());
        let mut i = Interrupt::new(flag.clone());
        flag.request();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        assert!(!i.due_at(at(0)), "noticed late in a step, after its metrics left");
        assert!(!i.due_at(at(300)), "the step may still finish");
        i.step_begins();
        assert!(!i.due_at(at(400)), "the next step's first layer boundary");
        assert!(!i.due_at(at(800)), "the next step was dropped within its own grace");
        assert!(i.due_at(at(900)), "a step still running its grace after the stop was kept");
    }
}
