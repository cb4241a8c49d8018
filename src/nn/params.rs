//! The parameters of one network in flat device buffers: values, gradients and both Adam
//! moments, plus the batch-norm running statistics. Each layer owns ranges into them, so a
//! bucket of gradients is one contiguous range: copied and averaged as a whole (in fragments),
//! updated by one Adam launch.

use crate::backend::{Backend, View, ViewMut};
use crate::ops::adam::AdamStep;
use anyhow::Result;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Normal};
use std::ops::Range;

/// How a tensor is initialized (DCGAN: conv weights N(0, 0.02), BN gamma N(1, 0.02), beta 0).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Init {
    Normal { mean: f32, std: f32 },
    Constant(f32),
}

/// One named tensor inside a flat buffer. `name` is its key in PyTorch's `state_dict()` of
/// the equivalent `nn.Sequential` named `main` (e.g. "main.1.running_var").
#[derive(Clone, Debug, PartialEq)]
pub struct TensorInfo {
    pub name: String,
    pub shape: Vec<usize>,
    pub range: Range<usize>,
    pub init: Init,
}

/// Where every tensor goes, decided before anything is allocated.
#[derive(Clone, Debug, Default)]
pub struct ParamLayout {
    /// Trained tensors, in the flat `value`/`grad`/`m`/`v` buffers.
    pub params: Vec<TensorInfo>,
    /// Running statistics, in the flat `state` buffer.
    pub buffers: Vec<TensorInfo>,
}

fn push(list: &mut Vec<TensorInfo>, name: String, shape: &[usize], init: Init) -> Range<usize> {
    let start = list.last().map_or(0, |t| t.range.end);
    let range = start..start + shape.iter().product::<usize>();
    list.push(TensorInfo { name, shape: shape.to_vec(), range: range.clone(), init });
    range
}

impl ParamLayout {
    pub fn add_param(&mut self, name: String, shape: &[usize], init: Init) -> Range<usize> {
        push(&mut self.params, name, shape, init)
    }
    pub fn add_buffer(&mut self, name: String, shape: &[usize], init: Init) -> Range<usize> {
        push(&mut self.buffers, name, shape, init)
    }
    pub fn param_len(&self) -> usize {
        self.params.last().map_or(0, |t| t.range.end)
    }
    pub fn state_len(&self) -> usize {
        self.buffers.last().map_or(0, |t| t.range.end)
    }

    /// Initial values drawn in layout order from `seed`: the same seed, the same weights.
    pub fn initial_values(&self, seed: u64) -> (Vec<f32>, Vec<f32>) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut fill = |list: &[TensorInfo], len: usize| {
            let mut out = vec![0.0f32; len];
            for t in list {
                match t.init {
                    Init::Constant(c) => out[t.range.clone()].fill(c),
                    Init::Normal { mean, std } => {
                        let d = Normal::new(mean, std).expect("a positive standard deviation");
                        out[t.range.clone()].iter_mut().for_each(|x| *x = d.sample(&mut rng));
                    }
                }
            }
            out
        };
        let values = fill(&self.params, self.param_len());
        let state = fill(&self.buffers, self.state_len());
        (values, state)
    }
}

/// The device side: flat buffers, `[param_len]` each for value, grad, m, v and `[state_len]`.
pub struct ParamStore<B: Backend> {
    pub layout: ParamLayout,
    pub value: B::Buf,
    pub grad: B::Buf,
    pub m: B::Buf,
    pub v: B::Buf,
    pub state: B::Buf,
    /// Adam steps taken (PyTorch's `step`), shared by every tensor of the network.
    pub adam_steps: u64,
    /// Forward passes in training mode (PyTorch's `num_batches_tracked`, the same for every
    /// batch-norm layer of a network).
    pub bn_batches_tracked: u64,
    /// Adam's (beta1, beta2, eps): the DCGAN paper's (0.5, 0.999) and PyTorch's 1e-8 unless
    /// set otherwise.
    pub adam_betas_eps: (f32, f32, f32),
    /// 1-bit Adam's frozen variance: Adam updates after this step count keep the second
    /// moment and its bias correction as they were at it (None: Adam as PyTorch's).
    pub freeze_variance_after: Option<u64>,
}

/// The floats `ParamStore::new` allocates for `layout`: values, gradients, Adam's two moments,
/// and the running statistics.
pub fn buffer_floats(layout: &ParamLayout) -> usize {
    4 * layout.param_len() + layout.state_len()
}

impl<B: Backend> ParamStore<B> {
    pub fn new(be: &B, layout: ParamLayout, seed: u64) -> Result<Self> {
        let (values, state) = layout.initial_values(seed);
        let n = layout.param_len();
        let mut store = ParamStore {
            value: be.alloc(n)?,
            grad: be.alloc(n)?,
            m: be.alloc(n)?,
            v: be.alloc(n)?,
            state: be.alloc(layout.state_len())?,
            layout,
            adam_steps: 0,
            bn_batches_tracked: 0,
            adam_betas_eps: (0.5, 0.999, 1e-8),
            freeze_variance_after: None,
        };
        be.upload(&values, ViewMut::whole(&mut store.value));
        be.upload(&state, ViewMut::whole(&mut store.state));
        Ok(store)
    }

    pub fn value(&self, r: &Range<usize>) -> View<'_, B> {
        View::range(&self.value, r.clone())
    }
    pub fn grad_mut(&mut self, r: &Range<usize>) -> ViewMut<'_, B> {
        ViewMut::range(&mut self.grad, r.clone())
    }

    /// Adam on one contiguous range (a bucket) with the step count `t` of this update.
    pub fn adam(&mut self, be: &B, range: Range<usize>, lr: f32, t: u64) {
        let (b1, b2, eps) = self.adam_betas_eps;
        let mut h = AdamStep::with_betas(lr, b1, b2, eps, t);
        if let Some(frozen) = self.freeze_variance_after.filter(|&f| f >= 1 && t > f) {
            // beta2 = 1 keeps v exactly (v = v + 0 * g^2), with the correction of its last update.
            h = AdamStep { beta2: 1.0, bias2_sqrt: AdamStep::with_betas(lr, b1, b2, eps, frozen).bias2_sqrt, ..h };
        }
        be.adam(
            &h,
            ViewMut::range(&mut self.value, range.clone()),
            View::range(&self.grad, range.clone()),
            ViewMut::range(&mut self.m, range.clone()),
            ViewMut::range(&mut self.v, range),
        );
    }

    /// Host copies of the values and the running statistics (for checkpoints and hashing).
    pub fn download_values(&self, be: &B) -> (Vec<f32>, Vec<f32>) {
        let mut values = vec![0.0; self.layout.param_len()];
        let mut state = vec![0.0; self.layout.state_len()];
        be.download(View::whole(&self.value), &mut values);
        be.download(View::whole(&self.state), &mut state);
        (values, state)
    }
}
