//! The Fréchet distance between two sets of feature vectors, each taken as a Gaussian: the
//! means and covariances in f64, and the trace of the matrix square root through two symmetric
//! eigendecompositions (S1^1/2 S2 S1^1/2 is symmetric, so no general square root is needed).

use anyhow::{Result, bail};
use nalgebra::{DMatrix, DVector, SymmetricEigen};

/// The mean and covariance of `n` feature vectors of `dim` values.
#[derive(Clone, Debug)]
pub struct Gaussian {
    pub mean: DVector<f64>,
    /// The unbiased sample covariance, [dim, dim].
    pub cov: DMatrix<f64>,
    pub n: usize,
}

/// The fewest samples whose covariance of `dim` features the distance takes: 2 x dim (fewer
/// leave it too far from full rank for the distance to mean anything).
pub fn min_samples(dim: usize) -> usize {
    2 * dim
}

impl Gaussian {
    /// From `features` [n, dim] (sample-major); fewer than `min_samples(dim)` are an error
    /// saying how many are needed.
    pub fn of(features: &[f32], dim: usize) -> Result<Gaussian> {
        let n = features.len() / dim.max(1);
        if n < min_samples(dim) {
            bail!(
                "{n} images give too few samples for a covariance of {dim} features: use at least {}",
                min_samples(dim)
            );
        }
        let x = DMatrix::from_fn(n, dim, |i, j| features[i * dim + j] as f64);
        let mean = x.row_mean().transpose();
        let centred = DMatrix::from_fn(n, dim, |i, j| x[(i, j)] - mean[j]);
        let cov = centred.transpose() * &centred / (n - 1) as f64;
        Ok(Gaussian { mean, cov, n })
    }
}

/// A symmetric matrix's square root V sqrt(L) V^T, its eigenvalues clamped at 0 (rounding
/// makes the smallest of a covariance slightly negative).
fn sqrt_psd(m: &DMatrix<f64>) -> DMatrix<f64> {
    let e = SymmetricEigen::new(m.clone());
    let roots = e.eigenvalues.map(|l| l.max(0.0).sqrt());
    &e.eigenvectors * DMatrix::from_diagonal(&roots) * e.eigenvectors.transpose()
}

/// |mu1 - mu2|^2 + tr(S1 + S2 - 2 (S1^1/2 S2 S1^1/2)^1/2).
pub fn frechet_distance(a: &Gaussian, b: &Gaussian) -> f64 {
    let d = &a.mean - &b.mean;
    let s1h = sqrt_psd(&a.cov);
    let mut m = &s1h * &b.cov * &s1h;
    // Symmetric in exact arithmetic; make the rounding so, for the symmetric solver.
    m = (&m + m.transpose()) * 0.5;
    let cross: f64 = SymmetricEigen::new(m).eigenvalues.iter().map(|l| l.max(0.0).sqrt()).sum();
    (d.dot(&d) + a.cov.trace() + b.cov.trace() - 2.0 * cross).max(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    /// `n` samples of `dim` values: x = A z + shift with z standard normal, from `seed`.
    fn sample(n: usize, dim: usize, mix: &DMatrix<f64>, shift: f64, seed: u64) -> Vec<f32> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut out = Vec::with_capacity(n * dim);
        for _ in 0..n {
            let z = DVector::from_fn(dim, |_, _| rng.sample::<f64, _>(rand_distr::StandardNormal));
            out.extend((mix * z).iter().map(|v| (v + shift) as f32));
        }
        out
    }

    /// sqrt(S1 S2) by the Denman-Beavers iteration on the (non-symmetric) product: another
    /// route to the same trace.
    fn trace_sqrt_of_product(s1: &DMatrix<f64>, s2: &DMatrix<f64>) -> f64 {
        let a = s1 * s2;
        let (mut y, mut z) = (a.clone(), DMatrix::identity(a.nrows(), a.ncols()));
        for _ in 0..100 {
            let (yi, zi) = (y.clone().try_inverse().unwrap(), z.clone().try_inverse().unwrap());
            (y, z) = ((&y + zi) * 0.5, (&z + yi) * 0.5);
        }
        y.trace()
    }

    #[test]
    fn the_distance_agrees_with_a_direct_computation() {
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let dim = 6;
        let mix_a = DMatrix::from_fn(dim, dim, |_, _| rng.random_range(-1.0..1.0));
        let mix_b = DMatrix::from_fn(dim, dim, |_, _| rng.random_range(-1.0..1.0));
        let a = Gaussian::of(&sample(400, dim, &mix_a, 0.0, 1), dim).unwrap();
        let b = Gaussian::of(&sample(300, dim, &mix_b, 0.3, 2), dim).unwrap();
        let d = &a.mean - &b.mean;
        let direct = d.dot(&d) + a.cov.trace() + b.cov.trace() - 2.0 * trace_sqrt_of_product(&a.cov, &b.cov);
        let ours = frechet_distance(&a, &b);
        assert!((ours - direct).abs() < 1e-9 * direct.max(1.0), "{ours} against {direct}");
        assert!(frechet_distance(&a, &a) < 1e-9, "a set is at distance 0 from itself");
    }

    #[test]
    fn diagonal_covariances_give_the_closed_form() {
        // Independent features: the distance is |dmu|^2 + sum (sqrt(a_i) - sqrt(b_i))^2.
        let (sd_a, sd_b) = ([1.0, 2.0, 0.5], [3.0, 1.0, 0.5]);
        let a = Gaussian::of(&sample(20_000, 3, &DMatrix::from_diagonal(&DVector::from_row_slice(&sd_a)), 0.0, 5), 3)
            .unwrap();
        let b = Gaussian::of(&sample(20_000, 3, &DMatrix::from_diagonal(&DVector::from_row_slice(&sd_b)), 1.0, 6), 3)
            .unwrap();
        let want = 3.0 + sd_a.iter().zip(sd_b).map(|(x, y)| (x - y) * (x - y)).sum::<f64>();
        let got = frechet_distance(&a, &b);
        assert!((got - want).abs() < 0.1, "{got} against {want} (sampling error only)");
    }

    #[test]
    fn too_few_samples_for_the_features_are_refused() {
        let e = Gaussian::of(&vec![0.0; 10 * 8], 8).unwrap_err().to_string();
        assert!(e.contains("10 images") && e.contains("at least 16"), "{e}");
    }
}
