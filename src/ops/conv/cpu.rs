//! CPU convolution: im2col / col2im around the `gemm` crate, chunked over the batch so that
//! the column matrix stays in cache. Deterministic: the GEMM splits only output tiles
//! between threads (the sum over k keeps one order whoever computes a tile) and chunks are
//! visited in order, so results do not depend on timing.

use super::ConvGeom;
use super::cpu_columns::Columns;
use crate::ops::cpu_scratch::with_scratch;
use gemm_common::Parallelism;
use rayon::prelude::*;

/// Floats of column matrix per chunk: 1 Mi floats (4 MiB) sits in this kind of machine's L3
/// next to the weights, while still giving the GEMM hundreds of columns.
const COL_CHUNK_FLOATS: usize = 1 << 20;

/// Images per chunk for this geometry.
fn chunk_images(g: &ConvGeom) -> usize {
    let per_image = g.col_rows() * g.out_pixels();
    (COL_CHUNK_FLOATS / per_image.max(1)).clamp(1, g.batch.max(1))
}

/// Output tiles per thread. `gemm`'s own threading gives each thread an equal share, so a
/// step goes at the pace of the slowest core, and on a virtual machine one core is often
/// slower than the other for stretches of a second. Smaller tiles, taken by rayon's work
/// stealing, let the faster thread do more of them; 2 per thread beat 1 and 4 (measured:
/// docs/performance/cpu-step.md).
const TILES_PER_THREAD: usize = 2;

/// Narrowest tile along the split dimension: each tile packs its own copy of the other
/// operand's panel, which costs about 1/width of the tile's multiply-adds.
const MIN_TILE: usize = 96;

/// A strided matrix operand: element (i, j) at `ptr + i*rs + j*cs`.
#[derive(Clone, Copy)]
pub struct Mat {
    pub ptr: *const f32,
    pub rs: isize,
    pub cs: isize,
}

// SAFETY: a Mat only reads, and `sgemm`'s caller keeps what it addresses alive and unwritten
// for the call, which is as long as any task holding it lives.
unsafe impl Send for Mat {}
unsafe impl Sync for Mat {}

impl Mat {
    pub fn row_major(s: &[f32], cols: usize) -> Mat {
        Mat { ptr: s.as_ptr(), rs: cols as isize, cs: 1 }
    }
    /// The transpose of a row-major [rows, cols] slice, seen as [cols, rows].
    pub fn transposed(s: &[f32], cols: usize) -> Mat {
        Mat { ptr: s.as_ptr(), rs: 1, cs: cols as isize }
    }
}

/// `c[m,n]` (+)= `a[m,k]` * `b[k,n]`, with c row-major at row stride `c_rs`.
///
/// # Safety
/// `a`, `b` must address m*k and k*n valid floats with their strides; `c` must address
/// m rows of n floats at row stride `c_rs`, not aliasing `a` or `b`.
#[allow(clippy::too_many_arguments)]
pub unsafe fn sgemm(m: usize, n: usize, k: usize, a: Mat, b: Mat, c: *mut f32, c_rs: usize, accumulate: bool) {
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        if !accumulate {
            for i in 0..m {
                unsafe { std::ptr::write_bytes(c.add(i * c_rs), 0, n) };
            }
        }
        return;
    }
    // Split the longer side of c, so that the panel each tile packs again is the shorter.
    let split_rows = m > n;
    let (len, threads) = (if split_rows { m } else { n }, rayon::current_num_threads());
    let tiles = (threads * TILES_PER_THREAD).min(len / MIN_TILE);
    if threads == 1 || tiles < 2 {
        let parallelism = if threads > 1 { Parallelism::Rayon(threads) } else { Parallelism::None };
        return unsafe { sgemm_on_this_thread(m, n, k, a, b, c, c_rs, accumulate, parallelism) };
    }
    // Tile edges on multiples of 16 (a microkernel's width), so only the last tile has a
    // ragged edge.
    let tile = len.div_ceil(tiles).next_multiple_of(16);
    let c = SendPtr(c);
    (0..len.div_ceil(tile)).into_par_iter().with_max_len(1).for_each(|t| {
        let (start, size) = (t * tile, tile.min(len - t * tile));
        // SAFETY: the tiles are disjoint row or column ranges of c, inside the caller's.
        unsafe {
            if split_rows {
                let a_tile = Mat { ptr: a.ptr.offset(start as isize * a.rs), ..a };
                let c_tile = c.get().add(start * c_rs);
                sgemm_on_this_thread(size, n, k, a_tile, b, c_tile, c_rs, accumulate, Parallelism::None)
            } else {
                let b_tile = Mat { ptr: b.ptr.offset(start as isize * b.cs), ..b };
                let c_tile = c.get().add(start);
                sgemm_on_this_thread(m, size, k, a, b_tile, c_tile, c_rs, accumulate, Parallelism::None)
            }
        }
    });
}

/// c's base address, shared by the tasks that write disjoint tiles of it.
#[derive(Clone, Copy)]
struct SendPtr(*mut f32);
// SAFETY: every task writes its own tile (see `sgemm`).
unsafe impl Send for SendPtr {}
unsafe impl Sync for SendPtr {}
impl SendPtr {
    /// A method, not field access, so closures capture the whole (Sync) wrapper.
    fn get(self) -> *mut f32 {
        self.0
    }
}

/// One call of the `gemm` family's f32 kernel: `c[m,n]` (+)= `a[m,k]` * `b[k,n]`. Safety as `sgemm`.
#[allow(clippy::too_many_arguments)]
unsafe fn sgemm_on_this_thread(
    m: usize,
    n: usize,
    k: usize,
    a: Mat,
    b: Mat,
    c: *mut f32,
    c_rs: usize,
    accumulate: bool,
    parallelism: Parallelism,
) {
    // gemm computes dst = alpha*dst + beta*lhs*rhs, reading dst only when asked to.
    unsafe {
        gemm_f32::gemm::f32::get_gemm_fn()(
            m,
            n,
            k,
            c,
            1,
            c_rs as isize,
            accumulate,
            a.ptr,
            a.cs,
            a.rs,
            b.ptr,
            b.cs,
            b.rs,
            1.0,
            1.0,
            false,
            false,
            false,
            parallelism,
        )
    };
}

/// Floats of this thread's scratch the three passes over `g` take: one chunk's column matrix
/// and its phase planes.
pub fn scratch_floats(g: &ConvGeom) -> usize {
    g.col_rows() * chunk_images(g) * g.out_pixels() + Columns::new(g).scratch_floats(chunk_images(g))
}

/// Runs `f(columns, b0, nb, col, planes)` for the batch's chunks of images in order, with
/// `col` [rows, nb * OH * OW] and the phase-plane scratch taken from this thread's scratch.
fn for_each_chunk(g: &ConvGeom, mut f: impl FnMut(&Columns, usize, usize, &mut [f32], &mut [f32])) {
    let (rows, pix, chunk) = (g.col_rows(), g.out_pixels(), chunk_images(g));
    let columns = Columns::new(g);
    with_scratch(scratch_floats(g), |scratch| {
        let (col, planes) = scratch.split_at_mut(rows * chunk * pix);
        for b0 in (0..g.batch).step_by(chunk) {
            let nb = chunk.min(g.batch - b0);
            f(&columns, b0, nb, &mut col[..rows * nb * pix], planes);
        }
    });
}

/// y [C_out, B, OH, OW] = conv(x [C_in, B, H, W], w [C_out, C_in, k, k]).
pub fn forward(g: &ConvGeom, x: &[f32], w: &[f32], y: &mut [f32]) {
    g.check_lengths(x.len(), w.len(), y.len());
    let (rows, pix, y_rs) = (g.col_rows(), g.out_pixels(), g.batch * g.out_pixels());
    for_each_chunk(g, |columns, b0, nb, col, planes| {
        let n = nb * pix;
        columns.im2col(x, b0, nb, planes, col);
        // y[:, b0*pix ..] = w [C_out, rows] * col [rows, n]
        unsafe {
            sgemm(
                g.c_out,
                n,
                rows,
                Mat::row_major(w, rows),
                Mat::row_major(col, n),
                y.as_mut_ptr().add(b0 * pix),
                y_rs,
                false,
            )
        };
    });
}

/// dx [C_in, B, H, W] = conv_transpose(dy [C_out, B, OH, OW], w): col = w^T dy, then col2im.
pub fn backward_data(g: &ConvGeom, dy: &[f32], w: &[f32], dx: &mut [f32]) {
    g.check_lengths(dx.len(), w.len(), dy.len());
    let (rows, pix, dy_rs) = (g.col_rows(), g.out_pixels(), g.batch * g.out_pixels());
    dx.par_iter_mut().for_each(|v| *v = 0.0);
    for_each_chunk(g, |columns, b0, nb, col, planes| {
        let n = nb * pix;
        // col [rows, n] = w^T [rows, C_out] * dy[:, b0*pix ..] [C_out, n]
        let dy_chunk = Mat { ptr: dy[b0 * pix..].as_ptr(), rs: dy_rs as isize, cs: 1 };
        unsafe { sgemm(rows, n, g.c_out, Mat::transposed(w, rows), dy_chunk, col.as_mut_ptr(), n, false) };
        columns.col2im(col, b0, nb, planes, dx);
    });
}

/// dw [C_out, C_in, k, k] (+)= dy [C_out, B*OH*OW] * im2col(x)^T, summed over the batch in
/// chunk order.
pub fn backward_weight(g: &ConvGeom, x: &[f32], dy: &[f32], dw: &mut [f32], accumulate: bool) {
    g.check_lengths(x.len(), dw.len(), dy.len());
    let (rows, pix, dy_rs) = (g.col_rows(), g.out_pixels(), g.batch * g.out_pixels());
    if g.batch == 0 && !accumulate {
        dw.fill(0.0);
    }
    for_each_chunk(g, |columns, b0, nb, col, planes| {
        let n = nb * pix;
        columns.im2col(x, b0, nb, planes, col);
        let dy_chunk = Mat { ptr: dy[b0 * pix..].as_ptr(), rs: dy_rs as isize, cs: 1 };
        // dw [C_out, rows] (+)= dy_chunk [C_out, n] * col^T [n, rows]
        unsafe {
            sgemm(g.c_out, rows, n, dy_chunk, Mat::transposed(col, n), dw.as_mut_ptr(), rows, accumulate || b0 > 0)
        };
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// c (+)= a * b by the definition, in f64; `a(i, p)` and `b(p, j)` read the operands.
    fn reference(
        dims: (usize, usize, usize),
        a: impl Fn(usize, usize) -> f32,
        b: impl Fn(usize, usize) -> f32,
        c: &mut [f32],
        acc: bool,
    ) {
        let (m, n, k) = dims;
        for i in 0..m {
            for j in 0..n {
                let dot: f64 = (0..k).map(|p| a(i, p) as f64 * b(p, j) as f64).sum();
                c[i * n + j] = if acc { c[i * n + j] + dot as f32 } else { dot as f32 };
            }
        }
    }

    /// The tiled split (rows when m > n, columns otherwise, a ragged last tile), plain and
    /// transposed operands, overwrite and accumulate, all give the product on a 2-thread pool,
    /// and the same bits as one untiled gemm call (the sum over k keeps its order).
    #[test]
    fn tiled_sgemm_matches_the_definition_and_one_untiled_call() {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
        let mut seed = 7u32;
        let mut rand = move || {
            seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (seed >> 8) as f32 / (1u32 << 24) as f32 - 0.5
        };
        for &(m, n, k) in &[(1000, 37, 50), (33, 1001, 70), (500, 500, 9), (20, 90, 5)] {
            for (a_t, b_t, acc) in
                [(false, false, false), (true, false, true), (false, true, false), (true, true, true)]
            {
                let a: Vec<f32> = (0..m * k).map(|_| rand()).collect(); // [m, k] or [k, m]
                let b: Vec<f32> = (0..k * n).map(|_| rand()).collect(); // [k, n] or [n, k]
                let c0: Vec<f32> = (0..m * n).map(|_| rand()).collect(); // [m, n]
                let am = if a_t { Mat::transposed(&a, m) } else { Mat::row_major(&a, k) };
                let bm = if b_t { Mat::transposed(&b, k) } else { Mat::row_major(&b, n) };
                let mut tiled = c0.clone();
                pool.install(|| unsafe { sgemm(m, n, k, am, bm, tiled.as_mut_ptr(), n, acc) });
                let mut untiled = c0.clone();
                unsafe { sgemm_on_this_thread(m, n, k, am, bm, untiled.as_mut_ptr(), n, acc, Parallelism::None) };
                let mut want = c0.clone();
                let a_at = |i, p| if a_t { a[p * m + i] } else { a[i * k + p] };
                let b_at = |p, j| if b_t { b[j * k + p] } else { b[p * n + j] };
                reference((m, n, k), a_at, b_at, &mut want, acc);
                let case = format!("m {m} n {n} k {k} a_t {a_t} b_t {b_t} acc {acc}");
                for (i, (&got, &w)) in tiled.iter().zip(&want).enumerate() {
                    assert!((got - w).abs() <= 1e-4 * (1.0 + w.abs()), "{case}: c[{i}] = {got}, want {w}");
                }
                assert!(
                    tiled.iter().zip(&untiled).all(|(x, y)| x.to_bits() == y.to_bits()),
                    "{case}: tiles changed bits"
                );
            }
        }
    }
}
