//! How long a two-way rayon join takes when the helper thread has been idle for a while,
//! with the helper asleep (rayon's own behaviour) and kept spinning (ops/cpu_helpers.rs):
//! `cargo bench --bench helper_wakeup`. Each half is ~50 us of arithmetic; a join that
//! takes as long as both halves on one thread means the helper woke too late to help.

use dcgan_train::ops::cpu_helpers::keep_awake;
use std::hint::black_box;
use std::time::{Duration, Instant};

fn half() -> f64 {
    (0..20_000).map(|i| (i as f64).sqrt()).sum()
}

fn busy_wait(d: Duration) {
    let t = Instant::now();
    while t.elapsed() < d {
        std::hint::spin_loop();
    }
}

fn main() {
    // The main thread is worker 0, as in the program (backend::threads::setup_threads).
    rayon::ThreadPoolBuilder::new().num_threads(2).use_current_thread().build_global().unwrap();
    let one_thread = {
        let t = Instant::now();
        black_box(half() + half());
        t.elapsed().as_secs_f64() * 1e6
    };
    println!("both halves on one thread: {one_thread:.0} us");
    for spin in [false, true] {
        for gap_us in [0u64, 20, 100, 1000] {
            let mut us: Vec<f64> = (0..200)
                .map(|_| {
                    busy_wait(Duration::from_micros(gap_us));
                    if spin {
                        keep_awake();
                    }
                    let t = Instant::now();
                    black_box(rayon::join(half, half));
                    t.elapsed().as_secs_f64() * 1e6
                })
                .collect();
            us.sort_by(|a, b| a.total_cmp(b));
            println!(
                "helper {:<8} after {gap_us:>4} us idle: join p10 {:.0}  median {:.0}  p90 {:.0} us",
                if spin { "spinning" } else { "asleep" },
                us[20],
                us[100],
                us[180]
            );
        }
    }
}
