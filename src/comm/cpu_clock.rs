//! The calling thread's CPU time: what the comm thread's polling, copies and sums take from
//! the cores, which wall time inside a collective cannot show.

use std::time::Duration;

/// CPU time consumed by the calling thread since it started (CLOCK_THREAD_CPUTIME_ID, user
/// plus system). Zero where the clock cannot be read.
pub fn thread_cpu_time() -> Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid timespec for the call to fill in.
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) } != 0 {
        return Duration::ZERO;
    }
    Duration::new(ts.tv_sec.max(0) as u64, ts.tv_nsec.clamp(0, 999_999_999) as u32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn counts_this_threads_work_and_not_its_sleep_or_other_threads() {
        // Another thread burning CPU must not show in this thread's clock (a process clock
        // would count it).
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let burner = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            })
        };
        let (wall0, cpu0) = (Instant::now(), thread_cpu_time());
        std::thread::sleep(Duration::from_millis(60));
        let slept = thread_cpu_time() - cpu0;
        // Work until the clock shows 30 ms more; a clock that does not advance with work
        // would spin here until the 5 s guard.
        let (guard, mut x) = (Instant::now(), 0u64);
        while thread_cpu_time() - cpu0 < slept + Duration::from_millis(30) && guard.elapsed() < Duration::from_secs(5) {
            for _ in 0..10_000 {
                x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
            }
        }
        let cpu = thread_cpu_time() - cpu0;
        let wall = wall0.elapsed();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        burner.join().unwrap();
        assert!(slept < Duration::from_millis(20), "a 60 ms sleep cost {slept:?} of CPU");
        assert!(guard.elapsed() < Duration::from_secs(5), "5 s of arithmetic showed as {cpu:?} of CPU");
        assert!(cpu <= wall, "thread CPU {cpu:?} over wall {wall:?}: not a per-thread clock");
    }
}
