//! The multi-rank exchange (`CommExchange`) on the Local transport: a step that panics while
//! finishing its buckets still waits, when the exchange is dropped, for the buckets it left
//! in flight, whose host memory the comm thread is still writing.

use dcgan_train::backend::cpu::Cpu;
use dcgan_train::backend::{Backend, View, ViewMut};
use dcgan_train::comm::allreduce::select::Policy;
use dcgan_train::comm::{CommConfig, CommHandle, Wire, start_local_group};
use dcgan_train::nn::params::{Init, ParamLayout, ParamStore};
use dcgan_train::train::ddp::buckets::Bucket;
use dcgan_train::train::ddp::comm_exchange::CommExchange;
use dcgan_train::train::ddp::exchange::{Exchange, NetId, Update};
use dcgan_train::train::timeline::Timeline;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Floats in each of G's two buckets.
const BUCKET: usize = 1024;

fn config() -> CommConfig {
    CommConfig {
        policy: Policy::Threshold(1024),
        fragment_bytes: 1 << 20,
        stall_timeout: Duration::from_secs(10),
        abort_on_failure: false,
        wire: Default::default(),
    }
}

fn grad(rank: usize, i: usize) -> f32 {
    ((i * 13 + rank * 7) % 23) as f32 - 11.0
}

/// G with two stages, each a bucket of its own; D with none.
fn exchange(comm: Rc<CommHandle>) -> CommExchange<Cpu> {
    let bucket = |id: u32, label, stage: usize| Bucket {
        id,
        label,
        range: stage * BUCKET..(stage + 1) * BUCKET,
        stages: vec![stage],
    };
    let g = vec![bucket(0, "G[1]", 0), bucket(1, "G[2]", 1)];
    CommExchange::new(&Cpu, comm, [g, Vec::new()], (2, 0), true, Wire::F32).unwrap()
}

/// A store of `floats` parameters whose gradients are `grad(rank, i)`.
fn store(floats: usize, rank: usize) -> ParamStore<Cpu> {
    let mut layout = ParamLayout::default();
    layout.add_param("w".into(), &[floats], Init::Constant(0.5));
    let mut s = ParamStore::new(&Cpu, layout, 1).unwrap();
    let g: Vec<f32> = (0..floats).map(|i| grad(rank, i)).collect();
    Cpu.upload(&g, ViewMut::whole(&mut s.grad));
    s
}

/// Rank 0 submits both buckets, then panics copying the first one back (the store it finishes
/// into is too small). Rank 1 hands its second bucket over only after a pause, so rank 0's is
/// still in flight when its exchange is dropped: the drop must wait for it, since the comm
/// thread writes the average into that bucket's memory. Had the panic taken the second bucket
/// out of the in-flight list (as draining the list did), the drop would return at once, rank 0
/// would free memory its comm thread still averages into, and rank 1 would see its peer fail.
#[test]
fn a_panic_while_finishing_leaves_the_drop_to_wait_for_buckets_in_flight() {
    let handles = start_local_group(2, config()).unwrap();
    let second_handed_over = AtomicBool::new(false);
    let results: Vec<Vec<f32>> = std::thread::scope(|s| {
        let second_handed_over = &second_handed_over;
        let threads: Vec<_> = handles
            .into_iter()
            .enumerate()
            .map(|(rank, handle)| {
                s.spawn(move || {
                    let comm = Rc::new(handle);
                    let mut ex = exchange(comm.clone());
                    let mut st = store(2 * BUCKET, rank);
                    let mut tl = Timeline::disabled();
                    let u = Update { lr: 1e-3, t: 1 };
                    ex.group_ready(&Cpu, NetId::G, &st, 0, &mut tl);
                    if rank == 1 {
                        std::thread::sleep(Duration::from_millis(300));
                        second_handed_over.store(true, Ordering::SeqCst);
                    }
                    ex.group_ready(&Cpu, NetId::G, &st, 1, &mut tl);
                    if rank == 0 {
                        let mut too_small = store(10, rank);
                        let finished = catch_unwind(AssertUnwindSafe(|| {
                            ex.finish(&Cpu, NetId::G, &mut too_small, u, &mut tl);
                        }));
                        assert!(finished.is_err(), "copying a bucket into a 10-float store must panic");
                        drop(ex);
                        assert!(
                            second_handed_over.load(Ordering::SeqCst),
                            "the drop returned before rank 1 handed over the bucket still in flight"
                        );
                    } else {
                        ex.finish(&Cpu, NetId::G, &mut st, u, &mut tl);
                    }
                    // The comm threads are still in step: one more average over both ranks.
                    let after = comm.allreduce_mean(vec![rank as f32]).unwrap();
                    assert_eq!(after, vec![0.5]);
                    let mut g = vec![0.0; 2 * BUCKET];
                    Cpu.download(View::whole(&st.grad), &mut g);
                    g
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().expect("rank thread panicked")).collect()
    });
    // Rank 1 received both averages, the second one from the memory rank 0 kept alive.
    for (i, &got) in results[1].iter().enumerate() {
        let want = (grad(0, i) + grad(1, i)) / 2.0;
        assert_eq!(got, want, "rank 1's averaged gradient {i}");
    }
}
