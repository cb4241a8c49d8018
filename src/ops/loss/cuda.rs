//! CUDA launcher for BCE with logits (kernels/loss.cu): one block, sums in double.

use crate::backend::cuda::kernel_table::{DevPtr, Dims, cuda_kernels};
use crate::backend::cuda::{Cuda, Family, THREADS, dptr, dptr_mut};
use crate::backend::{View, ViewMut};

cuda_kernels! {
    family: Family::Loss, file: "loss.cu";
    fn bce_with_logits(logits: DevPtr, target: f32, dlogits: DevPtr, out: DevPtr, n: i32);
}

/// dlogits = (sigmoid(x) - target) / n; out [2] = (mean loss, mean sigmoid(x)).
pub fn bce_with_logits(cu: &Cuda, logits: View<Cuda>, target: f32, dlogits: ViewMut<Cuda>, out: ViewMut<Cuda>) {
    assert_eq!(logits.len, dlogits.len, "BCE logits and gradient lengths");
    assert!(out.len >= 2, "BCE output needs 2 floats");
    assert!(logits.len <= i32::MAX as usize, "BCE over {} logits", logits.len);
    let (out_ptr, dl_ptr) = (dptr_mut(&out), dptr_mut(&dlogits));
    launch::bce_with_logits(cu, Dims::linear(1, THREADS), dptr(logits), target, dl_ptr, out_ptr, logits.len as i32);
}
