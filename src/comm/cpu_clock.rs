//! The calling thread's CPU time, and its time waiting for a core: what the comm thread's
//! polling, copies and sums take from the cores, which wall time cannot show.

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

/// Time one thread has spent runnable but waiting for a core since it started (the scheduler's
/// run delay, from its /proc schedstat): what other threads and processes took from it. The
/// file stays open, so a reading is one read into a stack buffer: the training loop takes two
/// per step.
pub struct RunDelayClock(std::fs::File);

impl RunDelayClock {
    /// The clock of the calling thread (/proc/thread-self names the thread that opens it).
    /// None where the kernel keeps none (not Linux, or built without schedstats).
    pub fn of_this_thread() -> Option<Self> {
        let clock = RunDelayClock(std::fs::File::open("/proc/thread-self/schedstat").ok()?);
        clock.read().map(|_| clock)
    }

    pub fn read(&self) -> Option<Duration> {
        // Three numbers of at most 20 digits each.
        let mut buf = [0u8; 96];
        let n = std::os::unix::fs::FileExt::read_at(&self.0, &mut buf, 0).ok()?;
        parse_run_delay(std::str::from_utf8(&buf[..n]).ok()?)
    }
}

/// schedstat is "ns on a CPU, ns waiting on a run queue, time slices".
fn parse_run_delay(schedstat: &str) -> Option<Duration> {
    let mut fields = schedstat.split_whitespace();
    fields.next()?.parse::<u64>().ok()?;
    Some(Duration::from_nanos(fields.next()?.parse().ok()?))
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

    #[test]
    fn schedstat_gives_the_second_field_as_the_run_delay() {
        assert_eq!(parse_run_delay("9010520321 660762 26\n"), Some(Duration::from_nanos(660762)));
        assert_eq!(parse_run_delay("9010520321\n"), None);
        assert_eq!(parse_run_delay("x 5 1"), None);
    }

    /// Two threads that spin on one core: each waits for the other about half the time.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_thread_sharing_its_core_with_a_spinner_waits_for_it() {
        let Some(clock) = RunDelayClock::of_this_thread() else {
            eprintln!("skipped: this kernel keeps no /proc/thread-self/schedstat");
            return;
        };
        let before = clock.read().unwrap();
        fn pin() -> i32 {
            // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET writes within it; pid 0
            // is the calling thread.
            unsafe {
                let mut one_core: libc::cpu_set_t = std::mem::zeroed();
                libc::CPU_SET(0, &mut one_core);
                libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &one_core)
            }
        }
        if pin() != 0 {
            eprintln!("skipped: cannot pin threads to core 0 here");
            return;
        }
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let spinner = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                pin();
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            })
        };
        let wall0 = Instant::now();
        let mut x = 0u64;
        while wall0.elapsed() < Duration::from_millis(400) {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
        let waited = clock.read().unwrap() - before;
        let wall = wall0.elapsed();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        spinner.join().unwrap();
        // About half (more if other tests' threads land on core 0 too); a clock that ignored
        // the spinner would stay near zero.
        assert!(waited > wall / 5 && waited < wall, "waited {waited:?} for a core in {wall:?} beside a spinner");
    }
}
