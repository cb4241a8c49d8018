//! One stage of a network: a convolution, then batch norm with a fused activation, layer norm
//! and an activation, or an activation alone. The stage owns its activations and their
//! gradients, allocated once.

use super::BnSync;
use super::batchnorm::BatchNormLayer;
use super::conv::ConvLayer;
use super::layernorm::LayerNormLayer;
use super::params::ParamStore;
use crate::backend::{Backend, View, ViewMut};
use crate::ops::activation::Activation;
use anyhow::{Result, ensure};
use std::ops::Range;

pub struct Stage<B: Backend> {
    /// e.g. "G.1 convT(100->256) bn relu"; also the trace label.
    pub label: &'static str,
    pub conv: ConvLayer,
    pub bn: Option<BatchNormLayer<B>>,
    /// Layer norm (never with batch norm): the activation follows it, in place.
    pub ln: Option<LayerNormLayer<B>>,
    /// The activation: fused into batch norm, applied in place to layer norm's output, or to
    /// the conv output when there is no norm.
    pub act: Activation,
    /// This stage's parameters (weight, then gamma and beta) in the store: one gradient group.
    pub group: Range<usize>,
    /// `[C_out, B, OH, OW]`: the conv output (activated in place when there is no norm).
    conv_out: B::Buf,
    /// `[C_out, B, OH, OW]`: act(norm(conv_out)); only with a norm.
    norm_out: Option<B::Buf>,
    /// `[C_out, B, OH, OW]`: the gradient of the stage output, turned in place into the
    /// gradient before the activation.
    d_out: B::Buf,
    /// `[C_out, B, OH, OW]`: the gradient of conv_out; only with a norm (else d_out is it).
    d_conv_out: Option<B::Buf>,
}

/// What a stage's forward leaves for its backward, kept aside for one micro-batch.
pub struct StageSaved<B: Backend> {
    /// [C_out, B, OH, OW]
    conv_out: B::Buf,
    /// [C_out, B, OH, OW], with batch norm.
    bn_out: Option<B::Buf>,
    /// [2 C_out]: mean and 1/std, with batch norm.
    bn_stats: Option<B::Buf>,
}

/// The floats `Stage::new_saved` allocates for an output of `output_len` floats and
/// `channels` batch-norm channels (None: no batch norm).
pub fn saved_floats(output_len: usize, bn_channels: Option<usize>) -> usize {
    bn_channels.map_or(output_len, |c| 2 * output_len + 2 * c)
}

/// The floats `Stage::new` allocates for an output of `output_len` floats (the norm's own
/// buffers aside): the conv output and its gradient, and with a norm the normalized output and
/// the gradient at the conv output.
pub fn buffer_floats(output_len: usize, with_norm: bool) -> usize {
    if with_norm { 4 * output_len } else { 2 * output_len }
}

impl<B: Backend> Stage<B> {
    pub fn new(
        be: &B,
        label: &'static str,
        conv: ConvLayer,
        norm: (Option<BatchNormLayer<B>>, Option<LayerNormLayer<B>>),
        act: Activation,
        group: Range<usize>,
    ) -> Result<Self> {
        let n = conv.output_len();
        let (bn, ln) = norm;
        ensure!(bn.is_none() || ln.is_none(), "{label}: batch norm and layer norm in one stage");
        let with_norm = bn.is_some() || ln.is_some();
        Ok(Stage {
            label,
            conv,
            bn,
            ln,
            act,
            group,
            conv_out: be.alloc(n)?,
            norm_out: if with_norm { Some(be.alloc(n)?) } else { None },
            d_out: be.alloc(n)?,
            d_conv_out: if with_norm { Some(be.alloc(n)?) } else { None },
        })
    }

    /// Buffers shaped as what this stage's forward leaves for its backward: the conv output,
    /// the batch-norm output and the batch-norm statistics.
    pub fn new_saved(&self, be: &B) -> Result<StageSaved<B>> {
        // Only the generator's forwards are put aside, and it has no layer norm.
        ensure!(self.ln.is_none(), "{}: a micro-batch's forward keeps no layer-norm statistics", self.label);
        let n = self.conv.output_len();
        Ok(StageSaved {
            conv_out: be.alloc(n)?,
            bn_out: if self.norm_out.is_some() { Some(be.alloc(n)?) } else { None },
            bn_stats: match &self.bn {
                Some(bn) => Some(be.alloc(2 * bn.geom.channels)?),
                None => None,
            },
        })
    }

    /// Exchange what the last forward left for backward with `saved` (no copy): a micro-batch's
    /// forward is put aside and taken back for its backward.
    pub fn swap_saved(&mut self, saved: &mut StageSaved<B>) {
        std::mem::swap(&mut self.conv_out, &mut saved.conv_out);
        if let (Some(mine), Some(theirs)) = (&mut self.norm_out, &mut saved.bn_out) {
            std::mem::swap(mine, theirs);
        }
        if let (Some(bn), Some(stats)) = (&mut self.bn, &mut saved.bn_stats) {
            bn.swap_saved(stats);
        }
    }

    /// The stage's output, [C_out, B, OH, OW].
    pub fn output(&self) -> &B::Buf {
        self.norm_out.as_ref().unwrap_or(&self.conv_out)
    }
    /// Where the gradient of the output is written before `backward_pre`.
    pub fn d_output_mut(&mut self) -> &mut B::Buf {
        &mut self.d_out
    }
    /// The gradient of the conv output, valid after `backward_pre`.
    fn conv_grad(&self) -> &B::Buf {
        self.d_conv_out.as_ref().unwrap_or(&self.d_out)
    }

    pub fn forward(
        &mut self,
        be: &B,
        p: &mut ParamStore<B>,
        x: View<B>,
        train: bool,
        sync: Option<&mut dyn BnSync<B>>,
    ) {
        self.conv.forward(be, p, x, ViewMut::whole(&mut self.conv_out));
        match (&mut self.bn, &mut self.ln, &mut self.norm_out) {
            (Some(bn), _, Some(out)) => {
                if train {
                    bn.forward_train(be, p, View::whole(&self.conv_out), ViewMut::whole(out), sync);
                } else {
                    bn.forward_eval(be, p, View::whole(&self.conv_out), ViewMut::whole(out));
                }
            }
            (_, Some(ln), Some(out)) => {
                ln.forward(be, p, View::whole(&self.conv_out), ViewMut::whole(out));
                be.act_forward(self.act, ViewMut::whole(out));
            }
            _ => be.act_forward(self.act, ViewMut::whole(&mut self.conv_out)),
        }
    }

    /// From the output gradient to the conv-output gradient: activation and norm backward (the
    /// output gradient becomes the gradient before the activation, in place). The norm's
    /// parameter gradients go to the store when `param_grads` is Some(accumulate).
    pub fn backward_pre(
        &mut self,
        be: &B,
        p: &mut ParamStore<B>,
        param_grads: Option<bool>,
        sync: Option<&mut dyn BnSync<B>>,
    ) {
        match (&mut self.bn, &self.norm_out, &mut self.d_conv_out) {
            (Some(bn), Some(out), Some(d_conv)) => bn.backward(
                be,
                p,
                View::whole(&self.conv_out),
                View::whole(out),
                ViewMut::whole(&mut self.d_out),
                ViewMut::whole(d_conv),
                param_grads,
                sync,
            ),
            (None, Some(out), Some(d_conv)) => {
                let ln = self.ln.as_ref().expect("a stage with a norm output has batch norm or layer norm");
                be.act_backward(self.act, View::whole(out), ViewMut::whole(&mut self.d_out));
                ln.backward(be, p, View::whole(&self.d_out), ViewMut::whole(d_conv), param_grads);
            }
            _ => be.act_backward(self.act, View::whole(&self.conv_out), ViewMut::whole(&mut self.d_out)),
        }
    }

    /// The input gradient dx [C_in, B, H, W], after `backward_pre`.
    pub fn backward_data(&self, be: &B, p: &ParamStore<B>, dx: ViewMut<B>) {
        self.conv.backward_data(be, p, View::whole(self.conv_grad()), dx);
    }

    /// The gradient penalty's tangent through this stage (WGAN-GP; model/penalty.rs): v_out =
    /// m * conv(v_in) without a norm, where m is the activation's slope at the last forward's
    /// inputs, read from its output as backward reads it (piecewise-linear activations keep
    /// their sign); with layer norm, ta = conv(v_in), tn = J ta and v_out = m * gamma tn, ta
    /// and tn `[C_out, B, OH, OW]` kept in `ln_tangent` for the penalty's adjoint.
    pub fn penalty_forward(
        &self,
        be: &B,
        p: &ParamStore<B>,
        v_in: View<B>,
        ln_tangent: Option<(&mut B::Buf, &mut B::Buf)>,
        mut v_out: ViewMut<B>,
    ) {
        assert!(self.bn.is_none(), "{}: the gradient penalty's stream needs a stage without batch norm", self.label);
        match (&self.ln, &self.norm_out, ln_tangent) {
            (Some(ln), Some(out), Some((ta, tn))) => {
                self.conv.forward(be, p, v_in, ViewMut::whole(ta));
                let (norm, stats, gb) = (View::whole(&ln.norm), View::whole(&ln.stats), ln.gamma_beta(p));
                be.ln_backward_data(&ln.geom, norm, stats, gb, false, View::whole(ta), ViewMut::whole(tn));
                be.ln_affine(&ln.geom, View::whole(tn), gb, false, v_out.rb());
                be.act_backward(self.act, View::whole(out), v_out);
            }
            (None, None, None) => {
                self.conv.forward(be, p, v_in, v_out.rb());
                be.act_backward(self.act, View::whole(&self.conv_out), v_out);
            }
            _ => panic!("{}: the penalty keeps a tangent for exactly the layer-norm stages", self.label),
        }
    }

    /// The gradient penalty's adjoint of the values at this stage's conv output (model/penalty.rs),
    /// after `penalty_forward` and the backward from ones that left the tangent's adjoint in
    /// this stage. `d_out` is the values' adjoint at the stage output (None: zero; turned in
    /// place into the adjoint before the activation). Without a norm the result is that
    /// `d_out`; with layer norm it goes to `da`, and gamma's and beta's penalty gradients to
    /// the store (added to it when `accumulate`).
    #[allow(clippy::too_many_arguments)] // the stage's inputs, two outputs and the choice
    pub fn penalty_adjoint(
        &self,
        be: &B,
        p: &mut ParamStore<B>,
        d_out: Option<&mut B::Buf>,
        ln_tangent: Option<(&B::Buf, &B::Buf)>,
        da: Option<&mut B::Buf>,
        accumulate: bool,
    ) {
        match (&self.ln, &self.norm_out, ln_tangent, da) {
            (Some(ln), Some(out), Some((ta, tn)), Some(da)) => {
                let mut d_out = d_out;
                if let Some(d) = d_out.as_deref_mut() {
                    be.act_backward(self.act, View::whole(out), ViewMut::whole(d));
                }
                let dgb = ln.gamma_beta.clone();
                // gamma's term from the tangent (no beta in a tangent), then the values'.
                be.ln_param_grad(
                    &ln.geom,
                    View::whole(tn),
                    View::whole(&self.d_out),
                    false,
                    p.grad_mut(&dgb),
                    accumulate,
                );
                if let Some(d) = d_out.as_deref() {
                    be.ln_param_grad(&ln.geom, View::whole(&ln.norm), View::whole(d), true, p.grad_mut(&dgb), true);
                }
                let (norm, stats, gb) = (View::whole(&ln.norm), View::whole(&ln.stats), ln.gamma_beta(p));
                let (ta, tn, dty) = (View::whole(ta), View::whole(tn), View::whole(&self.d_out));
                let dy = d_out.map(|d| View::whole(&*d));
                be.ln_penalty_adjoint(&ln.geom, norm, stats, gb, ta, tn, dty, dy, ViewMut::whole(da));
            }
            (None, None, None, None) => {
                let d = d_out.expect("a stage without a norm gets its values' adjoint");
                be.act_backward(self.act, View::whole(&self.conv_out), ViewMut::whole(d));
            }
            _ => panic!("{}: the penalty's adjoint takes a tangent and an output for layer norm only", self.label),
        }
    }

    /// The weight gradient from this stage's input x, after `backward_pre`.
    pub fn backward_weight(&self, be: &B, p: &mut ParamStore<B>, x: View<B>, accumulate: bool) {
        self.conv.backward_weight(be, p, x, View::whole(self.conv_grad()), accumulate);
    }
}
