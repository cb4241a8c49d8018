//! Layer norm's CUDA kernels (normalize, affine, backward, parameter gradient, the penalty's
//! adjoint) on fresh random inputs against the CPU backend, relative error at most 1e-5, on
//! each engine available (tests/cuda_common). Outputs are views inside larger buffers, and
//! what lies outside a view must come back untouched.
#![cfg(feature = "cuda")]

mod cuda_common;

use cuda_common::*;
use dcgan_train::backend::cpu::Cpu;
use dcgan_train::backend::cuda::Cuda;
use dcgan_train::backend::{Backend, View, ViewMut};
use dcgan_train::ops::layernorm::LnGeom;
use rand_chacha::ChaCha8Rng;
use std::ops::Range;

const TOL: f64 = 1e-5;

/// What surrounds each view in the padded buffers.
const MARK: f32 = 7.25;

/// Two samples of a single value per channel and an odd channel count, one like a critic's
/// 7x7 layer at batch 3, and one where a block's threads outnumber a sample's values; on a
/// GPU also a critic's first layer at batch 64.
fn shapes(cu: &Cuda) -> Vec<LnGeom> {
    let mut v = vec![LnGeom::new(5, 2, 1), LnGeom::new(128, 3, 49), LnGeom::new(3, 4, 17)];
    if !small(cu) {
        v.push(LnGeom::new(64, 64, 196));
    }
    v
}

/// A buffer of `pad + data.len() + pad` floats holding `data` in the middle, `MARK` around it,
/// and the range of the data.
fn padded(cu: &Cuda, data: &[f32], pad: usize) -> (<Cuda as Backend>::Buf, Range<usize>) {
    let mut host = vec![MARK; data.len() + 2 * pad];
    host[pad..pad + data.len()].copy_from_slice(data);
    (up(cu, &host), pad..pad + data.len())
}

/// The data range of a padded buffer, after checking that the padding is untouched.
#[track_caller]
fn unpad(cu: &Cuda, b: &<Cuda as Backend>::Buf, r: Range<usize>) -> Vec<f32> {
    let all = down(cu, b);
    assert!(all[..r.start].iter().chain(&all[r.end..]).all(|&v| v == MARK), "a kernel wrote outside its view");
    all[r].to_vec()
}

/// Inputs with an offset mean and a different spread in each sample, so that both the mean
/// and the scale matter.
fn sample_input(rng: &mut ChaCha8Rng, g: &LnGeom) -> Vec<f32> {
    let mut x = random(rng, g.len(), 1.0);
    for (i, v) in x.iter_mut().enumerate() {
        let b = (i / g.pixels) % g.batch;
        *v = *v * (0.5 + b as f32) + 0.7;
    }
    x
}

/// gamma `[C]` around 1 (some negative) then beta `[C]`.
fn gamma_beta(rng: &mut ChaCha8Rng, g: &LnGeom) -> Vec<f32> {
    let mut gb = random(rng, 2 * g.channels, 0.5);
    for (c, v) in gb[..g.channels].iter_mut().enumerate() {
        *v += if c % 4 == 3 { -1.0 } else { 1.0 };
    }
    gb
}

/// n and stats of `x` from the CPU backend, the inputs of the backward kernels.
fn cpu_normalized(g: &LnGeom, x: Vec<f32>) -> (Vec<f32>, Vec<f32>) {
    let (mut n, mut stats) = (vec![0.0; g.len()], vec![0.0; 2 * g.batch]);
    Cpu.ln_normalize(g, View::whole(&x), ViewMut::whole(&mut n), ViewMut::whole(&mut stats));
    (n, stats)
}

#[test]
fn normalize_and_affine_match_the_cpu() {
    for cu in engines("layernorm forward") {
        let mut rng = rng(21);
        for g in shapes(&cu) {
            let x = sample_input(&mut rng, &g);
            let (cn, cstats) = cpu_normalized(&g, x.clone());
            let (bx, rx) = padded(&cu, &x, 3);
            let (mut bn, rn) = padded(&cu, &vec![0.0; g.len()], 2);
            let (mut bs, rs) = padded(&cu, &vec![0.0; 2 * g.batch], 1);
            cu.ln_normalize(
                &g,
                View::range(&bx, rx.clone()),
                ViewMut::range(&mut bn, rn.clone()),
                ViewMut::range(&mut bs, rs.clone()),
            );
            assert_eq!(unpad(&cu, &bx, rx), x, "{g:?}: normalize wrote its input");
            assert_close(&format!("{g:?} n"), &unpad(&cu, &bn, rn), &cn, TOL);
            assert_close(&format!("{g:?} stats"), &unpad(&cu, &bs, rs), &cstats, TOL);

            let gb = gamma_beta(&mut rng, &g);
            let (bgb, rgb) = padded(&cu, &gb, 4);
            let bcn = up(&cu, &cn);
            for with_beta in [true, false] {
                let (mut by, ry) = padded(&cu, &vec![0.0; g.len()], 5);
                let gbv = View::range(&bgb, rgb.clone());
                cu.ln_affine(&g, View::whole(&bcn), gbv, with_beta, ViewMut::range(&mut by, ry.clone()));
                let mut cy = vec![0.0; g.len()];
                Cpu.ln_affine(&g, View::whole(&cn), View::whole(&gb), with_beta, ViewMut::whole(&mut cy));
                assert_close(&format!("{g:?} affine with_beta={with_beta}"), &unpad(&cu, &by, ry), &cy, TOL);
            }
        }
    }
}

#[test]
fn backward_data_matches_the_cpu() {
    for cu in engines("layernorm backward") {
        let mut rng = rng(22);
        for g in shapes(&cu) {
            let (n, stats) = cpu_normalized(&g, sample_input(&mut rng, &g));
            let gb = gamma_beta(&mut rng, &g);
            let dy = random(&mut rng, g.len(), 1.0);
            let (bn, bs, bgb) = (up(&cu, &n), up(&cu, &stats), up(&cu, &gb));
            let (bdy, rdy) = padded(&cu, &dy, 2);
            for by_gamma in [true, false] {
                let (mut bdx, rdx) = padded(&cu, &vec![0.0; g.len()], 3);
                cu.ln_backward_data(
                    &g,
                    View::whole(&bn),
                    View::whole(&bs),
                    View::whole(&bgb),
                    by_gamma,
                    View::range(&bdy, rdy.clone()),
                    ViewMut::range(&mut bdx, rdx.clone()),
                );
                let mut cdx = vec![0.0; g.len()];
                Cpu.ln_backward_data(
                    &g,
                    View::whole(&n),
                    View::whole(&stats),
                    View::whole(&gb),
                    by_gamma,
                    View::whole(&dy),
                    ViewMut::whole(&mut cdx),
                );
                assert_close(&format!("{g:?} dx by_gamma={by_gamma}"), &unpad(&cu, &bdx, rdx), &cdx, TOL);
            }
        }
    }
}

#[test]
fn param_grad_matches_the_cpu_set_and_accumulated() {
    for cu in engines("layernorm parameter gradient") {
        let mut rng = rng(23);
        for g in shapes(&cu) {
            let (n, _) = cpu_normalized(&g, sample_input(&mut rng, &g));
            let dy = random(&mut rng, g.len(), 1.0);
            let before = random(&mut rng, 2 * g.channels, 2.0);
            let (bn, bdy) = (up(&cu, &n), up(&cu, &dy));
            for accumulate in [false, true] {
                for with_beta in [true, false] {
                    let what = format!("{g:?} accumulate={accumulate} with_beta={with_beta}");
                    let (mut bout, rout) = padded(&cu, &before, 2);
                    let out = ViewMut::range(&mut bout, rout.clone());
                    cu.ln_param_grad(&g, View::whole(&bn), View::whole(&bdy), with_beta, out, accumulate);
                    let got = unpad(&cu, &bout, rout);
                    let mut want = before.clone();
                    let cout = ViewMut::whole(&mut want);
                    Cpu.ln_param_grad(&g, View::whole(&n), View::whole(&dy), with_beta, cout, accumulate);
                    assert_close(&format!("{what} dgamma"), &got[..g.channels], &want[..g.channels], TOL);
                    assert_close(&format!("{what} dbeta"), &got[g.channels..], &want[g.channels..], TOL);
                    // Without beta the shift's half gets nothing: kept when accumulating, else
                    // set to zero.
                    if !with_beta {
                        let kept = if accumulate { before[g.channels..].to_vec() } else { vec![0.0; g.channels] };
                        assert_eq!(got[g.channels..], kept[..], "{what}: the beta half");
                    }
                }
            }
        }
    }
}

#[test]
fn penalty_adjoint_matches_the_cpu_with_and_without_dy() {
    for cu in engines("layernorm penalty adjoint") {
        let mut rng = rng(24);
        for g in shapes(&cu) {
            let (n, stats) = cpu_normalized(&g, sample_input(&mut rng, &g));
            let gb = gamma_beta(&mut rng, &g);
            let ta = random(&mut rng, g.len(), 1.0);
            // The tangent after the normalization, as the penalty's forward pass makes it.
            let mut tn = vec![0.0; g.len()];
            let (vn, vs, vgb) = (View::whole(&n), View::whole(&stats), View::whole(&gb));
            Cpu.ln_backward_data(&g, vn, vs, vgb, false, View::whole(&ta), ViewMut::whole(&mut tn));
            let dty = random(&mut rng, g.len(), 1.0);
            let dy = random(&mut rng, g.len(), 1.0);
            let (bn, bs, bgb) = (up(&cu, &n), up(&cu, &stats), up(&cu, &gb));
            let (bta, btn, bdty) = (up(&cu, &ta), up(&cu, &tn), up(&cu, &dty));
            let (bdy, rdy) = padded(&cu, &dy, 1);
            for with_dy in [true, false] {
                let (mut bda, rda) = padded(&cu, &vec![0.0; g.len()], 3);
                cu.ln_penalty_adjoint(
                    &g,
                    View::whole(&bn),
                    View::whole(&bs),
                    View::whole(&bgb),
                    View::whole(&bta),
                    View::whole(&btn),
                    View::whole(&bdty),
                    with_dy.then(|| View::range(&bdy, rdy.clone())),
                    ViewMut::range(&mut bda, rda.clone()),
                );
                let mut cda = vec![0.0; g.len()];
                Cpu.ln_penalty_adjoint(
                    &g,
                    View::whole(&n),
                    View::whole(&stats),
                    View::whole(&gb),
                    View::whole(&ta),
                    View::whole(&tn),
                    View::whole(&dty),
                    with_dy.then(|| View::whole(&dy)),
                    ViewMut::whole(&mut cda),
                );
                assert_close(&format!("{g:?} da with_dy={with_dy}"), &unpad(&cu, &bda, rda), &cda, TOL);
            }
        }
    }
}
