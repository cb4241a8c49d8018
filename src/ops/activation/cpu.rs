//! CPU activations: elementwise, split into cache-sized rayon chunks.

use super::Activation;
use rayon::prelude::*;

const CHUNK: usize = 1 << 14;

pub fn forward(act: Activation, x: &mut [f32]) {
    if act == Activation::None {
        return;
    }
    crate::per_activation!(act, ACT => x.par_chunks_mut(CHUNK).for_each(|c| c.iter_mut().for_each(|v| *v = ACT.apply(*v))));
}

pub fn backward(act: Activation, y: &[f32], dy: &mut [f32]) {
    assert_eq!(y.len(), dy.len());
    if act == Activation::None {
        return;
    }
    crate::per_activation!(act, ACT => dy
        .par_chunks_mut(CHUNK)
        .zip(y.par_chunks(CHUNK))
        .for_each(|(d, y)| d.iter_mut().zip(y).for_each(|(d, &y)| *d *= ACT.grad_from_output(y))));
}
