//! The convolutions (forward, backward-data, backward-weight) against the CPU backend on
//! shapes that reach every kernel path.

use crate::cuda_common::*;
use crate::{TOL, padded, unpad};
use dcgan_train::backend::cpu::Cpu;
use dcgan_train::backend::cuda::Cuda;
use dcgan_train::backend::{Backend, View, ViewMut};
use dcgan_train::ops::conv::ConvGeom;

/// Shapes that reach every kernel path: the four tile shapes, split-K, stride phases with
/// padding (H or k not divisible by the stride), the dense and the single-input-channel
/// backward-data, stride 3.
fn conv_shapes(cu: &Cuda) -> Vec<ConvGeom> {
    let c = |b, ci, h, w, co, k, s, p| ConvGeom::conv(b, ci, h, w, co, k, s, p).unwrap();
    let t = |b, ci, h, w, co, k, s, p| ConvGeom::transposed(b, ci, h, w, co, k, s, p).unwrap();
    let mut v = vec![
        c(2, 3, 9, 7, 5, 3, 2, 1),
        c(2, 20, 8, 8, 70, 4, 2, 1),
        c(3, 6, 7, 7, 5, 7, 1, 0),
        c(2, 4, 10, 10, 1, 5, 3, 2),
        c(2, 1, 28, 28, 8, 4, 2, 1),
        t(2, 16, 7, 7, 8, 4, 2, 1),
        t(3, 10, 1, 1, 12, 4, 1, 0),
        c(3, 1, 3, 3, 6, 3, 1, 0),
        c(2, 1, 2, 2, 3, 2, 1, 0),
        c(2, 32, 7, 7, 1, 7, 1, 0),
        c(2, 3, 16, 16, 40, 3, 1, 1),
        c(4, 2, 16, 16, 32, 3, 1, 1),
        c(4, 1, 16, 16, 2, 3, 1, 1),
        // 128x128 tiles (M >= 128, not a multiple of 128) in each direction.
        c(2, 4, 16, 16, 130, 3, 1, 1),
        c(2, 60, 6, 6, 130, 3, 1, 1),
        c(2, 130, 8, 8, 6, 4, 2, 1),
        c(3, 12, 7, 7, 5, 7, 1, 0),
        // Single-input-channel backward-data at stride 3 with padding, and a C_in = 1 layer
        // whose weights (300*16 floats) do not fit its shared memory: the phase GEMM instead.
        c(2, 1, 10, 11, 4, 5, 3, 2),
        c(2, 1, 10, 10, 300, 4, 2, 1),
    ];
    // The DCGAN's layers: on the emulator at batch 2, on a GPU at 64 and an odd batch.
    let batches: &[usize] = if small(cu) { &[2] } else { &[64, 5] };
    for &b in batches {
        v.extend(dcgan_layers(b));
    }
    v
}

#[test]
fn convolution_forward_and_backward_match_the_cpu() {
    for cu in engines("convolution") {
        let mut rng = rng(6);
        for g in conv_shapes(&cu) {
            let x = random(&mut rng, g.x_len(), 1.0);
            let w = random(&mut rng, g.w_len(), 0.2);
            let dy = random(&mut rng, g.y_len(), 1.0);
            let (bx, rx) = padded(&cu, &x, 3);
            let (bw, rw) = padded(&cu, &w, 5);
            let (bdy, rdy) = padded(&cu, &dy, 2);

            let (mut by, ry) = padded(&cu, &vec![0.0; g.y_len()], 4);
            cu.conv2d_forward(
                &g,
                View::range(&bx, rx.clone()),
                View::range(&bw, rw.clone()),
                ViewMut::range(&mut by, ry.clone()),
            );
            let mut cy = vec![0.0; g.y_len()];
            Cpu.conv2d_forward(&g, View::whole(&x), View::whole(&w), ViewMut::whole(&mut cy));
            assert_close(&format!("{g:?} forward"), &unpad(&cu, &by, ry), &cy, TOL);

            let (mut bdx, rdx) = padded(&cu, &vec![0.0; g.x_len()], 1);
            cu.conv2d_backward_data(
                &g,
                View::range(&bdy, rdy.clone()),
                View::range(&bw, rw.clone()),
                ViewMut::range(&mut bdx, rdx.clone()),
            );
            let mut cdx = vec![0.0; g.x_len()];
            Cpu.conv2d_backward_data(&g, View::whole(&dy), View::whole(&w), ViewMut::whole(&mut cdx));
            assert_close(&format!("{g:?} backward-data"), &unpad(&cu, &bdx, rdx), &cdx, TOL);

            // Weight gradient, written and then accumulated onto.
            let (mut bdw, rdw) = padded(&cu, &vec![0.0; g.w_len()], 6);
            for accumulate in [false, true] {
                cu.conv2d_backward_weight(
                    &g,
                    View::range(&bx, rx.clone()),
                    View::range(&bdy, rdy.clone()),
                    ViewMut::range(&mut bdw, rdw.clone()),
                    accumulate,
                );
            }
            let mut cdw = vec![0.0; g.w_len()];
            for accumulate in [false, true] {
                Cpu.conv2d_backward_weight(&g, View::whole(&x), View::whole(&dy), ViewMut::whole(&mut cdw), accumulate);
            }
            assert_close(&format!("{g:?} backward-weight"), &unpad(&cu, &bdw, rdw), &cdw, TOL);
        }
    }
}
