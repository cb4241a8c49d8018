//! Slow, obvious f64 reference implementations of every op and of a whole network, written
//! independently of the crate's kernels (direct loops, no im2col, no GEMM). Tests compare the
//! crate's f32 results and gradients with these, and take finite differences through them.

#![allow(dead_code)]

use dcgan_train::model::net::{Norm, StageSpec, stage_geometry};
use dcgan_train::ops::activation::Activation;
use dcgan_train::ops::conv::ConvGeom;

/// Direct convolution: x [C_in,B,H,W], w [C_out,C_in,k,k] -> y [C_out,B,OH,OW].
pub fn conv(g: &ConvGeom, x: &[f64], w: &[f64]) -> Vec<f64> {
    let mut y = vec![0.0; g.y_len()];
    for co in 0..g.c_out {
        for b in 0..g.batch {
            for oh in 0..g.h_out {
                for ow in 0..g.w_out {
                    let mut acc = 0.0;
                    for ci in 0..g.c_in {
                        for ki in 0..g.k {
                            for kj in 0..g.k {
                                let ih = (oh * g.stride + ki) as isize - g.pad as isize;
                                let iw = (ow * g.stride + kj) as isize - g.pad as isize;
                                if ih < 0 || iw < 0 || ih >= g.h_in as isize || iw >= g.w_in as isize {
                                    continue;
                                }
                                acc += x[((ci * g.batch + b) * g.h_in + ih as usize) * g.w_in + iw as usize]
                                    * w[((co * g.c_in + ci) * g.k + ki) * g.k + kj];
                            }
                        }
                    }
                    y[((co * g.batch + b) * g.h_out + oh) * g.w_out + ow] = acc;
                }
            }
        }
    }
    y
}

/// Direct transposed convolution, written as PyTorch defines it (each input pixel scatters
/// its kernel-weighted value): x [C_in_T,B,h,w] with C_in_T = g.c_out, weight [C_in_T,
/// C_out_T,k,k], output [C_out_T = g.c_in, B, g.h_in, g.w_in].
pub fn conv_transpose(g: &ConvGeom, x: &[f64], w: &[f64]) -> Vec<f64> {
    let (cin_t, cout_t) = (g.c_out, g.c_in);
    let mut y = vec![0.0; g.x_len()];
    for ci in 0..cin_t {
        for b in 0..g.batch {
            for ih in 0..g.h_out {
                for iw in 0..g.w_out {
                    let xv = x[((ci * g.batch + b) * g.h_out + ih) * g.w_out + iw];
                    for co in 0..cout_t {
                        for ki in 0..g.k {
                            for kj in 0..g.k {
                                let oh = (ih * g.stride + ki) as isize - g.pad as isize;
                                let ow = (iw * g.stride + kj) as isize - g.pad as isize;
                                if oh < 0 || ow < 0 || oh >= g.h_in as isize || ow >= g.w_in as isize {
                                    continue;
                                }
                                y[((co * g.batch + b) * g.h_in + oh as usize) * g.w_in + ow as usize] +=
                                    xv * w[((ci * cout_t + co) * g.k + ki) * g.k + kj];
                            }
                        }
                    }
                }
            }
        }
    }
    y
}

/// Direct weight gradient: dw[co,ci,ki,kj] = sum over b, oh, ow of dy[co,b,oh,ow] * x[ci,b,ih,iw].
pub fn conv_weight_grad(g: &ConvGeom, x: &[f64], dy: &[f64]) -> Vec<f64> {
    let mut dw = vec![0.0; g.w_len()];
    for co in 0..g.c_out {
        for ci in 0..g.c_in {
            for ki in 0..g.k {
                for kj in 0..g.k {
                    let mut acc = 0.0;
                    for b in 0..g.batch {
                        for oh in 0..g.h_out {
                            for ow in 0..g.w_out {
                                let ih = (oh * g.stride + ki) as isize - g.pad as isize;
                                let iw = (ow * g.stride + kj) as isize - g.pad as isize;
                                if ih < 0 || iw < 0 || ih >= g.h_in as isize || iw >= g.w_in as isize {
                                    continue;
                                }
                                acc += dy[((co * g.batch + b) * g.h_out + oh) * g.w_out + ow]
                                    * x[((ci * g.batch + b) * g.h_in + ih as usize) * g.w_in + iw as usize];
                            }
                        }
                    }
                    dw[((co * g.c_in + ci) * g.k + ki) * g.k + kj] = acc;
                }
            }
        }
    }
    dw
}

pub fn act(a: Activation, x: f64) -> f64 {
    match a {
        Activation::None => x,
        Activation::Relu => x.max(0.0),
        Activation::LeakyRelu => {
            if x > 0.0 {
                x
            } else {
                0.2 * x
            }
        }
        Activation::Tanh => x.tanh(),
        Activation::Sigmoid => 1.0 / (1.0 + (-x).exp()),
    }
}

/// Training-mode batch norm over [C, count] with biased batch variance, then `a`.
pub fn batch_norm(x: &[f64], channels: usize, gamma: &[f64], beta: &[f64], a: Activation) -> Vec<f64> {
    let count = x.len() / channels;
    let mut y = vec![0.0; x.len()];
    for c in 0..channels {
        let xc = &x[c * count..][..count];
        let mean = xc.iter().sum::<f64>() / count as f64;
        let var = xc.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / count as f64;
        let inv = 1.0 / (var + 1e-5).sqrt();
        for i in 0..count {
            y[c * count + i] = act(a, gamma[c] * (xc[i] - mean) * inv + beta[c]);
        }
    }
    y
}

/// log(sigmoid(x)) without overflow for any x.
fn log_sigmoid(x: f64) -> f64 {
    if x >= 0.0 { -(-x).exp().ln_1p() } else { x - x.exp().ln_1p() }
}

/// Mean binary cross-entropy of sigmoid(logits) against `target`:
/// -(t log sigmoid(x) + (1-t) log(1 - sigmoid(x))), with 1 - sigmoid(x) = sigmoid(-x).
pub fn bce(logits: &[f64], target: f64) -> f64 {
    logits.iter().map(|&x| -(target * log_sigmoid(x) + (1.0 - target) * log_sigmoid(-x))).sum::<f64>()
        / logits.len() as f64
}

/// Mean softmax cross-entropy of logits [classes, B] (class c of sample i at c*B + i) against
/// `labels`, written as its definition -log(exp(x_label) / sum_c exp(x_c)) (no shift by the
/// largest logit: f64 holds exp of the logits tests use), and the accuracy: the share of
/// samples whose first largest logit is their label.
pub fn softmax_xent(logits: &[f64], labels: &[usize], classes: usize) -> (f64, f64) {
    let batch = labels.len();
    assert_eq!(logits.len(), classes * batch);
    let (mut loss, mut correct) = (0.0, 0);
    for (i, &label) in labels.iter().enumerate() {
        let x: Vec<f64> = (0..classes).map(|c| logits[c * batch + i]).collect();
        let z: f64 = x.iter().map(|v| v.exp()).sum();
        loss -= (x[label].exp() / z).ln();
        // The first class holding the largest value.
        let best = x.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        correct += usize::from(x.iter().position(|&v| v == best) == Some(label));
    }
    (loss / batch as f64, correct as f64 / batch as f64)
}

/// A network forward in training mode. `params` is the flat parameter vector in the crate's
/// layout order (per stage: weight, then a norm's gamma, beta).
pub fn net_forward(
    specs: &[StageSpec],
    batch: usize,
    input_shape: (usize, usize, usize),
    params: &[f64],
    input: &[f64],
) -> Vec<f64> {
    net_forward_stats(specs, batch, input_shape, params, input).0
}

/// `net_forward`, and each batch norm's batch statistics: per channel the mean and the
/// unbiased variance (what PyTorch's running statistics move towards), in stage order.
#[allow(clippy::type_complexity)]
pub fn net_forward_stats(
    specs: &[StageSpec],
    batch: usize,
    input_shape: (usize, usize, usize),
    params: &[f64],
    input: &[f64],
) -> (Vec<f64>, Vec<(Vec<f64>, Vec<f64>)>) {
    let mut stats = Vec::new();
    let geoms = stage_geometry(specs, batch, input_shape).unwrap();
    let mut x = input.to_vec();
    let mut off = 0;
    for (s, g) in specs.iter().zip(&geoms) {
        let wlen = g.w_len();
        let w = &params[off..off + wlen];
        off += wlen;
        let y = if s.transposed { conv_transpose(g, &x, w) } else { conv(g, &x, w) };
        x = if s.norm == Norm::Batch {
            let (gamma, beta) = (&params[off..off + s.c_out], &params[off + s.c_out..off + 2 * s.c_out]);
            off += 2 * s.c_out;
            let count = y.len() / s.c_out;
            let (mean, var): (Vec<f64>, Vec<f64>) = y
                .chunks_exact(count)
                .map(|c| {
                    let m = c.iter().sum::<f64>() / count as f64;
                    (m, c.iter().map(|v| (v - m) * (v - m)).sum::<f64>() / (count - 1) as f64)
                })
                .unzip();
            stats.push((mean, var));
            batch_norm(&y, s.c_out, gamma, beta, s.act)
        } else if s.norm == Norm::Layer {
            let (gamma, beta) = (&params[off..off + s.c_out], &params[off + s.c_out..off + 2 * s.c_out]);
            off += 2 * s.c_out;
            layer_norm(&y, s.c_out, batch, gamma, beta)[0].iter().map(|&v| act(s.act, v)).collect()
        } else {
            y.iter().map(|&v| act(s.act, v)).collect()
        };
    }
    assert_eq!(off, params.len());
    (x, stats)
}

/// Central finite difference of f at x along coordinate i.
pub fn central_difference(f: &mut dyn FnMut(&[f64]) -> f64, x: &[f64], i: usize, h: f64) -> f64 {
    let mut xp = x.to_vec();
    xp[i] += h;
    let fp = f(&xp);
    xp[i] -= 2.0 * h;
    let fm = f(&xp);
    (fp - fm) / (2.0 * h)
}

/// Layer norm of each sample of x `[C, B, P]` over its C * P values, eps 1e-5, then
/// gamma_c n + beta_c: (the output, n, 1/std per sample).
pub fn layer_norm(x: &[f64], channels: usize, batch: usize, gamma: &[f64], beta: &[f64]) -> [Vec<f64>; 3] {
    let p = x.len() / (channels * batch);
    let at = |c: usize, b: usize, j: usize| (c * batch + b) * p + j;
    let (mut y, mut n, mut rstd) = (vec![0.0; x.len()], vec![0.0; x.len()], vec![0.0; batch]);
    for (b, r) in rstd.iter_mut().enumerate() {
        let idx: Vec<usize> = (0..channels).flat_map(|c| (0..p).map(move |j| at(c, b, j))).collect();
        let mean = idx.iter().map(|&i| x[i]).sum::<f64>() / idx.len() as f64;
        let var = idx.iter().map(|&i| (x[i] - mean).powi(2)).sum::<f64>() / idx.len() as f64;
        *r = 1.0 / (var + 1e-5).sqrt();
        for &i in &idx {
            n[i] = (x[i] - mean) * *r;
            y[i] = gamma[i / (batch * p)] * n[i] + beta[i / (batch * p)];
        }
    }
    [y, n, rstd]
}

/// The input gradient of `layer_norm` from dy: per sample r (v - mean v - n mean(n v)) with
/// v = gamma_c dy.
pub fn layer_norm_backward(n: &[f64], rstd: &[f64], channels: usize, gamma: &[f64], dy: &[f64]) -> Vec<f64> {
    let batch = rstd.len();
    let p = n.len() / (channels * batch);
    let mut dx = vec![0.0; n.len()];
    for (b, &r) in rstd.iter().enumerate() {
        let idx: Vec<usize> = (0..channels).flat_map(|c| (0..p).map(move |j| (c * batch + b) * p + j)).collect();
        let v = |i: usize| gamma[i / (batch * p)] * dy[i];
        let mean_v = idx.iter().map(|&i| v(i)).sum::<f64>() / idx.len() as f64;
        let nv = idx.iter().map(|&i| n[i] * v(i)).sum::<f64>() / idx.len() as f64;
        for &i in &idx {
            dx[i] = r * (v(i) - mean_v - n[i] * nv);
        }
    }
    dx
}

/// The slope of a piecewise-linear activation at its input v.
fn slope(a: Activation, v: f64) -> f64 {
    match a {
        Activation::LeakyRelu if v <= 0.0 => 0.2,
        Activation::Relu if v <= 0.0 => 0.0,
        Activation::LeakyRelu | Activation::Relu | Activation::None => 1.0,
        a => panic!("{a:?} is not piecewise linear"),
    }
}

/// WGAN-GP's penalty of a critic of convolutions, optional layer norm (weight, then gamma and
/// beta in `params`) and piecewise-linear activations at `input`: lambda / B sum_b
/// (||grad_x D(x)_b|| - 1)^2, the input gradient taken by the chain rule in f64 (a transposed
/// convolution is the convolution's data gradient). Returns (penalty, the input gradient, the
/// smallest |activation input| of a kinked activation, divided by what layer norm multiplies
/// a move of its input by where it lies before the activation).
pub fn gradient_penalty(
    specs: &[StageSpec],
    batch: usize,
    input_shape: (usize, usize, usize),
    params: &[f64],
    input: &[f64],
    lambda: f64,
) -> (f64, Vec<f64>, f64) {
    let geoms = stage_geometry(specs, batch, input_shape).unwrap();
    let mut x = input.to_vec();
    // Per stage: the activation's input, its weight, and with layer norm (n, 1/std, gamma).
    type Kept<'a> = (Vec<f64>, &'a [f64], Option<[Vec<f64>; 3]>);
    let mut kept: Vec<Kept> = Vec::new();
    let mut off = 0;
    let mut nearest_kink = f64::INFINITY;
    for (s, g) in specs.iter().zip(&geoms) {
        assert!(s.norm != Norm::Batch && !s.transposed, "a critic of plain convolutions");
        let w = &params[off..off + g.w_len()];
        off += g.w_len();
        let mut z = conv(g, &x, w);
        let mut ln = None;
        // What a move of the conv output becomes at the activation: layer norm multiplies it
        // by up to 1/std |gamma| of its sample.
        let mut gain = vec![1.0; batch];
        if s.norm == Norm::Layer {
            let (gamma, beta) = (&params[off..off + s.c_out], &params[off + s.c_out..off + 2 * s.c_out]);
            off += 2 * s.c_out;
            let [y, n, rstd] = layer_norm(&z, s.c_out, batch, gamma, beta);
            let largest = gamma.iter().fold(0.0f64, |m, v| m.max(v.abs()));
            gain = rstd.iter().map(|r| r * largest).collect();
            z = y;
            ln = Some([n, rstd, gamma.to_vec()]);
        }
        if s.act != Activation::None {
            let p = z.len() / (s.c_out * batch);
            let gained = z.iter().enumerate().map(|(i, v)| v.abs() / gain[(i / p) % batch].max(1.0));
            nearest_kink = gained.fold(nearest_kink, f64::min);
        }
        x = z.iter().map(|&v| act(s.act, v)).collect();
        kept.push((z, w, ln));
    }
    assert_eq!(off, params.len());
    // Backward from one per sample: every sample's own gradient of its output.
    let mut d = vec![1.0; x.len()];
    for i in (0..specs.len()).rev() {
        let (z, w, ln) = &kept[i];
        let mut delta: Vec<f64> = d.iter().zip(z).map(|(d, &v)| d * slope(specs[i].act, v)).collect();
        if let Some([n, rstd, gamma]) = ln {
            delta = layer_norm_backward(n, rstd, specs[i].c_out, gamma, &delta);
        }
        d = conv_transpose(&geoms[i], &delta, w);
    }
    let (c, h, w) = input_shape;
    let per_channel = h * w;
    let mut penalty = 0.0;
    for b in 0..batch {
        let sq: f64 = (0..c)
            .map(|ch| d[(ch * batch + b) * per_channel..][..per_channel].iter().map(|v| v * v).sum::<f64>())
            .sum();
        penalty += (sq.sqrt() - 1.0).powi(2);
    }
    (lambda * penalty / batch as f64, d, nearest_kink)
}

/// Every parameter tensor of `layout`'s gradient `grad` at `picks` coordinates spread over
/// it, against central differences (step `h`) of `loss` at `params`: relative error under
/// 1e-3 (of the difference, or of 1e-4 where it is smaller). Returns the coordinates checked.
pub fn check_gradient_by_differences(
    layout: &dcgan_train::nn::params::ParamLayout,
    grad: &[f32],
    params: &[f64],
    loss: &mut dyn FnMut(&[f64]) -> f64,
    picks: usize,
    h: f64,
) -> usize {
    let mut checked = 0;
    for t in &layout.params {
        for k in 0..picks {
            let j = t.range.start + (k * 7919) % t.range.len();
            let fd = central_difference(loss, params, j, h);
            let scale = fd.abs().max(1e-4);
            assert!(
                (grad[j] as f64 - fd).abs() / scale < 1e-3,
                "{} [{}]: analytic {} vs finite difference {fd}",
                t.name,
                j - t.range.start,
                grad[j]
            );
            checked += 1;
        }
    }
    checked
}
