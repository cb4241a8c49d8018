//! CUDA launchers for the pointwise activations (kernels/activation.cu).

use super::Activation;
use crate::backend::cuda::kernel_table::{DevPtr, cuda_kernels};
use crate::backend::cuda::{Cuda, Family, dptr, dptr_mut, elementwise_dims};
use crate::backend::{View, ViewMut};

cuda_kernels! {
    family: Family::Activation, file: "activation.cu";
    fn act_forward(x: DevPtr, n: i64, act: i32);
    fn act_backward(y: DevPtr, dy: DevPtr, n: i64, act: i32);
}

/// x = act(x) in place.
pub fn forward(cu: &Cuda, act: Activation, x: ViewMut<Cuda>) {
    if act == Activation::None {
        return;
    }
    let dims = elementwise_dims(cu, x.len);
    launch::act_forward(cu, dims, dptr_mut(&x), x.len as i64, act.code());
}

/// dy *= act'(.) from the output y.
pub fn backward(cu: &Cuda, act: Activation, y: View<Cuda>, dy: ViewMut<Cuda>) {
    assert_eq!(y.len, dy.len, "activation backward lengths");
    if act == Activation::None {
        return;
    }
    let dims = elementwise_dims(cu, dy.len);
    launch::act_backward(cu, dims, dptr(y), dptr_mut(&dy), dy.len as i64, act.code());
}
