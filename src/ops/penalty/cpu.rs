//! CPU side of the WGAN-GP critic's terms: sequential f64 sums (a batch of a few hundred
//! samples), so the results do not depend on threads.

use super::{check_gradient_penalty, check_interpolate, seed_factor};

/// doutputs = sign / n; `out[0]` = mean(outputs).
pub fn critic_mean(outputs: &[f32], sign: f32, doutputs: &mut [f32], out: &mut [f32]) {
    assert_eq!(outputs.len(), doutputs.len(), "critic mean: outputs and gradient lengths");
    let n = outputs.len().max(1);
    doutputs.fill(sign / n as f32);
    out[0] = (outputs.iter().map(|&v| v as f64).sum::<f64>() / n as f64) as f32;
}

/// out `[C, B, P]` = eps_b real + (1 - eps_b) fake, with eps `[B]`.
pub fn interpolate(real: &[f32], fake: &[f32], channels: usize, eps: &[f32], out: &mut [f32]) {
    let p = check_interpolate(real.len(), fake.len(), channels, eps.len(), out.len());
    for (run, ((o, x), y)) in out.chunks_exact_mut(p).zip(real.chunks_exact(p)).zip(fake.chunks_exact(p)).enumerate() {
        // Run c * B + b is channel c of sample b.
        let e = eps[run % eps.len()];
        for ((o, &x), &y) in o.iter_mut().zip(x).zip(y) {
            *o = e * x + (1.0 - e) * y;
        }
    }
}

/// For g `[C, B, P]`, the gradient of D at each interpolate: norms `[B]` = ||g_b||, out `[2]` =
/// (lambda * mean_b (||g_b|| - 1)^2, mean_b ||g_b||), and seed `[C, B, P]` = d `out[0]` / dg =
/// 2 lambda / B (||g_b|| - 1) g_b / ||g_b|| (0 where ||g_b|| = 0).
pub fn gradient_penalty(g: &[f32], channels: usize, lambda: f32, seed: &mut [f32], norms: &mut [f32], out: &mut [f32]) {
    let p = check_gradient_penalty(g.len(), channels, seed.len(), norms.len(), out.len());
    let batch = norms.len();
    let scale = lambda as f64 / batch as f64;
    let (mut penalty, mut norm_sum) = (0.0f64, 0.0f64);
    // Sample b is runs c * B + b of P floats, c over the channels.
    let runs = |b: usize| (0..channels).map(move |c| (c * batch + b) * p..(c * batch + b + 1) * p);
    for (b, n) in norms.iter_mut().enumerate() {
        let squares: f64 = runs(b).map(|r| g[r].iter().map(|&v| (v as f64) * (v as f64)).sum::<f64>()).sum();
        let norm = squares.sqrt();
        let f = seed_factor(norm, scale) as f32;
        for r in runs(b) {
            for (s, &v) in seed[r.clone()].iter_mut().zip(&g[r]) {
                *s = f * v;
            }
        }
        *n = norm as f32;
        penalty += (norm - 1.0) * (norm - 1.0);
        norm_sum += norm;
    }
    out[0] = (lambda as f64 * penalty / batch as f64) as f32;
    out[1] = (norm_sum / batch as f64) as f32;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_penalty_and_its_seed_by_hand() {
        // Two channels of two samples of two pixels: sample 0 is (3, 4 | 0, 0), norm 5; sample
        // 1 is all zeros, norm 0 (no gradient, penalty 1).
        let g = [3.0, 4.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0];
        let (mut seed, mut norms, mut out) = ([9.0f32; 8], [0.0f32; 2], [0.0f32; 2]);
        gradient_penalty(&g, 2, 10.0, &mut seed, &mut norms, &mut out);
        assert_eq!(norms, [5.0, 0.0]);
        assert_eq!(out, [10.0 * (16.0 + 1.0) / 2.0, 2.5]);
        // 2 * 10 / 2 * (5 - 1) / 5 = 8 times g for sample 0.
        assert_eq!(seed, [24.0, 32.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]);
    }

    #[test]
    fn interpolates_take_each_sample_its_own_eps() {
        // [C=2, B=2, P=1]: runs are (c0 b0, c0 b1, c1 b0, c1 b1).
        let (real, fake, eps) = ([1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0], [0.25, 0.75]);
        let mut out = [0.0; 4];
        interpolate(&real, &fake, 2, &eps, &mut out);
        assert_eq!(out, [0.25, 0.75, 0.25, 0.75]);
    }
}
