//! A sequential network of stages with an explicit backward schedule, and the hooks through
//! which the trainer sees each layer's time and each gradient group as soon as it is complete.

use crate::backend::{Backend, DeviceBuf, View, ViewMut};
use crate::nn::BnSync;
use crate::nn::batchnorm::BatchNormLayer;
use crate::nn::conv::ConvLayer;
use crate::nn::layernorm::LayerNormLayer;
use crate::nn::params::{Init, ParamLayout, ParamStore};
use crate::nn::stage::Stage;
use crate::ops::activation::Activation;
use crate::ops::batchnorm::BnGeom;
use crate::ops::conv::ConvGeom;
use crate::ops::layernorm::LnGeom;
use anyhow::Result;
use std::ops::Range;
use std::time::Instant;

/// One stage of an architecture: Conv2d or ConvTranspose2d (no bias), then BatchNorm2d with
/// the activation fused, layer norm (`nn.GroupNorm(1, C)`) and the activation, or the
/// activation alone.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StageSpec {
    pub transposed: bool,
    pub c_in: usize,
    pub c_out: usize,
    pub k: usize,
    pub stride: usize,
    pub pad: usize,
    pub norm: Norm,
    pub act: Activation,
}

impl StageSpec {
    /// A Conv2d stage (no bias) from `c_in` to `c_out` channels, kernel `k`, then `norm` and
    /// `act`.
    pub const fn conv(
        c_in: usize,
        c_out: usize,
        k: usize,
        stride: usize,
        pad: usize,
        norm: Norm,
        act: Activation,
    ) -> Self {
        StageSpec { transposed: false, c_in, c_out, k, stride, pad, norm, act }
    }

    /// The same with a ConvTranspose2d.
    pub const fn transposed(
        c_in: usize,
        c_out: usize,
        k: usize,
        stride: usize,
        pad: usize,
        norm: Norm,
        act: Activation,
    ) -> Self {
        StageSpec { transposed: true, ..Self::conv(c_in, c_out, k, stride, pad, norm, act) }
    }
}

/// The norm after a stage's convolution.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Norm {
    None,
    /// BatchNorm2d, with the activation fused.
    Batch,
    /// Layer norm over each sample's C x H x W values (`nn.GroupNorm(1, C)`).
    Layer,
}

/// The order of backward work.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackwardOrder {
    /// Top to bottom, each stage's weight gradient right after its batch-norm backward and
    /// before its data gradient: the top layers' groups leave first.
    LayerByLayer,
    /// All data gradients top to bottom first, then the weight gradients bottom to top. When
    /// the bottom layer holds most of the bytes (the generator's first ConvT: 70%), its group
    /// leaves as early as possible and the other weight gradients hide its exchange.
    DataFirst,
}

/// What the trainer learns while a network runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    Forward,
    /// Activation and batch-norm backward.
    BackwardBn,
    BackwardData,
    BackwardWeight,
    /// The gradient penalty's seed travelling forward through a critic stage (WGAN-GP).
    PenaltyForward,
    /// The penalty's weight gradient of a critic stage.
    PenaltyWeight,
    /// The penalty's adjoint of the values through a critic stage (with layer norm).
    PenaltyAdjoint,
}

pub trait Observer<B: Backend> {
    /// A stage finished a phase (times are host times; the CPU backend is synchronous).
    fn span(&mut self, _net: &'static str, _stage: &Stage<B>, _phase: Phase, _start: Instant, _end: Instant) {}
    /// Every gradient of stage `stage` (its group) is complete in `store.grad`.
    fn group_ready(&mut self, _be: &B, _store: &ParamStore<B>, _stage: usize) {}
    /// Stage `stage` is about to run forward: the last moment its parameters may still change
    /// (an update left in flight by the previous step lands here, stage by stage).
    fn before_forward(&mut self, _be: &B, _store: &mut ParamStore<B>, _stage: usize) {}
    /// Asked before each stage's pass: true drops the rest of the pass (a stop that cannot
    /// wait for the step's end).
    fn interrupted(&mut self) -> bool {
        false
    }
}

/// An observer that ignores everything.
pub struct NoObserver;
impl<B: Backend> Observer<B> for NoObserver {}

pub struct Net<B: Backend> {
    /// "G" or "D".
    pub name: &'static str,
    pub stages: Vec<Stage<B>>,
    pub store: ParamStore<B>,
    pub order: BackwardOrder,
    pub batch: usize,
    /// [C, B, H, W]: the network's input.
    input: B::Buf,
    /// [C, B, H, W]: the gradient of the input (only when asked for).
    d_input: B::Buf,
}

/// A micro-batch's forward put aside until its backward: the network's input and each
/// stage's saved tensors.
pub struct NetSaved<B: Backend> {
    /// [C, B, H, W]
    input: B::Buf,
    stages: Vec<crate::nn::stage::StageSaved<B>>,
}

/// What a network will take before it is built (`plan_net`).
#[derive(Clone, Debug, Default)]
pub struct NetPlan {
    /// Floats `Net::new` allocates on the backend.
    pub floats: usize,
    /// Parameters (each has a gradient of the same length).
    pub params: usize,
    /// Floats `Net::new_saved` allocates: one micro-batch's forward kept for its backward.
    pub saved_floats: usize,
    /// The geometries its ops reserve workspace for.
    pub convs: Vec<ConvGeom>,
    pub bns: Vec<BnGeom>,
}

/// What a network of `specs` at `batch` on `input` [C, H, W] will take, without building
/// it: the floats `new` allocates and the geometries its ops reserve workspace for.
pub fn plan_net(specs: &[StageSpec], batch: usize, input: (usize, usize, usize)) -> Result<NetPlan> {
    let geoms = stage_geometry(specs, batch, input)?;
    let (layout, _) = param_layout(specs);
    let mut plan = NetPlan { floats: crate::nn::params::buffer_floats(&layout), ..NetPlan::default() };
    plan.params = layout.param_len();
    for (spec, geom) in specs.iter().zip(&geoms) {
        let conv = ConvLayer { geom: *geom, transposed: spec.transposed, weight: 0..0 };
        let (_, oh, ow) = conv.output_shape();
        plan.floats += crate::nn::stage::buffer_floats(conv.output_len(), spec.norm != Norm::None);
        if spec.norm == Norm::Layer {
            plan.floats += crate::nn::layernorm::buffer_floats(&LnGeom::new(spec.c_out, batch, oh * ow));
        }
        let bn_channels = (spec.norm == Norm::Batch).then_some(spec.c_out);
        plan.saved_floats += crate::nn::stage::saved_floats(conv.output_len(), bn_channels);
        if spec.norm == Norm::Batch {
            plan.floats += crate::nn::batchnorm::buffer_floats(spec.c_out);
            plan.bns.push(BnGeom::new(spec.c_out, batch * oh * ow));
        }
    }
    plan.floats += 2 * input.0 * batch * input.1 * input.2;
    plan.saved_floats += input.0 * batch * input.1 * input.2;
    plan.convs = geoms;
    Ok(plan)
}

/// Conv and ConvT geometry of every stage for `batch` images of `input` (C, H, W).
pub fn stage_geometry(specs: &[StageSpec], batch: usize, input: (usize, usize, usize)) -> Result<Vec<ConvGeom>> {
    let (mut c, mut h, mut w) = input;
    let mut out = Vec::with_capacity(specs.len());
    for s in specs {
        anyhow::ensure!(s.c_in == c, "stage expects {} input channels, gets {c}", s.c_in);
        let g = if s.transposed {
            ConvGeom::transposed(batch, s.c_in, h, w, s.c_out, s.k, s.stride, s.pad)?
        } else {
            ConvGeom::conv(batch, s.c_in, h, w, s.c_out, s.k, s.stride, s.pad)?
        };
        (c, h, w) = if s.transposed { (g.c_in, g.h_in, g.w_in) } else { (g.c_out, g.h_out, g.w_out) };
        out.push(g);
    }
    Ok(out)
}

/// Where one stage's tensors are: its weight in the parameters, with batch norm its
/// gamma/beta (parameters) and running statistics (state), with layer norm its gamma/beta.
pub type StageRanges = (Range<usize>, Option<(Range<usize>, Range<usize>)>, Option<Range<usize>>);

/// Parameter layout with PyTorch `nn.Sequential` names (`"main.<index>.<tensor>"`): every
/// conv, norm and activation takes one index, as in the PyTorch DCGAN example (layer norm's
/// tensors are those of `nn.GroupNorm(1, C)`: weight and bias `[C]`, no running statistics).
pub fn param_layout(specs: &[StageSpec]) -> (ParamLayout, Vec<StageRanges>) {
    let mut layout = ParamLayout::default();
    let mut ranges = Vec::new();
    let mut index = 0;
    for s in specs {
        // Conv2d weight [out, in, k, k]; ConvTranspose2d weight [in, out, k, k].
        let shape = if s.transposed { [s.c_in, s.c_out, s.k, s.k] } else { [s.c_out, s.c_in, s.k, s.k] };
        let w = layout.add_param(format!("main.{index}.weight"), &shape, Init::Normal { mean: 0.0, std: 0.02 });
        index += 1;
        let bn = if s.norm == Norm::Batch {
            let g = layout.add_param(format!("main.{index}.weight"), &[s.c_out], Init::Normal { mean: 1.0, std: 0.02 });
            let b = layout.add_param(format!("main.{index}.bias"), &[s.c_out], Init::Constant(0.0));
            let rm = layout.add_buffer(format!("main.{index}.running_mean"), &[s.c_out], Init::Constant(0.0));
            let rv = layout.add_buffer(format!("main.{index}.running_var"), &[s.c_out], Init::Constant(1.0));
            index += 1;
            Some((g.start..b.end, rm.start..rv.end))
        } else {
            None
        };
        let ln = (s.norm == Norm::Layer).then(|| {
            let g = layout.add_param(format!("main.{index}.weight"), &[s.c_out], Init::Constant(1.0));
            let b = layout.add_param(format!("main.{index}.bias"), &[s.c_out], Init::Constant(0.0));
            index += 1;
            g.start..b.end
        });
        if s.act != Activation::None {
            index += 1;
        }
        ranges.push((w, bn, ln));
    }
    (layout, ranges)
}

fn stage_label(net: &str, i: usize, s: &StageSpec) -> &'static str {
    let kind = if s.transposed { "convT" } else { "conv" };
    let bn = match s.norm {
        Norm::Batch => " bn",
        Norm::Layer => " ln",
        Norm::None => "",
    };
    let act = match s.act {
        Activation::None => "",
        Activation::Relu => " relu",
        Activation::LeakyRelu => " lrelu",
        Activation::Tanh => " tanh",
        Activation::Sigmoid => " sigmoid",
    };
    // A handful of labels per network, made once; traces refer to them every step.
    Box::leak(format!("{net}.{} {kind}({}->{}){bn}{act}", i + 1, s.c_in, s.c_out).into_boxed_str())
}

impl<B: Backend> Net<B> {
    pub fn new(
        be: &B,
        name: &'static str,
        specs: &[StageSpec],
        batch: usize,
        input: (usize, usize, usize),
        order: BackwardOrder,
        seed: u64,
    ) -> Result<Self> {
        let geoms = stage_geometry(specs, batch, input)?;
        let (layout, ranges) = param_layout(specs);
        let store = ParamStore::new(be, layout, seed)?;
        let mut stages = Vec::with_capacity(specs.len());
        for (i, ((spec, geom), (w, bn, ln))) in specs.iter().zip(&geoms).zip(ranges).enumerate() {
            be.prepare_conv(geom)?;
            let conv = ConvLayer { geom: *geom, transposed: spec.transposed, weight: w.clone() };
            let (_, oh, ow) = conv.output_shape();
            let mut group = w.clone();
            let bn = match bn {
                Some((gamma_beta, running)) => {
                    group.end = gamma_beta.end;
                    let g = BnGeom::new(spec.c_out, batch * oh * ow);
                    be.prepare_bn(&g)?;
                    Some(BatchNormLayer::new(be, g, spec.act, gamma_beta, running)?)
                }
                None => None,
            };
            let ln = match ln {
                Some(gamma_beta) => {
                    group.end = gamma_beta.end;
                    Some(LayerNormLayer::new(be, LnGeom::new(spec.c_out, batch, oh * ow), gamma_beta)?)
                }
                None => None,
            };
            stages.push(Stage::new(be, stage_label(name, i, spec), conv, (bn, ln), spec.act, group)?);
        }
        // The exchange sends what the groups cover: they must tile the parameters.
        let ends = stages.iter().map(|s| s.group.end);
        let tiled = stages.iter().map(|s| s.group.start).eq(std::iter::once(0).chain(ends).take(stages.len()))
            && stages.last().is_some_and(|s| s.group.end == store.layout.param_len());
        anyhow::ensure!(tiled, "{name}: the stages' gradient groups do not cover its parameters in order");
        let in_len = input.0 * batch * input.1 * input.2;
        Ok(Net { name, stages, store, order, batch, input: be.alloc(in_len)?, d_input: be.alloc(in_len)? })
    }

    /// Buffers for one micro-batch's forward, put aside until its backward (`swap_saved`).
    pub fn new_saved(&self, be: &B) -> Result<NetSaved<B>> {
        let stages = self.stages.iter().map(|s| s.new_saved(be)).collect::<Result<_>>()?;
        Ok(NetSaved { input: be.alloc(self.input.len())?, stages })
    }

    /// Exchange the input and what every stage's forward left for backward with `saved`,
    /// without copying: after a forward, this puts the micro-batch aside (and `saved` takes
    /// it); before its backward, the same call brings it back.
    pub fn swap_saved(&mut self, saved: &mut NetSaved<B>) {
        std::mem::swap(&mut self.input, &mut saved.input);
        for (stage, s) in self.stages.iter_mut().zip(&mut saved.stages) {
            stage.swap_saved(s);
        }
    }

    /// The batch-norm layers, in stage order.
    fn bns(&mut self) -> impl Iterator<Item = &mut BatchNormLayer<B>> {
        self.stages.iter_mut().filter_map(|s| s.bn.as_mut())
    }

    /// `--deferred-bn`: every batch-norm layer's running statistics wait for
    /// `apply_deferred_bn` (`nn::batchnorm::DeferredStats`).
    pub fn defer_bn(&mut self) {
        for bn in self.bns() {
            bn.deferred = Some(Default::default());
        }
    }

    /// The pass (0, 1, 2) the next forwards' deferred statistics belong to.
    pub fn set_bn_slot(&mut self, slot: usize) {
        for d in self.stages.iter_mut().filter_map(|s| s.bn.as_mut()).filter_map(|bn| bn.deferred.as_mut()) {
            d.slot = slot;
        }
    }

    /// Move the deferred running statistics (nothing where they are not deferred).
    pub fn apply_deferred_bn(&mut self, be: &B) {
        for bn in self.stages.iter_mut().filter_map(|s| s.bn.as_mut()) {
            bn.apply_deferred(be, &mut self.store);
        }
    }

    /// Drop the deferred sums gathered since the last apply (recomputed forwards).
    pub fn discard_deferred_bn(&mut self) {
        for bn in self.stages.iter_mut().filter_map(|s| s.bn.as_mut()) {
            bn.discard_deferred();
        }
    }

    pub fn input_mut(&mut self) -> &mut B::Buf {
        &mut self.input
    }
    pub fn output(&self) -> &B::Buf {
        self.stages.last().expect("a network has stages").output()
    }
    pub fn d_output_mut(&mut self) -> &mut B::Buf {
        self.stages.last_mut().expect("a network has stages").d_output_mut()
    }
    /// The input gradient, valid after `backward(.., input_grad = true, ..)`.
    pub fn d_input(&self) -> &B::Buf {
        &self.d_input
    }
    /// Adds to stage i's weight gradient the product of its input at the last forward and `dy`,
    /// a gradient at its conv output from elsewhere than its own backward (the penalty's).
    pub fn add_weight_grad(&mut self, be: &B, i: usize, dy: View<B>) {
        let x = if i == 0 { View::whole(&self.input) } else { View::whole(self.stages[i - 1].output()) };
        self.stages[i].conv.backward_weight(be, &mut self.store, x, dy, true);
    }

    /// Batch norm's running statistics recomputed as the plain mean of the batch statistics of
    /// `passes` training-mode forwards (PyTorch's `momentum=None`; BigGAN's "standing
    /// statistics"), for weights that were not trained along with them (an average of
    /// weights). `input(k, buf)` fills the input of pass k. The forward count, the deferred
    /// statistics and the momentum are left as they were.
    pub fn standing_statistics(&mut self, be: &B, passes: usize, mut input: impl FnMut(usize, &mut B::Buf)) {
        let tracked = self.store.bn_batches_tracked;
        let kept: Vec<_> = self.bns().map(|bn| (bn.geom.momentum, bn.deferred.take())).collect();
        for k in 0..passes {
            // The k-th pass weighs 1/(k+1): the running value is the mean of the passes so far.
            self.bns().for_each(|bn| bn.geom.momentum = 1.0 / (k + 1) as f32);
            input(k, &mut self.input);
            self.forward(be, true, None, &mut NoObserver);
        }
        for (bn, (momentum, deferred)) in self.bns().zip(kept) {
            (bn.geom.momentum, bn.deferred) = (momentum, deferred);
        }
        self.store.bn_batches_tracked = tracked;
    }

    pub fn forward(&mut self, be: &B, train: bool, mut sync: Option<&mut dyn BnSync<B>>, obs: &mut dyn Observer<B>) {
        if train {
            self.store.bn_batches_tracked += 1;
        }
        for i in 0..self.stages.len() {
            if obs.interrupted() {
                return;
            }
            obs.before_forward(be, &mut self.store, i);
            let t0 = Instant::now();
            let (before, rest) = self.stages.split_at_mut(i);
            let x = if i == 0 { View::whole(&self.input) } else { View::whole(before[i - 1].output()) };
            rest[0].forward(be, &mut self.store, x, train, crate::nn::reborrow(&mut sync));
            obs.span(self.name, &rest[0], Phase::Forward, t0, Instant::now());
        }
    }

    /// Backward from the gradient written into `d_output_mut()`. `weights`: Some(accumulate)
    /// computes parameter gradients (added to the store's when accumulate), None skips them
    /// (the generator step needs only D's data gradients). `input_grad` fills `d_input()`.
    pub fn backward(
        &mut self,
        be: &B,
        weights: Option<bool>,
        input_grad: bool,
        mut sync: Option<&mut dyn BnSync<B>>,
        obs: &mut dyn Observer<B>,
    ) {
        let n = self.stages.len();
        for i in (0..n).rev() {
            if obs.interrupted() {
                return;
            }
            self.backward_pre(be, i, weights, crate::nn::reborrow(&mut sync), obs);
            if self.order == BackwardOrder::LayerByLayer
                && let Some(acc) = weights
            {
                self.backward_weight(be, i, acc, obs);
            }
            if i > 0 || input_grad {
                self.backward_data(be, i, obs);
            }
        }
        if self.order == BackwardOrder::DataFirst
            && let Some(acc) = weights
        {
            for i in 0..n {
                if obs.interrupted() {
                    return;
                }
                self.backward_weight(be, i, acc, obs);
            }
        }
    }

    fn backward_pre(
        &mut self,
        be: &B,
        i: usize,
        weights: Option<bool>,
        sync: Option<&mut dyn BnSync<B>>,
        obs: &mut dyn Observer<B>,
    ) {
        let t0 = Instant::now();
        self.stages[i].backward_pre(be, &mut self.store, weights, sync);
        obs.span(self.name, &self.stages[i], Phase::BackwardBn, t0, Instant::now());
    }

    fn backward_data(&mut self, be: &B, i: usize, obs: &mut dyn Observer<B>) {
        let t0 = Instant::now();
        let (before, rest) = self.stages.split_at_mut(i);
        let dx = if i == 0 { ViewMut::whole(&mut self.d_input) } else { ViewMut::whole(before[i - 1].d_output_mut()) };
        rest[0].backward_data(be, &self.store, dx);
        obs.span(self.name, &rest[0], Phase::BackwardData, t0, Instant::now());
    }

    fn backward_weight(&mut self, be: &B, i: usize, accumulate: bool, obs: &mut dyn Observer<B>) {
        let t0 = Instant::now();
        let x = if i == 0 { View::whole(&self.input) } else { View::whole(self.stages[i - 1].output()) };
        self.stages[i].backward_weight(be, &mut self.store, x, accumulate);
        obs.span(self.name, &self.stages[i], Phase::BackwardWeight, t0, Instant::now());
        obs.group_ready(be, &self.store, i);
    }
}
