//! The compute thread pool of a rank: how many threads, and whether idle helpers may spin.

use anyhow::Result;

/// `--threads` beyond this many per core is refused.
const MAX_THREADS_PER_CORE: usize = 8;

/// Size the compute thread pool: `threads`, or this host's cores shared by its ranks.
pub fn setup_threads(threads: Option<usize>, local_ranks: usize) -> Result<usize> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let n = threads.unwrap_or((cores / local_ranks.max(1)).max(1));
    anyhow::ensure!(n >= 1, "--threads must be at least 1");
    // Each thread is a compute worker with its own stack: far past the cores they only take
    // turns, and tens of thousands exhaust memory before the first step.
    let most = MAX_THREADS_PER_CORE * cores;
    anyhow::ensure!(
        n <= most,
        "--threads {n} is more than {MAX_THREADS_PER_CORE} per core of this host's {cores}: use at most {most} (the default is the cores divided by the ranks on the host)"
    );
    let mut pool = rayon::ThreadPoolBuilder::new().num_threads(n);
    // The program's main thread runs the step: make it worker 0, so that parallel ops run on
    // it and n - 1 helpers rather than waking n workers while it sleeps. With --threads 1 no
    // worker exists at all: an idle one would spin, and where ranks share cores that time
    // comes out of another rank's compute. Only the main thread: a test's thread that ended
    // would leave the pool without its worker 0.
    if std::thread::current().name() == Some("main") {
        pool = pool.use_current_thread();
    }
    // A second call (tests, several commands in one process) keeps the first pool.
    let n = if pool.build_global().is_ok() { n } else { rayon::current_num_threads() };
    // Idle helpers spin between ops (ops/cpu_helpers.rs) only while this host's ranks leave
    // them a core each: oversubscribed, they would take turns with another rank's compute.
    crate::ops::cpu_helpers::set_enabled(local_ranks.max(1) * n <= cores);
    Ok(n)
}
