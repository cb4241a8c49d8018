//! WGAN-GP's gradient penalty (model/penalty.rs) against an independent f64 reference: its
//! value, the critic's input gradient, and its weight gradient by central finite differences
//! of the penalty itself, for a critic without a norm and one with layer norm; and the CUDA
//! backend's penalty step against the CPU's.

mod common;

use common::reference as r;
use common::{random, rel_err, to_f64};
use dcgan_train::backend::cpu::Cpu;
use dcgan_train::backend::{Backend, View, ViewMut};
use dcgan_train::model::net::{BackwardOrder, Net, NoObserver, Norm, StageSpec};
use dcgan_train::model::penalty::GradientPenalty;
use dcgan_train::ops::activation::Activation::{self, LeakyRelu};

const H: f64 = 1e-6;
const LAMBDA: f32 = 10.0;

const fn conv(c_in: usize, c_out: usize, k: usize, stride: usize, pad: usize, act: Activation) -> StageSpec {
    StageSpec::conv(c_in, c_out, k, stride, pad, Norm::None, act)
}
const fn conv_ln(c_in: usize, c_out: usize, k: usize, stride: usize, pad: usize) -> StageSpec {
    StageSpec::conv(c_in, c_out, k, stride, pad, Norm::Layer, LeakyRelu)
}

/// A small critic with every kind of stage of the real one: strided padded convolutions with
/// LeakyReLU, and a linear convolution down to one output per sample. Two input channels, so
/// that a sample's norm spans channels.
const CRITIC: [StageSpec; 3] =
    [conv(2, 4, 4, 2, 1, LeakyRelu), conv(4, 6, 4, 2, 1, LeakyRelu), conv(6, 1, 3, 1, 0, Activation::None)];
/// The same with layer norm as `--critic-norm layer` puts it (after every convolution but the
/// first and the last), twice in a row, so that one layer norm's adjoint travels through
/// another.
const CRITIC_LN: [StageSpec; 4] = [
    conv(2, 4, 4, 2, 1, LeakyRelu),
    conv_ln(4, 6, 4, 2, 1),
    conv_ln(6, 5, 3, 1, 1),
    conv(5, 1, 3, 1, 0, Activation::None),
];
/// Layer norm at the first stage and below a stage without one: the values' adjoint passes
/// through LeakyReLU alone between the two, and reaches a layer norm with no input adjoint
/// to pass on.
const CRITIC_LN_SPLIT: [StageSpec; 4] = [
    conv_ln(2, 4, 4, 2, 1),
    conv(4, 6, 4, 2, 1, LeakyRelu),
    conv_ln(6, 5, 3, 1, 1),
    conv(5, 1, 3, 1, 0, Activation::None),
];
/// The topmost layer norm at the first stage: the values' adjoint starts and ends there.
const CRITIC_LN_FIRST: [StageSpec; 3] =
    [conv_ln(2, 4, 4, 2, 1), conv(4, 6, 4, 2, 1, LeakyRelu), conv(6, 1, 3, 1, 0, Activation::None)];
const INPUT: (usize, usize, usize) = (2, 12, 12);
const BATCH: usize = 3;

/// The critic `specs` at `input`, its penalty run: (the critic, the penalty's [value, mean
/// norm]). Layer norm's gamma and beta are drawn away from their initial 1 and 0, so that a
/// term that drops either shows.
fn ours<B: Backend>(be: &B, specs: &[StageSpec], input: &[f32]) -> (Net<B>, Vec<f32>) {
    let mut net = Net::new(be, "C", specs, BATCH, INPUT, BackwardOrder::LayerByLayer, 11).unwrap();
    let mut values = vec![0.0; net.store.layout.param_len()];
    be.download(View::whole(&net.store.value), &mut values);
    for (k, t) in net.store.layout.params.iter().filter(|t| t.shape.len() == 1).enumerate() {
        let offset = if t.name.ends_with("weight") { 1.0 } else { 0.0 };
        let drawn = random(t.range.len(), 0.5, 40 + k as u64);
        values[t.range.clone()].iter_mut().zip(drawn).for_each(|(v, d)| *v = offset + d);
    }
    be.upload(&values, ViewMut::whole(&mut net.store.value));
    be.upload(input, ViewMut::whole(net.input_mut()));
    let mut gp = GradientPenalty::new(be, &net, LAMBDA).unwrap();
    assert!(gp.run(be, &mut net, false, &mut NoObserver));
    let mut out = vec![0.0; 2];
    be.download(View::whole(&gp.out), &mut out);
    (net, out)
}

#[test]
fn the_penalty_weight_gradient_matches_finite_differences_in_f64() {
    check_against_finite_differences(&CRITIC, 3 * 6);
}

#[test]
fn with_layer_norm_the_penalty_weight_gradient_matches_finite_differences_in_f64() {
    // Four weights and two layer norms' gamma and beta.
    check_against_finite_differences(&CRITIC_LN, 8 * 6);
}

#[test]
fn with_layer_norm_first_or_apart_the_penalty_weight_gradient_matches_finite_differences() {
    check_against_finite_differences(&CRITIC_LN_SPLIT, 8 * 6);
    check_against_finite_differences(&CRITIC_LN_FIRST, 5 * 6);
}

/// The reference's own input gradient through layer norm against finite differences of its
/// forward: the penalty test above leans on it.
#[test]
fn the_references_layer_norm_input_gradient_matches_finite_differences() {
    let (c, h, w) = INPUT;
    let input = to_f64(&random(c * BATCH * h * w, 1.0, 23));
    let (net, _) = ours(&Cpu, &CRITIC_LN, &random(c * BATCH * h * w, 1.0, 21));
    let params = to_f64(&net.store.value);
    let (_, g, _) = r::gradient_penalty(&CRITIC_LN, BATCH, INPUT, &params, &input, LAMBDA as f64);
    let mut outputs = |x: &[f64]| r::net_forward(&CRITIC_LN, BATCH, INPUT, &params, x).iter().sum::<f64>();
    for i in (0..input.len()).step_by(37) {
        let fd = r::central_difference(&mut outputs, &input, i, H);
        assert!((g[i] - fd).abs() < 1e-6 * fd.abs().max(1e-2), "input {i}: {} vs {fd}", g[i]);
    }
}

fn check_against_finite_differences(specs: &[StageSpec], coordinates: usize) {
    let (c, h, w) = INPUT;
    let input = random(c * BATCH * h * w, 1.0, 21);
    let (net, out) = ours(&Cpu, specs, &input);
    let params = to_f64(&net.store.value);
    let inputd = to_f64(&input);
    let (want, want_g, nearest_kink) = r::gradient_penalty(specs, BATCH, INPUT, &params, &inputd, LAMBDA as f64);
    // The differences below move one weight by H, so a conv output by at most H times the
    // largest value it multiplies (inputs in [-1, 1], activations below 2 here), and an
    // activation input by that times layer norm's gain (which `nearest_kink` divides out):
    // none may cross a kink, where the penalty has no derivative.
    assert!(nearest_kink > 10.0 * H, "an activation input is {nearest_kink:e} from its kink: pick other inputs");
    assert!((out[0] as f64 - want).abs() < 1e-4 * want.abs().max(1.0), "penalty {} vs {want}", out[0]);
    assert!(rel_err(&net.d_input().clone(), &want_g, 1e-9) < 1e-4, "the input gradient");
    assert!(want > 1e-2, "a penalty this small ({want}) would hide a wrong gradient");

    let grad = net.store.grad.clone();
    let penalty = |p: &[f64]| r::gradient_penalty(specs, BATCH, INPUT, p, &inputd, LAMBDA as f64).0;
    let checked = r::check_gradient_by_differences(&net.store.layout, &grad, &params, &mut |p| penalty(p), 6, H);
    assert_eq!(checked, coordinates);
}

#[test]
fn the_penalty_adds_to_gradients_already_there() {
    let (c, h, w) = INPUT;
    let input = random(c * BATCH * h * w, 1.0, 21);
    for specs in [&CRITIC[..], &CRITIC_LN[..], &CRITIC_LN_SPLIT[..]] {
        let (mut net, _) = ours(&Cpu, specs, &input);
        let once = net.store.grad.clone();
        // Anything already there is replaced by a run that does not accumulate.
        net.store.grad.fill(7.0);
        let mut gp = GradientPenalty::new(&Cpu, &net, LAMBDA).unwrap();
        gp.run(&Cpu, &mut net, false, &mut NoObserver);
        assert!(rel_err(&net.store.grad, &to_f64(&once), 1e-9) < 1e-6, "{} stages: a fresh run", specs.len());
        gp.run(&Cpu, &mut net, true, &mut NoObserver);
        let twice: Vec<f32> = once.iter().map(|v| 2.0 * v).collect();
        assert!(rel_err(&net.store.grad, &to_f64(&twice), 1e-9) < 1e-6, "{} stages: added", specs.len());
    }
}

#[cfg(feature = "cuda")]
#[path = "cuda_common/mod.rs"]
mod cuda_common;

#[cfg(feature = "cuda")]
#[test]
fn the_cuda_penalty_step_matches_the_cpu() {
    let (c, h, w) = INPUT;
    let input = random(c * BATCH * h * w, 1.0, 22);
    for specs in [&CRITIC[..], &CRITIC_LN[..], &CRITIC_LN_SPLIT[..]] {
        let (cpu_net, cpu_out) = ours(&Cpu, specs, &input);
        for cu in cuda_common::engines("penalty step") {
            let (net, out) = ours(&cu, specs, &input);
            let mut grad = vec![0.0; cpu_net.store.grad.len()];
            cu.download(View::whole(&net.store.grad), &mut grad);
            // Tensor by tensor: gamma's and beta's small gradients are held to their own scale.
            for t in &net.store.layout.params {
                let (ours, want) = (&grad[t.range.clone()], to_f64(&cpu_net.store.grad[t.range.clone()]));
                assert!(rel_err(ours, &want, 1e-9) < 1e-4, "{} stages: the gradient of {}", specs.len(), t.name);
            }
            let what = format!("{} stages: penalty and mean norm: {out:?} vs {cpu_out:?}", specs.len());
            assert!(rel_err(&out, &to_f64(&cpu_out), 1e-9) < 1e-4, "{what}");
        }
    }
}

/// What the penalty is for: 300 critic steps on Fashion-MNIST (batch 16) take the critic from
/// its initial gradient norm at the interpolates (~0.04: DCGAN's small initial weights) to
/// about 1. Loosely: the mean over the last 100 steps within a factor 2 of 1 (1.42 when
/// written; a penalty of the wrong sign or without effect drives it away or leaves it near 0).
#[test]
fn the_penalty_holds_the_critics_gradient_norm_near_one() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_dcgan-train"))
        .args(["--loss", "wgan-gp", "--batch-size", "16", "--max-steps", "300", "--eval-every", "0"])
        .args(["--progress", "none", "--threads", "2", "--out", out.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let norms: Vec<f32> = common::step_records(&out)
        .iter()
        .map(|r| match r.metrics.losses {
            dcgan_train::record::Losses::WganGp { grad_norm, .. } => grad_norm,
            other => panic!("a wgan-gp run logged {other:?}"),
        })
        .collect();
    assert_eq!(norms.len(), 300);
    assert!(norms[0] < 0.1, "the initial norm {} is not the small one expected", norms[0]);
    let late = norms[200..].iter().sum::<f32>() / 100.0;
    assert!((0.5..2.0).contains(&late), "the mean gradient norm over steps 201-300 is {late}");
}
