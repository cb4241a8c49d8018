//! The kernel inception distance: the unbiased estimate of the squared maximum mean
//! discrepancy between two sets of features under the kernel k(x, y) = (x.y / d + 1)^3,
//! averaged over random subsets (it can be slightly negative, as an unbiased estimate of a
//! number near 0 must be).

use nalgebra::DMatrix;
use rand::SeedableRng;
use rand::seq::index::sample;
use rand_chacha::ChaCha8Rng;
use rayon::prelude::*;

/// KID's mean and standard deviation over the subsets.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Kid {
    pub mean: f64,
    pub std: f64,
    pub subsets: usize,
    pub subset_size: usize,
}

/// The rows `idx` of `x` [n, dim], as an [m, dim] matrix.
fn rows(x: &[f32], dim: usize, idx: &[usize]) -> DMatrix<f32> {
    DMatrix::from_fn(idx.len(), dim, |i, j| x[idx[i] * dim + j])
}

/// Sum of k(a_i, b_j) over all pairs, and over the diagonal (meaningful when a is b). The dot
/// products come from one matrix product in f32 (a few hundred terms each, far from f32's
/// limits); the kernel and the sums are f64.
fn kernel_sums(a: &DMatrix<f32>, b: &DMatrix<f32>) -> (f64, f64) {
    let dim = a.ncols() as f64;
    let dots = a * b.transpose();
    let k = |d: f32| (d as f64 / dim + 1.0).powi(3);
    let all = dots.iter().map(|&d| k(d)).sum();
    let diag = (0..dots.nrows().min(dots.ncols())).map(|i| k(dots[(i, i)])).sum();
    (all, diag)
}

/// The unbiased MMD^2 of one pair of subsets of `m` rows each.
fn mmd2(x: &DMatrix<f32>, y: &DMatrix<f32>) -> f64 {
    let m = x.nrows();
    let (kxx, dxx) = kernel_sums(x, x);
    let (kyy, dyy) = kernel_sums(y, y);
    let (kxy, _) = kernel_sums(x, y);
    let pairs = (m * (m - 1)) as f64;
    (kxx - dxx) / pairs + (kyy - dyy) / pairs - 2.0 * kxy / (m * m) as f64
}

/// KID between `x` [n, dim] and `y` [n', dim]: `subsets` draws (keyed by `seed`) of
/// min(`subset_size`, n, n') rows of each, without replacement within a draw.
pub fn kid(x: &[f32], y: &[f32], dim: usize, subsets: usize, subset_size: usize, seed: u64) -> Kid {
    let (nx, ny) = (x.len() / dim, y.len() / dim);
    let m = subset_size.min(nx).min(ny);
    assert!(m >= 2, "KID needs at least 2 samples on each side");
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    // The draws in order from one stream, then the subsets on the compute threads: the same
    // values, in the same order, whatever the threads.
    let draws: Vec<(Vec<usize>, Vec<usize>)> =
        (0..subsets).map(|_| (sample(&mut rng, nx, m).into_vec(), sample(&mut rng, ny, m).into_vec())).collect();
    let values: Vec<f64> = draws.par_iter().map(|(ix, iy)| mmd2(&rows(x, dim, ix), &rows(y, dim, iy))).collect();
    let mean = values.iter().sum::<f64>() / subsets as f64;
    let var = values.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / (subsets.max(2) - 1) as f64;
    Kid { mean, std: var.sqrt(), subsets, subset_size: m }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::Rng;

    fn normal(n: usize, dim: usize, shift: f32, seed: u64) -> Vec<f32> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        (0..n * dim).map(|_| rng.sample::<f32, _>(rand_distr::StandardNormal) + shift).collect()
    }

    #[test]
    fn two_samples_of_one_distribution_average_near_zero() {
        let dim = 16;
        let (x, y) = (normal(2000, dim, 0.0, 1), normal(2000, dim, 0.0, 2));
        let k = kid(&x, &y, dim, 100, 200, 7);
        // Unbiased: the mean over subsets lies within a few standard errors of 0.
        let se = k.std / (k.subsets as f64).sqrt();
        assert!(k.mean.abs() < 4.0 * se.max(1e-6), "{k:?}");
        // A shifted distribution is far beyond that.
        let far = kid(&x, &normal(2000, dim, 0.5, 3), dim, 100, 200, 7);
        assert!(far.mean > 20.0 * se && far.mean > 10.0 * k.mean.abs(), "{far:?} against {k:?}");
    }

    #[test]
    fn the_estimate_is_the_formula_on_a_hand_sized_case() {
        // m = 2, dim = 1: every kernel value by hand.
        let (x, y) = ([1.0f32, 2.0], [0.0f32, 1.0]);
        let k = |a: f64, b: f64| (a * b + 1.0).powi(3);
        let xx = 2.0 * k(1.0, 2.0) / 2.0;
        let yy = 2.0 * k(0.0, 1.0) / 2.0;
        let xy = (k(1.0, 0.0) + k(1.0, 1.0) + k(2.0, 0.0) + k(2.0, 1.0)) / 4.0;
        let got = kid(&x, &y, 1, 1, 2, 0);
        assert!((got.mean - (xx + yy - 2.0 * xy)).abs() < 1e-12, "{got:?}");
    }
}
