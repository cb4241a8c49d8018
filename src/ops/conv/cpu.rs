//! CPU convolution: im2col / col2im around the `gemm` crate, chunked over the batch so that
//! the column matrix stays in cache. Deterministic: the GEMM splits only output blocks
//! between threads and chunks are visited in order, so results do not depend on timing.

use super::ConvGeom;
use super::cpu_columns::Columns;
use crate::ops::cpu_scratch::with_scratch;
use rayon::prelude::*;

/// Floats of column matrix per chunk: 1 Mi floats (4 MiB) sits in this kind of machine's L3
/// next to the weights, while still giving the GEMM hundreds of columns.
const COL_CHUNK_FLOATS: usize = 1 << 20;

/// Images per chunk for this geometry.
fn chunk_images(g: &ConvGeom) -> usize {
    let per_image = g.col_rows() * g.out_pixels();
    (COL_CHUNK_FLOATS / per_image.max(1)).clamp(1, g.batch.max(1))
}

fn parallelism() -> gemm::Parallelism {
    let threads = rayon::current_num_threads();
    if threads > 1 { gemm::Parallelism::Rayon(threads) } else { gemm::Parallelism::None }
}

/// A strided matrix operand: element (i, j) at `ptr + i*rs + j*cs`.
#[derive(Clone, Copy)]
pub struct Mat {
    pub ptr: *const f32,
    pub rs: isize,
    pub cs: isize,
}

impl Mat {
    pub fn row_major(s: &[f32], cols: usize) -> Mat {
        Mat { ptr: s.as_ptr(), rs: cols as isize, cs: 1 }
    }
    /// The transpose of a row-major [rows, cols] slice, seen as [cols, rows].
    pub fn transposed(s: &[f32], cols: usize) -> Mat {
        Mat { ptr: s.as_ptr(), rs: 1, cs: cols as isize }
    }
}

/// c[m,n] (+)= a[m,k] * b[k,n], with c row-major at row stride `c_rs`.
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
    // gemm computes dst = alpha*dst + beta*lhs*rhs, reading dst only when asked to.
    unsafe {
        gemm::gemm(
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
            parallelism(),
        )
    };
}

/// Runs `f(columns, b0, nb, col, planes)` for the batch's chunks of images in order, with
/// `col` [rows, nb * OH * OW] and the phase-plane scratch taken from this thread's scratch.
fn for_each_chunk(g: &ConvGeom, mut f: impl FnMut(&Columns, usize, usize, &mut [f32], &mut [f32])) {
    let (rows, pix, chunk) = (g.col_rows(), g.out_pixels(), chunk_images(g));
    let columns = Columns::new(g);
    with_scratch(rows * chunk * pix + columns.scratch_floats(chunk), |scratch| {
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
