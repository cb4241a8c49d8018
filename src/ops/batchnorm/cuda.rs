//! CUDA launchers for batch norm (kernels/batchnorm.cu). Every kernel runs on a grid of
//! (splits, C) blocks; the reductions write one partial pair per block into the workspace
//! (as doubles) and `bn_finalize` adds each channel's partials in split order.

use super::BnGeom;
use crate::backend::cuda::kernel_table::{DevPtr, Dims, cuda_kernels};
use crate::backend::cuda::{Cuda, Family, THREADS, dptr, dptr_mut};
use crate::backend::{View, ViewMut};
use crate::ops::activation::Activation;

cuda_kernels! {
    family: Family::BatchNorm, file: "batchnorm.cu";
    fn bn_stats_partial(x: DevPtr, partial: DevPtr, count: i32, chunk: i32);
    fn bn_finalize(partial: DevPtr, out: DevPtr, channels: i32, splits: i32);
    fn bn_apply(
        x: DevPtr,
        stats: DevPtr,
        stats_count: f64,
        gamma: DevPtr,
        beta: DevPtr,
        act: i32,
        y: DevPtr,
        saved: DevPtr,
        running: DevPtr,
        channels: i32,
        count: i32,
        chunk: i32,
        eps: f32,
        momentum: f32,
    );
    fn bn_eval(
        x: DevPtr,
        gamma: DevPtr,
        beta: DevPtr,
        running: DevPtr,
        act: i32,
        y: DevPtr,
        channels: i32,
        count: i32,
        chunk: i32,
        eps: f32,
    );
    fn bn_backward_reduce_partial(
        x: DevPtr,
        y: DevPtr,
        act: i32,
        saved: DevPtr,
        dy: DevPtr,
        partial: DevPtr,
        channels: i32,
        count: i32,
        chunk: i32,
    );
    fn bn_backward_data(
        x: DevPtr,
        dz: DevPtr,
        saved: DevPtr,
        gamma: DevPtr,
        sums: DevPtr,
        sums_count: f64,
        dx: DevPtr,
        channels: i32,
        count: i32,
        chunk: i32,
    );
}

/// How each channel's `count` elements are cut between blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BnSplit {
    /// Blocks per channel.
    pub splits: usize,
    /// Elements per block (a multiple of the block size); the last block may have fewer.
    pub chunk: usize,
}

/// Enough blocks to fill the device twice over, but at least ~2048 elements per block.
pub fn split(g: &BnGeom, sm_count: usize) -> BnSplit {
    let count = g.count.max(1);
    let want = (2 * sm_count).div_ceil(g.channels.max(1));
    let splits = want.min(count.div_ceil(2048)).clamp(1, 1024);
    let chunk = count.div_ceil(splits).next_multiple_of(THREADS as usize);
    BnSplit { splits: count.div_ceil(chunk), chunk }
}

/// Workspace floats for the partial sums: two doubles per (channel, split).
pub fn workspace_floats(g: &BnGeom, sm_count: usize) -> usize {
    4 * split(g, sm_count).splits * g.channels
}

fn grid(g: &BnGeom, s: BnSplit) -> Dims {
    Dims::grid3((s.splits, g.channels, 1), THREADS)
}

fn check(g: &BnGeom, x: usize, pair: usize) {
    assert_eq!(x, g.len(), "batch norm data length for {g:?}");
    assert_eq!(pair, 2 * g.channels, "batch norm [2C] buffer length for {g:?}");
    assert!(g.count <= i32::MAX as usize, "batch norm over {} elements per channel", g.count);
}

fn finalize(cu: &Cuda, g: &BnGeom, s: BnSplit, partial: DevPtr, out: DevPtr) {
    launch::bn_finalize(
        cu,
        Dims::linear(g.channels.div_ceil(THREADS as usize), THREADS),
        partial,
        out,
        g.channels as i32,
        s.splits as i32,
    );
}

/// stats `[2C]` = (sum x, sum x^2) per channel.
pub fn forward_stats(cu: &Cuda, g: &BnGeom, x: View<Cuda>, stats: ViewMut<Cuda>) {
    check(g, x.len, stats.len);
    if g.is_empty() {
        return;
    }
    let s = split(g, cu.sm_count());
    let partial = cu.workspace(workspace_floats(g, cu.sm_count()));
    let (count, chunk) = (g.count as i32, s.chunk as i32);
    launch::bn_stats_partial(cu, grid(g, s), dptr(x), partial, count, chunk);
    finalize(cu, g, s, partial, dptr_mut(&stats));
}

/// y = act(gamma * xhat + beta) with the batch statistics; saved = (mean, 1/std); running
/// statistics updated.
#[allow(clippy::too_many_arguments)]
pub fn forward_apply(
    cu: &Cuda,
    g: &BnGeom,
    x: View<Cuda>,
    stats: View<Cuda>,
    stats_count: f64,
    gamma: View<Cuda>,
    beta: View<Cuda>,
    act: Activation,
    y: ViewMut<Cuda>,
    saved: ViewMut<Cuda>,
    running: ViewMut<Cuda>,
) {
    check(g, x.len, stats.len);
    check(g, y.len, saved.len);
    check(g, y.len, running.len);
    assert!(gamma.len == g.channels && beta.len == g.channels, "batch norm gamma/beta length");
    let s = split(g, cu.sm_count());
    launch::bn_apply(
        cu,
        grid(g, s),
        dptr(x),
        dptr(stats),
        stats_count,
        dptr(gamma),
        dptr(beta),
        act.code(),
        dptr_mut(&y),
        dptr_mut(&saved),
        dptr_mut(&running),
        g.channels as i32,
        g.count as i32,
        s.chunk as i32,
        g.eps,
        g.momentum,
    );
}

/// y = act(gamma * (x - running mean) / sqrt(running var + eps) + beta).
#[allow(clippy::too_many_arguments)]
pub fn forward_eval(
    cu: &Cuda,
    g: &BnGeom,
    x: View<Cuda>,
    gamma: View<Cuda>,
    beta: View<Cuda>,
    running: View<Cuda>,
    act: Activation,
    y: ViewMut<Cuda>,
) {
    check(g, x.len, running.len);
    assert_eq!(y.len, g.len(), "batch norm output length");
    assert!(gamma.len == g.channels && beta.len == g.channels, "batch norm gamma/beta length");
    let s = split(g, cu.sm_count());
    launch::bn_eval(
        cu,
        grid(g, s),
        dptr(x),
        dptr(gamma),
        dptr(beta),
        dptr(running),
        act.code(),
        dptr_mut(&y),
        g.channels as i32,
        g.count as i32,
        s.chunk as i32,
        g.eps,
    );
}

/// dy -> dz in place through the activation; sums `[2C]` = (sum dz*xhat, sum dz).
#[allow(clippy::too_many_arguments)]
pub fn backward_reduce(
    cu: &Cuda,
    g: &BnGeom,
    x: View<Cuda>,
    y: View<Cuda>,
    act: Activation,
    saved: View<Cuda>,
    dy: ViewMut<Cuda>,
    sums: ViewMut<Cuda>,
) {
    check(g, x.len, saved.len);
    check(g, y.len, sums.len);
    assert_eq!(dy.len, g.len(), "batch norm gradient length");
    if g.is_empty() {
        return;
    }
    let s = split(g, cu.sm_count());
    let partial = cu.workspace(workspace_floats(g, cu.sm_count()));
    launch::bn_backward_reduce_partial(
        cu,
        grid(g, s),
        dptr(x),
        dptr(y),
        act.code(),
        dptr(saved),
        dptr_mut(&dy),
        partial,
        g.channels as i32,
        g.count as i32,
        s.chunk as i32,
    );
    finalize(cu, g, s, partial, dptr_mut(&sums));
}

/// dx = gamma/std * (dz - mean(dz) - xhat * mean(dz*xhat)), means over `sums_count`.
#[allow(clippy::too_many_arguments)]
pub fn backward_data(
    cu: &Cuda,
    g: &BnGeom,
    x: View<Cuda>,
    dz: View<Cuda>,
    saved: View<Cuda>,
    gamma: View<Cuda>,
    sums: View<Cuda>,
    sums_count: f64,
    dx: ViewMut<Cuda>,
) {
    check(g, x.len, saved.len);
    check(g, dz.len, sums.len);
    assert_eq!(dx.len, g.len(), "batch norm input-gradient length");
    assert_eq!(gamma.len, g.channels, "batch norm gamma length");
    let s = split(g, cu.sm_count());
    launch::bn_backward_data(
        cu,
        grid(g, s),
        dptr(x),
        dptr(dz),
        dptr(saved),
        dptr(gamma),
        dptr(sums),
        sums_count,
        dptr_mut(&dx),
        g.channels as i32,
        g.count as i32,
        s.chunk as i32,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_cover_each_channel_exactly_once() {
        for (c, count) in [(1, 1), (64, 12544), (128, 3136), (1, 262_144), (512, 1024), (3, 7)] {
            for sm in [1, 4, 132] {
                let g = BnGeom::new(c, count);
                let s = split(&g, sm);
                assert!(s.chunk.is_multiple_of(THREADS as usize));
                assert!(s.splits * s.chunk >= count, "{s:?} leaves elements of {count}");
                assert!((s.splits - 1) * s.chunk < count, "{s:?} has an empty split for {count}");
            }
        }
    }
}
