//! Binary cross-entropy with logits against a constant target (the GAN's real/fake label),
//! mean over the batch. CPU side in `cpu.rs`, CUDA launcher in `cuda.rs`.

pub mod cpu;
#[cfg(feature = "cuda")]
pub mod cuda;

/// Loss of one logit, in the stable form max(x,0) - x*t + log(1 + exp(-|x|)).
#[inline(always)]
pub fn bce_with_logits_one(x: f32, target: f32) -> f32 {
    x.max(0.0) - x * target + (-x.abs()).exp().ln_1p()
}

/// sigmoid(x), written so that exp never overflows.
#[inline(always)]
pub fn sigmoid(x: f32) -> f32 {
    if x >= 0.0 {
        1.0 / (1.0 + (-x).exp())
    } else {
        let e = x.exp();
        e / (1.0 + e)
    }
}
