//! How far the comm thread has averaged a bucket, so that the training thread can copy each
//! fragment back to the device while the next one is still being averaged.

use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// The training thread's end: waits for a prefix of the bucket to be averaged.
#[derive(Default)]
pub struct FragmentProgress {
    /// (elements averaged from the start of the bucket, the comm thread's end is gone)
    state: Mutex<(usize, bool)>,
    changed: Condvar,
}

/// The comm thread's end, moved into the bucket's fragment hook. Dropping it (with the
/// bucket, done or failed) closes the progress, so no waiter outlives the bucket.
pub struct ProgressSender(Arc<FragmentProgress>);

impl FragmentProgress {
    /// The two ends of a new progress.
    pub fn new() -> (Arc<FragmentProgress>, ProgressSender) {
        let p = Arc::new(FragmentProgress::default());
        (p.clone(), ProgressSender(p))
    }

    /// Wait until the first `n` elements are averaged: true. False when the comm thread's
    /// end closed short of that (a failed allreduce) or nothing came for `patience`: the
    /// caller then waits for the whole bucket, where failures and stalls are reported.
    pub fn wait_for(&self, n: usize, patience: Duration) -> bool {
        let deadline = Instant::now() + patience;
        let mut s = self.state.lock().unwrap();
        while s.0 < n && !s.1 {
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            s = self.changed.wait_timeout(s, deadline - now).unwrap().0;
        }
        s.0 >= n
    }
}

impl ProgressSender {
    /// The first `n` elements are averaged (fragments finish in order).
    pub fn averaged(&self, n: usize) {
        let mut s = self.0.state.lock().unwrap();
        s.0 = s.0.max(n);
        self.0.changed.notify_all();
    }
}

impl Drop for ProgressSender {
    fn drop(&mut self) {
        self.0.state.lock().unwrap().1 = true;
        self.0.changed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LONG: Duration = Duration::from_secs(30);

    #[test]
    fn a_waiter_wakes_when_its_prefix_is_averaged_on_another_thread() {
        let (p, tx) = FragmentProgress::new();
        let comm = std::thread::spawn(move || {
            for end in [100, 200, 300] {
                std::thread::sleep(Duration::from_millis(5));
                tx.averaged(end);
            }
            tx
        });
        assert!(p.wait_for(200, LONG));
        assert!(p.wait_for(300, LONG));
        drop(comm.join().unwrap());
        // Closed after everything was averaged: what was reached stays reached.
        assert!(p.wait_for(300, LONG));
    }

    #[test]
    fn a_bucket_that_fails_midway_releases_its_waiter_at_once() {
        let (p, tx) = FragmentProgress::new();
        tx.averaged(100);
        let t = Instant::now();
        let comm = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(5));
            drop(tx); // the allreduce failed: the hook is dropped with the bucket
        });
        assert!(!p.wait_for(200, LONG));
        assert!(t.elapsed() < LONG / 2, "waited for the patience instead of the close");
        comm.join().unwrap();
        assert!(p.wait_for(100, LONG));
    }

    #[test]
    fn no_news_within_the_patience_gives_up() {
        let (p, _tx) = FragmentProgress::new();
        assert!(!p.wait_for(1, Duration::from_millis(10)));
    }
}
