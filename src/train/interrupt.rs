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

    /// Asked between layers: whether the step in progress must be dropped now.
    pub fn due(&mut self) -> bool {
        if !self.tripped && self.flag.requested() {
            let noticed = *self.noticed.get_or_insert_with(Instant::now);
            self.tripped = noticed.elapsed() >= GRACE;
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
    }
}
