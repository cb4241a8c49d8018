//! SIGINT and SIGTERM ask training to stop after the current step (with a checkpoint)
//! instead of killing it; a second signal of the same kind kills at once.

use anyhow::Result;
use signal_hook::consts::{SIGINT, SIGTERM};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

#[derive(Clone)]
pub struct StopFlag(Arc<AtomicBool>);

impl StopFlag {
    pub fn install() -> Result<StopFlag> {
        let flag = Arc::new(AtomicBool::new(false));
        for sig in [SIGINT, SIGTERM] {
            // The second signal finds the flag set and terminates the process.
            signal_hook::flag::register_conditional_shutdown(sig, 1, flag.clone())?;
            signal_hook::flag::register(sig, flag.clone())?;
        }
        Ok(StopFlag(flag))
    }

    pub fn requested(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    /// A flag no signal sets (for tests of what reads it).
    #[cfg(test)]
    pub fn unset() -> StopFlag {
        StopFlag(Arc::new(AtomicBool::new(false)))
    }

    /// Set the flag as a signal would.
    #[cfg(test)]
    pub fn request(&self) {
        self.0.store(true, Ordering::Relaxed);
    }
}
