//! Keeps the CPU backend's rayon helper threads spinning between parallel ops, so that the
//! next op's work is picked up at once instead of after a wake-up.
//!
//! Rayon puts an idle worker to sleep after a few dozen yields (tens of microseconds), and a
//! step runs hundreds of parallel regions (every GEMM block, im2col, batch norm...). On a
//! virtual machine waking a sleeping worker can take longer than a short region: a join with
//! a sleeping helper ended later than the same work on one thread (`benches/helper_wakeup.rs`,
//! docs/performance/cpu-step.md). PyTorch's OpenMP threads spin between regions for the same
//! reason (GOMP_SPINCOUNT).
//!
//! A spinner is a job on each helper that polls the pool for work (`rayon::yield_now`) and
//! runs it, and gives the thread back to rayon's own sleep after `IDLE_LIMIT` without any.
//! The ops that start a layer's work (convolutions, batch-norm statistics and reductions,
//! activations, Adam) re-arm it, so it spins only while the step is computing: an idle rank,
//! or one waiting for the exchange, costs at most `IDLE_LIMIT` of each helper's core. Arming
//! allocates one rayon broadcast job, which happens only after such an idle stretch, not per
//! op.
//!
//! One counter covers all helpers: with more than one, a helper whose spinner timed out
//! sleeps until the others' have too (they see the same ops, so they time out close
//! together). The machines this project runs on give a rank one or two threads.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// How long a helper spins without finding work before it sleeps. Longer than the serial
/// stretches between a step's parallel ops (a few to a few hundred microseconds), short
/// enough that a rank waiting on the network does not hold a core for long.
const IDLE_LIMIT: Duration = Duration::from_millis(2);

/// Spinners running (0 when the helpers sleep or were never armed).
static SPINNING: AtomicUsize = AtomicUsize::new(0);

/// Whether arming is allowed at all (see `set_enabled`).
static ENABLED: AtomicBool = AtomicBool::new(true);

/// Allows or forbids spinning. `backend::threads::setup_threads` forbids it when the ranks of a host
/// ask for more compute threads than it has cores: a spinning helper would then take turns
/// on a core with another rank's compute thread instead of with nothing.
pub fn set_enabled(enabled: bool) {
    ENABLED.store(enabled, Ordering::Release);
}

/// Arms a spinner on every helper unless they already spin; true when this call armed them.
/// Only from worker 0 of the pool, which `backend::threads::setup_threads` makes the program's main
/// thread: a thread outside the pool, such as a test's, keeps rayon's plain behaviour, and
/// no worker is ever left waiting on itself.
pub fn keep_awake() -> bool {
    let helpers = rayon::current_num_threads().saturating_sub(1);
    if helpers == 0
        || !ENABLED.load(Ordering::Acquire)
        || rayon::current_thread_index() != Some(0)
        || SPINNING.load(Ordering::Acquire) != 0
    {
        return false;
    }
    if SPINNING.compare_exchange(0, helpers, Ordering::AcqRel, Ordering::Acquire).is_err() {
        return false;
    }
    rayon::spawn_broadcast(|ctx| {
        // Worker 0 is the thread that armed us: it has its own work to do.
        if ctx.index() == 0 {
            return;
        }
        let mut last_work = Instant::now();
        loop {
            if rayon::yield_now() == Some(rayon::Yield::Executed) {
                last_work = Instant::now();
            } else if last_work.elapsed() > IDLE_LIMIT {
                break;
            } else {
                // Not a pause loop: the scheduler may run another thread of this core (the
                // comm thread, another rank) in between, while we stay runnable (no wake-up
                // needed).
                std::thread::yield_now();
            }
        }
        SPINNING.fetch_sub(1, Ordering::AcqRel);
    });
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use rayon::prelude::*;

    /// On worker 0 of a pool, the first call arms the helper's spinner and later calls leave
    /// it be while it runs; the work still gives the right answer; the spinner stops by
    /// itself once the work ends, and a call after that arms it again, unless spinning is
    /// disabled. (The only test that arms: other tests' threads are not worker 0 of a pool.)
    #[test]
    fn spinners_arm_once_and_stop_when_idle() {
        std::thread::spawn(|| {
            let pool = rayon::ThreadPoolBuilder::new().num_threads(2).use_current_thread().build().unwrap();
            assert_eq!(rayon::current_thread_index(), Some(0));
            let wait_until_stopped = || {
                let deadline = Instant::now() + Duration::from_secs(10);
                while SPINNING.load(Ordering::Acquire) != 0 {
                    assert!(Instant::now() < deadline, "the spinner did not stop after {IDLE_LIMIT:?} idle");
                    std::thread::sleep(Duration::from_millis(1));
                }
            };
            assert!(keep_awake(), "the first call should arm the spinner");
            let mut armed = 1;
            for round in 1..50u64 {
                // Re-arms only if the spinner timed out meanwhile (a long preemption).
                armed += keep_awake() as u32;
                let sum: u64 = (0..10_000u64).into_par_iter().map(|i| i * round).sum();
                assert_eq!(sum, round * (10_000 * 9_999 / 2));
            }
            assert!(armed < 50, "arming should not repeat while the spinner runs");
            wait_until_stopped();
            assert!(keep_awake(), "once stopped, the spinner should be armed again");
            wait_until_stopped();
            // Forbidden (an oversubscribed host), nothing is armed. In this test rather than
            // its own, which would race with the arming above.
            set_enabled(false);
            assert!(!keep_awake(), "a disabled spinner should not be armed");
            assert_eq!(SPINNING.load(Ordering::Acquire), 0);
            set_enabled(true);
            drop(pool);
        })
        .join()
        .unwrap();
    }
}
