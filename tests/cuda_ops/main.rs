//! Every op of the CUDA backend on fresh random inputs against the CPU backend (relative error
//! at most 1e-4), on each engine available: a GPU, and the CPU emulator of the kernels
//! (tests/cuda_common). Views with offsets are used throughout, and what lies outside a view
//! must come back untouched.
#![cfg(feature = "cuda")]

mod batchnorm;
mod conv;
#[path = "../cuda_common/mod.rs"]
mod cuda_common;

use cuda_common::*;
use dcgan_train::backend::cpu::Cpu;
use dcgan_train::backend::cuda::Cuda;
use dcgan_train::backend::{Backend, View, ViewMut};
use dcgan_train::ops::activation::Activation;
use dcgan_train::ops::adam::AdamStep;
use dcgan_train::ops::batchnorm::BnGeom;
use dcgan_train::ops::conv::ConvGeom;

pub(crate) const TOL: f64 = 1e-4;

/// A buffer of `pad + data.len() + pad` floats holding `data` in the middle, with a marker
/// value around it, and the range of the data.
pub(crate) fn padded(cu: &Cuda, data: &[f32], pad: usize) -> (<Cuda as Backend>::Buf, std::ops::Range<usize>) {
    let mut host = vec![7.25f32; data.len() + 2 * pad];
    host[pad..pad + data.len()].copy_from_slice(data);
    (up(cu, &host), pad..pad + data.len())
}

/// The data range of a padded buffer, after checking that the padding is untouched.
#[track_caller]
pub(crate) fn unpad(cu: &Cuda, b: &<Cuda as Backend>::Buf, r: std::ops::Range<usize>) -> Vec<f32> {
    let all = down(cu, b);
    assert!(all[..r.start].iter().chain(&all[r.end..]).all(|&v| v == 7.25), "a kernel wrote outside its view");
    all[r].to_vec()
}

#[test]
fn elementwise_axpy_matches_the_cpu() {
    for cu in engines("elementwise") {
        let mut rng = rng(1);
        let n = if small(&cu) { 1000 } else { 1 << 20 };
        let x = random(&mut rng, n, 2.0);
        let y = random(&mut rng, n, 2.0);

        let (bx, rx) = padded(&cu, &x, 3);
        let (mut by, ry) = padded(&cu, &y, 5);
        cu.axpy(0.75, View::range(&bx, rx.clone()), ViewMut::range(&mut by, ry.clone()));
        let mut cy = y.clone();
        Cpu.axpy(0.75, View::whole(&x), ViewMut::whole(&mut cy));
        assert_eq!(unpad(&cu, &bx, rx), x, "axpy wrote its input");
        assert_close("axpy", &unpad(&cu, &by, ry), &cy, TOL);
    }
}

#[test]
fn activations_forward_and_backward_match_the_cpu() {
    for cu in engines("activations") {
        let mut rng = rng(2);
        let n = if small(&cu) { 777 } else { 300_001 };
        for act in [Activation::None, Activation::Relu, Activation::LeakyRelu, Activation::Tanh, Activation::Sigmoid] {
            let x = random(&mut rng, n, 6.0);
            let dy = random(&mut rng, n, 1.0);
            let (mut bx, rx) = padded(&cu, &x, 1);
            cu.act_forward(act, ViewMut::range(&mut bx, rx.clone()));
            let mut cx = x.clone();
            Cpu.act_forward(act, ViewMut::whole(&mut cx));
            let gy = unpad(&cu, &bx, rx.clone());
            assert_close(&format!("{act:?} forward"), &gy, &cx, TOL);

            let (mut bdy, rdy) = padded(&cu, &dy, 2);
            cu.act_backward(act, View::range(&bx, rx), ViewMut::range(&mut bdy, rdy.clone()));
            let mut cdy = dy.clone();
            Cpu.act_backward(act, View::whole(&cx), ViewMut::whole(&mut cdy));
            assert_close(&format!("{act:?} backward"), &unpad(&cu, &bdy, rdy), &cdy, TOL);
        }
    }
}

#[test]
fn bce_with_logits_matches_the_cpu() {
    for cu in engines("bce") {
        let mut rng = rng(3);
        for n in [1, 37, 64, 300] {
            let mut logits = random(&mut rng, n, 5.0);
            logits[0] = 40.0; // exp(-x) underflows: the stable form must hold
            if n > 1 {
                logits[1] = -40.0;
            }
            for target in [0.0, 1.0, 0.9] {
                let (bl, rl) = padded(&cu, &logits, 2);
                let (mut bd, rd) = padded(&cu, &vec![0.0; n], 1);
                let (mut bo, ro) = padded(&cu, &[0.0, 0.0], 3);
                cu.bce_with_logits(
                    View::range(&bl, rl),
                    target,
                    ViewMut::range(&mut bd, rd.clone()),
                    ViewMut::range(&mut bo, ro.clone()),
                );
                let (mut cd, mut co) = (vec![0.0; n], vec![0.0; 2]);
                Cpu.bce_with_logits(View::whole(&logits), target, ViewMut::whole(&mut cd), ViewMut::whole(&mut co));
                assert_close(&format!("bce n={n} t={target} dlogits"), &unpad(&cu, &bd, rd), &cd, TOL);
                assert_close(&format!("bce n={n} t={target} out"), &unpad(&cu, &bo, ro), &co, TOL);
            }
        }
    }
}

/// Logits `[classes, batch]` a few units apart and labels `[batch]` where every third sample
/// has its label and one other class tied for its largest logit (the lowest class wins, so
/// half of those count as right), and one sample has a logit whose exp overflows f32.
fn classified(rng: &mut rand_chacha::ChaCha8Rng, batch: usize, classes: usize) -> (Vec<f32>, Vec<f32>) {
    use rand::Rng;
    let mut logits = random(rng, classes * batch, 4.0);
    let labels: Vec<f32> = (0..batch).map(|_| rng.random_range(0..classes) as f32).collect();
    for i in (0..batch).step_by(3) {
        let (label, other) = (labels[i] as usize, (labels[i] as usize + 1 + i % (classes - 1)) % classes);
        logits[label * batch + i] = 5.0;
        logits[other * batch + i] = 5.0;
    }
    logits[(classes - 1) * batch + batch - 1] = 95.0;
    (logits, labels)
}

#[test]
fn softmax_xent_matches_the_cpu() {
    for cu in engines("softmax_xent") {
        let mut rng = rng(8);
        for classes in [2, 10] {
            for batch in [1, 7, 64, 300] {
                let what = format!("softmax_xent {batch}x{classes}");
                let (logits, labels) = classified(&mut rng, batch, classes);
                let (bl, rl) = padded(&cu, &logits, 2);
                let (blab, rlab) = padded(&cu, &labels, 3);
                let (mut bd, rd) = padded(&cu, &vec![0.0; classes * batch], 1);
                let (mut bo, ro) = padded(&cu, &[0.0, 0.0], 4);
                cu.softmax_xent(
                    View::range(&bl, rl),
                    View::range(&blab, rlab),
                    classes,
                    ViewMut::range(&mut bd, rd.clone()),
                    ViewMut::range(&mut bo, ro.clone()),
                );
                let (mut cd, mut co) = (vec![0.0; classes * batch], vec![0.0; 2]);
                Cpu.softmax_xent(
                    View::whole(&logits),
                    View::whole(&labels),
                    classes,
                    ViewMut::whole(&mut cd),
                    ViewMut::whole(&mut co),
                );
                assert_close(&format!("{what} dlogits"), &unpad(&cu, &bd, rd), &cd, TOL);
                let out = unpad(&cu, &bo, ro);
                assert_close(&format!("{what} loss"), &out[..1], &co[..1], TOL);
                // The same samples count as right: the same bits.
                assert_eq!(out[1], co[1], "{what} accuracy");
            }
        }
    }
}

#[test]
fn softmax_xent_refuses_a_label_outside_the_classes() {
    for cu in engines("softmax_xent labels") {
        let logits = up(&cu, &[0.5; 3 * 4]);
        for bad in [-1.0, 3.0, 0.5] {
            let labels = up(&cu, &[0.0, 2.0, bad, 1.0]);
            let (mut d, mut out) = (cu.alloc(3 * 4).unwrap(), cu.alloc(2).unwrap());
            let err = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                cu.softmax_xent(
                    View::whole(&logits),
                    View::whole(&labels),
                    3,
                    ViewMut::whole(&mut d),
                    ViewMut::whole(&mut out),
                );
            }))
            .expect_err("a bad label must panic");
            let msg = err.downcast_ref::<String>().cloned().unwrap_or_default();
            assert!(msg.contains("sample 2 has label") && msg.contains("not a class index in 0..3"), "{msg}");
        }
    }
}

#[test]
fn adam_matches_the_cpu_over_several_steps() {
    for cu in engines("adam") {
        let mut rng = rng(4);
        let n = if small(&cu) { 999 } else { 1_000_003 };
        let p = random(&mut rng, n, 0.1);
        let (mut bp, rp) = padded(&cu, &p, 1);
        let (mut bm, rm) = padded(&cu, &vec![0.0; n], 2);
        let (mut bv, rv) = padded(&cu, &vec![0.0; n], 3);
        let (mut cp, mut cm, mut cv) = (p.clone(), vec![0.0; n], vec![0.0; n]);
        for t in 1..=3 {
            let g = random(&mut rng, n, 1.0);
            let (bg, rg) = padded(&cu, &g, 4);
            let h = AdamStep::with_betas(2e-4, 0.5, 0.999, 1e-8, t);
            cu.adam(
                &h,
                ViewMut::range(&mut bp, rp.clone()),
                View::range(&bg, rg),
                ViewMut::range(&mut bm, rm.clone()),
                ViewMut::range(&mut bv, rv.clone()),
            );
            Cpu.adam(&h, ViewMut::whole(&mut cp), View::whole(&g), ViewMut::whole(&mut cm), ViewMut::whole(&mut cv));
        }
        assert_close("adam param", &unpad(&cu, &bp, rp), &cp, TOL);
        assert_close("adam m", &unpad(&cu, &bm, rm), &cm, TOL);
        assert_close("adam v", &unpad(&cu, &bv, rv), &cv, TOL);
    }
}

#[test]
fn results_are_identical_run_to_run() {
    // No atomics anywhere: the same inputs give the same bits.
    for cu in engines("determinism") {
        let mut rng = rng(7);
        let g = if small(&cu) {
            ConvGeom::conv(2, 1, 28, 28, 8, 4, 2, 1).unwrap()
        } else {
            ConvGeom::conv(64, 1, 28, 28, 64, 4, 2, 1).unwrap()
        };
        let x = up(&cu, &random(&mut rng, g.x_len(), 1.0));
        let dy = up(&cu, &random(&mut rng, g.y_len(), 1.0));
        let bn = BnGeom::new(g.c_in, g.batch * g.h_in * g.w_in);
        let run = || {
            let mut dw = cu.alloc(g.w_len()).unwrap();
            cu.conv2d_backward_weight(&g, View::whole(&x), View::whole(&dy), ViewMut::whole(&mut dw), false);
            let mut stats = cu.alloc(2 * bn.channels).unwrap();
            cu.bn_forward_stats(&bn, View::whole(&x), ViewMut::whole(&mut stats));
            (down(&cu, &dw), down(&cu, &stats))
        };
        let first = run();
        for _ in 0..3 {
            assert_eq!(run(), first, "a result changed between identical runs");
        }
    }
}

#[test]
fn the_wgan_gp_terms_match_the_cpu() {
    for cu in engines("penalty") {
        let mut rng = rng(9);
        for (channels, batch, p) in [(1, 1, 5), (1, 7, 784), (3, 5, 17)] {
            let what = format!("penalty C={channels} B={batch} P={p}");
            let n = channels * batch * p;
            // Sample 0 all zeros: the guarded norm.
            let mut g = random(&mut rng, n, 0.1);
            for c in 0..channels {
                g[c * batch * p..c * batch * p + p].fill(0.0);
            }
            let (bg, rg) = padded(&cu, &g, 2);
            let (mut bs, rs) = padded(&cu, &vec![0.0; n], 3);
            let (mut bn, rn) = padded(&cu, &vec![0.0; batch], 1);
            let (mut bo, ro) = padded(&cu, &[0.0; 2], 4);
            let (ms, mn, mo) = (
                ViewMut::range(&mut bs, rs.clone()),
                ViewMut::range(&mut bn, rn.clone()),
                ViewMut::range(&mut bo, ro.clone()),
            );
            cu.gradient_penalty(View::range(&bg, rg), channels, 10.0, ms, mn, mo);
            let (mut cs, mut cn, mut co) = (vec![0.0; n], vec![0.0; batch], vec![0.0; 2]);
            Cpu.gradient_penalty(
                View::whole(&g),
                channels,
                10.0,
                ViewMut::whole(&mut cs),
                ViewMut::whole(&mut cn),
                ViewMut::whole(&mut co),
            );
            assert_close(&format!("{what} seed"), &unpad(&cu, &bs, rs), &cs, TOL);
            assert_close(&format!("{what} norms"), &unpad(&cu, &bn, rn), &cn, TOL);
            assert_close(&format!("{what} out"), &unpad(&cu, &bo, ro), &co, TOL);

            let (real, fake) = (random(&mut rng, n, 1.0), random(&mut rng, n, 1.0));
            let eps: Vec<f32> = random(&mut rng, batch, 0.5).iter().map(|e| e + 0.5).collect();
            let (br, rr) = padded(&cu, &real, 1);
            let (bf, rf) = padded(&cu, &fake, 2);
            let (be, re) = padded(&cu, &eps, 3);
            let (mut bi, ri) = padded(&cu, &vec![0.0; n], 4);
            cu.interpolate(
                View::range(&br, rr),
                View::range(&bf, rf),
                channels,
                View::range(&be, re),
                ViewMut::range(&mut bi, ri.clone()),
            );
            let mut ci = vec![0.0; n];
            Cpu.interpolate(
                View::whole(&real),
                View::whole(&fake),
                channels,
                View::whole(&eps),
                ViewMut::whole(&mut ci),
            );
            assert_close(&format!("{what} interpolate"), &unpad(&cu, &bi, ri), &ci, TOL);

            let outputs = random(&mut rng, batch, 3.0);
            let (bx, rx) = padded(&cu, &outputs, 2);
            let (mut bd, rd) = padded(&cu, &vec![0.0; batch], 3);
            let (mut bm, rm) = padded(&cu, &[0.0], 1);
            cu.critic_mean(
                View::range(&bx, rx),
                -1.0,
                ViewMut::range(&mut bd, rd.clone()),
                ViewMut::range(&mut bm, rm.clone()),
            );
            let (mut cd, mut cm) = (vec![0.0; batch], vec![0.0]);
            Cpu.critic_mean(View::whole(&outputs), -1.0, ViewMut::whole(&mut cd), ViewMut::whole(&mut cm));
            assert_close(&format!("{what} critic mean"), &unpad(&cu, &bm, rm), &cm, TOL);
            assert_eq!(unpad(&cu, &bd, rd), cd, "{what} critic mean gradient");
        }
    }
}
