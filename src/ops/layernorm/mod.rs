//! Layer norm over each sample's C x H x W values, with a per-channel scale and shift (PyTorch's
//! `nn.GroupNorm(1, C)`, the WGAN-GP paper's critic norm), and the second-order terms its part
//! in the gradient penalty needs. CPU side in `cpu.rs`, CUDA launchers in `cuda.rs`, kernels in
//! kernels/layernorm.cu.
//!
//! Tensors are channel-major `[C, B, P]` with P = H * W: sample b's values are the C runs of P
//! floats starting at c * B * P + b * P. With n the normalized values of one sample (N = C * P
//! of them) and r = 1 / sqrt(var + eps), the Jacobian of n with respect to the input is the
//! symmetric J = r (I - 1 1^T / N - n n^T / N).

pub mod cpu;
#[cfg(feature = "cuda")]
pub mod cuda;

/// The shape of one layer-norm layer's input: `[channels, batch, pixels]`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LnGeom {
    pub channels: usize,
    pub batch: usize,
    /// H * W.
    pub pixels: usize,
    /// Added to the variance (PyTorch's default).
    pub eps: f32,
}

impl LnGeom {
    pub fn new(channels: usize, batch: usize, pixels: usize) -> Self {
        LnGeom { channels, batch, pixels, eps: 1e-5 }
    }
    /// Floats in x: C * B * P.
    pub fn len(&self) -> usize {
        self.channels * self.batch * self.pixels
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The values one sample is normalized over: C * P.
    pub fn per_sample(&self) -> usize {
        self.channels * self.pixels
    }
    /// Panics unless `lens` are all whole tensors of this shape (a bug upstream).
    pub fn check(&self, what: &str, lens: &[usize]) {
        assert!(self.per_sample() > 0 && self.batch > 0, "{what}: an empty layer-norm shape {self:?}");
        for &l in lens {
            assert_eq!(l, self.len(), "{what}: a tensor of {l} floats for the layer-norm shape {self:?}");
        }
    }
    /// Panics unless gamma and beta (or their gradients) are `[2C]`.
    pub fn check_gamma_beta(&self, what: &str, len: usize) {
        assert_eq!(len, 2 * self.channels, "{what}: gamma and beta are [2C] for the layer-norm shape {self:?}");
    }
    /// Panics unless the statistics are `[2B]`: a mean and a 1/std per sample.
    pub fn check_stats(&self, what: &str, len: usize) {
        assert_eq!(len, 2 * self.batch, "{what}: stats are (mean, 1/std) per sample for {self:?}");
    }
}

/// The ranges of sample b's C runs in a `[C, B, P]` tensor, in channel order.
pub fn sample_runs(g: &LnGeom, b: usize) -> impl Iterator<Item = std::ops::Range<usize>> + '_ {
    (0..g.channels).map(move |c| {
        let start = (c * g.batch + b) * g.pixels;
        start..start + g.pixels
    })
}
