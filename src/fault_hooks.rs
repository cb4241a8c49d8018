//! Faults the integration tests inject into a real run, each named by a `DCGAN_TEST_*`
//! environment variable (unset in normal use: every hook is then a no-op). They live here, in
//! one place, so that a reader sees every way a test can bend the program.
//!
//! | variable | effect |
//! |---|---|
//! | `DCGAN_TEST_FAIL_BUILD_ON_RANK=r` | building the model fails on rank r alone |
//! | `DCGAN_TEST_STOP_AT_STEP=n` | step n (1-based) asks to stop, as SIGTERM would |
//! | `DCGAN_TEST_SIGNAL_IN_STEP=n` | SIGTERM reaches step n once it has begun |
//! | `DCGAN_TEST_SLOW_RANK=r:ms` | rank r starts every step ms milliseconds late |
//! | `DCGAN_TEST_SLOW_COMM=ms` | the comm thread naps before each fragment of a gradient bucket |
//! | `DCGAN_TEST_DELAY_RANK=r` | in bench-allreduce, rank r arrives far past the stall timeout |

use std::time::Duration;

fn var(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// Building the model fails on this rank alone (on a GPU: its memory), while the others build.
pub fn fail_build_on(rank: usize) -> bool {
    var("DCGAN_TEST_FAIL_BUILD_ON_RANK").and_then(|v| v.parse::<usize>().ok()) == Some(rank)
}

/// The step (1-based) that asks to stop as SIGTERM would: a signal cannot be aimed at the
/// run's last step.
pub fn stop_at_step() -> Option<u64> {
    var("DCGAN_TEST_STOP_AT_STEP")?.parse().ok()
}

/// The step (1-based) that SIGTERM reaches once it has begun: after the check at its start, as
/// most signals come.
pub fn signal_in_step() -> Option<u64> {
    var("DCGAN_TEST_SIGNAL_IN_STEP")?.parse().ok()
}

/// How late this rank starts every step, so that the others wait for it (the wait accounting).
pub fn slow_rank_nap(rank: usize) -> Option<Duration> {
    let v = var("DCGAN_TEST_SLOW_RANK")?;
    let (r, ms) = v.split_once(':')?;
    (r.parse::<usize>().ok()? == rank).then_some(Duration::from_millis(ms.parse().ok()?))
}

/// A nap before each fragment of a gradient bucket on the comm thread: an error then finds
/// buckets still in flight (no bucket may write into freed memory).
pub fn comm_fragment_nap() -> Option<Duration> {
    Some(Duration::from_millis(var("DCGAN_TEST_SLOW_COMM")?.parse().ok()?))
}

/// In bench-allreduce, this rank arrives late enough for the others' stall timeout to fire.
pub fn delayed_bench_rank(rank: usize) -> bool {
    var("DCGAN_TEST_DELAY_RANK").and_then(|v| v.parse::<usize>().ok()) == Some(rank)
}
