//! CUDA launchers for the losses (kernels/loss.cu): one block each, sums in double.

use super::{check_softmax_xent_shapes, class_of};
use crate::backend::cuda::kernel_table::{DevPtr, Dims, cuda_kernels};
use crate::backend::cuda::{Cuda, Family, THREADS, dptr, dptr_mut};
use crate::backend::{Backend, View, ViewMut};

cuda_kernels! {
    family: Family::Loss, file: "loss.cu";
    fn bce_with_logits(logits: DevPtr, target: f32, dlogits: DevPtr, out: DevPtr, n: i32);
    fn softmax_xent(logits: DevPtr, labels: DevPtr, dlogits: DevPtr, out: DevPtr, batch: i32, classes: i32);
}

/// dlogits = (sigmoid(x) - target) / n; out `[2]` = (mean loss, mean sigmoid(x)).
pub fn bce_with_logits(cu: &Cuda, logits: View<Cuda>, target: f32, dlogits: ViewMut<Cuda>, out: ViewMut<Cuda>) {
    assert_eq!(logits.len, dlogits.len, "BCE logits and gradient lengths");
    assert!(out.len >= 2, "BCE output needs 2 floats");
    assert!(logits.len <= i32::MAX as usize, "BCE over {} logits", logits.len);
    let (out_ptr, dl_ptr) = (dptr_mut(&out), dptr_mut(&dlogits));
    launch::bce_with_logits(cu, Dims::linear(1, THREADS), dptr(logits), target, dl_ptr, out_ptr, logits.len as i32);
}

/// Softmax cross-entropy of logits `[classes, B]` against labels `[B]`: dlogits `[classes, B]`
/// = (softmax(x) - onehot(label)) / B, out `[2]` = (mean loss, accuracy). See ops/loss/cpu.rs.
///
/// The labels live on the device: they are read back and checked first, so that a bad one
/// panics here with the CPU's message instead of making the kernel read past the logits.
/// That waits for the work issued so far, which no other op does; it comes once a step.
pub fn softmax_xent(
    cu: &Cuda,
    logits: View<Cuda>,
    labels: View<Cuda>,
    classes: usize,
    dlogits: ViewMut<Cuda>,
    out: ViewMut<Cuda>,
) {
    let batch = labels.len;
    check_softmax_xent_shapes(logits.len, batch, classes, dlogits.len, out.len);
    assert!(logits.len <= i32::MAX as usize, "softmax cross-entropy over {} logits", logits.len);
    // [B] on the host: a few hundred floats, small beside the wait.
    let mut host = vec![0.0f32; batch];
    cu.download(labels, &mut host);
    for (i, &l) in host.iter().enumerate() {
        class_of(l, i, classes);
    }
    let (out_ptr, dl_ptr) = (dptr_mut(&out), dptr_mut(&dlogits));
    let dims = Dims::linear(1, THREADS);
    launch::softmax_xent(cu, dims, dptr(logits), dptr(labels), dl_ptr, out_ptr, batch as i32, classes as i32);
}
