//! CPU axpy.

use rayon::prelude::*;

const CHUNK: usize = 1 << 14;

/// y += a * x
pub fn axpy(a: f32, x: &[f32], y: &mut [f32]) {
    assert_eq!(x.len(), y.len());
    y.par_chunks_mut(CHUNK)
        .zip(x.par_chunks(CHUNK))
        .for_each(|(y, x)| y.iter_mut().zip(x).for_each(|(y, &x)| *y += a * x));
}
