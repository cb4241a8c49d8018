//! Fused Adam (PyTorch's formula, no weight decay), one pass over a contiguous range of
//! parameters, gradients and moments. CPU side in `cpu.rs`, CUDA launcher in `cuda.rs`.

pub mod cpu;
#[cfg(feature = "cuda")]
pub mod cuda;

/// The scalars of one Adam step; the bias corrections are computed once on the host.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdamStep {
    pub lr: f32,
    pub beta1: f32,
    pub beta2: f32,
    pub eps: f32,
    /// lr / (1 - beta1^t)
    pub step_size: f32,
    /// sqrt(1 - beta2^t)
    pub bias2_sqrt: f32,
}

impl AdamStep {
    /// Step `t` (1-based) of Adam with learning rate `lr`.
    pub fn with_betas(lr: f32, beta1: f32, beta2: f32, eps: f32, t: u64) -> Self {
        assert!(t >= 1, "Adam steps count from 1");
        let t = t.min(i32::MAX as u64) as i32;
        let bc1 = 1.0 - (beta1 as f64).powi(t);
        let bc2 = 1.0 - (beta2 as f64).powi(t);
        AdamStep { lr, beta1, beta2, eps, step_size: (lr as f64 / bc1) as f32, bias2_sqrt: bc2.sqrt() as f32 }
    }

    /// One element; the CPU backend and tests use this, the CUDA kernel mirrors it.
    #[inline(always)]
    pub fn update(&self, p: &mut f32, g: f32, m: &mut f32, v: &mut f32) {
        *m = self.beta1 * *m + (1.0 - self.beta1) * g;
        *v = self.beta2 * *v + (1.0 - self.beta2) * g * g;
        let denom = v.sqrt() / self.bias2_sqrt + self.eps;
        *p -= self.step_size * *m / denom;
    }
}
