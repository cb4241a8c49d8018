//! CPU batch norm over channel-major [C, count] data: one rayon task per channel, sums in f64.

use super::{BnGeom, mean_var};
use crate::ops::activation::Activation;
use crate::per_activation;
use rayon::prelude::*;

/// Partial sums per channel: 8 independent f64 additions per step instead of one chain of
/// them (which is latency-bound at a few cycles per element), combined in a fixed order so
/// that every run gives the same bits.
const LANES: usize = 8;

/// (sum of term(a_i, b_i).0, sum of term(a_i, b_i).1) over LANES interleaved partial sums.
#[inline(always)]
fn lane_sums(a: &[f32], b: &[f32], term: impl Fn(f32, f32) -> (f64, f64)) -> (f64, f64) {
    debug_assert_eq!(a.len(), b.len());
    let (mut s, mut q) = ([0.0f64; LANES], [0.0f64; LANES]);
    let (a_full, b_full) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    let (a_rest, b_rest) = (a_full.remainder(), b_full.remainder());
    for (ac, bc) in a_full.zip(b_full) {
        for l in 0..LANES {
            let (ts, tq) = term(ac[l], bc[l]);
            s[l] += ts;
            q[l] += tq;
        }
    }
    for (l, (&av, &bv)) in a_rest.iter().zip(b_rest).enumerate() {
        let (ts, tq) = term(av, bv);
        s[l] += ts;
        q[l] += tq;
    }
    (s.iter().sum(), q.iter().sum())
}

/// stats `[2C]` = (sum x, sum x^2) per channel.
pub fn forward_stats(g: &BnGeom, x: &[f32], stats: &mut [f32]) {
    assert_eq!(x.len(), g.len());
    assert_eq!(stats.len(), 2 * g.channels);
    let sums: Vec<(f64, f64)> =
        x.par_chunks(g.count.max(1)).map(|xc| lane_sums(xc, xc, |v, _| (v as f64, v as f64 * v as f64))).collect();
    for (c, (s, q)) in sums.into_iter().enumerate().take(g.channels) {
        stats[c] = s as f32;
        stats[g.channels + c] = q as f32;
    }
}

/// Normalize with batch statistics; saved `[2C]` = (mean, 1/std); running `[2C]` = (mean, var).
#[allow(clippy::too_many_arguments)]
pub fn forward_apply(
    g: &BnGeom,
    x: &[f32],
    stats: &[f32],
    stats_count: f64,
    gamma: &[f32],
    beta: &[f32],
    act: Activation,
    y: &mut [f32],
    saved: &mut [f32],
    running: &mut [f32],
) {
    let ch = g.channels;
    assert_eq!(x.len(), g.len());
    assert_eq!(y.len(), g.len());
    let unbias = if stats_count > 1.0 { stats_count / (stats_count - 1.0) } else { 1.0 };
    let m = g.momentum as f64;
    for c in 0..ch {
        let (mean, var) = mean_var(stats[c] as f64, stats[ch + c] as f64, stats_count);
        saved[c] = mean as f32;
        saved[ch + c] = (1.0 / (var + g.eps as f64).sqrt()) as f32;
        running[c] = ((1.0 - m) * running[c] as f64 + m * mean) as f32;
        running[ch + c] = ((1.0 - m) * running[ch + c] as f64 + m * var * unbias) as f32;
    }
    let saved = &*saved;
    normalize(g, x, act, y, |c| {
        let scale = gamma[c] * saved[ch + c];
        (scale, beta[c] - saved[c] * scale)
    });
}

/// Normalize with the running statistics.
#[allow(clippy::too_many_arguments)]
pub fn forward_eval(
    g: &BnGeom,
    x: &[f32],
    gamma: &[f32],
    beta: &[f32],
    running: &[f32],
    act: Activation,
    y: &mut [f32],
) {
    let ch = g.channels;
    normalize(g, x, act, y, |c| {
        let invstd = 1.0 / (running[ch + c] + g.eps).sqrt();
        let scale = gamma[c] * invstd;
        (scale, beta[c] - running[c] * scale)
    });
}

/// y = act(x * scale + shift) per channel, with (scale, shift) = `affine(channel)`.
fn normalize(g: &BnGeom, x: &[f32], act: Activation, y: &mut [f32], affine: impl Fn(usize) -> (f32, f32) + Sync) {
    per_activation!(act, ACT => y.par_chunks_mut(g.count.max(1)).zip(x.par_chunks(g.count.max(1))).enumerate().for_each(
        |(c, (yc, xc))| {
            let (scale, shift) = affine(c);
            for (o, &i) in yc.iter_mut().zip(xc) {
                *o = ACT.apply(i * scale + shift);
            }
        }
    ));
}

/// dy -> dz in place through the fused activation; sums `[2C]` = (sum dz*xhat, sum dz).
pub fn backward_reduce(
    g: &BnGeom,
    x: &[f32],
    y: &[f32],
    act: Activation,
    saved: &[f32],
    dy: &mut [f32],
    sums: &mut [f32],
) {
    let ch = g.channels;
    let n = g.count.max(1);
    let per_channel: Vec<(f64, f64)> = per_activation!(act, ACT => dy
        .par_chunks_mut(n)
        .zip(x.par_chunks(n).zip(y.par_chunks(n)))
        .enumerate()
        .map(|(c, (dyc, (xc, yc)))| {
            let (mean, invstd) = (saved[c], saved[ch + c]);
            for (d, &yv) in dyc.iter_mut().zip(yc) {
                *d *= ACT.grad_from_output(yv);
            }
            lane_sums(dyc, xc, |d, xv| ((d * (xv - mean) * invstd) as f64, d as f64))
        })
        .collect());
    for (c, (a, b)) in per_channel.into_iter().enumerate().take(ch) {
        sums[c] = a as f32;
        sums[ch + c] = b as f32;
    }
}

/// dx = gamma/std * (dz - mean(dz) - xhat * mean(dz*xhat)), the means over `sums_count`.
#[allow(clippy::too_many_arguments)]
pub fn backward_data(
    g: &BnGeom,
    x: &[f32],
    dz: &[f32],
    saved: &[f32],
    gamma: &[f32],
    sums: &[f32],
    sums_count: f64,
    dx: &mut [f32],
) {
    let ch = g.channels;
    let n = g.count.max(1);
    dx.par_chunks_mut(n).zip(x.par_chunks(n).zip(dz.par_chunks(n))).enumerate().for_each(|(c, (dxc, (xc, dzc)))| {
        let (mean, invstd) = (saved[c], saved[ch + c]);
        let mean_dz_xhat = (sums[c] as f64 / sums_count) as f32;
        let mean_dz = (sums[ch + c] as f64 / sums_count) as f32;
        let k = gamma[c] * invstd;
        for ((o, &xv), &d) in dxc.iter_mut().zip(xc).zip(dzc) {
            let xhat = (xv - mean) * invstd;
            *o = k * (d - mean_dz - xhat * mean_dz_xhat);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The lane-split sums equal a plain sequential f64 sum (to f64 rounding), for lengths
    /// with and without a remainder after the full lanes.
    #[test]
    fn lane_sums_match_sequential_sums_for_every_remainder() {
        for len in (0..=2 * LANES + 1).chain([37, 3136]) {
            let a: Vec<f32> = (0..len).map(|i| ((i * 7919) % 113) as f32 / 17.0 - 3.0).collect();
            let b: Vec<f32> = (0..len).map(|i| ((i * 104_729) % 89) as f32 / 13.0 - 2.5).collect();
            let term = |x: f32, y: f32| ((x * y) as f64, x as f64);
            let (s, q) = lane_sums(&a, &b, term);
            let (s_ref, q_ref) = a.iter().zip(&b).fold((0.0, 0.0), |(s, q), (&x, &y)| {
                let (ts, tq) = term(x, y);
                (s + ts, q + tq)
            });
            let scale = a.iter().zip(&b).map(|(x, y)| (x * y).abs() as f64 + x.abs() as f64).sum::<f64>().max(1.0);
            assert!((s - s_ref).abs() <= 1e-12 * scale, "len {len}: {s} vs {s_ref}");
            assert!((q - q_ref).abs() <= 1e-12 * scale, "len {len}: {q} vs {q_ref}");
        }
    }
}
