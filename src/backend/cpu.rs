//! The CPU backend: host vectors and the ops' CPU sides, threaded with rayon (whose helpers
//! the ops keep spinning between them: see ops/cpu_helpers.rs).
//! It is the reference every other backend is tested against.

use super::{Backend, DeviceBuf, StageWaiter, View, ViewMut};
use crate::ops::activation::{self, Activation};
use crate::ops::adam::{self, AdamStep};
use crate::ops::batchnorm::{self, BnGeom};
use crate::ops::conv::{self, ConvGeom};
use crate::ops::cpu_helpers::keep_awake;
use crate::ops::layernorm::{self, LnGeom};
use crate::ops::{elementwise, loss, penalty, wire};
use anyhow::Result;

#[derive(Clone, Debug, Default)]
pub struct Cpu;

impl DeviceBuf for Vec<f32> {
    fn len(&self) -> usize {
        Vec::len(self)
    }
}

fn s<'a>(v: View<'a, Cpu>) -> &'a [f32] {
    &v.buf[v.off..v.off + v.len]
}

fn sm<'a>(v: ViewMut<'a, Cpu>) -> &'a mut [f32] {
    &mut v.buf[v.off..v.off + v.len]
}

impl Backend for Cpu {
    type Buf = Vec<f32>;
    type Host = Vec<f32>;

    fn describe(&self) -> String {
        format!("cpu ({} threads)", rayon::current_num_threads())
    }
    fn alloc(&self, len: usize) -> Result<Vec<f32>> {
        #[cfg(test)]
        allocated::add(len);
        Ok(vec![0.0; len])
    }
    fn upload(&self, src: &[f32], dst: ViewMut<Self>) {
        sm(dst).copy_from_slice(src);
    }
    fn download(&self, src: View<Self>, dst: &mut [f32]) {
        dst.copy_from_slice(s(src));
    }
    fn copy(&self, src: View<Self>, dst: ViewMut<Self>) {
        sm(dst).copy_from_slice(s(src));
    }
    fn synchronize(&self) {}

    fn workspace_floats(&self, convs: &[ConvGeom], _bns: &[BnGeom]) -> usize {
        convs.iter().map(conv::cpu::scratch_floats).max().unwrap_or(0)
    }
    fn alloc_host(&self, len: usize) -> Result<Vec<f32>> {
        Ok(vec![0.0; len])
    }
    fn stage_out(&self, src: View<Self>, host: &mut Vec<f32>, at: usize) -> Result<StageWaiter> {
        host[at..at + src.len].copy_from_slice(s(src));
        Ok(std::sync::Arc::new(|| {}))
    }
    fn stage_in(&self, host: &Vec<f32>, at: usize, dst: ViewMut<Self>) -> Result<()> {
        let n = dst.len;
        assert!(at + n <= host.len(), "staging {n} floats at {at} from {}", host.len());
        // Only host[at..at + n] may be referenced: the comm thread can still be writing the
        // bucket's later fragments (`as_ptr` makes no reference to the whole buffer).
        let src = unsafe { std::slice::from_raw_parts(host.as_ptr().add(at), n) };
        sm(dst).copy_from_slice(src);
        Ok(())
    }

    fn axpy(&self, a: f32, x: View<Self>, y: ViewMut<Self>) {
        elementwise::cpu::axpy(a, s(x), sm(y));
    }

    fn wire_onebit_quantize(
        &self,
        cols: View<Self>,
        v: View<Self>,
        res: ViewMut<Self>,
        out: ViewMut<Self>,
        sq: ViewMut<Self>,
    ) {
        wire::cpu::onebit_quantize(s(cols), s(v), sm(res), sm(out), sm(sq));
    }
    fn wire_onebit_decode(&self, cols: View<Self>, enc: View<Self>, out: ViewMut<Self>) {
        wire::cpu::onebit_decode(s(cols), s(enc), sm(out));
    }
    fn wire_bf16_encode(&self, x: View<Self>, out: ViewMut<Self>) {
        wire::cpu::bf16_encode(s(x), sm(out));
    }
    fn wire_bf16_decode(&self, enc: View<Self>, out: ViewMut<Self>) {
        wire::cpu::bf16_decode(s(enc), sm(out));
    }

    fn conv2d_forward(&self, g: &ConvGeom, x: View<Self>, w: View<Self>, y: ViewMut<Self>) {
        keep_awake();
        conv::cpu::forward(g, s(x), s(w), sm(y));
    }
    fn conv2d_backward_data(&self, g: &ConvGeom, dy: View<Self>, w: View<Self>, dx: ViewMut<Self>) {
        keep_awake();
        conv::cpu::backward_data(g, s(dy), s(w), sm(dx));
    }
    fn conv2d_backward_weight(&self, g: &ConvGeom, x: View<Self>, dy: View<Self>, dw: ViewMut<Self>, accumulate: bool) {
        keep_awake();
        conv::cpu::backward_weight(g, s(x), s(dy), sm(dw), accumulate);
    }

    fn bn_forward_stats(&self, g: &BnGeom, x: View<Self>, stats: ViewMut<Self>) {
        keep_awake();
        batchnorm::cpu::forward_stats(g, s(x), sm(stats));
    }
    fn bn_forward_apply(
        &self,
        g: &BnGeom,
        x: View<Self>,
        stats: View<Self>,
        stats_count: f64,
        gamma: View<Self>,
        beta: View<Self>,
        act: Activation,
        y: ViewMut<Self>,
        saved: ViewMut<Self>,
        running: ViewMut<Self>,
    ) {
        batchnorm::cpu::forward_apply(
            g,
            s(x),
            s(stats),
            stats_count,
            s(gamma),
            s(beta),
            act,
            sm(y),
            sm(saved),
            sm(running),
        );
    }
    fn bn_forward_eval(
        &self,
        g: &BnGeom,
        x: View<Self>,
        gamma: View<Self>,
        beta: View<Self>,
        running: View<Self>,
        act: Activation,
        y: ViewMut<Self>,
    ) {
        batchnorm::cpu::forward_eval(g, s(x), s(gamma), s(beta), s(running), act, sm(y));
    }
    fn bn_backward_reduce(
        &self,
        g: &BnGeom,
        x: View<Self>,
        y: View<Self>,
        act: Activation,
        saved: View<Self>,
        dy: ViewMut<Self>,
        sums: ViewMut<Self>,
    ) {
        keep_awake();
        batchnorm::cpu::backward_reduce(g, s(x), s(y), act, s(saved), sm(dy), sm(sums));
    }
    fn bn_backward_data(
        &self,
        g: &BnGeom,
        x: View<Self>,
        dz: View<Self>,
        saved: View<Self>,
        gamma: View<Self>,
        sums: View<Self>,
        sums_count: f64,
        dx: ViewMut<Self>,
    ) {
        batchnorm::cpu::backward_data(g, s(x), s(dz), s(saved), s(gamma), s(sums), sums_count, sm(dx));
    }

    fn ln_normalize(&self, g: &LnGeom, x: View<Self>, n: ViewMut<Self>, stats: ViewMut<Self>) {
        keep_awake();
        layernorm::cpu::normalize(g, s(x), sm(n), sm(stats));
    }
    fn ln_affine(&self, g: &LnGeom, n: View<Self>, gamma_beta: View<Self>, with_beta: bool, y: ViewMut<Self>) {
        keep_awake();
        layernorm::cpu::affine(g, s(n), s(gamma_beta), with_beta, sm(y));
    }
    fn ln_backward_data(
        &self,
        g: &LnGeom,
        n: View<Self>,
        stats: View<Self>,
        gamma_beta: View<Self>,
        by_gamma: bool,
        dy: View<Self>,
        dx: ViewMut<Self>,
    ) {
        keep_awake();
        layernorm::cpu::backward_data(g, s(n), s(stats), s(gamma_beta), by_gamma, s(dy), sm(dx));
    }
    fn ln_param_grad(
        &self,
        g: &LnGeom,
        n: View<Self>,
        dy: View<Self>,
        with_beta: bool,
        dgamma_beta: ViewMut<Self>,
        accumulate: bool,
    ) {
        keep_awake();
        layernorm::cpu::param_grad(g, s(n), s(dy), with_beta, sm(dgamma_beta), accumulate);
    }
    fn ln_penalty_adjoint(
        &self,
        g: &LnGeom,
        n: View<Self>,
        stats: View<Self>,
        gamma_beta: View<Self>,
        ta: View<Self>,
        tn: View<Self>,
        dty: View<Self>,
        dy: Option<View<Self>>,
        da: ViewMut<Self>,
    ) {
        keep_awake();
        let (n, st, gb, ta, tn, dty) = (s(n), s(stats), s(gamma_beta), s(ta), s(tn), s(dty));
        layernorm::cpu::penalty_adjoint(g, n, st, gb, ta, tn, dty, dy.map(s), sm(da));
    }
    fn act_forward(&self, act: Activation, x: ViewMut<Self>) {
        keep_awake();
        activation::cpu::forward(act, sm(x));
    }
    fn act_backward(&self, act: Activation, y: View<Self>, dy: ViewMut<Self>) {
        keep_awake();
        activation::cpu::backward(act, s(y), sm(dy));
    }

    fn bce_with_logits(&self, logits: View<Self>, target: f32, dlogits: ViewMut<Self>, out: ViewMut<Self>) {
        loss::cpu::bce_with_logits(s(logits), target, sm(dlogits), sm(out));
    }
    fn softmax_xent(
        &self,
        logits: View<Self>,
        labels: View<Self>,
        classes: usize,
        dlogits: ViewMut<Self>,
        out: ViewMut<Self>,
    ) {
        loss::cpu::softmax_xent(s(logits), s(labels), classes, sm(dlogits), sm(out));
    }

    fn critic_mean(&self, outputs: View<Self>, sign: f32, doutputs: ViewMut<Self>, out: ViewMut<Self>) {
        penalty::cpu::critic_mean(s(outputs), sign, sm(doutputs), sm(out));
    }
    fn interpolate(&self, real: View<Self>, fake: View<Self>, channels: usize, eps: View<Self>, out: ViewMut<Self>) {
        keep_awake();
        penalty::cpu::interpolate(s(real), s(fake), channels, s(eps), sm(out));
    }
    fn gradient_penalty(
        &self,
        g: View<Self>,
        channels: usize,
        lambda: f32,
        seed: ViewMut<Self>,
        norms: ViewMut<Self>,
        out: ViewMut<Self>,
    ) {
        keep_awake();
        penalty::cpu::gradient_penalty(s(g), channels, lambda, sm(seed), sm(norms), sm(out));
    }

    fn adam(&self, h: &AdamStep, param: ViewMut<Self>, grad: View<Self>, m: ViewMut<Self>, v: ViewMut<Self>) {
        keep_awake();
        adam::cpu::step(h, sm(param), s(grad), sm(m), sm(v));
    }
}

/// For the tests of memory plans: the floats this thread has had allocated through `alloc`.
#[cfg(test)]
pub mod allocated {
    use std::cell::Cell;

    thread_local! {
        static FLOATS: Cell<usize> = const { Cell::new(0) };
    }

    pub(super) fn add(n: usize) {
        FLOATS.with(|f| f.set(f.get() + n));
    }

    /// The floats allocated on this thread so far.
    pub fn floats() -> usize {
        FLOATS.with(Cell::get)
    }
}
