//! CPU fill / scale / axpy.

use rayon::prelude::*;

const CHUNK: usize = 1 << 14;

pub fn fill(x: &mut [f32], value: f32) {
    x.par_chunks_mut(CHUNK).for_each(|c| c.fill(value));
}

pub fn scale(x: &mut [f32], a: f32) {
    x.par_chunks_mut(CHUNK).for_each(|c| c.iter_mut().for_each(|v| *v *= a));
}

/// y += a * x
pub fn axpy(a: f32, x: &[f32], y: &mut [f32]) {
    assert_eq!(x.len(), y.len());
    y.par_chunks_mut(CHUNK)
        .zip(x.par_chunks(CHUNK))
        .for_each(|(y, x)| y.iter_mut().zip(x).for_each(|(y, &x)| *y += a * x));
}
