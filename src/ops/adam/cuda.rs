//! CUDA launcher for the fused Adam step (kernels/adam.cu).

use super::AdamStep;
use crate::backend::cuda::kernel_table::{DevPtr, cuda_kernels};
use crate::backend::cuda::{Cuda, Family, dptr, dptr_mut, elementwise_dims};
use crate::backend::{View, ViewMut};

cuda_kernels! {
    family: Family::Adam, file: "adam.cu";
    fn adam_step(
        param: DevPtr,
        grad: DevPtr,
        m: DevPtr,
        v: DevPtr,
        n: i64,
        beta1: f32,
        beta2: f32,
        eps: f32,
        step_size: f32,
        bias2_sqrt: f32,
    );
}

pub fn step(cu: &Cuda, h: &AdamStep, param: ViewMut<Cuda>, grad: View<Cuda>, m: ViewMut<Cuda>, v: ViewMut<Cuda>) {
    let n = param.len;
    assert!(grad.len == n && m.len == n && v.len == n, "Adam lengths");
    launch::adam_step(
        cu,
        elementwise_dims(cu, n),
        dptr_mut(&param),
        dptr(grad),
        dptr_mut(&m),
        dptr_mut(&v),
        n as i64,
        h.beta1,
        h.beta2,
        h.eps,
        h.step_size,
        h.bias2_sqrt,
    );
}
