//! CUDA launchers for convolution (kernels/conv.cu): the GEMM shape of each direction, the
//! tile shape, and the split of long reductions over several blocks (split-K) whose partial
//! tiles `conv_splitk_reduce` adds in a fixed order.

use super::ConvGeom;
use crate::backend::cuda::kernel_table::{DevPtr, Dims, FastDiv, cuda_kernels, device_struct};
use crate::backend::cuda::{Cuda, Family, THREADS, dptr, dptr_mut, elementwise_dims};
use crate::backend::{Precision, View, ViewMut};

device_struct! {
    /// One conv launch (`ConvParams` in kernels/conv.cu, declared from this struct).
    pub struct ConvParams {
        pub batch: i32,
        pub c_in: i32,
        pub h_in: i32,
        pub w_in: i32,
        pub c_out: i32,
        pub k: i32,
        pub stride: i32,
        pub pad: i32,
        pub h_out: i32,
        pub w_out: i32,
        /// The GEMM: C[gemm_m, gemm_n] = sum over gemm_k (per phase for backward-data).
        pub gemm_m: i32,
        pub gemm_n: i32,
        pub gemm_k: i32,
        /// Reduction elements per split (blockIdx.z), a multiple of 16.
        pub k_chunk: i32,
        /// 1: each split writes its partial [M, N] tile into the workspace.
        pub split_out: i32,
        /// 1: add to what the output holds (weight gradients).
        pub accumulate: i32,
        /// k*k, k: a reduction/column index r -> (ci, ki, kj).
        pub div_kk: FastDiv,
        pub div_k: FastDiv,
        /// OH*OW, OW: an output pixel index -> (b, oh, ow).
        pub div_pix: FastDiv,
        pub div_w_out: FastDiv,
        /// ceil(H/s)*ceil(W/s), ceil(W/s): a backward-data column -> (b, i', j').
        pub div_phase_pix: FastDiv,
        pub div_w_phase: FastDiv,
        /// taps^2, taps with taps = ceil(k/s): a backward-data reduction index -> (co, th, tw).
        pub div_taps2: FastDiv,
        pub div_taps: FastDiv,
    }
}

cuda_kernels! {
    family: Family::Conv, file: "conv.cu";
    fn conv_fwd_128x128(p: ConvParams, a: DevPtr, b: DevPtr, c: DevPtr);
    fn conv_fwd_64x64(p: ConvParams, a: DevPtr, b: DevPtr, c: DevPtr);
    fn conv_fwd_16x128(p: ConvParams, a: DevPtr, b: DevPtr, c: DevPtr);
    fn conv_fwd_4x256(p: ConvParams, a: DevPtr, b: DevPtr, c: DevPtr);
    fn conv_bwd_data_128x128(p: ConvParams, a: DevPtr, b: DevPtr, c: DevPtr);
    fn conv_bwd_data_64x64(p: ConvParams, a: DevPtr, b: DevPtr, c: DevPtr);
    fn conv_bwd_data_16x128(p: ConvParams, a: DevPtr, b: DevPtr, c: DevPtr);
    fn conv_bwd_data_4x256(p: ConvParams, a: DevPtr, b: DevPtr, c: DevPtr);
    fn conv_bwd_data_dense_128x128(p: ConvParams, a: DevPtr, b: DevPtr, c: DevPtr);
    fn conv_bwd_data_dense_64x64(p: ConvParams, a: DevPtr, b: DevPtr, c: DevPtr);
    fn conv_bwd_data_dense_16x128(p: ConvParams, a: DevPtr, b: DevPtr, c: DevPtr);
    fn conv_bwd_data_dense_4x256(p: ConvParams, a: DevPtr, b: DevPtr, c: DevPtr);
    fn conv_bwd_weight_128x128(p: ConvParams, a: DevPtr, b: DevPtr, c: DevPtr);
    fn conv_bwd_weight_64x64(p: ConvParams, a: DevPtr, b: DevPtr, c: DevPtr);
    fn conv_bwd_weight_16x128(p: ConvParams, a: DevPtr, b: DevPtr, c: DevPtr);
    fn conv_bwd_weight_4x256(p: ConvParams, a: DevPtr, b: DevPtr, c: DevPtr);
    fn conv_fwd_128x128_tf32(p: ConvParams, a: DevPtr, b: DevPtr, c: DevPtr);
    fn conv_fwd_128x128_3xtf32(p: ConvParams, a: DevPtr, b: DevPtr, c: DevPtr);
    fn conv_fwd_64x64_tf32(p: ConvParams, a: DevPtr, b: DevPtr, c: DevPtr);
    fn conv_fwd_64x64_3xtf32(p: ConvParams, a: DevPtr, b: DevPtr, c: DevPtr);
    fn conv_bwd_data_128x128_tf32(p: ConvParams, a: DevPtr, b: DevPtr, c: DevPtr);
    fn conv_bwd_data_128x128_3xtf32(p: ConvParams, a: DevPtr, b: DevPtr, c: DevPtr);
    fn conv_bwd_data_64x64_tf32(p: ConvParams, a: DevPtr, b: DevPtr, c: DevPtr);
    fn conv_bwd_data_64x64_3xtf32(p: ConvParams, a: DevPtr, b: DevPtr, c: DevPtr);
    fn conv_bwd_data_dense_128x128_tf32(p: ConvParams, a: DevPtr, b: DevPtr, c: DevPtr);
    fn conv_bwd_data_dense_128x128_3xtf32(p: ConvParams, a: DevPtr, b: DevPtr, c: DevPtr);
    fn conv_bwd_data_dense_64x64_tf32(p: ConvParams, a: DevPtr, b: DevPtr, c: DevPtr);
    fn conv_bwd_data_dense_64x64_3xtf32(p: ConvParams, a: DevPtr, b: DevPtr, c: DevPtr);
    fn conv_bwd_weight_128x128_tf32(p: ConvParams, a: DevPtr, b: DevPtr, c: DevPtr);
    fn conv_bwd_weight_128x128_3xtf32(p: ConvParams, a: DevPtr, b: DevPtr, c: DevPtr);
    fn conv_bwd_weight_64x64_tf32(p: ConvParams, a: DevPtr, b: DevPtr, c: DevPtr);
    fn conv_bwd_weight_64x64_3xtf32(p: ConvParams, a: DevPtr, b: DevPtr, c: DevPtr);
    fn conv_bwd_data_cin1(p: ConvParams, w: DevPtr, dy: DevPtr, dx: DevPtr);
    fn conv_splitk_reduce(ws: DevPtr, out: DevPtr, mn: i64, splits: i32, accumulate: i32);
}

/// K step of the kernels (BK in conv.cu).
const BK: usize = 16;
/// At most this many splits of one reduction.
const MAX_SPLITS: usize = 64;
/// Split-K partial tiles are capped at this many floats (64 MiB).
const MAX_WORKSPACE_FLOATS: usize = 1 << 24;
/// The most weights `conv_bwd_data_cin1` holds in shared memory (CIN1_MAX_W in conv.cu).
const CIN1_MAX_W: usize = 4096;

/// Which GEMM a launch computes (MODE_* in conv.cu).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    Forward,
    /// Backward-data by stride phases.
    BackwardData,
    /// Backward-data of a conv that covers its whole input (OH = OW = 1, k = H = W, pad 0).
    BackwardDataDense,
    /// Backward-data into one input channel (C_in = 1): not a tiled GEMM but one thread per
    /// dx pixel (`conv_bwd_data_cin1`); a one-row GEMM would be mostly padding rows.
    BackwardDataOneChannel,
    BackwardWeight,
}

/// Output tile of one block: rows x columns of C.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tile {
    T128x128,
    T64x64,
    T16x128,
    T4x256,
}

impl Tile {
    /// The widest tile whose rows are not mostly padding for M rows.
    pub fn for_rows(m: usize) -> Tile {
        match m {
            0..=4 => Tile::T4x256,
            5..=16 => Tile::T16x128,
            _ => Tile::T64x64,
        }
    }

    /// The tile for a GEMM of m x n outputs in `z` independent slabs: 128x128 (8x8 outputs
    /// per thread, more multiply-adds per shared-memory read) once it still gives every
    /// multiprocessor a block, otherwise the 64-row or narrow tiles. `DCGAN_CONV_TILE=64`
    /// or `=128` forces the choice between the two wide tiles (for benchmarking).
    pub fn choose(m: usize, n: usize, z: usize, sm_count: usize) -> Tile {
        let narrow = Tile::for_rows(m);
        if narrow != Tile::T64x64 {
            return narrow;
        }
        let blocks_128 = m.div_ceil(128) * n.div_ceil(128) * z;
        match wide_tile_override() {
            Some(128) => Tile::T128x128,
            Some(_) => Tile::T64x64,
            None if m >= 128 && blocks_128 >= sm_count => Tile::T128x128,
            None => Tile::T64x64,
        }
    }

    pub fn rows(self) -> usize {
        match self {
            Tile::T128x128 => 128,
            Tile::T64x64 => 64,
            Tile::T16x128 => 16,
            Tile::T4x256 => 4,
        }
    }
    pub fn cols(self) -> usize {
        match self {
            Tile::T128x128 => 128,
            Tile::T64x64 => 64,
            Tile::T16x128 => 128,
            Tile::T4x256 => 256,
        }
    }
}

/// `DCGAN_CONV_TILE`, read once: `64` or `128` forces that wide tile wherever `Tile::choose`
/// would pick one of the two (for benchmarking); unset, or any other value, lets it choose.
fn wide_tile_override() -> Option<usize> {
    static TILE: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();
    *TILE.get_or_init(|| {
        std::env::var("DCGAN_CONV_TILE").ok().and_then(|v| v.parse().ok()).filter(|t| [64, 128].contains(t))
    })
}

/// The GEMM a launch computes and how it is cut into blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GemmPlan {
    pub dir: Direction,
    pub tile: Tile,
    pub m: usize,
    pub n: usize,
    pub k: usize,
    /// Blocks along z: reduction splits (forward, backward-weight), stride^2 phases
    /// (backward-data) or 1.
    pub z: usize,
    /// Reduction splits (1: no workspace).
    pub splits: usize,
    pub k_chunk: usize,
}

impl GemmPlan {
    /// Workspace floats for the partial tiles.
    pub fn workspace_floats(&self) -> usize {
        if self.splits > 1 { self.splits * self.m * self.n } else { 0 }
    }
}

/// Whether backward-data can run as one dense GEMM straight into dx.
pub fn is_dense(g: &ConvGeom) -> bool {
    g.h_out == 1 && g.w_out == 1 && g.pad == 0 && g.k == g.h_in && g.k == g.w_in
}

/// How backward-data of `g` runs: one dense GEMM, one thread per pixel of a single input
/// channel, or a GEMM per stride phase.
pub fn backward_data_direction(g: &ConvGeom) -> Direction {
    if is_dense(g) {
        Direction::BackwardDataDense
    } else if g.c_in == 1 && g.c_out * g.k * g.k <= CIN1_MAX_W {
        Direction::BackwardDataOneChannel
    } else {
        Direction::BackwardData
    }
}

/// Split a reduction of length k when the output tiles alone cannot fill the device twice.
fn split_k(tile: Tile, m: usize, n: usize, k: usize, sm_count: usize) -> (usize, usize) {
    let tiles = m.div_ceil(tile.rows()) * n.div_ceil(tile.cols());
    let want = (2 * sm_count).div_ceil(tiles.max(1));
    let by_k = (k / (4 * BK)).max(1); // at least four K steps per split
    let by_ws = (MAX_WORKSPACE_FLOATS / (m * n).max(1)).max(1);
    let splits = want.min(by_k).min(by_ws).clamp(1, MAX_SPLITS);
    let k_chunk = k.div_ceil(splits).next_multiple_of(BK).max(BK);
    (k.div_ceil(k_chunk).max(1), k_chunk)
}

/// The plan of direction `dir` of `g` on a device with `sm_count` multiprocessors.
pub fn plan(g: &ConvGeom, dir: Direction, sm_count: usize) -> GemmPlan {
    let kk = g.k * g.k;
    let s = g.stride;
    let (m, n, k) = match dir {
        Direction::Forward => (g.c_out, g.batch * g.out_pixels(), g.c_in * kk),
        Direction::BackwardData => {
            let taps = g.k.div_ceil(s);
            let (h_phase, w_phase) = g.phase_side();
            let phase_pix = h_phase * w_phase;
            (g.c_in, g.batch * phase_pix, g.c_out * taps * taps)
        }
        Direction::BackwardDataDense => (g.c_in * kk, g.batch, g.c_out),
        Direction::BackwardDataOneChannel => (1, g.batch * g.h_in * g.w_in, g.c_out * kk),
        Direction::BackwardWeight => (g.c_out, g.c_in * kk, g.batch * g.out_pixels()),
    };
    let phases = if dir == Direction::BackwardData { s * s } else { 1 };
    let tile = Tile::choose(m, n, phases, sm_count);
    let (z, splits, k_chunk) = match dir {
        Direction::Forward | Direction::BackwardWeight => {
            let (splits, chunk) = split_k(tile, m, n, k, sm_count);
            (splits, splits, chunk)
        }
        Direction::BackwardData => (phases, 1, k.next_multiple_of(BK).max(BK)),
        Direction::BackwardDataDense | Direction::BackwardDataOneChannel => (1, 1, k.next_multiple_of(BK).max(BK)),
    };
    GemmPlan { dir, tile, m, n, k, z, splits, k_chunk }
}

/// The largest workspace any direction of `g` needs.
pub fn workspace_floats(g: &ConvGeom, sm_count: usize) -> usize {
    [Direction::Forward, Direction::BackwardWeight]
        .iter()
        .map(|&d| plan(g, d, sm_count).workspace_floats())
        .max()
        .unwrap_or(0)
}

fn params(g: &ConvGeom, p: &GemmPlan, accumulate: bool) -> ConvParams {
    let s = g.stride;
    let taps = g.k.div_ceil(s);
    let (h_phase, w_phase) = g.phase_side();
    let i = |v: usize| -> i32 {
        assert!(v <= i32::MAX as usize, "convolution size {v} does not fit 32 bits: {g:?}");
        v as i32
    };
    // The kernels index within one tensor in 32 bits.
    for len in [g.x_len(), g.y_len(), g.w_len()] {
        assert!(len < 1 << 31, "a convolution tensor of {len} floats is too large: {g:?}");
    }
    let div = |d: usize| FastDiv::new(d.max(1));
    ConvParams {
        batch: i(g.batch),
        c_in: i(g.c_in),
        h_in: i(g.h_in),
        w_in: i(g.w_in),
        c_out: i(g.c_out),
        k: i(g.k),
        stride: i(g.stride),
        pad: i(g.pad),
        h_out: i(g.h_out),
        w_out: i(g.w_out),
        gemm_m: i(p.m),
        gemm_n: i(p.n),
        gemm_k: i(p.k),
        k_chunk: i(p.k_chunk),
        split_out: (p.splits > 1) as i32,
        accumulate: accumulate as i32,
        div_kk: div(g.k * g.k),
        div_k: div(g.k),
        div_pix: div(g.out_pixels()),
        div_w_out: div(g.w_out),
        div_phase_pix: div(h_phase * w_phase),
        div_w_phase: div(w_phase),
        div_taps2: div(taps * taps),
        div_taps: div(taps),
    }
}

type GemmKernel = fn(&Cuda, Dims, ConvParams, DevPtr, DevPtr, DevPtr);

/// The kernel of a direction and tile in a precision: the wide tiles have tensor-core
/// kernels, the narrow ones (M <= 16 rows) multiply with FFMA in every precision.
fn kernel(dir: Direction, tile: Tile, precision: Precision) -> GemmKernel {
    use Direction::*;
    use Precision::*;
    use Tile::*;
    match (dir, tile, precision) {
        (_, T16x128 | T4x256, _) | (_, _, Fp32) => fp32_kernel(dir, tile),
        (Forward, T128x128, Tf32) => launch::conv_fwd_128x128_tf32,
        (Forward, T128x128, ThreeTf32) => launch::conv_fwd_128x128_3xtf32,
        (Forward, T64x64, Tf32) => launch::conv_fwd_64x64_tf32,
        (Forward, T64x64, ThreeTf32) => launch::conv_fwd_64x64_3xtf32,
        (BackwardData, T128x128, Tf32) => launch::conv_bwd_data_128x128_tf32,
        (BackwardData, T128x128, ThreeTf32) => launch::conv_bwd_data_128x128_3xtf32,
        (BackwardData, T64x64, Tf32) => launch::conv_bwd_data_64x64_tf32,
        (BackwardData, T64x64, ThreeTf32) => launch::conv_bwd_data_64x64_3xtf32,
        (BackwardDataDense, T128x128, Tf32) => launch::conv_bwd_data_dense_128x128_tf32,
        (BackwardDataDense, T128x128, ThreeTf32) => launch::conv_bwd_data_dense_128x128_3xtf32,
        (BackwardDataDense, T64x64, Tf32) => launch::conv_bwd_data_dense_64x64_tf32,
        (BackwardDataDense, T64x64, ThreeTf32) => launch::conv_bwd_data_dense_64x64_3xtf32,
        (BackwardWeight, T128x128, Tf32) => launch::conv_bwd_weight_128x128_tf32,
        (BackwardWeight, T128x128, ThreeTf32) => launch::conv_bwd_weight_128x128_3xtf32,
        (BackwardWeight, T64x64, Tf32) => launch::conv_bwd_weight_64x64_tf32,
        (BackwardWeight, T64x64, ThreeTf32) => launch::conv_bwd_weight_64x64_3xtf32,
        (BackwardDataOneChannel, ..) => unreachable!("conv_bwd_data_cin1 is not a tiled GEMM"),
    }
}

fn fp32_kernel(dir: Direction, tile: Tile) -> GemmKernel {
    use Direction::*;
    use Tile::*;
    match (dir, tile) {
        (Forward, T128x128) => launch::conv_fwd_128x128,
        (Forward, T64x64) => launch::conv_fwd_64x64,
        (Forward, T16x128) => launch::conv_fwd_16x128,
        (Forward, T4x256) => launch::conv_fwd_4x256,
        (BackwardData, T128x128) => launch::conv_bwd_data_128x128,
        (BackwardData, T64x64) => launch::conv_bwd_data_64x64,
        (BackwardData, T16x128) => launch::conv_bwd_data_16x128,
        (BackwardData, T4x256) => launch::conv_bwd_data_4x256,
        (BackwardDataDense, T128x128) => launch::conv_bwd_data_dense_128x128,
        (BackwardDataDense, T64x64) => launch::conv_bwd_data_dense_64x64,
        (BackwardDataDense, T16x128) => launch::conv_bwd_data_dense_16x128,
        (BackwardDataDense, T4x256) => launch::conv_bwd_data_dense_4x256,
        (BackwardWeight, T128x128) => launch::conv_bwd_weight_128x128,
        (BackwardWeight, T64x64) => launch::conv_bwd_weight_64x64,
        (BackwardWeight, T16x128) => launch::conv_bwd_weight_16x128,
        (BackwardWeight, T4x256) => launch::conv_bwd_weight_4x256,
        (BackwardDataOneChannel, _) => unreachable!("conv_bwd_data_cin1 is not a tiled GEMM"),
    }
}

/// Launch plan `p` with operands a, b and output c; with splits, through the workspace.
fn run(cu: &Cuda, g: &ConvGeom, p: &GemmPlan, a: DevPtr, b: DevPtr, c: DevPtr, accumulate: bool) {
    if p.m == 0 || p.n == 0 {
        return;
    }
    let dims = Dims::grid3((p.n.div_ceil(p.tile.cols()), p.m.div_ceil(p.tile.rows()), p.z), THREADS);
    let params = params(g, p, accumulate);
    let launch = kernel(p.dir, p.tile, cu.precision());
    if p.splits > 1 {
        let ws = cu.workspace(p.workspace_floats());
        launch(cu, dims, params, a, b, ws);
        let mn = p.m * p.n;
        launch::conv_splitk_reduce(cu, elementwise_dims(cu, mn), ws, c, mn as i64, p.splits as i32, accumulate as i32);
    } else {
        launch(cu, dims, params, a, b, c);
    }
}

/// y [C_out, B, OH, OW] = conv(x [C_in, B, H, W], w [C_out, C_in, k, k]).
pub fn forward(cu: &Cuda, g: &ConvGeom, x: View<Cuda>, w: View<Cuda>, y: ViewMut<Cuda>) {
    g.check_lengths(x.len, w.len, y.len);
    let p = plan(g, Direction::Forward, cu.sm_count());
    run(cu, g, &p, dptr(w), dptr(x), dptr_mut(&y), false);
}

/// dx [C_in, B, H, W] = conv_transpose(dy [C_out, B, OH, OW], w): also ConvTranspose2d's
/// forward.
pub fn backward_data(cu: &Cuda, g: &ConvGeom, dy: View<Cuda>, w: View<Cuda>, dx: ViewMut<Cuda>) {
    g.check_lengths(dx.len, w.len, dy.len);
    let p = plan(g, backward_data_direction(g), cu.sm_count());
    if p.dir == Direction::BackwardDataOneChannel {
        // A thread per dx pixel (p.n of them), not a tiled GEMM.
        let dims = Dims::linear(p.n.div_ceil(THREADS as usize), THREADS);
        launch::conv_bwd_data_cin1(cu, dims, params(g, &p, false), dptr(w), dptr(dy), dptr_mut(&dx));
        return;
    }
    run(cu, g, &p, dptr(w), dptr(dy), dptr_mut(&dx), false);
}

/// dw [C_out, C_in, k, k] (+)= dy * im2col(x)^T summed over the batch.
pub fn backward_weight(cu: &Cuda, g: &ConvGeom, x: View<Cuda>, dy: View<Cuda>, dw: ViewMut<Cuda>, accumulate: bool) {
    g.check_lengths(x.len, dw.len, dy.len);
    let p = plan(g, Direction::BackwardWeight, cu.sm_count());
    run(cu, g, &p, dptr(dy), dptr(x), dptr_mut(&dw), accumulate);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dcgan_geoms(batch: usize) -> Vec<ConvGeom> {
        vec![
            ConvGeom::conv(batch, 1, 28, 28, 64, 4, 2, 1).unwrap(),
            ConvGeom::conv(batch, 64, 14, 14, 128, 4, 2, 1).unwrap(),
            ConvGeom::conv(batch, 128, 7, 7, 1, 7, 1, 0).unwrap(),
            ConvGeom::transposed(batch, 100, 1, 1, 256, 7, 1, 0).unwrap(),
            ConvGeom::transposed(batch, 256, 7, 7, 128, 4, 2, 1).unwrap(),
            ConvGeom::transposed(batch, 128, 14, 14, 1, 4, 2, 1).unwrap(),
            ConvGeom::transposed(batch, 100, 1, 1, 512, 4, 1, 0).unwrap(),
            ConvGeom::conv(batch, 512, 4, 4, 1, 4, 1, 0).unwrap(),
        ]
    }

    #[test]
    fn splits_cover_the_reduction_exactly() {
        for batch in [1, 3, 64, 256] {
            for g in dcgan_geoms(batch) {
                for sm in [1, 4, 132] {
                    for dir in [Direction::Forward, Direction::BackwardWeight] {
                        let p = plan(&g, dir, sm);
                        assert_eq!(p.k_chunk % BK, 0);
                        assert!(p.splits * p.k_chunk >= p.k, "{p:?} misses part of K");
                        assert!(p.splits == 1 || (p.splits - 1) * p.k_chunk < p.k, "{p:?} has an empty split");
                        assert!(p.workspace_floats() <= MAX_WORKSPACE_FLOATS.max(p.m * p.n));
                    }
                }
            }
        }
    }

    #[test]
    fn backward_data_phases_write_every_input_pixel_once() {
        // The phase decomposition as the kernel does it, replayed on the host: every
        // (ih, iw) of every image must be produced by exactly one (phase, column).
        for g in dcgan_geoms(2)
            .into_iter()
            .chain([ConvGeom::conv(2, 3, 9, 7, 5, 3, 2, 1).unwrap(), ConvGeom::conv(2, 3, 10, 10, 5, 5, 3, 2).unwrap()])
        {
            if is_dense(&g) {
                continue;
            }
            let p = plan(&g, Direction::BackwardData, 4);
            let s = g.stride;
            let (hp, wp) = (g.h_in.div_ceil(s), g.w_in.div_ceil(s));
            let mut hits = vec![0u32; g.batch * g.h_in * g.w_in];
            for z in 0..p.z {
                let (ph, pw) = (z / s, z % s);
                for n in 0..p.n {
                    let (b, rem) = (n / (hp * wp), n % (hp * wp));
                    let (ih, iw) = (ph + s * (rem / wp), pw + s * (rem % wp));
                    if ih < g.h_in && iw < g.w_in {
                        hits[(b * g.h_in + ih) * g.w_in + iw] += 1;
                    }
                }
            }
            assert!(hits.iter().all(|&h| h == 1), "{g:?}");
        }
    }

    #[test]
    fn backward_data_phase_taps_are_exactly_the_contributing_ones() {
        // For each phase, the taps the kernel visits (ki = kh0 + s*th < k, oh = i' + qh - th
        // inside the output) must be exactly those with ih = oh*s - pad + ki.
        for g in [
            ConvGeom::conv(1, 1, 14, 14, 1, 4, 2, 1).unwrap(),
            ConvGeom::conv(1, 1, 9, 7, 1, 3, 2, 1).unwrap(),
            ConvGeom::conv(1, 1, 10, 10, 1, 5, 3, 2).unwrap(),
            ConvGeom::conv(1, 1, 7, 7, 1, 7, 1, 0).unwrap(),
        ] {
            let (s, k, pad) = (g.stride, g.k, g.pad as isize);
            let taps = k.div_ceil(s);
            for ih in 0..g.h_in {
                let ph = ih % s;
                let i2 = ih / s;
                let kh0 = (ph + g.pad) % s;
                let qh = (ph + g.pad - kh0) / s;
                let mut visited: Vec<(usize, usize)> = (0..taps)
                    .filter_map(|th| {
                        let ki = kh0 + s * th;
                        let oh = i2 as isize + qh as isize - th as isize;
                        (ki < k && oh >= 0 && (oh as usize) < g.h_out).then_some((ki, oh as usize))
                    })
                    .collect();
                let mut want: Vec<(usize, usize)> = (0..k)
                    .flat_map(|ki| (0..g.h_out).map(move |oh| (ki, oh)))
                    .filter(|&(ki, oh)| (oh * s) as isize - pad + ki as isize == ih as isize)
                    .collect();
                visited.sort();
                want.sort();
                assert_eq!(visited, want, "{g:?} ih {ih}");
            }
        }
    }
}
