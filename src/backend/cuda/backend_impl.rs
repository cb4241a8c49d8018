//! `Backend` for `Cuda`: buffers and copies through the engine (GPU or emulator), every op
//! through its launcher in `src/ops/<family>/cuda.rs`.

use super::{Cuda, CudaBuf, Engine, dptr, dptr_mut};
use crate::backend::{Backend, Precision, View, ViewMut};
use crate::ops::activation::Activation;
use crate::ops::adam::AdamStep;
use crate::ops::batchnorm::BnGeom;
use crate::ops::conv::ConvGeom;
use crate::ops::layernorm::LnGeom;
use crate::ops::{activation, adam, batchnorm, conv, elementwise, layernorm, loss, penalty, wire};
use anyhow::Result;

fn check_len(what: &str, got: usize, want: usize) {
    assert_eq!(got, want, "{what}: {got} floats where {want} are needed");
}

impl Backend for Cuda {
    type Buf = CudaBuf;
    type Host = super::staging::CudaHost;

    fn describe(&self) -> String {
        let device = match &self.engine {
            Engine::Driver(d) => format!("cuda:{} {}", d.probe.ordinal, d.probe.name),
            Engine::Emulator(_) => "cuda-emulator (CPU)".into(),
        };
        match self.precision() {
            Precision::Fp32 => device,
            p => format!("{device}, {} convolutions", p.name()),
        }
    }
    fn alloc(&self, len: usize) -> Result<CudaBuf> {
        self.alloc_buf(len)
    }
    fn upload(&self, src: &[f32], dst: ViewMut<Self>) {
        check_len("upload", src.len(), dst.len);
        self.graph_boundary();
        let to = dptr_mut(&dst).0;
        match &self.engine {
            Engine::Driver(d) => d.upload(src, to),
            Engine::Emulator(_) => unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), to as *mut f32, src.len()) },
        }
    }
    fn download(&self, src: View<Self>, dst: &mut [f32]) {
        check_len("download", dst.len(), src.len);
        self.graph_boundary();
        let from = dptr(src).0;
        match &self.engine {
            Engine::Driver(d) => d.download(from, dst),
            Engine::Emulator(_) => unsafe {
                std::ptr::copy_nonoverlapping(from as *const f32, dst.as_mut_ptr(), dst.len())
            },
        }
    }
    fn copy(&self, src: View<Self>, dst: ViewMut<Self>) {
        check_len("copy", dst.len, src.len);
        if self.in_graph_step() {
            // A graph records kernels: the copy as one keeps the segment whole.
            return elementwise::cuda::copy(self, src, dst);
        }
        self.graph_boundary();
        let (from, to) = (dptr(src).0, dptr_mut(&dst).0);
        match &self.engine {
            Engine::Driver(d) => d.copy_dtod(from, to, src.len),
            Engine::Emulator(_) => unsafe { std::ptr::copy(from as *const f32, to as *mut f32, src.len) },
        }
    }
    fn synchronize(&self) {
        if let Err(e) = self.try_synchronize() {
            panic!("{e:#}");
        }
    }

    fn begin_step(&self, kind: u64) {
        self.begin_graph_step(kind);
    }
    fn end_step(&self) {
        self.end_graph_step();
    }

    fn alloc_host(&self, len: usize) -> Result<Self::Host> {
        self.host_buffer(len)
    }
    fn stage_out(&self, src: View<Self>, host: &mut Self::Host, at: usize) -> Result<crate::backend::StageWaiter> {
        self.stage_out_to(src, host, at)
    }
    fn stage_in(&self, host: &Self::Host, at: usize, dst: ViewMut<Self>) -> Result<()> {
        self.stage_in_from(host, at, dst)
    }
    fn prepare_conv(&self, g: &ConvGeom) -> Result<()> {
        Cuda::prepare_conv(self, g)
    }
    fn prepare_bn(&self, g: &BnGeom) -> Result<()> {
        Cuda::prepare_bn(self, g)
    }
    fn graph_stats(&self) -> Option<crate::backend::GraphStats> {
        Cuda::graph_stats(self)
    }
    fn peak_bytes(&self) -> Option<usize> {
        Some(Cuda::peak_bytes(self))
    }
    fn workspace_floats(&self, convs: &[ConvGeom], bns: &[BnGeom]) -> usize {
        let conv = convs.iter().map(|g| conv::cuda::workspace_floats(g, self.sm_count));
        let bn = bns.iter().map(|g| batchnorm::cuda::workspace_floats(g, self.sm_count));
        conv.chain(bn).max().unwrap_or(0)
    }
    fn free_device_bytes(&self) -> Option<u64> {
        Cuda::free_device_bytes(self)
    }

    fn axpy(&self, a: f32, x: View<Self>, y: ViewMut<Self>) {
        elementwise::cuda::axpy(self, a, x, y);
    }

    fn packs_wire(&self) -> bool {
        true
    }
    fn wire_onebit_quantize(
        &self,
        cols: View<Self>,
        v: View<Self>,
        res: ViewMut<Self>,
        out: ViewMut<Self>,
        sq: ViewMut<Self>,
    ) {
        wire::cuda::onebit_quantize(self, cols, v, res, out, sq);
    }
    fn wire_onebit_decode(&self, cols: View<Self>, enc: View<Self>, out: ViewMut<Self>) {
        wire::cuda::onebit_decode(self, cols, enc, out);
    }
    fn wire_bf16_encode(&self, x: View<Self>, out: ViewMut<Self>) {
        wire::cuda::bf16_encode(self, x, out);
    }
    fn wire_bf16_decode(&self, enc: View<Self>, out: ViewMut<Self>) {
        wire::cuda::bf16_decode(self, enc, out);
    }

    fn conv2d_forward(&self, g: &ConvGeom, x: View<Self>, w: View<Self>, y: ViewMut<Self>) {
        conv::cuda::forward(self, g, x, w, y);
    }
    fn conv2d_backward_data(&self, g: &ConvGeom, dy: View<Self>, w: View<Self>, dx: ViewMut<Self>) {
        conv::cuda::backward_data(self, g, dy, w, dx);
    }
    fn conv2d_backward_weight(&self, g: &ConvGeom, x: View<Self>, dy: View<Self>, dw: ViewMut<Self>, accumulate: bool) {
        conv::cuda::backward_weight(self, g, x, dy, dw, accumulate);
    }

    fn bn_forward_stats(&self, g: &BnGeom, x: View<Self>, stats: ViewMut<Self>) {
        batchnorm::cuda::forward_stats(self, g, x, stats);
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
        batchnorm::cuda::forward_apply(self, g, x, stats, stats_count, gamma, beta, act, y, saved, running);
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
        batchnorm::cuda::forward_eval(self, g, x, gamma, beta, running, act, y);
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
        batchnorm::cuda::backward_reduce(self, g, x, y, act, saved, dy, sums);
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
        batchnorm::cuda::backward_data(self, g, x, dz, saved, gamma, sums, sums_count, dx);
    }

    fn ln_normalize(&self, g: &LnGeom, x: View<Self>, n: ViewMut<Self>, stats: ViewMut<Self>) {
        layernorm::cuda::normalize(self, g, x, n, stats);
    }
    fn ln_affine(&self, g: &LnGeom, n: View<Self>, gamma_beta: View<Self>, with_beta: bool, y: ViewMut<Self>) {
        layernorm::cuda::affine(self, g, n, gamma_beta, with_beta, y);
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
        layernorm::cuda::backward_data(self, g, n, stats, gamma_beta, by_gamma, dy, dx);
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
        layernorm::cuda::param_grad(self, g, n, dy, with_beta, dgamma_beta, accumulate);
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
        layernorm::cuda::penalty_adjoint(self, g, n, stats, gamma_beta, ta, tn, dty, dy, da);
    }

    fn act_forward(&self, act: Activation, x: ViewMut<Self>) {
        activation::cuda::forward(self, act, x);
    }
    fn act_backward(&self, act: Activation, y: View<Self>, dy: ViewMut<Self>) {
        activation::cuda::backward(self, act, y, dy);
    }

    fn bce_with_logits(&self, logits: View<Self>, target: f32, dlogits: ViewMut<Self>, out: ViewMut<Self>) {
        loss::cuda::bce_with_logits(self, logits, target, dlogits, out);
    }
    fn softmax_xent(
        &self,
        logits: View<Self>,
        labels: View<Self>,
        classes: usize,
        dlogits: ViewMut<Self>,
        out: ViewMut<Self>,
    ) {
        loss::cuda::softmax_xent(self, logits, labels, classes, dlogits, out);
    }

    fn critic_mean(&self, outputs: View<Self>, sign: f32, doutputs: ViewMut<Self>, out: ViewMut<Self>) {
        penalty::cuda::critic_mean(self, outputs, sign, doutputs, out);
    }
    fn interpolate(&self, real: View<Self>, fake: View<Self>, channels: usize, eps: View<Self>, out: ViewMut<Self>) {
        penalty::cuda::interpolate(self, real, fake, channels, eps, out);
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
        penalty::cuda::gradient_penalty(self, g, channels, lambda, seed, norms, out);
    }

    fn adam(&self, h: &AdamStep, param: ViewMut<Self>, grad: View<Self>, m: ViewMut<Self>, v: ViewMut<Self>) {
        adam::cuda::step(self, h, param, grad, m, v);
    }
}
