//! The wire packed on the device (`train::ddp::device_packing`) against the comm thread's own
//! packing: three ranks (Local transport, each with the CUDA emulator) run the real exchange
//! over three steps, buckets cut into several fragments (some of odd length), one bucket too
//! small to pack `--wire 1bit` beside them. Both wires: the weights after each step's Adam
//! must be the same bits both ways, and the device must have copied the small form. 1-bit:
//! every rank's residuals the same bits, and the residual norms the same to f32 rounding.
#![cfg(feature = "cuda")]

mod cuda_common;

use dcgan_train::backend::cuda::Cuda;
use dcgan_train::backend::{Backend, View, ViewMut};
use dcgan_train::checkpoint::RankResiduals;
use dcgan_train::comm::allreduce::select::Policy;
use dcgan_train::comm::handle::fragments;
use dcgan_train::comm::{CommConfig, Wire, start_local_group};
use dcgan_train::nn::params::{Init, ParamLayout, ParamStore};
use dcgan_train::train::ddp::buckets::Bucket;
use dcgan_train::train::ddp::comm_exchange::CommExchange;
use dcgan_train::train::ddp::exchange::{Exchange, NetId, Update};
use dcgan_train::train::timeline::Timeline;
use std::rc::Rc;
use std::time::Duration;

const RANKS: usize = 3;
/// Side by side in pairs (as the replicas of two pipelines' stages average): ranks 0 and 2,
/// 1 and 3.
const PAIRED_RANKS: usize = 4;
/// G's buckets: two of several fragments, and one of 4 values (stripes of one or two values,
/// whose encodings do not fit in their floats: the comm thread quantizes it).
const BUCKETS: [usize; 3] = [4000, 2600, 4];
const STEPS: u64 = 3;

fn config(wire: Wire) -> CommConfig {
    CommConfig {
        policy: Policy::Threshold(1024),
        // At most 1501 values: nearly equal fragments, some of odd length (1333), whose bf16
        // take half a float more than half of theirs.
        fragment_bytes: 4 * 1501,
        stall_timeout: Duration::from_secs(30),
        abort_on_failure: false,
        wire,
    }
}

fn grad(rank: usize, step: u64, i: usize) -> f32 {
    let x = (i as u64 * 2654435761 + rank as u64 * 97 + step * 7919) % 10007;
    (x as f32 / 10007.0 - 0.45) * (1.0 + step as f32)
}

/// What one rank ends with: its weights, its residuals, the residual norms after each step
/// and while each step's buckets are in flight (the norms are those after the last exchange
/// finished), and the comm thread's own residuals of the packable buckets' values (zeros
/// where the device holds them), and the bytes staged to the host.
type RankEnd = (Vec<f32>, Option<RankResiduals>, Vec<[Option<f32>; 2]>, Vec<f32>, u64);

/// `paired`: PAIRED_RANKS ranks whose buckets are averaged in pairs; otherwise RANKS ranks
/// averaging over all.
fn run(wire: Wire, pack_on_device: bool, paired: bool) -> Vec<RankEnd> {
    let ranks = if paired { PAIRED_RANKS } else { RANKS };
    let handles = start_local_group(ranks, config(wire)).unwrap();
    std::thread::scope(|s| {
        let threads: Vec<_> = handles
            .into_iter()
            .enumerate()
            .map(|(rank, handle)| {
                s.spawn(move || {
                    let cu = Cuda::emulated(4).unwrap();
                    let comm = Rc::new(handle);
                    if paired {
                        comm.set_bucket_group((rank % 2..ranks).step_by(2).collect()).unwrap();
                    }
                    let mut at = 0;
                    let plan: Vec<Bucket> = BUCKETS
                        .iter()
                        .enumerate()
                        .map(|(k, &n)| {
                            at += n;
                            Bucket { id: k as u32, label: "G", range: at - n..at, stages: vec![k] }
                        })
                        .collect();
                    let total = at;
                    let stages = (BUCKETS.len(), 0);
                    let pack = if pack_on_device { wire } else { Wire::F32 };
                    let mut ex = CommExchange::new(&cu, comm.clone(), [plan, Vec::new()], stages, true, pack).unwrap();
                    ex.compress_from(0);
                    let mut layout = ParamLayout::default();
                    layout.add_param("w".into(), &[total], Init::Constant(0.5));
                    let mut st = ParamStore::new(&cu, layout, 1).unwrap();
                    let mut tl = Timeline::disabled();
                    let mut norms = Vec::new();
                    for step in 0..STEPS {
                        let g: Vec<f32> = (0..total).map(|i| grad(rank, step, i)).collect();
                        cu.upload(&g, ViewMut::whole(&mut st.grad));
                        for k in 0..BUCKETS.len() {
                            ex.group_ready(&cu, NetId::G, &st, k, &mut tl);
                        }
                        ex.flush(&cu, NetId::G, &st, &mut tl);
                        norms.push(ex.residual_norms(&cu));
                        let u = Update::next(&mut st, 1e-2);
                        ex.finish(&cu, NetId::G, &mut st, u, &mut tl);
                        norms.push(ex.residual_norms(&cu));
                    }
                    let mut w = vec![0.0; total];
                    cu.download(View::whole(&st.value), &mut w);
                    let held = comm.residuals().unwrap();
                    let comm_own: Vec<f32> =
                        held.iter().filter(|(id, _)| *id < 2).flat_map(|(_, r)| r.own.clone()).collect();
                    (w, ex.residuals(&cu).unwrap(), norms, comm_own, ex.stats.staged)
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().expect("rank thread panicked")).collect()
    })
}

fn emulator() -> bool {
    let there = dcgan_train::backend::cuda::emu::is_available();
    if !there {
        eprintln!("device_packing: skipped: no C++ compiler for the emulator");
    }
    there
}

fn same(a: &[f32], b: &[f32]) -> bool {
    a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

/// Every rank's weights and residuals the same bits whether the device or the comm thread
/// packed the 1-bit wire, and the residual norms the same to f32 rounding.
fn assert_the_same_ends(host: &[RankEnd], device: &[RankEnd]) {
    for (rank, ((hw, hr, hn, host_own, _), (dw, dr, dn, device_own, _))) in host.iter().zip(device).enumerate() {
        // It did pack: the comm thread held no own residual of the packable buckets.
        assert!(device_own.iter().all(|&x| x == 0.0), "rank {rank}: the comm thread quantized");
        assert!(host_own.iter().any(|&x| x != 0.0), "rank {rank}: no residual without packing");
        assert!(same(hw, dw), "rank {rank}: the weights differ");
        assert!(hw.iter().any(|&w| w != 0.5), "rank {rank}: nothing was trained");
        assert!(hw.iter().all(|w| w.is_finite()), "rank {rank}: weights not finite");
        assert_eq!(hr, dr, "rank {rank}: the residuals differ");
        assert_eq!(hn.len(), dn.len());
        // G's buckets only: a norm for G, none for a D the exchange does not hold.
        assert!(matches!(hn.last().unwrap(), [Some(_), None]), "rank {rank}: norms {:?}", hn.last());
        for (i, (h, d)) in hn.iter().zip(dn).enumerate() {
            let close = (0..2).all(|k| match (h[k], d[k]) {
                (Some(h), Some(d)) => (h - d).abs() <= 1e-6 * h.abs(),
                (h, d) => h == d,
            });
            assert!(close, "rank {rank}, report {i}: norms {h:?} vs {d:?}");
        }
    }
}

#[test]
fn packing_one_bit_on_the_device_gives_the_comm_threads_bits() {
    if !emulator() {
        return;
    }
    assert_the_same_ends(&run(Wire::OneBit, false, false), &run(Wire::OneBit, true, false));
}

/// Averaged in pairs, the device lays its encodings out for the pair's two stripes, as the
/// comm thread does, not for the world's four.
#[test]
fn packing_one_bit_on_the_device_for_a_group_of_ranks_gives_the_comm_threads_bits() {
    if !emulator() {
        return;
    }
    let (host, device) = (run(Wire::OneBit, false, true), run(Wire::OneBit, true, true));
    assert_the_same_ends(&host, &device);
    // Pairs average apart: ranks 0 and 2 end alike, and unlike 1 and 3.
    assert!(same(&host[0].0, &host[2].0) && !same(&host[0].0, &host[1].0), "the pairs did not average apart");
}

#[test]
fn packing_bf16_on_the_device_gives_the_comm_threads_bits() {
    if !emulator() {
        return;
    }
    let host = run(Wire::Bf16, false, false);
    let device = run(Wire::Bf16, true, false);
    let exact = run(Wire::F32, false, false);
    let total: usize = BUCKETS.iter().sum();
    // Per fragment of n values, ceil(n/2) floats.
    let fragments = |n: usize| fragments(n, config(Wire::Bf16).fragment_bytes);
    let packed_floats: usize = BUCKETS.iter().flat_map(|&n| fragments(n)).map(|f| f.len().div_ceil(2)).sum();
    for (rank, ((hw, .., h_staged), ((dw, .., d_staged), (ew, ..)))) in
        host.iter().zip(device.iter().zip(&exact)).enumerate()
    {
        assert!(same(hw, dw), "rank {rank}: the weights differ");
        assert!(!same(hw, ew), "rank {rank}: the same weights as f32's: nothing travelled as bf16");
        assert_eq!(*h_staged, 4 * (total * STEPS as usize) as u64, "rank {rank}: the comm thread packing copies f32");
        assert_eq!(*d_staged, 4 * (packed_floats * STEPS as usize) as u64, "rank {rank}: the device copied bf16");
    }
}
