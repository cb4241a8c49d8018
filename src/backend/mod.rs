//! The device abstraction: a `Backend` owns buffers of f32 and runs every op the model needs.
//!
//! Layers and models are written once, generic over `Backend`. The CPU backend is the
//! reference; the CUDA backend must match it op for op. Ops never allocate on their hot path:
//! buffers are made once per run by the layers, and each backend keeps its own scratch space.
//!
//! Activation layout everywhere is channel-major, `[C, B, H, W]` ("CNHW"): a convolution is
//! then one GEMM over the whole batch (`[C_out, C_in*k*k] x [C_in*k*k, B*H*W]`) and batch norm
//! reads each channel as one contiguous run. At the model's edges C = 1 or H = W = 1, where
//! CNHW and PyTorch's NCHW hold the same bytes. Weights keep PyTorch's layouts.

pub mod cpu;
#[cfg(feature = "cuda")]
pub mod cuda;
pub mod threads;

use crate::ops::activation::Activation;
use crate::ops::adam::AdamStep;
use crate::ops::batchnorm::BnGeom;
use crate::ops::conv::ConvGeom;
use crate::ops::layernorm::LnGeom;
use anyhow::Result;
use std::ops::Range;

/// How the CUDA convolutions multiply (`--precision`). Everything else (batch norm, the
/// losses, reductions, Adam) and the CPU backend always compute in f32.
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Precision {
    /// FFMA on the CUDA cores.
    #[default]
    #[value(name = "fp32")]
    #[serde(rename = "fp32")]
    Fp32,
    /// Tensor cores on operands rounded to TF32 (10 mantissa bits): relative errors of about
    /// 1e-3.
    #[value(name = "tf32")]
    #[serde(rename = "tf32")]
    Tf32,
    /// Tensor cores, each operand split into two TF32 parts and three products summed
    /// (CUTLASS's 3xTF32): FP32's accuracy.
    #[value(name = "3xtf32")]
    #[serde(rename = "3xtf32")]
    ThreeTf32,
}

impl Precision {
    /// The name `--precision` takes.
    pub fn name(self) -> &'static str {
        match self {
            Precision::Fp32 => "fp32",
            Precision::Tf32 => "tf32",
            Precision::ThreeTf32 => "3xtf32",
        }
    }
}

/// What `--cuda-graphs` did in a run (`summary.json`, `bench-step --json`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct GraphStats {
    /// Steps whose launches were recorded (the first, and each after a step changed shape).
    pub recorded_steps: u64,
    /// Steps replayed through their graphs from start to end.
    pub replayed_steps: u64,
    /// Steps that left their record part-way and ran eagerly from there.
    pub diverged_steps: u64,
    /// Graphs launched, and the kernels they launched.
    pub graph_launches: u64,
    pub graphed_kernels: u64,
    /// Kernels whose arguments were updated in their graph before a launch.
    pub patched_kernels: u64,
}

impl GraphStats {
    /// Every step bracketed so far, however it ran.
    pub fn steps(&self) -> u64 {
        self.recorded_steps + self.replayed_steps + self.diverged_steps
    }
}

/// A device buffer of f32.
pub trait DeviceBuf: Send {
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A read-only window `[off, off+len)` into a device buffer.
pub struct View<'a, B: Backend> {
    pub buf: &'a B::Buf,
    pub off: usize,
    pub len: usize,
}

// Derived Clone/Copy would demand `B: Copy`; a view is two integers and a reference.
impl<B: Backend> Clone for View<'_, B> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<B: Backend> Copy for View<'_, B> {}

/// A writable window `[off, off+len)` into a device buffer.
pub struct ViewMut<'a, B: Backend> {
    pub buf: &'a mut B::Buf,
    pub off: usize,
    pub len: usize,
}

impl<'a, B: Backend> View<'a, B> {
    pub fn whole(buf: &'a B::Buf) -> Self {
        View { buf, off: 0, len: buf.len() }
    }
    pub fn range(buf: &'a B::Buf, r: Range<usize>) -> Self {
        assert!(r.start <= r.end && r.end <= buf.len(), "view {r:?} out of a buffer of {}", buf.len());
        View { buf, off: r.start, len: r.end - r.start }
    }
}

impl<'a, B: Backend> ViewMut<'a, B> {
    pub fn whole(buf: &'a mut B::Buf) -> Self {
        let len = buf.len();
        ViewMut { buf, off: 0, len }
    }
    pub fn range(buf: &'a mut B::Buf, r: Range<usize>) -> Self {
        assert!(r.start <= r.end && r.end <= buf.len(), "view {r:?} out of a buffer of {}", buf.len());
        ViewMut { buf, off: r.start, len: r.end - r.start }
    }
    /// Reborrow, so a `ViewMut` can be passed to an op and used again afterwards.
    pub fn rb(&mut self) -> ViewMut<'_, B> {
        ViewMut { buf: self.buf, off: self.off, len: self.len }
    }
    pub fn as_view(&self) -> View<'_, B> {
        View { buf: self.buf, off: self.off, len: self.len }
    }
}

/// Host memory a gradient bucket is staged in for the comm thread (pinned on CUDA).
pub trait HostBuffer: Send + 'static {
    /// Start and length, without waiting for copies in flight: the comm thread gets these
    /// and reads only after the stage-out waiter has returned.
    fn raw_parts(&mut self) -> (*mut f32, usize);
}

impl HostBuffer for Vec<f32> {
    fn raw_parts(&mut self) -> (*mut f32, usize) {
        (self.as_mut_ptr(), self.len())
    }
}

/// Returns once a staged copy is complete; may be called more than once and on any thread
/// (the comm thread waits on it before reading the bucket; the compute thread waits on it
/// first so that time spent waiting for the device is not counted as communication).
pub type StageWaiter = std::sync::Arc<dyn Fn() + Send + Sync>;

/// Everything the model does on a device. All ops are asynchronous with respect to the host
/// on devices that can be (CUDA); `download` and `synchronize` wait.
pub trait Backend: Sized + 'static {
    type Buf: DeviceBuf;
    type Host: HostBuffer;

    /// `"cpu"` or `"cuda:<ordinal> <name>"`.
    fn describe(&self) -> String;
    /// A zero-filled buffer of `len` floats.
    fn alloc(&self, len: usize) -> Result<Self::Buf>;
    fn upload(&self, src: &[f32], dst: ViewMut<Self>);
    fn download(&self, src: View<Self>, dst: &mut [f32]);
    fn copy(&self, src: View<Self>, dst: ViewMut<Self>);
    /// Wait until every op issued so far has finished.
    fn synchronize(&self);
    /// One training step's ops follow, until `end_step`. Steps of one `kind` launch the same
    /// kernels in the same order (CUDA with `--cuda-graphs` replays the last step of its kind
    /// as graphs where this one repeats it).
    fn begin_step(&self, _kind: u64) {}
    /// The step's ops are all issued: none is held back after this.
    fn end_step(&self) {}

    // ---- the gradient path and memory ----
    /// Host memory for staging `len` floats (zeroed).
    fn alloc_host(&self, len: usize) -> Result<Self::Host>;
    /// Copy `src` into `host[at..at + src.len]` once the work issued so far is done, without
    /// blocking this thread where the device allows it (CUDA: on the copy stream).
    fn stage_out(&self, src: View<Self>, host: &mut Self::Host, at: usize) -> Result<StageWaiter>;
    /// Copy `host[at..at + dst.len]` into `dst`; work issued afterwards sees it (CUDA: the
    /// compute stream waits for the copy stream).
    fn stage_in(&self, host: &Self::Host, at: usize, dst: ViewMut<Self>) -> Result<()>;
    /// Reserve what the ops of a convolution need, so that the step loop never allocates.
    fn prepare_conv(&self, _g: &ConvGeom) -> Result<()> {
        Ok(())
    }
    /// Reserve what the ops of a batch norm need.
    fn prepare_bn(&self, _g: &BnGeom) -> Result<()> {
        Ok(())
    }
    /// What the step's CUDA graphs did (None: no graphs).
    fn graph_stats(&self) -> Option<GraphStats> {
        None
    }
    /// The most device memory held at once so far (None where not tracked: the CPU).
    fn peak_bytes(&self) -> Option<usize> {
        None
    }
    /// Floats of scratch the ops over these geometries take beside the layers' buffers (the
    /// largest one op needs: ops run one at a time).
    fn workspace_floats(&self, _convs: &[ConvGeom], _bns: &[BnGeom]) -> usize {
        0
    }
    /// Bytes free for new buffers on a device of its own (None: buffers live in host memory,
    /// as on the CPU and the emulator).
    fn free_device_bytes(&self) -> Option<u64> {
        None
    }

    // ---- elementwise (ops/elementwise) ----
    /// y += a * x
    fn axpy(&self, a: f32, x: View<Self>, y: ViewMut<Self>);

    // ---- the wire encodings (ops/wire, codec/): raw bits in f32 buffers ----
    /// Whether the gradient exchange packs `--wire 1bit` and `bf16` here, beside the gradients, rather
    /// than on the comm thread: a device apart from the host does (the copies then carry the
    /// small form); the CPU's gradients are on the comm thread's host already.
    fn packs_wire(&self) -> bool {
        false
    }
    /// The 1-bit columns of table `cols` ([3 * columns] words, `codec::onebit::column_words`)
    /// of values + residual into `out`, the residual left with what they miss, and the sum of
    /// squares of each column's residual in col_sq `[columns]`.
    fn wire_onebit_quantize(
        &self,
        cols: View<Self>,
        values: View<Self>,
        residual: ViewMut<Self>,
        out: ViewMut<Self>,
        col_sq: ViewMut<Self>,
    );
    /// out = the values of the 1-bit columns `cols` of `enc`.
    fn wire_onebit_decode(&self, cols: View<Self>, enc: View<Self>, out: ViewMut<Self>);
    /// out `[ceil(n/2)]` = the bf16 encodings of x `[n]`, two to a float (`codec::bf16`).
    fn wire_bf16_encode(&self, x: View<Self>, out: ViewMut<Self>);
    /// out `[n]` = the values of the bf16 encodings enc `[ceil(n/2)]`.
    fn wire_bf16_decode(&self, enc: View<Self>, out: ViewMut<Self>);

    // ---- convolution (ops/conv): x [C_in,B,H,W], w [C_out,C_in,k,k], y [C_out,B,OH,OW] ----
    /// y = conv(x, w)
    fn conv2d_forward(&self, g: &ConvGeom, x: View<Self>, w: View<Self>, y: ViewMut<Self>);
    /// dx = conv_transpose(dy, w): the gradient of the input, also ConvTranspose2d's forward.
    fn conv2d_backward_data(&self, g: &ConvGeom, dy: View<Self>, w: View<Self>, dx: ViewMut<Self>);
    /// dw (+)= the gradient of the weight; `accumulate` adds to what dw holds.
    fn conv2d_backward_weight(&self, g: &ConvGeom, x: View<Self>, dy: View<Self>, dw: ViewMut<Self>, accumulate: bool);

    // ---- batch norm (ops/batchnorm), x and y [C, count] with count = B*H*W ----
    /// Per-channel partial sums for the batch statistics: stats `[2C]` = (sum x, sum x^2).
    /// Split from `bn_forward_apply` so that `--sync-bn` can average them over ranks.
    fn bn_forward_stats(&self, g: &BnGeom, x: View<Self>, stats: ViewMut<Self>);
    /// Normalize with the batch statistics `stats` (sums over `stats_count` elements per
    /// channel), apply gamma/beta and the fused activation, save mean and 1/std for backward,
    /// and update the running statistics (momentum, unbiased variance).
    #[allow(clippy::too_many_arguments)]
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
    );
    /// Evaluation: normalize with the running statistics.
    #[allow(clippy::too_many_arguments)]
    fn bn_forward_eval(
        &self,
        g: &BnGeom,
        x: View<Self>,
        gamma: View<Self>,
        beta: View<Self>,
        running: View<Self>,
        act: Activation,
        y: ViewMut<Self>,
    );
    /// Backward part 1: turn dy into dz, the gradient before the fused activation (in place,
    /// using the saved output y), and reduce sums `[2C]` = (sum dz*xhat, sum dz): this rank's
    /// dgamma and dbeta, in the order gamma and beta are stored.
    #[allow(clippy::too_many_arguments)]
    fn bn_backward_reduce(
        &self,
        g: &BnGeom,
        x: View<Self>,
        y: View<Self>,
        act: Activation,
        saved: View<Self>,
        dy: ViewMut<Self>,
        sums: ViewMut<Self>,
    );
    /// Backward part 2: dx from dz (the in-place result of part 1) and the sums, which may
    /// have been averaged over ranks (`sums_count` elements per channel behind them).
    #[allow(clippy::too_many_arguments)]
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
    );

    // ---- layer norm (ops/layernorm): x, n, y `[C, B, P]`, each sample over its C * P values ----
    /// stats `[2B]` = (each sample's mean, then its 1 / sqrt(var + eps)); n = the normalized x.
    fn ln_normalize(&self, g: &LnGeom, x: View<Self>, n: ViewMut<Self>, stats: ViewMut<Self>);
    /// y = gamma_c n + beta_c with gamma_beta `[2C]`; without the shift unless `with_beta`.
    fn ln_affine(&self, g: &LnGeom, n: View<Self>, gamma_beta: View<Self>, with_beta: bool, y: ViewMut<Self>);
    /// dx = J (gamma_c dy) per sample (J in ops/layernorm), or J dy unless `by_gamma`.
    #[allow(clippy::too_many_arguments)]
    fn ln_backward_data(
        &self,
        g: &LnGeom,
        n: View<Self>,
        stats: View<Self>,
        gamma_beta: View<Self>,
        by_gamma: bool,
        dy: View<Self>,
        dx: ViewMut<Self>,
    );
    /// dgamma_beta `[2C]` (+)= per channel (sum dy n, sum dy), or (sum dy n, 0) unless
    /// `with_beta`.
    #[allow(clippy::too_many_arguments)]
    fn ln_param_grad(
        &self,
        g: &LnGeom,
        n: View<Self>,
        dy: View<Self>,
        with_beta: bool,
        dgamma_beta: ViewMut<Self>,
        accumulate: bool,
    );
    /// The gradient penalty's adjoint at a layer norm's input (ops/layernorm/cpu.rs says how):
    /// from the tangent ta and tn = J ta, the tangent's adjoint dty after the scale and the
    /// values' adjoint dy (None: zero).
    #[allow(clippy::too_many_arguments)]
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
    );

    // ---- activations (ops/activation), in place ----
    fn act_forward(&self, act: Activation, x: ViewMut<Self>);
    /// dy *= act'(.) computed from the activation's output y.
    fn act_backward(&self, act: Activation, y: View<Self>, dy: ViewMut<Self>);

    // ---- loss (ops/loss) ----
    /// Mean BCE with logits against a constant target. Writes dlogits = d(mean loss)/dlogits
    /// and out `[2]` = (loss, mean sigmoid(logits)); both stay on the device.
    fn bce_with_logits(&self, logits: View<Self>, target: f32, dlogits: ViewMut<Self>, out: ViewMut<Self>);
    /// Mean softmax cross-entropy of class logits `[classes, B]` against labels `[B]` (class
    /// indices as f32; one outside 0..classes panics). Writes dlogits [classes, B] =
    /// d(mean loss)/dlogits and out `[2]` = (loss, accuracy: the share of samples whose first
    /// largest logit is their label). CUDA reads the labels back to check them, so it waits.
    fn softmax_xent(
        &self,
        logits: View<Self>,
        labels: View<Self>,
        classes: usize,
        dlogits: ViewMut<Self>,
        out: ViewMut<Self>,
    );

    // ---- the WGAN-GP critic's terms (ops/penalty) ----
    /// `out[0]` = the mean of the critic's outputs `[B]`; doutputs = sign / B (its gradient, times
    /// the sign the loss gives that mean).
    fn critic_mean(&self, outputs: View<Self>, sign: f32, doutputs: ViewMut<Self>, out: ViewMut<Self>);
    /// out `[C, B, P]` = eps_b real + (1 - eps_b) fake, with eps `[B]`.
    fn interpolate(&self, real: View<Self>, fake: View<Self>, channels: usize, eps: View<Self>, out: ViewMut<Self>);
    /// The gradient penalty of g `[C, B, P]` (D's gradient at each interpolate): norms `[B]` =
    /// ||g_b||, out `[2]` = (lambda mean (||g_b|| - 1)^2, mean ||g_b||), seed `[C, B, P]` = the
    /// gradient of `out[0]` with respect to g.
    #[allow(clippy::too_many_arguments)] // the input, its shape, lambda and three outputs
    fn gradient_penalty(
        &self,
        g: View<Self>,
        channels: usize,
        lambda: f32,
        seed: ViewMut<Self>,
        norms: ViewMut<Self>,
        out: ViewMut<Self>,
    );

    // ---- optimizer (ops/adam) ----
    fn adam(&self, h: &AdamStep, param: ViewMut<Self>, grad: View<Self>, m: ViewMut<Self>, v: ViewMut<Self>);
}
