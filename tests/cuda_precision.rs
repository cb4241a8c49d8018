//! `--precision tf32` and `3xtf32`: the tensor-core convolution kernels against the CPU
//! backend, on each engine available (a GPU, and the emulator, whose MMA is its own model of
//! the instruction: see kernels/tensor_core.cuh).
//!
//! TF32 is checked twice: against the CPU convolution of the same inputs rounded to TF32 on
//! the host (to nearest, ties away, as cvt.rna does), which it must match to 1e-5 (f32
//! accumulation error), so a wrong rounding (truncation, or none) or a misplaced fragment
//! fails; and against the exact convolution, within the 2e-3 a user of TF32 gets. 3xTF32 must match the exact
//! convolution to 1e-5. Directions whose GEMM has at most 16 rows run the FFMA kernels in
//! every precision (`Tile::for_rows`) and must match the exact convolution like fp32.
#![cfg(feature = "cuda")]

mod cuda_common;

use cuda_common::*;
use dcgan_train::backend::cpu::Cpu;
use dcgan_train::backend::cuda::Cuda;
use dcgan_train::backend::{Backend, Precision, View, ViewMut};
use dcgan_train::ops::conv::ConvGeom;
use dcgan_train::ops::conv::cuda::{Direction, Tile, backward_data_direction, plan};

/// The fp32 kernels' tolerance against the CPU (tests/cuda_ops/).
const F32_TOL: f64 = 1e-4;
/// TF32 against the exact convolution: each operand within 2^-11 of itself.
const TF32_TOL: f64 = 2e-3;
/// 3xTF32 against the exact convolution, and TF32 against the convolution of TF32-rounded
/// inputs: the products exact or within 2^-21, summed in f32 in another order.
const SUM_ORDER_TOL: f64 = 1e-5;

/// `x` rounded to TF32 (cvt.rna.tf32.f32): 10 mantissa bits, ties away from zero.
fn tf32_round(x: f32) -> f32 {
    if x.is_nan() { x } else { f32::from_bits((x.to_bits() + 0x1000) & !0x1fff) }
}

fn tf32_all(v: &[f32]) -> Vec<f32> {
    v.iter().map(|&x| tf32_round(x)).collect()
}

/// The three directions of `g` on the CPU: y, dx, dw.
fn cpu_conv(g: &ConvGeom, x: &[f32], w: &[f32], dy: &[f32]) -> [Vec<f32>; 3] {
    let (x, w, dy) = (&x.to_vec(), &w.to_vec(), &dy.to_vec());
    let mut y = vec![0.0; g.y_len()];
    Cpu.conv2d_forward(g, View::whole(x), View::whole(w), ViewMut::whole(&mut y));
    let mut dx = vec![0.0; g.x_len()];
    Cpu.conv2d_backward_data(g, View::whole(dy), View::whole(w), ViewMut::whole(&mut dx));
    let mut dw = vec![0.0; g.w_len()];
    Cpu.conv2d_backward_weight(g, View::whole(x), View::whole(dy), ViewMut::whole(&mut dw), false);
    [y, dx, dw]
}

/// The same on the CUDA backend.
fn cuda_conv(cu: &Cuda, g: &ConvGeom, x: &[f32], w: &[f32], dy: &[f32]) -> [Vec<f32>; 3] {
    let (bx, bw, bdy) = (up(cu, x), up(cu, w), up(cu, dy));
    let mut by = cu.alloc(g.y_len()).unwrap();
    cu.conv2d_forward(g, View::whole(&bx), View::whole(&bw), ViewMut::whole(&mut by));
    let mut bdx = cu.alloc(g.x_len()).unwrap();
    cu.conv2d_backward_data(g, View::whole(&bdy), View::whole(&bw), ViewMut::whole(&mut bdx));
    let mut bdw = cu.alloc(g.w_len()).unwrap();
    cu.conv2d_backward_weight(g, View::whole(&bx), View::whole(&bdy), ViewMut::whole(&mut bdw), false);
    [down(cu, &by), down(cu, &bdx), down(cu, &bdw)]
}

/// Whether direction `dir` of `g` runs on tensor cores (a wide tile) on `cu`.
fn on_tensor_cores(cu: &Cuda, g: &ConvGeom, dir: Direction) -> bool {
    let p = plan(g, dir, cu.sm_count());
    p.dir != Direction::BackwardDataOneChannel && matches!(p.tile, Tile::T128x128 | Tile::T64x64)
}

/// Shapes whose directions reach both wide tiles on tensor cores, split-K, stride phases with
/// padding, the dense backward-data, and the FFMA tiles beside them.
fn shapes(cu: &Cuda) -> Vec<ConvGeom> {
    let c = |b, ci, h, w, co, k, s, p| ConvGeom::conv(b, ci, h, w, co, k, s, p).unwrap();
    let t = |b, ci, h, w, co, k, s, p| ConvGeom::transposed(b, ci, h, w, co, k, s, p).unwrap();
    let mut v = vec![
        c(2, 20, 8, 8, 70, 4, 2, 1),
        c(2, 130, 8, 8, 6, 4, 2, 1),
        c(2, 60, 6, 6, 130, 3, 1, 1),
        c(2, 4, 10, 10, 33, 5, 3, 2),
        c(2, 4, 16, 16, 130, 3, 1, 1),
        t(3, 10, 1, 1, 40, 4, 1, 0),
        t(3, 10, 1, 1, 4, 4, 1, 0),
        // A backward-data of K = 2048 in one accumulator, as long as the DCGAN's longest: the
        // tensor cores truncate their sums, and 3xTF32's must not build up over it.
        c(1, 64, 8, 8, 512, 4, 2, 1),
    ];
    // The DCGAN's layers, at batch 64 and an odd batch: on a GPU only (the emulator's MMAs
    // switch between the warp's 32 fibers, too slow for these).
    if !small(cu) {
        for b in [64, 5] {
            v.extend(dcgan_layers(b));
        }
    }
    v
}

#[test]
fn tensor_core_convolutions_match_the_cpu_within_their_precision() {
    for precision in [Precision::Tf32, Precision::ThreeTf32] {
        for cu in engines("precision") {
            let cu = cu.with_precision(precision).unwrap();
            // What summary.json and the start line call the device says how it multiplies.
            assert!(cu.describe().ends_with(&format!(", {} convolutions", precision.name())), "{}", cu.describe());
            let mut kernels_checked = std::collections::BTreeSet::new();
            // The largest error of the sums on tensor cores and where: a GPU's MMAs add in
            // their own order and rounding (published models of A100/H100 truncate), which only
            // a GPU run can measure; printed so that its log holds the figure.
            let mut worst = (0.0f64, String::new());
            let mut rng = rng(11);
            for g in shapes(&cu) {
                let x = random(&mut rng, g.x_len(), 1.0);
                let w = random(&mut rng, g.w_len(), 0.2);
                let dy = random(&mut rng, g.y_len(), 1.0);
                let exact = cpu_conv(&g, &x, &w, &dy);
                let rounded = cpu_conv(&g, &tf32_all(&x), &tf32_all(&w), &tf32_all(&dy));
                let got = cuda_conv(&cu, &g, &x, &w, &dy);
                let dirs = [Direction::Forward, backward_data_direction(&g), Direction::BackwardWeight];
                let names = ["forward", "backward-data", "backward-weight"];
                for i in 0..3 {
                    let what = format!("{} {g:?} {}", precision.name(), names[i]);
                    if !on_tensor_cores(&cu, &g, dirs[i]) {
                        assert_close(&what, &got[i], &exact[i], F32_TOL);
                        continue;
                    }
                    let p = plan(&g, dirs[i], cu.sm_count());
                    kernels_checked.insert(format!("{:?} {:?}", dirs[i], p.tile));
                    let reference = if precision == Precision::Tf32 { &rounded[i] } else { &exact[i] };
                    let e = rel_err(&got[i], reference);
                    if e > worst.0 {
                        worst = (e, format!("{what} (K {} in chunks of {})", p.k, p.k_chunk));
                    }
                    match precision {
                        Precision::Tf32 => {
                            assert_close(&format!("{what} (TF32 inputs)"), &got[i], &rounded[i], SUM_ORDER_TOL);
                            assert_close(&what, &got[i], &exact[i], TF32_TOL);
                        }
                        _ => assert_close(&what, &got[i], &exact[i], SUM_ORDER_TOL),
                    }
                }
            }
            eprintln!(
                "{}: the largest error of the sums on tensor cores {:.2e} (tolerance {SUM_ORDER_TOL:.0e}), {}",
                cu.describe(),
                worst.0,
                worst.1
            );
            // Every tensor-core kernel: both wide tiles in each of the four GEMMs.
            assert_eq!(kernels_checked.len(), 8, "tensor-core kernels reached: {kernels_checked:?}");
        }
    }
}

#[test]
fn tf32_rounding_differs_from_the_exact_result() {
    // The TF32 check above cannot pass by computing in f32 instead: on these inputs the exact
    // convolution and that of the TF32-rounded inputs differ by far more than SUM_ORDER_TOL.
    let g = ConvGeom::conv(2, 64, 14, 14, 128, 4, 2, 1).unwrap();
    let mut rng = rng(11);
    let x = random(&mut rng, g.x_len(), 1.0);
    let w = random(&mut rng, g.w_len(), 0.2);
    let dy = random(&mut rng, g.y_len(), 1.0);
    let exact = cpu_conv(&g, &x, &w, &dy);
    let rounded = cpu_conv(&g, &tf32_all(&x), &tf32_all(&w), &tf32_all(&dy));
    for i in 0..3 {
        let e = rel_err(&rounded[i], &exact[i]);
        assert!(e > 10.0 * SUM_ORDER_TOL && e < TF32_TOL, "direction {i}: TF32 inputs move the result by {e:.2e}");
    }
}

#[test]
fn tf32_rounds_to_nearest_with_ties_away_from_zero() {
    let ulp = 2f32.powi(-10); // TF32's last mantissa bit at 1.0
    assert_eq!(tf32_round(1.0 + 0.49 * ulp), 1.0);
    assert_eq!(tf32_round(1.0 + 0.51 * ulp), 1.0 + ulp);
    assert_eq!(tf32_round(1.0 + 0.5 * ulp), 1.0 + ulp, "a tie rounds away from zero");
    assert_eq!(tf32_round(-(1.0 + 0.5 * ulp)), -(1.0 + ulp));
    assert_eq!(tf32_round(f32::INFINITY), f32::INFINITY);
    assert!(tf32_round(f32::NAN).is_nan());
}
