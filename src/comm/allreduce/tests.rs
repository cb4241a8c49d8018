//! Every algorithm on the Local transport against an independent reference (the exact sum of
//! integer-valued inputs), at every rank count 1..16 and awkward lengths.

use super::{Algorithm, allreduce_mean, inv_ranks};
use crate::codec::bf16;
use crate::comm::transport::{Local, Transport};

/// Run `f` on every rank of an `n`-rank Local group, each on its own thread.
pub(crate) fn on_ranks<R: Send>(n: usize, f: impl Fn(&mut Local) -> R + Sync) -> Vec<R> {
    let f = &f;
    std::thread::scope(|s| {
        let handles: Vec<_> = Local::group(n).into_iter().map(|mut t| s.spawn(move || f(&mut t))).collect();
        handles.into_iter().map(|h| h.join().expect("rank panicked")).collect()
    })
}

/// Integer-valued input of rank r, element i: sums over up to 16 ranks are exact in f32.
fn input(r: usize, i: usize) -> f32 {
    ((i * 31 + r * 17 + (i >> 7)) % 61) as f32 - 30.0
}

fn expected(p: usize, len: usize) -> Vec<f32> {
    let s = inv_ranks(p);
    (0..len)
        .map(|i| {
            let sum: i64 = (0..p).map(|r| input(r, i) as i64).sum();
            sum as f32 * s
        })
        .collect()
}

#[test]
fn every_algorithm_every_rank_count_every_length_is_exact() {
    for p in 1..=16usize {
        let mut lens = vec![0, 1, 2, 3, 7, p.saturating_sub(1), p, p + 1, 1_000_003];
        lens.sort();
        lens.dedup();
        for &algo in Algorithm::all() {
            // The large case is the expensive one: every algorithm at p in a spread of rank
            // counts covering powers of two, odd counts and the largest.
            let big = matches!(p, 1 | 2 | 3 | 4 | 5 | 7 | 8 | 12 | 16);
            for &len in lens.iter().filter(|&&l| l < 1_000_000 || big) {
                let want = expected(p, len);
                let got = on_ranks(p, |t| {
                    let mut v: Vec<f32> = (0..len).map(|i| input(t.rank(), i)).collect();
                    allreduce_mean(t, algo, &mut v, 5).expect("allreduce");
                    v
                });
                for (r, v) in got.iter().enumerate() {
                    let bad = v.iter().zip(&want).position(|(a, b)| a.to_bits() != b.to_bits());
                    assert!(
                        bad.is_none(),
                        "{algo} p={p} len={len} rank {r}: element {} is {} not {}",
                        bad.unwrap(),
                        v[bad.unwrap()],
                        want[bad.unwrap()]
                    );
                    assert_eq!(v.len(), len);
                }
            }
        }
    }
}

#[test]
fn remaining_rank_counts_with_the_large_length() {
    // The rank counts the test above skips for the 1000003-element case.
    for p in [6usize, 9, 10, 11, 13, 14, 15] {
        let len = 1_000_003;
        let want = expected(p, len);
        for &algo in Algorithm::all() {
            let got = on_ranks(p, |t| {
                let mut v: Vec<f32> = (0..len).map(|i| input(t.rank(), i)).collect();
                allreduce_mean(t, algo, &mut v, 9).expect("allreduce");
                v
            });
            for (r, v) in got.iter().enumerate() {
                assert!(
                    v.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits()),
                    "{algo} p={p} rank {r} differs from the reference"
                );
            }
        }
    }
}

#[test]
fn real_valued_inputs_give_identical_bits_on_every_rank_and_every_run() {
    // Not exactly representable sums: ranks must still agree bit for bit, and a second run
    // must give the same bits (weights stay identical across ranks and runs).
    let noisy = |r: usize, i: usize| (i as f32 * 0.37 + r as f32 * 1.91).sin() * 1e-3;
    for p in [2usize, 3, 5, 6, 8, 13] {
        for &algo in Algorithm::all() {
            let run = || {
                on_ranks(p, |t| {
                    let mut v: Vec<f32> = (0..4099).map(|i| noisy(t.rank(), i)).collect();
                    allreduce_mean(t, algo, &mut v, 1).expect("allreduce");
                    v
                })
            };
            let a = run();
            let b = run();
            for r in 0..p {
                assert!(
                    a[r].iter().zip(&a[0]).all(|(x, y)| x.to_bits() == y.to_bits()),
                    "{algo} p={p}: rank {r} differs from rank 0"
                );
                assert!(
                    a[r].iter().zip(&b[r]).all(|(x, y)| x.to_bits() == y.to_bits()),
                    "{algo} p={p}: rank {r} differs between two runs"
                );
            }
            // And it is the mean, up to rounding.
            for i in (0..4099).step_by(97) {
                let mean: f64 = (0..p).map(|r| noisy(r, i) as f64).sum::<f64>() / p as f64;
                assert!((a[0][i] as f64 - mean).abs() < 1e-8, "{algo} p={p} i={i}");
            }
        }
    }
}

#[test]
fn back_to_back_collectives_with_different_tags_do_not_mix() {
    // Two vectors reduced one after the other (as buckets are): each keeps its own values.
    for &algo in Algorithm::all() {
        let got = on_ranks(5, |t| {
            let mut a: Vec<f32> = (0..300).map(|i| input(t.rank(), i)).collect();
            let mut b: Vec<f32> = (0..17).map(|i| input(t.rank(), i + 1000)).collect();
            allreduce_mean(t, algo, &mut a, 1).unwrap();
            allreduce_mean(t, algo, &mut b, 2).unwrap();
            (a, b)
        });
        let want_a = expected(5, 300);
        let want_b: Vec<f32> = expected(5, 1017)[1000..].to_vec();
        for (a, b) in got {
            assert_eq!(a, want_a, "{algo}");
            assert_eq!(b, want_b, "{algo}");
        }
    }
}

/// Rank r's bf16 input value i: every mantissa bit of the f32 in use before it is rounded,
/// so that the rounding is real.
fn bf16_input(r: usize, i: usize) -> u16 {
    bf16::encode((i as f32 * 0.731 + r as f32 * 2.3).sin() * (1.0 + (i % 7) as f32))
}

/// Every rank's bf16 average of `len` values (`bf16_input`) with `algo`, decoded.
fn bf16_means(p: usize, algo: Algorithm, len: usize) -> Vec<Vec<f32>> {
    on_ranks(p, |t| {
        let mut v: Vec<u16> = (0..len).map(|i| bf16_input(t.rank(), i)).collect();
        allreduce_mean(t, algo, &mut v, 3).expect("allreduce");
        v.into_iter().map(bf16::decode).collect()
    })
}

#[test]
fn bf16_averages_keep_ranks_identical_and_stay_within_their_rounding_bound() {
    for p in [2usize, 3, 4, 5, 8] {
        for algo in [Algorithm::Tree, Algorithm::Rd, Algorithm::Vhd, Algorithm::Ring, Algorithm::Mpi] {
            for len in [1usize, 7, p + 1, 20_011] {
                let got = bf16_means(p, algo, len);
                for r in 1..p {
                    assert!(
                        got[r].iter().zip(&got[0]).all(|(a, b)| a.to_bits() == b.to_bits()),
                        "{algo} p={p} len={len}: rank {r} differs from rank 0"
                    );
                }
                // The exact mean of the bf16 inputs: each addition on a value's way (at most
                // p - 1) and the scaling round by at most 2^-9 of a partial sum of at most
                // sum |x| (and f32's own roundings, far smaller).
                let mut rounded = false;
                for (i, &v) in got[0].iter().enumerate() {
                    let x = |r| f64::from(bf16::decode(bf16_input(r, i)));
                    let exact: f64 = (0..p).map(x).sum::<f64>() / p as f64;
                    let scale: f64 = (0..p).map(|r| x(r).abs()).sum::<f64>() / p as f64;
                    let err = (f64::from(v) - exact).abs();
                    assert!(err <= p as f64 * scale / 512.0 + 1e-6 * scale, "{algo} p={p} i={i}: {v} vs {exact}");
                    rounded |= err > 1e-5 * scale;
                }
                // A few sums of bf16 values may happen to be bf16 themselves; not 20,011 of them.
                assert!(rounded || len < 1000, "{algo} p={p} len={len}: no sum was rounded, so none was bf16");
            }
        }
    }
}

#[test]
fn bf16_averages_of_two_ranks_are_their_rounded_mean() {
    // With two ranks every algorithm forms each value's sum once and scales it: the f32 sum
    // of the two bf16 inputs, halved, rounded to bf16 (what a reader of the wire computes).
    let len = 1001;
    for algo in [Algorithm::Tree, Algorithm::Rd, Algorithm::Vhd, Algorithm::Ring, Algorithm::Hier] {
        let got = bf16_means(2, algo, len);
        for (i, &v) in got[0].iter().enumerate() {
            let (a, b) = (bf16::decode(bf16_input(0, i)), bf16::decode(bf16_input(1, i)));
            let want = bf16::decode(bf16::encode((a + b) * 0.5));
            assert_eq!(v.to_bits(), want.to_bits(), "{algo} i={i}: {a} and {b}");
        }
    }
}

#[test]
fn bf16_values_travel_as_their_two_bytes() {
    let sent: Vec<u16> = (0..1001).map(|i| bf16_input(0, i)).collect();
    let [mut t0, mut t1]: [Local; 2] = Local::group(2).try_into().ok().unwrap();
    let (kept, raw) = std::thread::scope(|s| {
        let sender = s.spawn(|| {
            let mut v = sent.clone();
            let n = v.len();
            crate::comm::transport::bf16_wire::exchange(&mut t0, &mut v, Some((1, 0..n)), None, 4).unwrap();
            v
        });
        let raw = t1.recv_vec(0, 4).unwrap();
        (sender.join().unwrap(), raw)
    });
    assert_eq!(kept, sent, "sending leaves the sender's values as they were");
    let received: Vec<u16> = raw.chunks_exact(2).map(|b| u16::from_ne_bytes([b[0], b[1]])).collect();
    assert_eq!(received, sent, "the message is the values' bits, 2 bytes each");
}

/// `on_ranks` over a Local group whose rank r says it runs on host `hosts[r]`.
fn on_host_ranks<R: Send>(hosts: &[usize], f: impl Fn(&mut Local) -> R + Sync) -> Vec<R> {
    let f = &f;
    std::thread::scope(|s| {
        let handles: Vec<_> = Local::on_hosts(hosts).into_iter().map(|mut t| s.spawn(move || f(&mut t))).collect();
        handles.into_iter().map(|h| h.join().expect("rank panicked")).collect()
    })
}

/// `l` ranks on each of `h` hosts, consecutive ranks together (mpiexec's default placement).
fn blocks(h: usize, l: usize) -> Vec<usize> {
    (0..h * l).map(|r| r / l).collect()
}

#[test]
fn hier_is_exact_on_every_host_layout() {
    let layouts = [
        blocks(2, 2),
        blocks(2, 3),
        blocks(3, 2),
        blocks(4, 2),
        blocks(2, 4),
        blocks(3, 3),
        blocks(5, 1),
        blocks(1, 4),
        vec![0, 1, 0, 1, 0, 1], // round robin (--map-by node)
        vec![0, 1, 1, 0],       // a host's ranks not consecutive, in both hosts
        vec![0, 0, 0, 1, 1],    // uneven hosts: ring over the job
    ];
    for hosts in &layouts {
        let p = hosts.len();
        // Lengths below the parts' count, between, and large enough for vhd across hosts.
        for len in [0, 1, 2, 3, 5, 7, 17, 1000, 100_003] {
            let want = expected(p, len);
            let got = on_host_ranks(hosts, |t| {
                let mut v: Vec<f32> = (0..len).map(|i| input(t.rank(), i)).collect();
                allreduce_mean(t, Algorithm::Hier, &mut v, 6).expect("allreduce");
                v
            });
            for (r, v) in got.iter().enumerate() {
                let bad = v.iter().zip(&want).position(|(a, b)| a.to_bits() != b.to_bits());
                assert!(bad.is_none(), "hier on hosts {hosts:?} len={len} rank {r}: element {bad:?} differs");
            }
        }
    }
}

#[test]
fn hier_keeps_ranks_identical_with_real_values_and_the_bf16_wire() {
    let x = |r: usize, i: usize| (i as f32 * 0.731 + r as f32 * 2.3).sin() * (1.0 + (i % 7) as f32);
    for hosts in [blocks(2, 2), blocks(3, 2), blocks(2, 3), vec![0, 1, 0, 1]] {
        let p = hosts.len();
        for wire_bf16 in [false, true] {
            let got = on_host_ranks(&hosts, |t| {
                let mut v: Vec<f32> = (0..20_011).map(|i| x(t.rank(), i)).collect();
                if wire_bf16 {
                    let mut b: Vec<u16> = v.iter().map(|&f| bf16::encode(f)).collect();
                    allreduce_mean(t, Algorithm::Hier, &mut b, 3).expect("allreduce");
                    bf16::decode_into(&b, &mut v);
                } else {
                    allreduce_mean(t, Algorithm::Hier, &mut v, 3).expect("allreduce");
                }
                v
            });
            for r in 1..p {
                assert!(
                    got[r].iter().zip(&got[0]).all(|(a, b)| a.to_bits() == b.to_bits()),
                    "hosts {hosts:?} bf16={wire_bf16}: rank {r} differs from rank 0"
                );
            }
            // The mean, within f32 rounding, or bf16's 2^-9 for each input and addition (at
            // most p of them).
            for (i, &v) in got[0].iter().enumerate().step_by(13) {
                let exact: f64 = (0..p).map(|r| x(r, i) as f64).sum::<f64>() / p as f64;
                let scale: f64 = (0..p).map(|r| (x(r, i) as f64).abs()).sum::<f64>() / p as f64;
                let bound = if wire_bf16 { (p + 1) as f64 * scale / 512.0 } else { 1e-6 * scale } + 1e-7;
                assert!((v as f64 - exact).abs() <= bound, "hosts {hosts:?} bf16={wire_bf16} i={i}: {v} vs {exact}");
            }
        }
    }
}
