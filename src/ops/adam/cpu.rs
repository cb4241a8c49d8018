//! CPU fused Adam: one pass over parameter, gradient and both moments.

use super::AdamStep;
use rayon::prelude::*;

const CHUNK: usize = 1 << 14;

pub fn step(h: &AdamStep, p: &mut [f32], g: &[f32], m: &mut [f32], v: &mut [f32]) {
    assert!(p.len() == g.len() && p.len() == m.len() && p.len() == v.len());
    p.par_chunks_mut(CHUNK)
        .zip(g.par_chunks(CHUNK))
        .zip(m.par_chunks_mut(CHUNK).zip(v.par_chunks_mut(CHUNK)))
        .for_each(|((p, g), (m, v))| {
            for i in 0..p.len() {
                h.update(&mut p[i], g[i], &mut m[i], &mut v[i]);
            }
        });
}
