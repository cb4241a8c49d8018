//! CUDA launchers of the wire encodings (kernels/wire.cu).

use crate::backend::cuda::kernel_table::{DevPtr, Dims, cuda_kernels};
use crate::backend::cuda::{Cuda, Family, THREADS, dptr, dptr_mut};
use crate::backend::{View, ViewMut};

cuda_kernels! {
    family: Family::Wire, file: "wire.cu";
    fn wire_onebit_quantize(cols: DevPtr, ncols: i32, values: DevPtr, residual: DevPtr, out: DevPtr, col_sq: DevPtr);
    fn wire_onebit_decode(cols: DevPtr, enc: DevPtr, out: DevPtr);
    fn wire_bf16_encode(x: DevPtr, n: i32, out: DevPtr);
    fn wire_bf16_decode(enc: DevPtr, n: i32, out: DevPtr);
}

/// The 1-bit columns `cols` (a table of words) of values + residual into `out`, and each
/// column's residual's sum of squares into col_sq `[columns]`; a thread per column.
pub fn onebit_quantize(
    cu: &Cuda,
    cols: View<Cuda>,
    values: View<Cuda>,
    residual: ViewMut<Cuda>,
    out: ViewMut<Cuda>,
    col_sq: ViewMut<Cuda>,
) {
    assert_eq!(values.len, residual.len, "onebit_quantize: values and residual");
    let ncols = cols.len / 3;
    assert_eq!(col_sq.len, ncols, "onebit_quantize: a square sum per column");
    if ncols == 0 {
        return;
    }
    let dims = Dims::linear(ncols.div_ceil(THREADS as usize), THREADS);
    let (res, enc, sq) = (dptr_mut(&residual), dptr_mut(&out), dptr_mut(&col_sq));
    launch::wire_onebit_quantize(cu, dims, dptr(cols), ncols as i32, dptr(values), res, enc, sq);
}

/// The values of the 1-bit columns `cols` of `enc`, into out; a block per column.
pub fn onebit_decode(cu: &Cuda, cols: View<Cuda>, enc: View<Cuda>, out: ViewMut<Cuda>) {
    let ncols = cols.len / 3;
    if ncols == 0 {
        return;
    }
    launch::wire_onebit_decode(cu, Dims::linear(ncols, THREADS), dptr(cols), dptr(enc), dptr_mut(&out));
}

/// out `[ceil(n/2)]` = the bf16 encodings of x `[n]`, two to a float; a thread per value.
pub fn bf16_encode(cu: &Cuda, x: View<Cuda>, out: ViewMut<Cuda>) {
    super::check_bf16_floats(x.len, out.len);
    if x.len == 0 {
        return;
    }
    let dims = Dims::linear(x.len.div_ceil(THREADS as usize), THREADS);
    launch::wire_bf16_encode(cu, dims, dptr(x), x.len as i32, dptr_mut(&out));
}

/// out `[n]` = the values of the bf16 encodings enc `[ceil(n/2)]`; a thread per value.
pub fn bf16_decode(cu: &Cuda, enc: View<Cuda>, out: ViewMut<Cuda>) {
    super::check_bf16_floats(out.len, enc.len);
    if out.len == 0 {
        return;
    }
    let dims = Dims::linear(out.len.div_ceil(THREADS as usize), THREADS);
    launch::wire_bf16_decode(cu, dims, dptr(enc), out.len as i32, dptr_mut(&out));
}
