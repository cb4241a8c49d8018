//! Helpers shared by the integration tests.

#![allow(dead_code)]

pub mod reference;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// `n` values uniform in [-scale, scale] from `seed`.
pub fn random(n: usize, scale: f32, seed: u64) -> Vec<f32> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..n).map(|_| rng.random_range(-scale..scale)).collect()
}

pub fn to_f64(v: &[f32]) -> Vec<f64> {
    v.iter().map(|&x| x as f64).collect()
}

/// max |a - b| / max(max |b|, floor): the error of `a` relative to the reference's scale.
pub fn rel_err(a: &[f32], b: &[f64], floor: f64) -> f64 {
    assert_eq!(a.len(), b.len());
    let scale = b.iter().fold(0.0f64, |m, v| m.max(v.abs())).max(floor);
    a.iter().zip(b).fold(0.0f64, |m, (x, y)| m.max((*x as f64 - y).abs())) / scale
}

/// <a, b> in f64.
pub fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}
