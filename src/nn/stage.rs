//! One stage of a network: a convolution, then batch norm with a fused activation or an
//! activation alone. The stage owns its activations and their gradients, allocated once.

use super::BnSync;
use super::batchnorm::BatchNormLayer;
use super::conv::ConvLayer;
use super::params::ParamStore;
use crate::backend::{Backend, View, ViewMut};
use crate::ops::activation::Activation;
use anyhow::Result;
use std::ops::Range;

pub struct Stage<B: Backend> {
    /// e.g. "G.1 convT(100->256) bn relu"; also the trace label.
    pub label: &'static str,
    pub conv: ConvLayer,
    pub bn: Option<BatchNormLayer<B>>,
    /// The activation applied in place to the conv output when there is no batch norm
    /// (with batch norm it is fused into it).
    pub act: Activation,
    /// This stage's parameters (weight, then gamma and beta) in the store: one gradient group.
    pub group: Range<usize>,
    /// [C_out, B, OH, OW]: the conv output (activated in place when there is no batch norm).
    conv_out: B::Buf,
    /// [C_out, B, OH, OW]: act(BN(conv_out)); only with batch norm.
    bn_out: Option<B::Buf>,
    /// [C_out, B, OH, OW]: the gradient of the stage output, turned in place into the
    /// gradient before the activation.
    d_out: B::Buf,
    /// [C_out, B, OH, OW]: the gradient of conv_out; only with batch norm (else d_out is it).
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

/// The floats `Stage::new` allocates for an output of `output_len` floats (batch norm's own
/// buffers aside): the conv output and its gradient, and with batch norm the normalized output
/// and the gradient at the conv output.
pub fn buffer_floats(output_len: usize, with_bn: bool) -> usize {
    if with_bn { 4 * output_len } else { 2 * output_len }
}

impl<B: Backend> Stage<B> {
    pub fn new(
        be: &B,
        label: &'static str,
        conv: ConvLayer,
        bn: Option<BatchNormLayer<B>>,
        act: Activation,
        group: Range<usize>,
    ) -> Result<Self> {
        let n = conv.output_len();
        let with_bn = bn.is_some();
        Ok(Stage {
            label,
            conv,
            bn,
            act,
            group,
            conv_out: be.alloc(n)?,
            bn_out: if with_bn { Some(be.alloc(n)?) } else { None },
            d_out: be.alloc(n)?,
            d_conv_out: if with_bn { Some(be.alloc(n)?) } else { None },
        })
    }

    /// Buffers shaped as what this stage's forward leaves for its backward: the conv output,
    /// the batch-norm output and the batch-norm statistics.
    pub fn new_saved(&self, be: &B) -> Result<StageSaved<B>> {
        let n = self.conv.output_len();
        Ok(StageSaved {
            conv_out: be.alloc(n)?,
            bn_out: if self.bn_out.is_some() { Some(be.alloc(n)?) } else { None },
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
        if let (Some(mine), Some(theirs)) = (&mut self.bn_out, &mut saved.bn_out) {
            std::mem::swap(mine, theirs);
        }
        if let (Some(bn), Some(stats)) = (&mut self.bn, &mut saved.bn_stats) {
            bn.swap_saved(stats);
        }
    }

    /// The stage's output, [C_out, B, OH, OW].
    pub fn output(&self) -> &B::Buf {
        self.bn_out.as_ref().unwrap_or(&self.conv_out)
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
        match (&mut self.bn, &mut self.bn_out) {
            (Some(bn), Some(out)) => {
                if train {
                    bn.forward_train(be, p, View::whole(&self.conv_out), ViewMut::whole(out), sync);
                } else {
                    bn.forward_eval(be, p, View::whole(&self.conv_out), ViewMut::whole(out));
                }
            }
            _ => be.act_forward(self.act, ViewMut::whole(&mut self.conv_out)),
        }
    }

    /// From the output gradient to the conv-output gradient: activation and batch norm
    /// backward. Batch-norm parameter gradients go to the store when `param_grads` is
    /// Some(accumulate).
    pub fn backward_pre(
        &mut self,
        be: &B,
        p: &mut ParamStore<B>,
        param_grads: Option<bool>,
        sync: Option<&mut dyn BnSync<B>>,
    ) {
        match (&mut self.bn, &self.bn_out, &mut self.d_conv_out) {
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
            _ => be.act_backward(self.act, View::whole(&self.conv_out), ViewMut::whole(&mut self.d_out)),
        }
    }

    /// The input gradient dx [C_in, B, H, W], after `backward_pre`.
    pub fn backward_data(&self, be: &B, p: &ParamStore<B>, dx: ViewMut<B>) {
        self.conv.backward_data(be, p, View::whole(self.conv_grad()), dx);
    }

    /// The gradient penalty's forward stream (WGAN-GP; a stage without batch norm): v_out =
    /// m * conv(v_in), where m is the activation's slope at the last forward's inputs, read
    /// from its output as backward reads it (piecewise-linear activations keep their sign).
    pub fn penalty_forward(&self, be: &B, p: &ParamStore<B>, v_in: View<B>, mut v_out: ViewMut<B>) {
        assert!(self.bn.is_none(), "{}: the gradient penalty's stream needs a stage without batch norm", self.label);
        self.conv.forward(be, p, v_in, v_out.rb());
        be.act_backward(self.act, View::whole(&self.conv_out), v_out);
    }

    /// The weight gradient from this stage's input x, after `backward_pre`.
    pub fn backward_weight(&self, be: &B, p: &mut ParamStore<B>, x: View<B>, accumulate: bool) {
        self.conv.backward_weight(be, p, x, View::whole(self.conv_grad()), accumulate);
    }
}
