//! The WGAN-GP critic's terms: the mean of the critic's outputs (its Wasserstein estimate),
//! the interpolates between real and fake images, and the gradient penalty's value and the
//! seed of its weight gradient. CPU sides in `cpu.rs`, CUDA launchers in `cuda.rs`, kernels in
//! kernels/penalty.cu.
//!
//! Images are channel-major, [C, B, P] with P = H * W pixels: sample b's values are the C runs
//! of P floats starting at c * B * P + b * P.

pub mod cpu;
#[cfg(feature = "cuda")]
pub mod cuda;

/// P, the pixels of one channel of one sample, for images [C, B, P] of `len` floats: panics
/// unless `len` is C x B runs of one whole length (a bug upstream).
pub fn run_len(len: usize, channels: usize, batch: usize, what: &str) -> usize {
    assert!(batch >= 1 && channels >= 1, "{what}: {channels} channel(s) of {batch} sample(s)");
    let runs = channels * batch;
    assert_eq!(len % runs, 0, "{what}: {len} floats are not {channels} channel(s) of {batch} equal samples");
    len / runs
}

/// The shapes `interpolate` takes, checked the same way on every backend; returns P.
pub fn check_interpolate(real: usize, fake: usize, channels: usize, eps: usize, out: usize) -> usize {
    assert_eq!(real, fake, "interpolate: real and fake lengths");
    assert_eq!(out, real, "interpolate: output length");
    run_len(real, channels, eps, "interpolate")
}

/// The shapes `gradient_penalty` takes: g and seed `[C, B, P]`, norms `[B]`, out `[2]`; returns P.
pub fn check_gradient_penalty(g: usize, channels: usize, seed: usize, norms: usize, out: usize) -> usize {
    assert_eq!(seed, g, "gradient penalty: gradient and seed lengths");
    assert_eq!(out, 2, "gradient penalty writes 2 floats (penalty, mean norm)");
    run_len(g, channels, norms, "gradient penalty")
}

/// d/dg of (||g|| - 1)^2 is 2 (||g|| - 1) g / ||g||: the factor of g for one sample, times
/// `scale`. At ||g|| = 0 the term has no gradient (its subgradient at the origin is 0): a
/// critic flat at that sample gives its weights nothing to follow from it.
#[inline(always)]
pub fn seed_factor(norm: f64, scale: f64) -> f64 {
    if norm > 0.0 { scale * 2.0 * (norm - 1.0) / norm } else { 0.0 }
}
