//! CPU side of layer norm: each sample's sums in f64 in one fixed order whatever the threads
//! (samples are reduced in parallel, each by one thread), then the elementwise passes in
//! parallel over the runs of P values.

use super::{LnGeom, sample_runs};
use crate::ops::cpu_scratch::with_f64_scratch;
use rayon::prelude::*;

/// K scalars for each of `n` samples (or channels), `per(index, its K)` in parallel, then
/// `then(all of them)`; held in this thread's scratch, so the step loop does not allocate.
fn with_scalars<const K: usize, R>(
    n: usize,
    per: impl Fn(usize, &mut [f64]) + Sync,
    then: impl FnOnce(&[f64]) -> R,
) -> R {
    with_f64_scratch(K * n, |sc| {
        sc.par_chunks_mut(K).enumerate().for_each(|(i, s)| per(i, s));
        then(sc)
    })
}

/// `f(c, b, run start, run)` for every run r = c * B + b of P values of `out`, in parallel.
fn each_run(g: &LnGeom, out: &mut [f32], f: impl Fn(usize, usize, usize, &mut [f32]) + Sync) {
    let (batch, p) = (g.batch, g.pixels);
    out.par_chunks_exact_mut(p).enumerate().for_each(|(r, o)| f(r / batch, r % batch, r * p, o));
}

/// Sample b's sum of `f(c, run)` over its C runs (the indices of P values of channel c), in
/// channel order: the one order, whatever the threads.
fn sample_sum(g: &LnGeom, b: usize, f: impl Fn(usize, std::ops::Range<usize>) -> f64) -> f64 {
    sample_runs(g, b).enumerate().map(|(c, run)| f(c, run)).sum()
}

/// sum of a(i) b(i) over a run, in f64.
#[inline(always)]
fn dot(a: &[f32], b: &[f32]) -> f64 {
    a.iter().zip(b).map(|(&x, &y)| x as f64 * y as f64).sum()
}

/// stats `[2B]` = (mean of each sample, then 1 / sqrt(var + eps) of each); n = (x - mean) / std.
pub fn normalize(g: &LnGeom, x: &[f32], n: &mut [f32], stats: &mut [f32]) {
    g.check("layer norm", &[x.len(), n.len()]);
    g.check_stats("layer norm", stats.len());
    let count = g.per_sample() as f64;
    let per = |b: usize, s: &mut [f64]| {
        let mean = sample_sum(g, b, |_, r| x[r].iter().map(|&v| v as f64).sum::<f64>()) / count;
        let var = sample_sum(g, b, |_, r| x[r].iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>()) / count;
        (s[0], s[1]) = (mean, 1.0 / (var + g.eps as f64).sqrt());
    };
    with_scalars::<2, _>(g.batch, per, |sc| {
        each_run(g, n, |_, b, at, o| {
            let (mean, rstd) = (sc[2 * b], sc[2 * b + 1]);
            for (o, &v) in o.iter_mut().zip(&x[at..]) {
                *o = ((v as f64 - mean) * rstd) as f32;
            }
        });
        for (b, s) in sc.chunks_exact(2).enumerate() {
            (stats[b], stats[g.batch + b]) = (s[0] as f32, s[1] as f32);
        }
    });
}

/// y = gamma_c n + beta_c, with gamma_beta `[2C]`; the shift only where `with_beta` (a
/// tangent has none).
pub fn affine(g: &LnGeom, n: &[f32], gamma_beta: &[f32], with_beta: bool, y: &mut [f32]) {
    g.check("layer norm affine", &[n.len(), y.len()]);
    g.check_gamma_beta("layer norm affine", gamma_beta.len());
    let (gamma, beta) = gamma_beta.split_at(g.channels);
    each_run(g, y, |c, _, at, o| {
        let shift = if with_beta { beta[c] } else { 0.0 };
        for (o, &n) in o.iter_mut().zip(&n[at..]) {
            *o = gamma[c] * n + shift;
        }
    });
}

/// dx = J v per sample, with v = gamma_c dy where `by_gamma` (the backward of the affine
/// layer norm), else v = dy (the tangent of the normalization).
#[allow(clippy::too_many_arguments)] // the shape, four inputs, a choice and the output
pub fn backward_data(
    g: &LnGeom,
    n: &[f32],
    stats: &[f32],
    gamma_beta: &[f32],
    by_gamma: bool,
    dy: &[f32],
    dx: &mut [f32],
) {
    g.check("layer norm backward", &[n.len(), dy.len(), dx.len()]);
    g.check_stats("layer norm backward", stats.len());
    g.check_gamma_beta("layer norm backward", gamma_beta.len());
    let count = g.per_sample() as f64;
    let scale = |c: usize| if by_gamma { gamma_beta[c] as f64 } else { 1.0 };
    let per = |b: usize, s: &mut [f64]| {
        let sum_dy = sample_sum(g, b, |c, r| scale(c) * dy[r].iter().map(|&v| v as f64).sum::<f64>());
        let n_dy = sample_sum(g, b, |c, r| scale(c) * dot(&n[r.clone()], &dy[r]));
        (s[0], s[1]) = (sum_dy / count, n_dy / count);
    };
    with_scalars::<2, _>(g.batch, per, |sc| {
        each_run(g, dx, |c, b, at, o| {
            let (rstd, k) = (stats[g.batch + b] as f64, scale(c));
            let (mean_v, nv) = (sc[2 * b], sc[2 * b + 1]);
            for ((o, &d), &n) in o.iter_mut().zip(&dy[at..]).zip(&n[at..]) {
                *o = (rstd * (k * d as f64 - mean_v - n as f64 * nv)) as f32;
            }
        });
    });
}

/// dgamma_beta `[2C]` (+)= (sum of dy n, sum of dy) over each channel's B * P values, or
/// (sum of dy n, 0) unless `with_beta` (a tangent's term: it has no shift). `accumulate` adds
/// to what it holds.
pub fn param_grad(g: &LnGeom, n: &[f32], dy: &[f32], with_beta: bool, dgamma_beta: &mut [f32], accumulate: bool) {
    g.check("layer norm parameter gradient", &[n.len(), dy.len()]);
    g.check_gamma_beta("layer norm parameter gradient", dgamma_beta.len());
    let per_channel = g.batch * g.pixels;
    let per = |c: usize, s: &mut [f64]| {
        let r = c * per_channel..(c + 1) * per_channel;
        (s[0], s[1]) = (dot(&n[r.clone()], &dy[r.clone()]), dy[r].iter().map(|&d| d as f64).sum());
    };
    with_scalars::<2, _>(g.channels, per, |sc| {
        let (dgamma, dbeta) = dgamma_beta.split_at_mut(g.channels);
        for (c, s) in sc.chunks_exact(2).enumerate() {
            let keep = |v: f32| if accumulate { v } else { 0.0 };
            dgamma[c] = keep(dgamma[c]) + s[0] as f32;
            dbeta[c] = keep(dbeta[c]) + if with_beta { s[1] as f32 } else { 0.0 };
        }
    });
}

/// The penalty's adjoint at a layer norm's input (module doc of model/penalty.rs): with the
/// tangent ta at the input and tn = J ta after the normalization, dty the adjoint of the
/// tangent after the scale and dy that of the values (None: zero), da = J (gamma dy) plus the
/// derivative of <gamma dty, J ta> with respect to the input.
#[allow(clippy::too_many_arguments)] // the shape, seven inputs and the output
pub fn penalty_adjoint(
    g: &LnGeom,
    n: &[f32],
    stats: &[f32],
    gamma_beta: &[f32],
    ta: &[f32],
    tn: &[f32],
    dty: &[f32],
    dy: Option<&[f32]>,
    da: &mut [f32],
) {
    g.check("layer norm penalty adjoint", &[n.len(), ta.len(), tn.len(), dty.len(), da.len()]);
    g.check_stats("layer norm penalty adjoint", stats.len());
    g.check_gamma_beta("layer norm penalty adjoint", gamma_beta.len());
    if let Some(dy) = dy {
        g.check("layer norm penalty adjoint", &[dy.len()]);
    }
    let count = g.per_sample() as f64;
    let gamma = |c: usize| gamma_beta[c] as f64;
    let rstd = |b: usize| stats[g.batch + b] as f64;
    // The adjoint of n at value i of channel c: gamma dy, and what tn = r (P ta - n <n, ta> / N)
    // adds through n (dtn = gamma dty); s holds (<n, ta> / N, <n, dtn> / N).
    let dn = |c: usize, i: usize, r: f64, s: &[f64]| {
        let direct = dy.map_or(0.0, |dy| gamma(c) * dy[i] as f64);
        direct - r * (s[0] * gamma(c) * dty[i] as f64 + s[1] * ta[i] as f64)
    };
    // Per sample: <n, ta> / N, <n, dtn> / N, <tn, dtn>, then mean(dn) and <n, dn> / N.
    let per = |b: usize, s: &mut [f64]| {
        s[0] = sample_sum(g, b, |_, r| dot(&n[r.clone()], &ta[r])) / count;
        s[1] = sample_sum(g, b, |c, r| gamma(c) * dot(&n[r.clone()], &dty[r])) / count;
        s[2] = sample_sum(g, b, |c, r| gamma(c) * dot(&tn[r.clone()], &dty[r]));
        let r = rstd(b);
        s[3] = sample_sum(g, b, |c, run| run.map(|i| dn(c, i, r, s)).sum::<f64>()) / count;
        s[4] = sample_sum(g, b, |c, run| run.map(|i| n[i] as f64 * dn(c, i, r, s)).sum::<f64>()) / count;
    };
    with_scalars::<5, _>(g.batch, per, |sc| {
        each_run(g, da, |c, b, at, o| {
            let (r, s) = (rstd(b), &sc[5 * b..5 * b + 5]);
            for (k, o) in o.iter_mut().enumerate() {
                let (i, ni) = (at + k, n[at + k] as f64);
                // J dn, and through r = (var + eps)^(-1/2): dr/dx = -r^2 n / N.
                *o = (r * (dn(c, i, r, s) - s[3] - ni * s[4]) - r * s[2] * ni / count) as f32;
            }
        });
    });
}
