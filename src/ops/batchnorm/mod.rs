//! Batch normalization over [C, count] (count = B*H*W per channel): parameters and the split
//! into statistics / apply (forward) and reduce / data (backward) that lets `--sync-bn` put an
//! allreduce between the halves. CPU side in `cpu.rs`, CUDA launchers in `cuda.rs`.

pub mod cpu;
#[cfg(feature = "cuda")]
pub mod cuda;

/// Shape and hyper-parameters of one batch-norm layer (PyTorch's defaults).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BnGeom {
    pub channels: usize,
    /// Elements per channel on this rank: B * H * W.
    pub count: usize,
    pub eps: f32,
    pub momentum: f32,
}

impl BnGeom {
    pub fn new(channels: usize, count: usize) -> Self {
        BnGeom { channels, count, eps: 1e-5, momentum: 0.1 }
    }
    /// Floats in x and y: C * count.
    pub fn len(&self) -> usize {
        self.channels * self.count
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Mean and biased variance from (sum, sum of squares) over n elements, in f64 so that the
/// cancellation in `E[x^2]` - `E[x]^2` costs as little as possible. Shared by both backends' CPU
/// reference and by tests.
pub fn mean_var(sum: f64, sumsq: f64, n: f64) -> (f64, f64) {
    let mean = sum / n;
    let var = (sumsq / n - mean * mean).max(0.0);
    (mean, var)
}
