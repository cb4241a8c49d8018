//! CUDA launchers for layer norm (kernels/layernorm.cu): the per-sample kernels run one block
//! per sample, the parameter gradient one block per channel, the affine map a grid-stride loop.

use super::LnGeom;
use crate::backend::cuda::kernel_table::{DevPtr, Dims, cuda_kernels};
use crate::backend::cuda::{Cuda, Family, THREADS, dptr, dptr_mut, elementwise_dims};
use crate::backend::{View, ViewMut};

cuda_kernels! {
    family: Family::LayerNorm, file: "layernorm.cu";
    fn ln_normalize(x: DevPtr, n: DevPtr, stats: DevPtr, channels: i32, batch: i32, pixels: i32, eps: f32);
    fn ln_affine(
        n: DevPtr,
        gamma_beta: DevPtr,
        with_beta: i32,
        y: DevPtr,
        n_total: i64,
        per_channel: i64,
        channels: i32,
    );
    fn ln_backward_data(
        n: DevPtr,
        stats: DevPtr,
        gamma_beta: DevPtr,
        by_gamma: i32,
        dy: DevPtr,
        dx: DevPtr,
        channels: i32,
        batch: i32,
        pixels: i32,
    );
    fn ln_param_grad(
        n: DevPtr,
        dy: DevPtr,
        with_beta: i32,
        dgamma_beta: DevPtr,
        accumulate: i32,
        channels: i32,
        per_channel: i64,
    );
    fn ln_penalty_adjoint(
        n: DevPtr,
        stats: DevPtr,
        gamma_beta: DevPtr,
        ta: DevPtr,
        tn: DevPtr,
        dty: DevPtr,
        dy: DevPtr,
        da: DevPtr,
        channels: i32,
        batch: i32,
        pixels: i32,
    );
}

/// The shape as the kernels take it, (channels, batch, pixels), after checking that each
/// sample's C * P values index in 32 bits.
fn dims32(g: &LnGeom) -> (i32, i32, i32) {
    let fits = |v: usize| v <= i32::MAX as usize;
    assert!(fits(g.per_sample()) && fits(g.batch), "layer norm over {g:?}: beyond the kernels' 32-bit indexing");
    (g.channels as i32, g.batch as i32, g.pixels as i32)
}

/// One block per sample.
fn per_sample(g: &LnGeom) -> Dims {
    Dims::linear(g.batch, THREADS)
}

/// stats `[2B]` = (each sample's mean, then its 1 / sqrt(var + eps)); n = the normalized x.
pub fn normalize(cu: &Cuda, g: &LnGeom, x: View<Cuda>, n: ViewMut<Cuda>, stats: ViewMut<Cuda>) {
    g.check("layer norm", &[x.len, n.len]);
    g.check_stats("layer norm", stats.len);
    let (c, b, p) = dims32(g);
    let (np, sp) = (dptr_mut(&n), dptr_mut(&stats));
    launch::ln_normalize(cu, per_sample(g), dptr(x), np, sp, c, b, p, g.eps);
}

/// y = gamma_c n + beta_c; without the shift unless `with_beta`.
pub fn affine(cu: &Cuda, g: &LnGeom, n: View<Cuda>, gamma_beta: View<Cuda>, with_beta: bool, y: ViewMut<Cuda>) {
    g.check("layer norm affine", &[n.len, y.len]);
    g.check_gamma_beta("layer norm affine", gamma_beta.len);
    let (len, per_channel) = (g.len(), (g.batch * g.pixels) as i64);
    let (gb, yp) = (dptr(gamma_beta), dptr_mut(&y));
    let c = g.channels as i32;
    launch::ln_affine(cu, elementwise_dims(cu, len), dptr(n), gb, with_beta as i32, yp, len as i64, per_channel, c);
}

/// dx = J (gamma_c dy) per sample, or J dy unless `by_gamma`.
#[allow(clippy::too_many_arguments)] // the shape, four inputs, a choice and the output
pub fn backward_data(
    cu: &Cuda,
    g: &LnGeom,
    n: View<Cuda>,
    stats: View<Cuda>,
    gamma_beta: View<Cuda>,
    by_gamma: bool,
    dy: View<Cuda>,
    dx: ViewMut<Cuda>,
) {
    g.check("layer norm backward", &[n.len, dy.len, dx.len]);
    g.check_stats("layer norm backward", stats.len);
    g.check_gamma_beta("layer norm backward", gamma_beta.len);
    let (c, b, p) = dims32(g);
    let (np, sp, gb) = (dptr(n), dptr(stats), dptr(gamma_beta));
    launch::ln_backward_data(cu, per_sample(g), np, sp, gb, by_gamma as i32, dptr(dy), dptr_mut(&dx), c, b, p);
}

/// dgamma_beta `[2C]` (+)= per channel (sum dy n, sum dy), or (sum dy n, 0) unless `with_beta`.
#[allow(clippy::too_many_arguments)] // the shape, two inputs, a choice, the output and a choice
pub fn param_grad(
    cu: &Cuda,
    g: &LnGeom,
    n: View<Cuda>,
    dy: View<Cuda>,
    with_beta: bool,
    dgamma_beta: ViewMut<Cuda>,
    accumulate: bool,
) {
    g.check("layer norm parameter gradient", &[n.len, dy.len]);
    g.check_gamma_beta("layer norm parameter gradient", dgamma_beta.len);
    let (c, per_channel) = (g.channels as i32, (g.batch * g.pixels) as i64);
    let out = dptr_mut(&dgamma_beta);
    let (wb, acc) = (with_beta as i32, accumulate as i32);
    launch::ln_param_grad(cu, Dims::linear(g.channels, THREADS), dptr(n), dptr(dy), wb, out, acc, c, per_channel);
}

/// The gradient penalty's adjoint at a layer norm's input (ops/layernorm/cpu.rs), dy None
/// counting as zero.
#[allow(clippy::too_many_arguments)] // the shape, seven inputs and the output
pub fn penalty_adjoint(
    cu: &Cuda,
    g: &LnGeom,
    n: View<Cuda>,
    stats: View<Cuda>,
    gamma_beta: View<Cuda>,
    ta: View<Cuda>,
    tn: View<Cuda>,
    dty: View<Cuda>,
    dy: Option<View<Cuda>>,
    da: ViewMut<Cuda>,
) {
    let what = "layer norm penalty adjoint";
    g.check(what, &[n.len, ta.len, tn.len, dty.len, da.len]);
    if let Some(dy) = &dy {
        g.check(what, &[dy.len]);
    }
    g.check_stats(what, stats.len);
    g.check_gamma_beta(what, gamma_beta.len);
    let (c, b, p) = dims32(g);
    // A null pointer: the kernel reads no dy.
    let dyp = dy.map_or(DevPtr(0), dptr);
    let (np, sp, gb) = (dptr(n), dptr(stats), dptr(gamma_beta));
    let (tap, tnp, dtp) = (dptr(ta), dptr(tn), dptr(dty));
    launch::ln_penalty_adjoint(cu, per_sample(g), np, sp, gb, tap, tnp, dtp, dyp, dptr_mut(&da), c, b, p);
}
