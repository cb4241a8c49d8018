//! The 1-bit allreduce on the Local transport against the exact mean computed in f64.

use super::quantize::COLUMN;
use super::{OneBitStage, Residuals, allreduce_mean};
use crate::comm::allreduce::part;
use crate::comm::allreduce::tests::on_ranks;
use crate::comm::transport::Transport;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

fn gradient(rank: usize, step: u64, n: usize) -> Vec<f32> {
    let mut rng = ChaCha8Rng::seed_from_u64(rank as u64 * 1000 + step);
    (0..n).map(|_| rng.random_range(-1.0f32..1.2) * rng.random_range(0.0f32..1.0)).collect()
}

/// The column bound of a quantization of `x`: no value misses by more than its column's range.
fn column_ranges(x: &[f64], start: usize, len: usize) -> Vec<f64> {
    let mut out = vec![0.0; len];
    for c in (0..len).step_by(COLUMN) {
        let col = &x[start + c..start + (c + COLUMN).min(len)];
        let (lo, hi) = col.iter().fold((f64::MAX, f64::MIN), |(l, h), &v| (l.min(v), h.max(v)));
        out[c..(c + COLUMN).min(len)].iter_mut().for_each(|o| *o = hi - lo);
    }
    out
}

/// Every rank ends with the same bits, and the result is the exact mean less what the
/// residuals hold: mean = result + stripe residual (the owner's) + mean of the ranks' own
/// residuals, to f32 rounding; each part within its quantizer's column bound.
#[test]
fn every_rank_gets_the_same_bits_and_the_mean_less_the_residuals() {
    for p in 2..=8usize {
        for n in [1, p - 1, p, 7 * COLUMN + 13, 3 * p * COLUMN + 5] {
            let got = on_ranks(p, |t| {
                let mut v = gradient(t.rank(), 0, n);
                let mut res = Residuals::zeros(n);
                let sent = allreduce_mean(t, &mut v, res.range_mut(0..n), &mut OneBitStage::default(), 4).unwrap();
                (v, res, sent)
            });
            let inputs: Vec<Vec<f32>> = (0..p).map(|r| gradient(r, 0, n)).collect();
            let exact: Vec<f64> = (0..n).map(|i| inputs.iter().map(|g| g[i] as f64).sum::<f64>() / p as f64).collect();
            for (r, (v, _, _)) in got.iter().enumerate() {
                assert!(
                    v.iter().zip(&got[0].0).all(|(a, b)| a.to_bits() == b.to_bits()),
                    "p {p} n {n}: rank {r} differs"
                );
            }
            for (i, want) in exact.iter().enumerate() {
                let owner = (0..p).find(|&j| part(n, p, j).contains(&i)).unwrap();
                let own_mean: f64 = got.iter().map(|(_, res, _)| res.own[i] as f64).sum::<f64>() / p as f64;
                let total = got[0].0[i] as f64 + got[owner].1.stripe[i] as f64 + own_mean;
                assert!((total - want).abs() < 1e-5, "p {p} n {n} [{i}]: {total} vs {want}");
            }
            // A rank's own residual stays within its columns' range of its input.
            for (r, (_, res, _)) in got.iter().enumerate() {
                let g: Vec<f64> = inputs[r].iter().map(|&x| x as f64).collect();
                for j in 0..p {
                    let s = part(n, p, j);
                    let bound = column_ranges(&g, s.start, s.len());
                    for (k, i) in s.enumerate() {
                        assert!((res.own[i] as f64).abs() <= bound[k] + 1e-6, "p {p} rank {r} [{i}]");
                    }
                }
            }
            // Bytes: rank 0 sends every other stripe's encoding once and its own p-1 times.
            let sent = got[0].2;
            let enc = |j: usize| super::quantize::encoded_len(part(n, p, j).len());
            assert_eq!(sent, (1..p).map(enc).sum::<usize>() + (p - 1) * enc(0), "p {p} n {n}");
            // Stripes of several whole columns: at least 25x fewer bytes than f32 would take.
            let f32_ring = 2 * (p - 1) * n.div_ceil(p) * 4;
            if n >= 3 * p * COLUMN {
                assert!(sent * 25 <= f32_ring, "p {p} n {n}: sent {sent} vs f32 {f32_ring}");
            }
        }
    }
}

/// Over many steps the error feedback carries what each step missed into the next: the sum
/// of the results equals the sum of the exact means less the final residuals.
#[test]
fn over_steps_the_results_add_up_to_the_exact_means() {
    let (p, n, steps) = (3usize, 2 * COLUMN + 99, 60u64);
    let got = on_ranks(p, |t| {
        let mut res = Residuals::zeros(n);
        let mut stage = OneBitStage::default();
        let mut total = vec![0.0f64; n];
        for step in 0..steps {
            let mut v = gradient(t.rank(), step, n);
            allreduce_mean(t, &mut v, res.range_mut(0..n), &mut stage, 4).unwrap();
            total.iter_mut().zip(&v).for_each(|(s, &x)| *s += x as f64);
        }
        (total, res)
    });
    let mut exact = vec![0.0f64; n];
    for step in 0..steps {
        for r in 0..p {
            exact.iter_mut().zip(gradient(r, step, n)).for_each(|(s, x)| *s += x as f64 / p as f64);
        }
    }
    let mut worst = 0.0f64;
    for (i, want) in exact.iter().enumerate() {
        let owner = (0..p).find(|&j| part(n, p, j).contains(&i)).unwrap();
        let own_mean: f64 = got.iter().map(|(_, res)| res.own[i] as f64).sum::<f64>() / p as f64;
        worst = worst.max((got[0].0[i] + got[owner].1.stripe[i] as f64 + own_mean - want).abs());
    }
    assert!(worst < 1e-3, "the results drift {worst} from the exact means");
    // Without the residuals the sums would be off by the quantization error of every step.
    let plain: f64 = (0..n).map(|i| (got[0].0[i] - exact[i]).abs()).fold(0.0, f64::max);
    assert!(plain > 10.0 * worst, "{plain} vs {worst}");
}

/// A fragment quantized elsewhere (a device, `packed_layout`) and averaged packed decodes to
/// the very bits `allreduce_mean` leaves, with the same owner residuals, step after step.
#[test]
fn a_packed_fragment_ends_as_the_unpacked_one_does() {
    use super::{allreduce_mean_packed, packed_fits, packed_layout};
    use crate::codec::onebit::{Land, decode, encoded_len, quantize};
    for p in 2..=5usize {
        for n in [4 * p, 7 * COLUMN + 13, 2 * p * COLUMN + 5] {
            assert!(packed_fits(n, p), "p {p} n {n}");
            let got = on_ranks(p, |t| {
                let (mut plain_res, mut packed_res) = (Residuals::zeros(n), Residuals::zeros(n));
                let (mut stage, mut packed_stage) = (OneBitStage::default(), OneBitStage::default());
                let mut out = Vec::new();
                for step in 0..3 {
                    let mut plain = gradient(t.rank(), step, n);
                    let g = plain.clone();
                    allreduce_mean(t, &mut plain, plain_res.range_mut(0..n), &mut stage, 4).unwrap();
                    // The device's part, done here: each stripe quantized into its place.
                    let mut packed = vec![0.0f32; n];
                    let mut bytes = vec![0u8; 4 * n];
                    for (start, len, at) in packed_layout(n, p) {
                        let r = start..start + len;
                        quantize(&g[r.clone()], &mut packed_res.own[r], &mut bytes[at..at + encoded_len(len)]);
                    }
                    packed
                        .iter_mut()
                        .zip(bytes.chunks(4))
                        .for_each(|(v, b)| *v = f32::from_le_bytes(b.try_into().unwrap()));
                    allreduce_mean_packed(t, &mut packed, &mut packed_res.stripe, &mut packed_stage, 5).unwrap();
                    let bytes: Vec<u8> = packed.iter().flat_map(|v| v.to_le_bytes()).collect();
                    let mut decoded = vec![0.0f32; n];
                    for (start, len, at) in packed_layout(n, p) {
                        decode(&bytes[at..at + encoded_len(len)], &mut decoded[start..start + len], Land::Copy);
                    }
                    out.push((plain, decoded));
                }
                (out, plain_res, packed_res)
            });
            for (r, (steps, plain_res, packed_res)) in got.iter().enumerate() {
                for (step, (plain, decoded)) in steps.iter().enumerate() {
                    let same = plain.iter().zip(decoded).all(|(a, b)| a.to_bits() == b.to_bits());
                    assert!(same, "p {p} n {n} rank {r} step {step}: packed and unpacked results differ");
                }
                assert_eq!(plain_res, packed_res, "p {p} n {n} rank {r}: residuals");
            }
        }
    }
    // Stripes of a value or two cannot hold a column's 12 bytes in their f32 bytes.
    assert!(!packed_fits(3, 2) && !packed_fits(8, 8));
}
