//! CUDA launchers for the WGAN-GP critic's terms (kernels/penalty.cu).

use super::{check_gradient_penalty, check_interpolate};
use crate::backend::cuda::kernel_table::{DevPtr, Dims, cuda_kernels};
use crate::backend::cuda::{Cuda, Family, THREADS, dptr, dptr_mut, elementwise_dims};
use crate::backend::{View, ViewMut};

cuda_kernels! {
    family: Family::Penalty, file: "penalty.cu";
    fn critic_mean(outputs: DevPtr, sign: f32, doutputs: DevPtr, out: DevPtr, n: i32);
    fn interpolate(real: DevPtr, fake: DevPtr, eps: DevPtr, out: DevPtr, n: i64, p: i64, batch: i32);
    fn penalty_norms(g: DevPtr, norms: DevPtr, p: i64, batch: i32, channels: i32);
    fn penalty_seed(g: DevPtr, norms: DevPtr, seed: DevPtr, lambda: f32, n: i64, p: i64, batch: i32);
    fn penalty_stats(norms: DevPtr, out: DevPtr, lambda: f32, batch: i32);
}

/// doutputs = sign / n; `out[0]` = mean(outputs).
pub fn critic_mean(cu: &Cuda, outputs: View<Cuda>, sign: f32, doutputs: ViewMut<Cuda>, out: ViewMut<Cuda>) {
    assert_eq!(outputs.len, doutputs.len, "critic mean: outputs and gradient lengths");
    assert!(out.len >= 1 && outputs.len <= i32::MAX as usize, "critic mean over {} outputs", outputs.len);
    let (d, o) = (dptr_mut(&doutputs), dptr_mut(&out));
    launch::critic_mean(cu, Dims::linear(1, THREADS), dptr(outputs), sign, d, o, outputs.len as i32);
}

/// out [C, B, P] = eps_b real + (1 - eps_b) fake.
pub fn interpolate(
    cu: &Cuda,
    real: View<Cuda>,
    fake: View<Cuda>,
    channels: usize,
    eps: View<Cuda>,
    out: ViewMut<Cuda>,
) {
    let p = check_interpolate(real.len, fake.len, channels, eps.len, out.len);
    let (n, batch) = (out.len, eps.len as i32);
    let o = dptr_mut(&out);
    launch::interpolate(cu, elementwise_dims(cu, n), dptr(real), dptr(fake), dptr(eps), o, n as i64, p as i64, batch);
}

/// The penalty of g `[C, B, P]`: norms `[B]`, out `[2]` = (penalty, mean norm), seed =
/// d penalty / dg.
pub fn gradient_penalty(
    cu: &Cuda,
    g: View<Cuda>,
    channels: usize,
    lambda: f32,
    seed: ViewMut<Cuda>,
    norms: ViewMut<Cuda>,
    out: ViewMut<Cuda>,
) {
    let p = check_gradient_penalty(g.len, channels, seed.len, norms.len, out.len) as i64;
    let (n, batch) = (g.len, norms.len as i32);
    let nrm = dptr_mut(&norms);
    let gp = dptr(g);
    launch::penalty_norms(cu, Dims::linear(norms.len, THREADS), gp, nrm, p, batch, channels as i32);
    launch::penalty_seed(cu, elementwise_dims(cu, n), gp, nrm, dptr_mut(&seed), lambda, n as i64, p, batch);
    launch::penalty_stats(cu, Dims::linear(1, THREADS), nrm, dptr_mut(&out), lambda, batch);
}
