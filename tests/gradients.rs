//! Every CPU op and the two networks against independent f64 references: forward values
//! directly, gradients by central finite differences through the reference.
//!
//! Tolerance: the crate computes in f32 and sums up to ~10^4 products per output, so its
//! relative error is bounded by ~K * 2^-24 ≈ 1e-3 and is ~1e-6 in practice; finite
//! differences in f64 with h = 1e-6 are exact to ~1e-9. We require 1e-4 relative to the
//! largest reference value of the tensor (1e-3 for whole networks, whose gradients pass
//! through several f32 layers), which a wrong index or a missing term exceeds by orders.

use crate::common::reference as r;
use crate::common::{dot, random, rel_err, to_f64};
use dcgan_train::backend::cpu::Cpu;
use dcgan_train::backend::{Backend, View, ViewMut};
use dcgan_train::model::dcgan::{DISCRIMINATOR_28, Discriminator, GENERATOR_28, NZ, Widths, architecture};
use dcgan_train::model::net::{BackwardOrder, Net, NoObserver, Norm, StageSpec, param_layout};
use dcgan_train::ops::activation::Activation;
use dcgan_train::ops::adam::AdamStep;
use dcgan_train::ops::batchnorm::BnGeom;
use dcgan_train::ops::conv::ConvGeom;

const H: f64 = 1e-6;

fn v(b: &Vec<f32>) -> View<'_, Cpu> {
    View::whole(b)
}
fn vm(b: &mut Vec<f32>) -> ViewMut<'_, Cpu> {
    ViewMut::whole(b)
}

/// Geometries covering stride 1, 2 and 3, padding 0, 1 and 2, odd and non-square sizes,
/// several channels, and kernels wider than their output.
fn geometries() -> Vec<ConvGeom> {
    vec![
        ConvGeom::conv(2, 3, 6, 6, 4, 3, 1, 1).unwrap(),
        ConvGeom::conv(2, 2, 9, 8, 3, 3, 3, 2).unwrap(),
        ConvGeom::conv(3, 2, 7, 5, 3, 4, 2, 1).unwrap(),
        ConvGeom::conv(2, 4, 5, 5, 2, 5, 1, 0).unwrap(),
        // Padding 2 > kernel 2 - 1: output rows and columns 0 and 5 see only the padding.
        ConvGeom::conv(2, 2, 3, 3, 2, 2, 1, 2).unwrap(),
        ConvGeom::transposed(2, 3, 3, 3, 2, 4, 2, 1).unwrap(),
    ]
}

#[test]
fn conv_forward_matches_direct_convolution() {
    let be = Cpu;
    for (i, g) in geometries().into_iter().enumerate() {
        let x = random(g.x_len(), 1.0, 10 + i as u64);
        let w = random(g.w_len(), 1.0, 20 + i as u64);
        let mut y = vec![0.0; g.y_len()];
        be.conv2d_forward(&g, v(&x), v(&w), vm(&mut y));
        let want = r::conv(&g, &to_f64(&x), &to_f64(&w));
        assert!(rel_err(&y, &want, 1e-12) < 1e-5, "geometry {g:?}");
    }
}

#[test]
fn conv_backward_data_and_weight_match_finite_differences() {
    let be = Cpu;
    for (i, g) in geometries().into_iter().enumerate() {
        let x = random(g.x_len(), 1.0, 30 + i as u64);
        let w = random(g.w_len(), 1.0, 40 + i as u64);
        let dy = random(g.y_len(), 1.0, 50 + i as u64);
        let (xd, wd, dyd) = (to_f64(&x), to_f64(&w), to_f64(&dy));

        let mut dx = vec![0.0; g.x_len()];
        be.conv2d_backward_data(&g, v(&dy), v(&w), vm(&mut dx));
        let fd_x: Vec<f64> =
            (0..xd.len()).map(|j| r::central_difference(&mut |x| dot(&r::conv(&g, x, &wd), &dyd), &xd, j, H)).collect();
        assert!(rel_err(&dx, &fd_x, 1e-12) < 1e-4, "dx, geometry {g:?}");

        let mut dw = vec![0.0; g.w_len()];
        be.conv2d_backward_weight(&g, v(&x), v(&dy), vm(&mut dw), false);
        let fd_w: Vec<f64> =
            (0..wd.len()).map(|j| r::central_difference(&mut |w| dot(&r::conv(&g, &xd, w), &dyd), &wd, j, H)).collect();
        assert!(rel_err(&dw, &fd_w, 1e-12) < 1e-4, "dw, geometry {g:?}");

        // accumulate adds to what is there
        let before = dw.clone();
        be.conv2d_backward_weight(&g, v(&x), v(&dy), vm(&mut dw), true);
        for (a, b) in dw.iter().zip(&before) {
            assert!((a - 2.0 * b).abs() <= 1e-5 * b.abs().max(1.0));
        }
    }
}

#[test]
fn conv_chunks_over_a_large_batch_match_the_reference() {
    // 64 images of the generator's middle layer: im2col runs in several chunks.
    let be = Cpu;
    // 512 column rows x 49 pixels per image: the 4 MiB column buffer holds 41 images.
    let g = ConvGeom::transposed(64, 32, 7, 7, 32, 4, 2, 1).unwrap();
    let x = random(g.x_len(), 1.0, 1);
    let w = random(g.w_len(), 1.0, 2);
    let mut y = vec![0.0; g.y_len()];
    be.conv2d_forward(&g, v(&x), v(&w), vm(&mut y));
    assert!(rel_err(&y, &r::conv(&g, &to_f64(&x), &to_f64(&w)), 1e-12) < 1e-5);
    // ConvTranspose2d forward = backward-data, against PyTorch's scatter definition.
    let xt = random(g.y_len(), 1.0, 3);
    let mut yt = vec![0.0; g.x_len()];
    be.conv2d_backward_data(&g, v(&xt), v(&w), vm(&mut yt));
    assert!(rel_err(&yt, &r::conv_transpose(&g, &to_f64(&xt), &to_f64(&w)), 1e-12) < 1e-5);
    // The weight gradient sums over every chunk of the batch.
    let mut dw = vec![0.0; g.w_len()];
    be.conv2d_backward_weight(&g, v(&x), v(&xt), vm(&mut dw), false);
    let want = r::conv_weight_grad(&g, &to_f64(&x), &to_f64(&xt));
    assert!(rel_err(&dw, &want, 1e-12) < 1e-5);
}

const ACTS: [Activation; 5] =
    [Activation::None, Activation::Relu, Activation::LeakyRelu, Activation::Tanh, Activation::Sigmoid];

#[test]
fn activations_forward_and_backward() {
    let be = Cpu;
    for (i, act) in ACTS.into_iter().enumerate() {
        let x = random(300, 3.0, 60 + i as u64);
        let mut y = x.clone();
        be.act_forward(act, vm(&mut y));
        let want: Vec<f64> = x.iter().map(|&a| r::act(act, a as f64)).collect();
        assert!(rel_err(&y, &want, 1e-12) < 1e-6, "{act:?} forward");
        let g = random(300, 1.0, 70 + i as u64);
        let mut dx = g.clone();
        be.act_backward(act, v(&y), vm(&mut dx));
        let fd: Vec<f64> = x
            .iter()
            .zip(&g)
            .map(|(&a, &gi)| gi as f64 * (r::act(act, a as f64 + H) - r::act(act, a as f64 - H)) / (2.0 * H))
            .collect();
        assert!(rel_err(&dx, &fd, 1e-12) < 1e-4, "{act:?} backward");
    }
}

#[test]
fn batch_norm_training_forward_backward_and_running_statistics() {
    let be = Cpu;
    let (c, count) = (3, 40);
    let g = BnGeom::new(c, count);
    for (i, act) in ACTS.into_iter().enumerate() {
        let x = random(c * count, 2.0, 80 + i as u64)
            .iter()
            .enumerate()
            .map(|(j, v)| v + (j / count) as f32)
            .collect::<Vec<_>>();
        let gamma = random(c, 1.0, 90 + i as u64).iter().map(|v| 1.0 + v).collect::<Vec<f32>>();
        let beta = random(c, 0.5, 100 + i as u64);
        let mut stats = vec![0.0; 2 * c];
        let (mut y, mut saved) = (vec![0.0; c * count], vec![0.0; 2 * c]);
        let mut running: Vec<f32> = [vec![0.5; c], vec![2.0; c]].concat();
        be.bn_forward_stats(&g, v(&x), vm(&mut stats));
        be.bn_forward_apply(
            &g,
            v(&x),
            v(&stats),
            count as f64,
            v(&gamma),
            v(&beta),
            act,
            vm(&mut y),
            vm(&mut saved),
            vm(&mut running),
        );
        let (xd, gd, bd) = (to_f64(&x), to_f64(&gamma), to_f64(&beta));
        assert!(rel_err(&y, &r::batch_norm(&xd, c, &gd, &bd, act), 1e-12) < 1e-5, "{act:?} forward");

        // Running statistics: momentum 0.1, unbiased variance.
        for ch in 0..c {
            let xc = &xd[ch * count..][..count];
            let mean = xc.iter().sum::<f64>() / count as f64;
            let var_unbiased = xc.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (count - 1) as f64;
            assert!((running[ch] as f64 - (0.9 * 0.5 + 0.1 * mean)).abs() < 1e-5);
            assert!((running[c + ch] as f64 - (0.9 * 2.0 + 0.1 * var_unbiased)).abs() < 1e-5);
        }

        let dy = random(c * count, 1.0, 110 + i as u64);
        let dyd = to_f64(&dy);
        let (mut dz, mut sums, mut dx) = (dy.clone(), vec![0.0; 2 * c], vec![0.0; c * count]);
        be.bn_backward_reduce(&g, v(&x), v(&y), act, v(&saved), vm(&mut dz), vm(&mut sums));
        be.bn_backward_data(&g, v(&x), v(&dz), v(&saved), v(&gamma), v(&sums), count as f64, vm(&mut dx));
        let loss = |x: &[f64], gm: &[f64], bt: &[f64]| dot(&r::batch_norm(x, c, gm, bt, act), &dyd);
        let fd_x: Vec<f64> =
            (0..xd.len()).map(|j| r::central_difference(&mut |x| loss(x, &gd, &bd), &xd, j, H)).collect();
        assert!(rel_err(&dx, &fd_x, 1e-9) < 1e-4, "{act:?} dx");
        let fd_gamma: Vec<f64> =
            (0..c).map(|j| r::central_difference(&mut |gm| loss(&xd, gm, &bd), &gd, j, H)).collect();
        let fd_beta: Vec<f64> =
            (0..c).map(|j| r::central_difference(&mut |bt| loss(&xd, &gd, bt), &bd, j, H)).collect();
        assert!(rel_err(&sums[..c], &fd_gamma, 1e-9) < 1e-4, "{act:?} dgamma");
        assert!(rel_err(&sums[c..], &fd_beta, 1e-9) < 1e-4, "{act:?} dbeta");
    }
}

#[test]
fn batch_norm_evaluation_uses_running_statistics() {
    let be = Cpu;
    let (c, count) = (2, 10);
    let g = BnGeom::new(c, count);
    let x = random(c * count, 2.0, 5);
    let (gamma, beta) = (vec![1.5, 0.5], vec![0.1, -0.2]);
    let running = vec![0.3, -0.1, 2.0, 0.5];
    let mut y = vec![0.0; c * count];
    be.bn_forward_eval(&g, v(&x), v(&gamma), v(&beta), v(&running), Activation::Relu, vm(&mut y));
    for (j, &yv) in y.iter().enumerate() {
        let ch = j / count;
        let want = (gamma[ch] as f64 * (x[j] as f64 - running[ch] as f64) / (running[c + ch] as f64 + 1e-5).sqrt()
            + beta[ch] as f64)
            .max(0.0);
        assert!((yv as f64 - want).abs() < 1e-5);
    }
}

#[test]
fn bce_with_logits_loss_gradient_and_probability() {
    let be = Cpu;
    for target in [0.0f32, 1.0] {
        // Include large logits: the stable form must not overflow.
        let mut logits = random(50, 6.0, 7 + target as u64);
        logits[0] = 80.0;
        logits[1] = -80.0;
        let (mut d, mut out) = (vec![0.0; 50], vec![0.0; 2]);
        be.bce_with_logits(v(&logits), target, vm(&mut d), vm(&mut out));
        let ld = to_f64(&logits);
        assert!((out[0] as f64 - r::bce(&ld, target as f64)).abs() < 1e-5, "loss");
        let fd: Vec<f64> =
            (2..50).map(|j| r::central_difference(&mut |x| r::bce(x, target as f64), &ld, j, H)).collect();
        assert!(rel_err(&d[2..], &fd, 1e-9) < 1e-4, "dlogits");
        let mean_p = ld.iter().map(|x| 1.0 / (1.0 + (-x).exp())).sum::<f64>() / 50.0;
        assert!((out[1] as f64 - mean_p).abs() < 1e-6);
    }
}

/// `batch` labels in 0..classes from `seed`, as the f32 the op takes and as indices.
fn class_labels(batch: usize, classes: usize, seed: u64) -> (Vec<f32>, Vec<usize>) {
    let idx: Vec<usize> = random(batch, 1.0, seed)
        .iter()
        .map(|v| (((v + 1.0) / 2.0 * classes as f32) as usize).min(classes - 1))
        .collect();
    (idx.iter().map(|&c| c as f32).collect(), idx)
}

#[test]
fn softmax_xent_loss_gradient_and_accuracy() {
    let be = Cpu;
    for (k, (batch, classes)) in [(1, 2), (5, 3), (7, 10), (16, 10), (4, 1)].into_iter().enumerate() {
        // logits [classes, batch], spread over a few units.
        let mut logits = random(classes * batch, 3.0, 200 + k as u64);
        let (mut labels, mut idx) = class_labels(batch, classes, 210 + k as u64);
        // Sample 0: its first and last class tie for the largest logit, and its label is the
        // last, so it counts as wrong only if the lowest class wins the tie.
        logits[0] = 4.0;
        logits[(classes - 1) * batch] = 4.0;
        (labels[0], idx[0]) = ((classes - 1) as f32, classes - 1);
        // [classes, batch] and [2]
        let (mut d, mut out) = (vec![0.0; classes * batch], vec![0.0; 2]);
        be.softmax_xent(v(&logits), v(&labels), classes, vm(&mut d), vm(&mut out));

        let ld = to_f64(&logits);
        let (loss, accuracy) = r::softmax_xent(&ld, &idx, classes);
        assert!((out[0] as f64 - loss).abs() < 1e-5 * loss.max(1.0), "loss {} vs {loss}, {batch}x{classes}", out[0]);
        assert_eq!(out[1], accuracy as f32, "accuracy, {batch}x{classes}");
        let fd: Vec<f64> = (0..ld.len())
            .map(|j| r::central_difference(&mut |x| r::softmax_xent(x, &idx, classes).0, &ld, j, H))
            .collect();
        assert!(rel_err(&d, &fd, 1e-9) < 1e-4, "dlogits, {batch}x{classes}");
    }
}

#[test]
fn softmax_xent_holds_where_exp_of_a_logit_overflows_f32() {
    // exp(90) is past f32's range: only the shift by each sample's largest logit keeps it finite.
    let be = Cpu;
    let (batch, classes) = (3, 4);
    let mut logits = random(classes * batch, 2.0, 220);
    logits[0] = 90.0; // sample 0, class 0
    logits[batch + 1] = -90.0; // sample 1, class 1
    logits[2 * batch + 2] = 88.0; // sample 2, class 2
    let (labels, idx) = class_labels(batch, classes, 221);
    let (mut d, mut out) = (vec![0.0; classes * batch], vec![0.0; 2]);
    be.softmax_xent(v(&logits), v(&labels), classes, vm(&mut d), vm(&mut out));
    let ld = to_f64(&logits);
    let (loss, accuracy) = r::softmax_xent(&ld, &idx, classes);
    assert!((out[0] as f64 - loss).abs() < 1e-5 * loss.max(1.0), "loss {} vs {loss}", out[0]);
    assert_eq!(out[1], accuracy as f32);
    let fd: Vec<f64> =
        (0..ld.len()).map(|j| r::central_difference(&mut |x| r::softmax_xent(x, &idx, classes).0, &ld, j, H)).collect();
    assert!(rel_err(&d, &fd, 1e-9) < 1e-4, "dlogits");
}

#[test]
fn softmax_xent_refuses_a_label_outside_the_classes() {
    let logits = random(3 * 2, 1.0, 230);
    for bad in [-1.0f32, 3.0, 1.5, f32::NAN] {
        let (logits, labels) = (logits.clone(), vec![0.0, bad]);
        let (mut d, mut out) = (vec![0.0; 6], vec![0.0; 2]);
        let err = std::panic::catch_unwind(move || {
            Cpu.softmax_xent(v(&logits), v(&labels), 3, vm(&mut d), vm(&mut out));
        })
        .expect_err("a bad label must panic");
        let msg = err.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(msg.contains("sample 1 has label") && msg.contains("not a class index in 0..3"), "{msg}");
    }
}

#[test]
fn adam_matches_pytorch_formula_over_several_steps() {
    let be = Cpu;
    let n = 1000;
    let mut p = random(n, 0.1, 1);
    let (mut m, mut vv) = (vec![0.0; n], vec![0.0; n]);
    let mut pd = to_f64(&p);
    let (mut md, mut vd) = (vec![0.0f64; n], vec![0.0f64; n]);
    for t in 1..=4u64 {
        let g = random(n, 1.0, 100 + t);
        be.adam(&AdamStep::with_betas(2e-4, 0.5, 0.999, 1e-8, t), vm(&mut p), v(&g), vm(&mut m), vm(&mut vv));
        // torch.optim.Adam: m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
        // p -= lr / (1-b1^t) * m / (sqrt(v) / sqrt(1-b2^t) + eps)
        let (b1, b2, lr, eps) = (0.5f64, 0.999f64, 2e-4f64, 1e-8f64);
        for i in 0..n {
            let gi = g[i] as f64;
            md[i] = b1 * md[i] + (1.0 - b1) * gi;
            vd[i] = b2 * vd[i] + (1.0 - b2) * gi * gi;
            let denom = vd[i].sqrt() / (1.0 - b2.powi(t as i32)).sqrt() + eps;
            pd[i] -= lr / (1.0 - b1.powi(t as i32)) * md[i] / denom;
        }
    }
    for i in 0..n {
        assert!((p[i] as f64 - pd[i]).abs() < 1e-7 + 1e-5 * pd[i].abs(), "param {i}");
    }
}

/// Gradient of a loss through a whole network, against finite differences of the f64
/// reference network at a sample of parameters from every tensor.
/// The network's loss gradients against finite differences of its f64 forward: a few
/// coordinates of each parameter tensor among the first `checked_params` values (those of the
/// stages under test), and of the input.
fn check_network(
    specs: &[StageSpec],
    input_shape: (usize, usize, usize),
    batch: usize,
    order: BackwardOrder,
    target: f32,
    checked_params: usize,
) {
    let be = Cpu;
    let mut net = Net::new(&be, "N", specs, batch, input_shape, order, 7).unwrap();
    let input = random(net.input_mut().len(), 1.0, 8);
    be.upload(&input, vm(net.input_mut()));
    net.forward(&be, true, None, &mut NoObserver);
    let out = net.output().clone();
    let mut dlogits = vec![0.0; out.len()];
    let mut stats = vec![0.0; 2];
    be.bce_with_logits(v(&out), target, vm(&mut dlogits), vm(&mut stats));
    be.copy(v(&dlogits), vm(net.d_output_mut()));
    net.backward(&be, Some(false), true, None, &mut NoObserver);

    let params = to_f64(&net.store.value);
    let inputd = to_f64(&input);
    let loss = |p: &[f64], x: &[f64]| r::bce(&r::net_forward(specs, batch, input_shape, p, x), target as f64);
    let want_out = r::net_forward(specs, batch, input_shape, &params, &inputd);
    assert!(rel_err(&out, &want_out, 1e-9) < 1e-4, "forward");
    assert!((stats[0] as f64 - loss(&params, &inputd)).abs() < 1e-5, "loss");

    let grad = net.store.grad.clone();
    // A few coordinates of each tensor, spread over it.
    let mut layout = net.store.layout.clone();
    layout.params.retain(|t| t.range.end <= checked_params);
    assert!(!layout.params.is_empty());
    r::check_gradient_by_differences(&layout, &grad, &params, &mut |p| loss(p, &inputd), 4, H);
    let dx = net.d_input().clone();
    for j in (0..input.len()).step_by(input.len() / 6 + 1) {
        let fd = r::central_difference(&mut |x| loss(&params, x), &inputd, j, H);
        assert!((dx[j] as f64 - fd).abs() / fd.abs().max(1e-5) < 1e-3, "input gradient [{j}]: {} vs {fd}", dx[j]);
    }
}

#[test]
fn discriminator_gradients_match_finite_differences() {
    check_network(&DISCRIMINATOR_28, (1, 28, 28), 3, BackwardOrder::LayerByLayer, 1.0, usize::MAX);
}

#[test]
fn layer_norm_critic_gradients_match_finite_differences() {
    // `--critic-norm layer`: layer norm in place of the discriminator's batch norm.
    let (_, critic) = architecture(28, Widths::DCGAN, Discriminator::Critic { layer_norm: true }).unwrap();
    assert!(critic.iter().any(|s| s.norm == Norm::Layer));
    check_network(&critic, (1, 28, 28), 3, BackwardOrder::LayerByLayer, 1.0, usize::MAX);
}

#[test]
fn generator_with_discriminator_head_gradients_match_finite_differences() {
    // G followed by D: the generator's loss, as the G step computes it (D's weights fixed:
    // their gradients are the discriminator test's), G's parameters first in the layout.
    let specs: Vec<StageSpec> = GENERATOR_28.iter().chain(DISCRIMINATOR_28.iter()).copied().collect();
    let g_params = param_layout(&GENERATOR_28).0.param_len();
    check_network(&specs, (NZ, 1, 1), 2, BackwardOrder::DataFirst, 1.0, g_params);
}

#[test]
fn backward_orders_give_identical_gradients() {
    let be = Cpu;
    let mut grads = Vec::new();
    for order in [BackwardOrder::LayerByLayer, BackwardOrder::DataFirst] {
        let mut net = Net::new(&be, "G", &GENERATOR_28, 4, (NZ, 1, 1), order, 3).unwrap();
        let z = random(net.input_mut().len(), 1.0, 4);
        be.upload(&z, vm(net.input_mut()));
        net.forward(&be, true, None, &mut NoObserver);
        let dy = random(net.output().len(), 1.0, 5);
        be.upload(&dy, vm(net.d_output_mut()));
        net.backward(&be, Some(false), false, None, &mut NoObserver);
        grads.push(net.store.grad.clone());
    }
    assert_eq!(grads[0], grads[1]);
}
