//! CUDA launchers for axpy and copy (kernels/elementwise.cu).

use crate::backend::cuda::kernel_table::{DevPtr, cuda_kernels};
use crate::backend::cuda::{Cuda, Family, dptr, dptr_mut, elementwise_dims};
use crate::backend::{View, ViewMut};

cuda_kernels! {
    family: Family::Elementwise, file: "elementwise.cu";
    fn axpy_f32(a: f32, x: DevPtr, y: DevPtr, n: i64);
    fn copy_f32(x: DevPtr, y: DevPtr, n: i64);
}

/// y += a * x
pub fn axpy(cu: &Cuda, a: f32, x: View<Cuda>, y: ViewMut<Cuda>) {
    assert_eq!(x.len, y.len, "axpy lengths");
    launch::axpy_f32(cu, elementwise_dims(cu, y.len), a, dptr(x), dptr_mut(&y), y.len as i64);
}

/// y = x, as a kernel (inside a graphed step; `Backend::copy` otherwise uses the driver's copy).
pub fn copy(cu: &Cuda, x: View<Cuda>, y: ViewMut<Cuda>) {
    assert_eq!(x.len, y.len, "copy lengths");
    launch::copy_f32(cu, elementwise_dims(cu, y.len), dptr(x), dptr_mut(&y), y.len as i64);
}
