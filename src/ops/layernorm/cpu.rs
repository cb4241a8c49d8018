//! CPU side of layer norm: per-sample sums in f64, sequential, so the results do not depend
//! on threads (a critic's layers hold a few hundred thousand values).

use super::{LnGeom, sample_runs};

/// Sample b's sum of f(i) over its C * P indices i, in f64.
fn sample_sum(g: &LnGeom, b: usize, mut f: impl FnMut(usize) -> f64) -> f64 {
    sample_runs(g, b).map(|r| r.map(&mut f).sum::<f64>()).sum()
}

/// Channel c of element i of a `[C, B, P]` tensor.
#[inline(always)]
fn channel(g: &LnGeom, i: usize) -> usize {
    i / (g.batch * g.pixels)
}

/// stats `[2B]` = (mean of each sample, then 1 / sqrt(var + eps) of each); n = (x - mean) / std.
pub fn normalize(g: &LnGeom, x: &[f32], n: &mut [f32], stats: &mut [f32]) {
    g.check("layer norm", &[x.len(), n.len()]);
    assert_eq!(stats.len(), 2 * g.batch, "layer norm: stats are (mean, 1/std) per sample");
    let count = g.per_sample() as f64;
    for b in 0..g.batch {
        let mean = sample_sum(g, b, |i| x[i] as f64) / count;
        let var = sample_sum(g, b, |i| (x[i] as f64 - mean).powi(2)) / count;
        let rstd = 1.0 / (var + g.eps as f64).sqrt();
        for r in sample_runs(g, b) {
            for i in r {
                n[i] = ((x[i] as f64 - mean) * rstd) as f32;
            }
        }
        (stats[b], stats[g.batch + b]) = (mean as f32, rstd as f32);
    }
}

/// y = gamma_c n + beta_c, with gamma_beta `[2C]`; the shift only where `with_beta` (a
/// tangent has none).
pub fn affine(g: &LnGeom, n: &[f32], gamma_beta: &[f32], with_beta: bool, y: &mut [f32]) {
    g.check("layer norm affine", &[n.len(), y.len()]);
    let (gamma, beta) = gamma_beta.split_at(g.channels);
    for (c, (y, n)) in y.chunks_exact_mut(g.batch * g.pixels).zip(n.chunks_exact(g.batch * g.pixels)).enumerate() {
        let shift = if with_beta { beta[c] } else { 0.0 };
        for (y, &n) in y.iter_mut().zip(n) {
            *y = gamma[c] * n + shift;
        }
    }
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
    let count = g.per_sample() as f64;
    let v = |i: usize| if by_gamma { gamma_beta[channel(g, i)] as f64 * dy[i] as f64 } else { dy[i] as f64 };
    for b in 0..g.batch {
        let rstd = stats[g.batch + b] as f64;
        let mean_v = sample_sum(g, b, v) / count;
        let nv = sample_sum(g, b, |i| n[i] as f64 * v(i)) / count;
        for r in sample_runs(g, b) {
            for i in r {
                dx[i] = (rstd * (v(i) - mean_v - n[i] as f64 * nv)) as f32;
            }
        }
    }
}

/// dgamma_beta `[2C]` (+)= (sum of dy n, sum of dy) over each channel's B * P values, or
/// (sum of dy n, 0) unless `with_beta` (a tangent's term: it has no shift). `accumulate` adds
/// to what it holds.
pub fn param_grad(g: &LnGeom, n: &[f32], dy: &[f32], with_beta: bool, dgamma_beta: &mut [f32], accumulate: bool) {
    g.check("layer norm parameter gradient", &[n.len(), dy.len()]);
    assert_eq!(dgamma_beta.len(), 2 * g.channels, "layer norm: gamma and beta gradients are [2C]");
    let per_channel = g.batch * g.pixels;
    for (c, (n, dy)) in n.chunks_exact(per_channel).zip(dy.chunks_exact(per_channel)).enumerate() {
        let dgamma = n.iter().zip(dy).map(|(&n, &d)| n as f64 * d as f64).sum::<f64>() as f32;
        let dbeta = dy.iter().map(|&d| d as f64).sum::<f64>() as f32;
        let base = if accumulate { dgamma_beta[c] } else { 0.0 };
        dgamma_beta[c] = base + dgamma;
        let base = if accumulate { dgamma_beta[g.channels + c] } else { 0.0 };
        dgamma_beta[g.channels + c] = base + if with_beta { dbeta } else { 0.0 };
    }
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
    if let Some(dy) = dy {
        g.check("layer norm penalty adjoint", &[dy.len()]);
    }
    let count = g.per_sample() as f64;
    let gamma = |i: usize| gamma_beta[channel(g, i)] as f64;
    let dtn = |i: usize| gamma(i) * dty[i] as f64;
    for b in 0..g.batch {
        let rstd = stats[g.batch + b] as f64;
        let n_ta = sample_sum(g, b, |i| n[i] as f64 * ta[i] as f64) / count;
        let n_dtn = sample_sum(g, b, |i| n[i] as f64 * dtn(i)) / count;
        let tn_dtn = sample_sum(g, b, |i| tn[i] as f64 * dtn(i));
        // The adjoint of n: gamma dy, and what tn = r (P ta - n <n, ta> / N) adds through n.
        let dn = |i: usize| {
            let direct = dy.map_or(0.0, |dy| gamma(i) * dy[i] as f64);
            direct - rstd * (n_ta * dtn(i) + n_dtn * ta[i] as f64)
        };
        let mean_dn = sample_sum(g, b, dn) / count;
        let n_dn = sample_sum(g, b, |i| n[i] as f64 * dn(i)) / count;
        for r in sample_runs(g, b) {
            for i in r {
                let ni = n[i] as f64;
                // J dn, and through r = (var + eps)^(-1/2): dr/dx = -r^2 n / N.
                da[i] = (rstd * (dn(i) - mean_dn - ni * n_dn) - rstd * tn_dtn * ni / count) as f32;
            }
        }
    }
}
