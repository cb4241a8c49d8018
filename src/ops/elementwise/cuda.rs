//! CUDA launchers for fill / scale / axpy (kernels/elementwise.cu).

use crate::backend::cuda::kernel_table::{DevPtr, cuda_kernels};
use crate::backend::cuda::{Cuda, Family, dptr, dptr_mut, elementwise_dims};
use crate::backend::{View, ViewMut};

cuda_kernels! {
    family: Family::Elementwise, file: "elementwise.cu";
    fn fill_f32(x: DevPtr, n: i64, value: f32);
    fn scale_f32(x: DevPtr, n: i64, a: f32);
    fn axpy_f32(a: f32, x: DevPtr, y: DevPtr, n: i64);
}

pub fn fill(cu: &Cuda, x: ViewMut<Cuda>, value: f32) {
    launch::fill_f32(cu, elementwise_dims(cu, x.len), dptr_mut(&x), x.len as i64, value);
}

pub fn scale(cu: &Cuda, x: ViewMut<Cuda>, a: f32) {
    launch::scale_f32(cu, elementwise_dims(cu, x.len), dptr_mut(&x), x.len as i64, a);
}

/// y += a * x
pub fn axpy(cu: &Cuda, a: f32, x: View<Cuda>, y: ViewMut<Cuda>) {
    assert_eq!(x.len, y.len, "axpy lengths");
    launch::axpy_f32(cu, elementwise_dims(cu, y.len), a, dptr(x), dptr_mut(&y), y.len as i64);
}
